/**
 * TCP forwards (api.md, "TCP forwards"): a listener on the host's loopback reaching a port
 * inside a sandbox, through the SDK, the HTTP API and the CLI, against a real daemon. And
 * port URLs' other promises: no credential a client sends warren reaches the app, and a URL
 * is worth no more than the key or token that made it.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { ApiKeys, InvalidArgumentError, NotFoundError, Sandbox } from '@warren/sdk';
import type { PortUrl } from '@warren/protocol';
import { REPO, WEBSOCKET_UPGRADE_HEADERS, eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

let d: DaemonHandle | undefined;
let sbx: Sandbox;

// An echo server inside: every line comes back upper-cased.
const ECHO = `python3 -c '
import socketserver
class H(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line.upper()); self.wfile.flush()
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
S(("127.0.0.1", 7000), H).serve_forever()'`;

before(async () => {
  d = await startDaemon();
  sbx = await d.create({ ttlSeconds: 600 });
  await sbx.exec(ECHO, { background: true });
  await eventually(
    async () => (await sbx.exec('python3 -c "import socket; socket.create_connection((\'127.0.0.1\', 7000))"')).exitCode === 0 || undefined,
    20_000,
    'echo server listening',
  );
});
after(() => stopAndCheckClean(d));

/** Sends `line` on a new connection to the host port and resolves with the first answer. */
function roundTrip(port: number, line: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port });
    let got = '';
    s.setEncoding('utf8');
    s.on('connect', () => s.write(`${line}\n`));
    s.on('data', (chunk: string) => {
      got += chunk;
      if (got.endsWith('\n')) {
        s.end();
        resolve(got);
      }
    });
    s.on('error', (err: NodeJS.ErrnoException) => {
      // A reset after connecting is a close too (the forward found nothing listening inside).
      if (err.code === 'ECONNRESET') resolve(got);
      else reject(err);
    });
    s.on('close', () => resolve(got));
  });
}

