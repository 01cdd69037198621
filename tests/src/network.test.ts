/**
 * Egress through the daemon's proxy, against real sandboxes: nothing is reachable by default;
 * an allow rule opens exactly one host:port; policies change at runtime and are inherited by
 * forks; every attempt is in the audit log. Upstream servers are ones this test starts on
 * 127.0.0.1, allowed by explicit IP rules. Everything refused here is refused before any
 * packet leaves: by the proxy's name check before DNS, or inside the sandbox, which has no
 * network device.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import type { Sandbox, WarrenError } from '@warren/sdk';
import { eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 180_000 };
let d: DaemonHandle | undefined;
let plain: http.Server;
let secure: https.Server;
let plainPort = 0;
let securePort = 0;
let certDir = '';

before(async () => {
  d = await startDaemon();
  plain = http.createServer((req, res) => res.end(`plain ${req.method} ${req.url} host=${req.headers.host}\n`));
  await new Promise<void>((r) => plain.listen(0, '127.0.0.1', r));
  plainPort = (plain.address() as AddressInfo).port;
  certDir = mkdtempSync('/tmp/warren-net-test-');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-subj',
      '/CN=localhost',
      '-keyout',
      path.join(certDir, 'key.pem'),
      '-out',
      path.join(certDir, 'cert.pem'),
      '-days',
      '1',
    ],
    { stdio: 'ignore' },
  );
  secure = https.createServer({ key: readFileSync(path.join(certDir, 'key.pem')), cert: readFileSync(path.join(certDir, 'cert.pem')) }, (_req, res) =>
    res.end('secret-free hello over tls\n'),
  );
  await new Promise<void>((r) => secure.listen(0, '127.0.0.1', r));
  securePort = (secure.address() as AddressInfo).port;
});

after(async () => {
  plain?.close();
  secure?.close();
  rmSync(certDir, { recursive: true, force: true });
  await stopAndCheckClean(d);
});

/** curl through the sandbox's proxy (127.0.0.1 is in NO_PROXY, so the test overrides that). */
async function curl(sbx: Sandbox, url: string, extra: string[] = []): Promise<{ code: number; out: string }> {
  const r = await sbx.exec(['curl', '-fsS', '-k', '--noproxy', '', '--max-time', '20', ...extra, url]);
  return { code: r.exitCode ?? -1, out: r.stdout + r.stderr };
}

test('a sandbox without a policy reaches nothing; the proxy variables are set', T, async () => {
  const sbx = await d!.create();
  try {
    const env = (await sbx.exec('env | grep -i _proxy= | sort', { check: true })).stdout;
    assert.match(env, /^HTTPS_PROXY=http:\/\/127\.0\.0\.1:3128$/m);
    assert.match(env, /^http_proxy=http:\/\/127\.0\.0\.1:3128$/m);
    assert.deepEqual(await sbx.getNetwork(), { allow: [] });
    const denied = await curl(sbx, `http://127.0.0.1:${plainPort}/`);
    assert.notEqual(denied.code, 0);
    assert.match(denied.out, /403/);
    const name = await curl(sbx, 'https://denied.invalid/');
    assert.notEqual(name.code, 0);
    const log = await sbx.egressLog();
    assert.ok(
      log.some((e) => e.host === '127.0.0.1' && e.port === plainPort && e.decision === 'denied'),
      JSON.stringify(log),
    );
    assert.ok(
      log.some((e) => e.host === 'denied.invalid' && e.method === 'CONNECT' && e.decision === 'denied'),
      JSON.stringify(log),
    );
  } finally {
    await sbx.kill();
  }
});

test('an allow rule opens exactly that host:port, for HTTP and HTTPS, and is audited', T, async () => {
  const sbx = await d!.create({ network: { allow: [`127.0.0.1:${plainPort}`, `127.0.0.1:${securePort}`] } });
  try {
    const r = await curl(sbx, `http://127.0.0.1:${plainPort}/hello?x=1`);
    assert.equal(r.code, 0, r.out);
    assert.equal(r.out, `plain GET /hello?x=1 host=127.0.0.1:${plainPort}\n`);
    const s = await curl(sbx, `https://127.0.0.1:${securePort}/`);
    assert.equal(s.code, 0, s.out);
    assert.equal(s.out, 'secret-free hello over tls\n');
    // node and python clients inside work through the same variables.
    const py = await sbx.exec([
      'python3',
      '-c',
      `import urllib.request, os; os.environ['NO_PROXY'] = ''; os.environ['no_proxy'] = ''; print(urllib.request.urlopen('http://127.0.0.1:${plainPort}/py').read().decode().strip())`,
    ]);
    assert.equal(py.stdout.trim(), `plain GET /py host=127.0.0.1:${plainPort}`, py.stderr);

    // The daemon's own API port is a local service of the host: not allowed by these rules.
    const api = await curl(sbx, `${d!.url}/v1/health`);
    assert.notEqual(api.code, 0);
    assert.match(api.out, /403/);
    // A forged Host header is refused.
    const forged = await curl(sbx, `http://127.0.0.1:${plainPort}/`, ['-H', 'Host: other.invalid']);
    assert.notEqual(forged.code, 0, forged.out);

    const log = await sbx.egressLog();
    const get = log.find((e) => e.method === 'GET' && e.path === '/hello?x=1');
    assert.ok(get, JSON.stringify(log));
    assert.equal(get.decision, 'allowed');
    assert.ok(get.bytesDown > 0);
    await eventually(
      async () =>
        (await sbx.egressLog()).some((e) => e.method === 'CONNECT' && e.port === securePort && e.decision === 'allowed' && e.bytesUp > 0 && e.bytesDown > 0),
      10_000,
      'the CONNECT to be audited with its bytes',
    );
    assert.ok(log.some((e) => e.port === Number(new URL(d!.url).port) && e.decision === 'denied'));
  } finally {
    await sbx.kill();
  }
});