function warren(...args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(path.join(REPO, 'bin/warren'), args, {
    encoding: 'utf8',
    env: { ...process.env, WARREN_URL: d!.url, WARREN_API_KEY: d!.apiKey },
    timeout: 60_000,
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

test('a forward carries TCP both ways, many connections at once; asking again answers the same one', async () => {
  const f = await sbx.forwardPort(7000);
  assert.equal(f.port, 7000);
  assert.equal(f.host, '127.0.0.1');
  assert.ok(f.hostPort > 0);
  const answers = await Promise.all(['one', 'two', 'three'].map((w) => roundTrip(f.hostPort, w)));
  assert.deepEqual(answers, ['ONE\n', 'TWO\n', 'THREE\n']);
  assert.equal((await sbx.forwardPort(7000)).hostPort, f.hostPort);
  assert.deepEqual(
    (await sbx.forwards()).map((x) => [x.port, x.hostPort]),
    [[7000, f.hostPort]],
  );
  await sbx.closeForward(7000);
  await assert.rejects(roundTrip(f.hostPort, 'gone'), /ECONNREFUSED/);
  assert.deepEqual(await sbx.forwards(), []);
});

test('nothing listening inside: the connection closes; bad ports are 400, unknown ones 404', async () => {
  const f = await sbx.forwardPort(7999);
  assert.equal(await roundTrip(f.hostPort, 'anyone?'), '');
  await sbx.closeForward(7999);
  await assert.rejects(sbx.forwardPort(0), InvalidArgumentError);
  await assert.rejects(sbx.forwardPort(70000), InvalidArgumentError);
  await assert.rejects(sbx.closeForward(7000), NotFoundError);
  const res = await fetch(`${d!.url}/v1/sandboxes/sb-nosuchbox/ports/7000/forward`, {
    method: 'POST',
    headers: { authorization: `Bearer ${d!.apiKey}`, 'content-type': 'application/json' },
    body: '{}',
  });
  assert.equal(res.status, 404);
  const noKey = await fetch(`${d!.url}/v1/sandboxes/${sbx.id}/ports/7000/forward`, { method: 'POST', body: '{}' });
  assert.equal(noKey.status, 401);
});

test('a host port in use is a 409 naming it', async () => {
  const taken = net.createServer();
  await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
  const port = (taken.address() as net.AddressInfo).port;
  try {
    await assert.rejects(sbx.forwardPort(7000, { hostPort: port }), new RegExp(`127\\.0\\.0\\.1:${port} is already in use`));
  } finally {
    taken.close();
  }
});

test('CLI: warren forward opens, lists and closes', async () => {
  const opened = warren('forward', sbx.id, '7000');
  assert.equal(opened.code, 0, opened.stderr);
  const hostPort = Number(/^127\.0\.0\.1:(\d+)\n$/.exec(opened.stdout)?.[1]);
  assert.ok(hostPort > 0, opened.stdout);
  assert.equal(await roundTrip(hostPort, 'cli'), 'CLI\n');
  assert.match(warren('forward', sbx.id).stdout, new RegExp(`7000\\s+127\\.0\\.0\\.1:${hostPort}`));
  assert.equal(warren('forward', sbx.id, '7000', '--rm').code, 0);
  assert.match(warren('forward', sbx.id, '7000', '--rm').stderr, /not forwarded/);
});

test("a sandbox's end closes its forwards", async () => {
  const other = await d!.create({ ttlSeconds: 300 });
  await other.exec(ECHO, { background: true });
  const f = await other.forwardPort(7000);
  await other.kill();
  await assert.rejects(roundTrip(f.hostPort, 'after'), /ECONNREFUSED/);
});

/** One connection, two exchanges with a pause between them; resolves with what came back. */
function conversation(port: number, keepOpen = false): Promise<{ answers: string; socket?: net.Socket }> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    let got = '';
    s.setEncoding('utf8');
    s.on('connect', () => s.write('first\n'));
    s.on('data', (chunk: string) => {
      got += chunk;
      if (got === 'FIRST\n') setTimeout(() => s.write('second\n'), 200);
      if (got === 'FIRST\nSECOND\n') {
        if (keepOpen) resolve({ answers: got, socket: s });
        else s.end();
      }
    });
    s.on('error', () => undefined);
    s.on('close', () => resolve({ answers: got }));
  });
}

test('a fork of a fork serves new connections through its forwards while old ones were open at each fork', async () => {
  // The fork's agent drops the connections it carried over; the Sentry used to save the removed
  // epoll interests with the fork, and the fork of that fork then saw every new socket that
  // reused such a descriptor number as closed after its first read (docs/runsc.md, third fix).
  const held: net.Socket[] = [];
  const forks: Sandbox[] = [];
  try {
    for (let round = 0; round < 2; round++) {
      const opened = await conversation((await sbx.forwardPort(7000)).hostPort, true);
      held.push(opened.socket!);
      const child = await sbx.fork();
      forks.push(child);
      const childOpen = await conversation((await child.forwardPort(7000)).hostPort, true);
      assert.equal(childOpen.answers, 'FIRST\nSECOND\n', 'the fork serves its forward');
      held.push(childOpen.socket!);
      const grandchild = await child.fork();
      forks.push(grandchild);
      const port = (await grandchild.forwardPort(7000)).hostPort;
      for (let i = 0; i < 4; i++) assert.equal((await conversation(port)).answers, 'FIRST\nSECOND\n', `round ${round}, connection ${i} to the fork of a fork`);
    }
  } finally {
    for (const s of held) s.destroy();
    for (const f of forks) await f.kill();
  }
});

/** Answers any request, an upgrade too, with its head as received, then closes. */
const HEAD_ECHO = `python3 -c '
import socketserver
class H(socketserver.StreamRequestHandler):
    def handle(self):
        head = b""
        while not head.endswith(b"\\r\\n\\r\\n"):
            line = self.rfile.readline()
            if not line: return
            head += line
        self.wfile.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n" % len(head) + head)
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
S(("127.0.0.1", 7100), H).serve_forever()'`;

/** One raw request to the daemon for a port host name; resolves with all that came back. */
function rawPortRequest(host: string, headers: Record<string, string>, upgrade: boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const lines = [`GET /x HTTP/1.1`, `Host: ${host}`, ...(upgrade ? ['Upgrade: websocket', 'Connection: Upgrade'] : ['Connection: close'])];
    for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
    const s = net.connect(Number(new URL(d!.url).port), '127.0.0.1', () => s.write(`${lines.join('\r\n')}\r\n\r\n`));
    let got = '';
    s.setEncoding('latin1');
    s.setTimeout(15_000, () => s.destroy(new Error(`no answer through ${host}, got: ${got}`)));
    s.on('data', (chunk: string) => (got += chunk));
    s.on('error', reject);
    s.on('close', () => resolve(got));
  });
}

test('port URLs: no credential warren reads reaches the app, over HTTP or an upgrade; the app’s own cookies and headers do', async () => {
  await sbx.exec(HEAD_ECHO, { background: true });
  const { token } = await sbx.createToken({ scopes: ['exec'], ttlSeconds: 600 });
  const secrets = [d!.apiKey, token, 'csrf-secret-1', 'session-secret-2', 'port-token-secret-3'];
  const host = `7100-${sbx.id}.localhost:${new URL(d!.url).port}`;
  // Every credential header warren reads at once: the port URL is opened by the first one it
  // checks (E2B's traffic token), and the others must be stripped all the same.
  const sent = {
    'E2B-Traffic-Access-Token': token,
    Authorization: `Bearer ${d!.apiKey}`,
    'X-Api-Key': d!.apiKey,
    'X-Access-Token': token,
    'X-Warren-CSRF': 'csrf-secret-1',
    Cookie: 'app=1; warren_session=session-secret-2; warren_port_token=port-token-secret-3; theme=dark',
    'Sec-WebSocket-Protocol': `chat, warren.bearer.${d!.apiKey}`,
    'X-App': 'mine',
  };
  const plain = await eventually(
    async () => {
      const r = await rawPortRequest(host, sent, false);
      return r.startsWith('HTTP/1.1 200') ? r : undefined;
    },
    20_000,
    'the head echo server answers through the port URL',
  );
  const upgraded = await rawPortRequest(host, sent, true);
  assert.match(upgraded, /^HTTP\/1\.1 200/, upgraded);
  for (const [how, answer] of [
    ['HTTP', plain],
    ['upgrade', upgraded],
  ] as const) {
    const head = answer.slice(answer.indexOf('\r\n\r\n') + 4).toLowerCase();
    for (const secret of secrets) assert.ok(!head.includes(secret.toLowerCase()), `${how}: a secret reached the app:\n${head}`);
    assert.doesNotMatch(head, /authorization|x-api-key|x-access-token|e2b-traffic|x-warren-csrf|warren_session|warren_port_token|warren\.bearer/, how);
    assert.match(head, /^cookie: app=1; theme=dark\r$/m, how);
    assert.match(head, /^x-app: mine\r$/m, how);
  }
  assert.match(upgraded.toLowerCase(), /^sec-websocket-protocol: chat\r$/m);
});

/** A request through a port URL (Host names the port, the socket goes to the daemon): status, body, cookies set; 101 for an upgrade. */
function viaPortUrl(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; setCookie: string[] }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: Number(u.port), path: u.pathname + u.search, headers: { host: u.host, ...headers } });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, setCookie: res.headers['set-cookie'] ?? [] }));
    });
    req.on('upgrade', (_res, socket) => {
      socket.destroy();
      resolve({ status: 101, body: '', setCookie: [] });
    });
    req.on('error', reject);
    req.end();
  });
}