test('attacks from root inside the sandbox are refused before anything leaves', T, async () => {
  const sbx = await d!.create({ network: { allow: [`127.0.0.1:${securePort}`] } });
  try {
    // No network device: a direct connection has no route (192.0.2.0/24 is documentation space).
    const direct = await sbx.exec(['python3', '-c', "import socket; socket.create_connection(('192.0.2.1', 80), timeout=3)"], { user: 'root' });
    assert.notEqual(direct.exitCode, 0);
    assert.match(direct.stderr, /unreachable|Errno 101|Errno 113|timed out/i);
    // Raw sockets and DNS to an outside resolver do not exist either.
    const raw = await sbx.exec(['python3', '-c', 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'], { user: 'root' });
    assert.notEqual(raw.exitCode, 0);
    const dns = await sbx.exec(
      ['python3', '-c', "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(b'x', ('192.0.2.53', 53)); s.recv(10)"],
      { user: 'root' },
    );
    assert.notEqual(dns.exitCode, 0);
    // Unsetting the proxy variables leaves no way out.
    const unset = await sbx.exec(['env', '-u', 'HTTPS_PROXY', '-u', 'https_proxy', 'curl', '-sk', '--max-time', '5', `https://127.0.0.1:${securePort}/`]);
    assert.notEqual(unset.exitCode, 0);
    // A TLS handshake whose SNI differs from the CONNECT host is cut.
    const sni = await sbx.exec([
      'python3',
      '-c',
      `
import socket, ssl
s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
s.sendall(b'CONNECT 127.0.0.1:${securePort} HTTP/1.1\\r\\nHost: 127.0.0.1:${securePort}\\r\\n\\r\\n')
assert b' 200 ' in s.recv(4096)
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
t = ctx.wrap_socket(s, server_hostname='evil.invalid')
print('handshake passed')
`,
    ]);
    assert.notEqual(sni.exitCode, 0, sni.stdout);
    await eventually(
      async () => (await sbx.egressLog()).some((e) => e.decision === 'denied' && /SNI/.test(e.reason ?? '')),
      10_000,
      'the SNI denial to be audited',
    );
  } finally {
    await sbx.kill();
  }
});

test('a CONNECT to a host:port a rule names is answered inside; the daemon still checks it and says why in the audit log', T, async () => {
  // A port nothing listens on: the daemon's proxy cannot connect, so only the agent can have said 200.
  const closed = net.createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const downPort = (closed.address() as AddressInfo).port;
  await new Promise<void>((r) => closed.close(() => r()));
  const sbx = await d!.create({ network: { allow: [`127.0.0.1:${downPort}`, `127.0.0.1:${securePort}`] } });
  try {
    const ask = (authority: string) =>
      sbx.exec([
        'python3',
        '-c',
        `
import socket
s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
s.sendall(b'CONNECT ${authority} HTTP/1.1\\r\\nHost: ${authority}\\r\\n\\r\\n')
head = s.recv(4096)
print(head.split(b'\\r\\n')[0].decode())
print('closed' if s.recv(4096) == b'' else 'open')
`,
      ]);
    const down = await ask(`127.0.0.1:${downPort}`);
    assert.equal(down.stdout, 'HTTP/1.1 200 Connection Established\nclosed\n', down.stderr);
    await eventually(
      async () => (await sbx.egressLog()).some((e) => e.port === downPort && e.method === 'CONNECT' && /cannot connect/.test(e.reason ?? '')),
      10_000,
      'the failed CONNECT to be audited',
    );
    // Not named by a rule: the daemon answers, with its reason.
    const other = await ask(`127.0.0.1:${plainPort}`);
    assert.match(other.stdout, /^HTTP\/1\.1 403 /, other.stderr);
    // And an allowed one goes through, by curl as by anyone.
    assert.equal((await curl(sbx, `https://127.0.0.1:${securePort}/`)).out, 'secret-free hello over tls\n');
  } finally {
    await sbx.kill();
  }
});

test('policies change at runtime, are validated, and forks inherit them', T, async () => {
  await assert.rejects(d!.create({ network: { allow: ['not a rule!'] } }), (e: WarrenError) => e.status === 400 && e.message.includes('not a rule!'));
  const sbx = await d!.create();
  try {
    await assert.rejects(sbx.setNetwork({ allow: ['10.0.0.0/33'] }), (e: WarrenError) => e.status === 400 && e.message.includes('10.0.0.0/33'));
    assert.notEqual((await curl(sbx, `http://127.0.0.1:${plainPort}/`)).code, 0);
    assert.deepEqual(await sbx.setNetwork({ allow: [`127.0.0.1:${plainPort}`] }), { allow: [`127.0.0.1:${plainPort}`] });
    assert.equal((await curl(sbx, `http://127.0.0.1:${plainPort}/`)).code, 0);

    const [child] = await sbx.forkTree(1);
    assert.ok(child);
    assert.deepEqual(await child.getNetwork(), { allow: [`127.0.0.1:${plainPort}`] });
    const viaChild = await curl(child, `http://127.0.0.1:${plainPort}/child`);
    assert.equal(viaChild.code, 0, viaChild.out);
    assert.ok((await child.egressLog()).some((e) => e.path === '/child'));
    assert.equal(
      (await sbx.egressLog()).some((e) => e.path === '/child'),
      false,
      'audit is per sandbox',
    );
    await child.kill();

    // After a hibernate the policy and the proxy still work.
    await sbx.hibernate();
    assert.equal((await curl(sbx, `http://127.0.0.1:${plainPort}/after`)).code, 0);

    await sbx.setNetwork({ allow: [] });
    assert.notEqual((await curl(sbx, `http://127.0.0.1:${plainPort}/`)).code, 0);
  } finally {
    await sbx.kill();
  }
});

test('plain TCP to an allowed host:port works through the connect helper (ssh ProxyCommand style)', T, async () => {
  const echo = net.createServer((sock) => sock.pipe(sock));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  const echoPort = (echo.address() as AddressInfo).port;
  const sbx = await d!.create({ network: { allow: [`127.0.0.1:${echoPort}`] } });
  try {
    const ok = await sbx.exec(`printf 'hello over tcp' | /opt/warren/lib/connect 127.0.0.1 ${echoPort}`);
    assert.equal(ok.exitCode, 0, ok.stderr);
    assert.equal(ok.stdout, 'hello over tcp');
    const env = (await sbx.exec('echo "$GIT_SSH_COMMAND"', { check: true })).stdout;
    assert.match(env, /ProxyCommand="\/opt\/warren\/lib\/connect %h %p"/);
    // Another port is refused by the policy, with the proxy's reason.
    const denied = await sbx.exec(`printf x | /opt/warren/lib/connect 127.0.0.1 ${plainPort}`);
    assert.equal(denied.exitCode, 1);
    assert.match(denied.stderr, /refused 127\.0\.0\.1:\d+: .*not allowed/);
    // Byte counts land when the relay sees the tunnel close, which may be a moment after the helper exits.
    await eventually(
      async () => (await sbx.egressLog()).some((e) => e.method === 'CONNECT' && e.port === echoPort && e.decision === 'allowed' && e.bytesUp === 14),
      10_000,
      'the tunnel audited with its 14 bytes up',
    );
  } finally {
    await sbx.kill();
    echo.close();
  }
});

const UPGRADE_ECHO = `require('http').createServer((q, s) => s.end('plain')).on('upgrade', (req, sock) => { sock.write('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n'); sock.pipe(sock); }).listen(3001, '127.0.0.1')`;
const COUNTER = `let n = 0; require('http').createServer((q, s) => s.end(JSON.stringify({ n: ++n, url: q.url, cookie: q.headers.cookie ?? null, auth: q.headers.authorization ?? null }))).listen(3000, '127.0.0.1')`;

/** A request to the daemon with the port URL's Host header (node does not resolve *.localhost). */
function viaDaemon(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; setCookie: string[] }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: Number(u.port), path: u.pathname + u.search, headers: { host: u.host, ...headers } }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, setCookie: res.headers['set-cookie'] ?? [] }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('port URLs: signed, per port, expiring; HTTP and WebSocket; traffic resumes a hibernated sandbox', T, async () => {
  const sbx = await d!.create();
  try {
    await sbx.exec(['node', '-e', COUNTER], { background: true });
    await sbx.exec(['node', '-e', UPGRADE_ECHO], { background: true });
    await eventually(
      async () =>
        (await sbx.exec(['curl', '-sf', 'http://127.0.0.1:3000/'])).exitCode === 0 &&
        (await sbx.exec(['curl', '-sf', 'http://127.0.0.1:3001/'])).exitCode === 0,
      10_000,
      'both servers to answer',
    );
    const url = await sbx.getUrl(3000);
    assert.match(url, new RegExp(`^http://3000-${sbx.id}\\.localhost:\\d+/\\?warren_token=[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$`));

    const first = await viaDaemon(url.replace('/?', '/page?a=1&'), { cookie: 'theme=dark' });
    assert.equal(first.status, 200, first.body);
    const seen = JSON.parse(first.body) as { n: number; url: string; cookie: string | null; auth: string | null };
    assert.equal(seen.url, '/page?a=1', 'the token is not passed to the app');
    assert.equal(seen.cookie, 'theme=dark');
    const cookie = first.setCookie.map((c) => /^warren_port_token=[^;]*/.exec(c)?.[0]).find((c) => c !== undefined);
    assert.ok(cookie, 'the token is traded for a cookie');
    const bare = `${new URL(url).origin}/`; // the port URL without its token
    // A browser comes back with the cookie only.
    const second = await viaDaemon(`${bare}again`, { cookie });
    assert.equal(second.status, 200, second.body);
    assert.equal((JSON.parse(second.body) as { cookie: string | null }).cookie, null, "warren's cookie stays out of the app");
    // The API key works too and stays out of the app.
    const withKey = await viaDaemon(bare, { authorization: `Bearer ${d!.apiKey}` });
    assert.equal((JSON.parse(withKey.body) as { auth: string | null }).auth, null);

    assert.equal((await viaDaemon(bare)).status, 401);
    assert.equal((await viaDaemon(bare, { authorization: 'Bearer wrong' })).status, 401);
    const token = new URL(url).searchParams.get('warren_token')!;
    assert.equal((await viaDaemon(url.replace('http://3000-', 'http://3001-'))).status, 401, 'a token opens only its own port');
    assert.equal((await viaDaemon(url.replace(token, `${token.slice(0, -2)}xx`))).status, 401);
    const short = await sbx.getUrl(3000, { expiresInSeconds: 1 });
    // It expires at most a second from now (at a whole second): from then on it is refused.
    const expiresBy = Date.now() + 1000;
    let lateOpen = 0;
    await eventually(
      async () => {
        const sent = Date.now();
        const status = (await viaDaemon(short)).status;
        if (status === 200 && sent > expiresBy) lateOpen = sent - expiresBy;
        return status === 401;
      },
      10_000,
      'the 1-second token to be refused',
      100,
    );
    assert.equal(lateOpen, 0, `a token that had expired ${lateOpen} ms before still opened the port`);
    const nothing = await viaDaemon(url.replace('http://3000-', 'http://3999-'), { authorization: `Bearer ${d!.apiKey}` });
    assert.equal(nothing.status, 503);
    assert.match(nothing.body, /nothing listens on port 3999/);

    // WebSocket (any Upgrade): the head goes through, then bytes both ways.
    const wsUrl = new URL(await sbx.getUrl(3001));
    const echoed = await new Promise<string>((resolve, reject) => {
      const sock = net.connect(Number(wsUrl.port), '127.0.0.1', () => {
        sock.write(
          `GET /?warren_token=${wsUrl.searchParams.get('warren_token')} HTTP/1.1\r\nHost: ${wsUrl.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n`,
        );
      });
      let got = '';
      // A deadline, cleared on the echo: left running it would hold the test process open.
      const deadline = setTimeout(() => reject(new Error(`no echo, got: ${got}`)), 15_000);
      sock.on('data', (d: Buffer) => {
        got += d.toString();
        if (got.includes('\r\n\r\n') && !got.includes('ping')) sock.write('ping');
        if (got.endsWith('ping')) {
          clearTimeout(deadline);
          sock.destroy();
          resolve(got);
        }
      });
      sock.on('error', reject);
    });
    assert.match(echoed, /^HTTP\/1\.1 101 /);

    // Traffic to a port resumes a hibernated sandbox, its server still counting.
    const before = (JSON.parse((await viaDaemon(url)).body) as { n: number }).n;
    await sbx.hibernate();
    const after = await viaDaemon(url);
    assert.equal(after.status, 200, after.body);
    assert.equal((JSON.parse(after.body) as { n: number }).n, before + 1);
    assert.equal((await sbx.refresh()).state, 'running');
    await assert.rejects(sbx.getUrl(0), (e: WarrenError) => e.status === 400);
  } finally {
    await sbx.kill();
  }
});