test('port URLs end with the key or token that made them (URL, its cookie and an upgrade); a token caps its URL at its own expiry; a refused URL resumes nothing', async () => {
  const ivy = await ApiKeys.create({ name: 'ivy', scopes: ['sandboxes:create', 'sandboxes:read', 'sandboxes:exec'] }, d!.conn);
  const own = await Sandbox.create({ url: d!.url, apiKey: ivy.key, ttlSeconds: 600 });
  try {
    await own.exec('python3 -m http.server 7200 --bind 127.0.0.1', { background: true });
    const mint = async (secret: string, body: object): Promise<PortUrl> => {
      const res = await fetch(`${d!.url}/v1/sandboxes/${own.id}/ports/7200/url`, {
        method: 'POST',
        headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const text = await res.text();
      assert.equal(res.status, 201, text);
      return JSON.parse(text) as PortUrl;
    };
    const refused = async (url: string, headers: Record<string, string>, why: RegExp, what: string) => {
      const r = await viaPortUrl(url, headers);
      assert.equal(r.status, 401, `${what}: ${r.body}`);
      assert.match(r.body, why, what);
    };
    const byKey = await mint(ivy.key, {});
    await eventually(async () => (await viaPortUrl(byKey.url)).status === 200, 20_000, 'the server inside answers through the key URL');

    // A 60-second token asks for a week and gets its own expiry; revoked, its URL and cookie end.
    const short = await own.createToken({ scopes: ['exec'], ttlSeconds: 60 });
    const byToken = await mint(short.token, { expiresInSeconds: 604800 });
    assert.ok(Date.parse(byToken.expiresAt) <= Date.parse(short.expiresAt), `URL until ${byToken.expiresAt}, its token until ${short.expiresAt}`);
    const first = await viaPortUrl(byToken.url);
    assert.equal(first.status, 200, first.body);
    const cookie = first.setCookie.map((c) => /^warren_port_token=[^;]*/.exec(c)?.[0]).find((c) => c !== undefined);
    assert.ok(cookie, 'the first visit sets the cookie');
    const bare = `${new URL(byToken.url).origin}/`;
    assert.equal((await viaPortUrl(bare, { cookie })).status, 200);
    await own.revokeToken(short.id);
    const tokenRevoked = new RegExp(`this port URL was made by token ${short.id}, which was revoked`);
    await refused(byToken.url, {}, tokenRevoked, 'the URL of a revoked token');
    await refused(bare, { cookie }, tokenRevoked, 'the cookie of a revoked token');
    assert.equal((await viaPortUrl(byToken.url, WEBSOCKET_UPGRADE_HEADERS)).status, 401, 'an upgrade with it');
    assert.equal((await viaPortUrl(byKey.url)).status, 200, 'the key URL is untouched');

    // The admin hibernates the sandbox and revokes the key: the key's URL and its token's end, and
    // neither resumes the sandbox.
    const live = await own.createToken({ scopes: ['exec'], ttlSeconds: 600 });
    const byLive = await mint(live.token, {});
    assert.equal((await viaPortUrl(byLive.url)).status, 200);
    const asAdmin = await Sandbox.connect(own.id, d!.conn);
    await asAdmin.hibernate();
    await ApiKeys.revoke(ivy.id, d!.conn);
    const keyRevoked = new RegExp(`this port URL was made by API key ${ivy.id}, which was revoked`);
    for (const [what, url] of [
      ['the key URL', byKey.url],
      ["the key's token URL", byLive.url],
    ] as const) {
      await refused(url, {}, keyRevoked, what);
      assert.equal((await viaPortUrl(url, WEBSOCKET_UPGRADE_HEADERS)).status, 401, `${what}, upgraded`);
    }
    assert.equal((await asAdmin.refresh()).state, 'hibernated', 'a refused URL resumed the sandbox');
    // The admin's own URL still opens it: only the revoked maker's URLs ended.
    assert.equal((await viaPortUrl(await asAdmin.getUrl(7200))).status, 200);
  } finally {
    // With the admin key: the test revokes ivy's.
    await (await Sandbox.connect(own.id, d!.conn)).kill();
  }
});
