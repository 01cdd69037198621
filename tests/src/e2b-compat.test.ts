/**
 * E2B's official SDK (`e2b` on npm, pinned in devDependencies) driving a real daemon through
 * its E2B-compatible API (docs/e2b.md), configured only by the environment variables
 * `warren e2b env` prints: create, commands (streaming, stdin, background, kill, connect,
 * CommandExitError), files (read, write, list, watch), PTY, timeouts, pause and resume with
 * memory kept, list by metadata, fork, getHost, kill, and the refusals.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import {
  AuthenticationError,
  BuildError,
  CommandExitError,
  Template,
  type SandboxOpts,
  FileNotFoundError,
  FilesystemEventType,
  InvalidArgumentError,
  Sandbox,
  SandboxNotFoundError,
  type FilesystemEvent,
} from 'e2b';
import { eventually, runWarren, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 120_000 };
/** Long enough that no sandbox of this file expires while the file runs. */
const LONG = { timeoutMs: 1_800_000 };

let d: DaemonHandle;
let sbx: Sandbox;
const made: Sandbox[] = [];

async function create(opts: SandboxOpts = {}): Promise<Sandbox> {
  const s = await Sandbox.create({ ...LONG, ...opts });
  made.push(s);
  return s;
}

before(async () => {
  d = await startDaemon();
  // Exactly what `warren e2b env` prints, applied as a shell would.
  const env = runWarren(d, ['e2b', 'env']);
  assert.equal(env.code, 0, env.stderr);
  for (const m of env.stdout.matchAll(/^export (E2B_[A-Z_]+)=(?:'([^']*)'|(\S+))$/gm)) process.env[m[1]!] = m[2] ?? m[3];
  assert.equal(process.env.E2B_API_URL, `${d.url}/e2b`);
  assert.equal(process.env.E2B_API_KEY, d.apiKey);
  sbx = await create({ metadata: { app: 'e2b-test' }, envs: { GREETING: 'hi' } });
});

after(async () => {
  for (const s of made) await s.kill().catch(() => undefined);
  await stopAndCheckClean(d);
});

test('create: the sandbox is warren sandbox with its metadata, running, its envs set', T, async () => {
  assert.match(sbx.sandboxId, /^sb-[a-z0-9]+$/);
  const info = await Sandbox.getInfo(sbx.sandboxId);
  assert.equal(info.state, 'running');
  assert.equal(info.templateId, 'base');
  assert.deepEqual(info.metadata, { app: 'e2b-test' });
  assert.ok(await sbx.isRunning());
  // The same sandbox through warren's own API.
  const native = await d.http.json<{ metadata: Record<string, string> }>('GET', `/v1/sandboxes/${sbx.sandboxId}`);
  assert.deepEqual(native.metadata, { app: 'e2b-test' });
});

test('commands.run: stdout, stderr, envs, default user and home, root, cwd', T, async () => {
  const r = await sbx.commands.run('echo $GREETING; echo err >&2');
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'hi\n');
  assert.equal(r.stderr, 'err\n');
  assert.equal((await sbx.commands.run('whoami; pwd')).stdout, 'user\n/home/user\n');
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n');
  assert.equal((await sbx.commands.run('pwd; echo $X', { cwd: '/tmp', envs: { X: 'y' } })).stdout, '/tmp\ny\n');
});

test('commands.run streams output as it comes', T, async () => {
  const seen: Array<{ chunk: string; at: number }> = [];
  const r = await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.3; done', {
    onStdout: (chunk) => {
      seen.push({ chunk, at: Date.now() });
    },
  });
  assert.equal(r.stdout, '1\n2\n3\n');
  assert.equal(seen.map((s) => s.chunk).join(''), '1\n2\n3\n');
  assert.ok(seen.length >= 2, `output came in one piece: ${JSON.stringify(seen)}`);
  assert.ok(seen.at(-1)!.at - seen[0]!.at >= 300, 'the chunks came at the end, not as printed');
});

test('a non-zero exit is a CommandExitError with the exit code and output', T, async () => {
  const err = await sbx.commands.run('echo bad >&2; exit 3').then(
    () => assert.fail('exit 3 resolved'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof CommandExitError, String(err));
  assert.equal(err.exitCode, 3);
  assert.equal(err.stderr, 'bad\n');
});

test('stdin of a background command: send, close, its output', T, async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true });
  await sbx.commands.sendStdin(h.pid, 'hello\n');
  await sbx.commands.closeStdin(h.pid);
  const r = await h.wait();
  assert.equal(r.stdout, 'hello\n');
});

test('background commands: listed, connected to later, killed', T, async () => {
  const late = await sbx.commands.run('sleep 1; echo late', { background: true });
  const connected = await sbx.commands.connect(late.pid);
  assert.equal((await connected.wait()).stdout, 'late\n');

  const h = await sbx.commands.run('sleep 600', { background: true });
  assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid && p.cmd === '/bin/bash' && p.args.includes('sleep 600')));
  assert.equal(await h.kill(), true);
  const err = await h.wait().then(
    () => assert.fail('a killed command resolved'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof CommandExitError, String(err));
  assert.notEqual(err.exitCode, 0);
  await eventually(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 10_000, 'the killed command leaves the list');
  // Killing what is gone says so.
  assert.equal(await sbx.commands.kill(h.pid), false);
});

test('timeoutMs is the command lifetime: the command is killed when it passes', T, async () => {
  const t0 = Date.now();
  await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1500 }));
  assert.ok(Date.now() - t0 < 15_000);
  await eventually(async () => !(await sbx.commands.list()).some((p) => p.args.join(' ').includes('sleep 30')), 10_000, 'the timed-out command is gone');
});

test('files: write and read text and bytes, many at once, list, info, exists, makeDir, rename, remove', T, async () => {
  const written = await sbx.files.write('/home/user/a.txt', 'content');
  assert.equal(written.path, '/home/user/a.txt');
  assert.equal(await sbx.files.read('/home/user/a.txt'), 'content');
  const bytes = new Uint8Array([0, 1, 2, 200, 255]);
  await sbx.files.write('bin/b.dat', bytes.buffer); // relative to the home; the directory is made
  assert.deepEqual([...(await sbx.files.read('/home/user/bin/b.dat', { format: 'bytes' }))], [...bytes]);
  const many = await sbx.files.write([
    { path: '/home/user/m/1.txt', data: 'one' },
    { path: '/home/user/m/2.txt', data: 'two' },
  ]);
  assert.deepEqual(
    many.map((e) => e.path),
    ['/home/user/m/1.txt', '/home/user/m/2.txt'],
  );
  const listed = await sbx.files.list('/home/user');
  assert.ok(listed.some((e) => e.name === 'a.txt' && e.type === 'file'));
  assert.ok(listed.some((e) => e.name === 'm' && e.type === 'dir'));
  const info = await sbx.files.getInfo('/home/user/a.txt');
  assert.equal(info.size, 7);
  assert.equal(info.owner, 'user');
  assert.equal(await sbx.files.exists('/home/user/a.txt'), true);
  assert.equal(await sbx.files.exists('/home/user/nope'), false);
  assert.equal(await sbx.files.makeDir('/home/user/newdir'), true);
  assert.equal(await sbx.files.makeDir('/home/user/newdir'), false);
  await sbx.files.rename('/home/user/a.txt', '/home/user/newdir/a.txt');
  assert.equal(await sbx.files.read('/home/user/newdir/a.txt'), 'content');
  await sbx.files.remove('/home/user/newdir');
  assert.equal(await sbx.files.exists('/home/user/newdir'), false);
  await assert.rejects(sbx.files.read('/home/user/missing.txt'), FileNotFoundError);
  // The user's files are the user's: a root-owned path is refused, and so is a climb out of the home.
  await assert.rejects(sbx.files.write('/etc/e2b-test', 'x'));
  await assert.rejects(sbx.files.read('../../etc/shadow'));
  // A link the user plants to a root-only file reads as the user would: refused.
  await sbx.commands.run('ln -sf /etc/shadow /home/user/shadow-link');
  await assert.rejects(sbx.files.read('/home/user/shadow-link'));
});

test('watchDir reports a file made in the directory, and stops', T, async () => {
  await sbx.files.makeDir('/home/user/watched');
  const events: FilesystemEvent[] = [];
  const w = await sbx.files.watchDir('/home/user/watched', (ev) => {
    events.push(ev);
  });
  await sbx.files.write('/home/user/watched/x.txt', 'x');
  await eventually(
    () => events.some((e) => e.name === 'x.txt' && (e.type === FilesystemEventType.CREATE || e.type === FilesystemEventType.WRITE)),
    10_000,
    'a watch event for x.txt',
  );
  // warren's own upload file never shows.
  assert.ok(!events.some((e) => e.name.startsWith('.warren-upload')), JSON.stringify(events));
  await w.stop();
});

test('pty: typed input runs, resize changes the size, kill ends it', T, async () => {
  let out = '';
  const decoder = new TextDecoder();
  const h = await sbx.pty.create({
    cols: 80,
    rows: 24,
    onData: (data) => {
      out += decoder.decode(data);
    },
  });
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('echo $((6*7))\n'));
  await eventually(() => out.includes('42'), 15_000, `42 on the terminal; it showed ${JSON.stringify(out.slice(-300))}`);
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 });
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size\n'));
  await eventually(() => out.includes('30 100'), 15_000, `stty size after the resize; the terminal showed ${JSON.stringify(out.slice(-300))}`);
  assert.equal(await sbx.pty.kill(h.pid), true);
  await assert.rejects(h.wait());
});

test('setTimeout moves the end; refreshes only extend', T, async () => {
  await sbx.setTimeout(600_000);
  const left = (await sbx.getInfo()).endAt.getTime() - Date.now();
  assert.ok(left > 540_000 && left <= 600_000, `${left} ms left`);
  await sbx.setTimeout(LONG.timeoutMs);
});

test('pause and connect: hibernated and back, with its processes still running', T, async () => {
  const s = await create();
  const h = await s.commands.run('sleep 600', { background: true });
  await s.files.write('/home/user/kept.txt', 'kept');
  assert.equal(await s.pause(), true);
  assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'paused');
  const native = await d.http.json<{ state: string }>('GET', `/v1/sandboxes/${s.sandboxId}`);
  assert.equal(native.state, 'hibernated');
  assert.equal(await s.pause(), false); // already paused
  const again = await Sandbox.connect(s.sandboxId);
  assert.equal((await again.getInfo()).state, 'running');
  assert.ok(
    (await again.commands.list()).some((p) => p.pid === h.pid),
    'the background process survived the pause',
  );
  assert.equal(await again.files.read('/home/user/kept.txt'), 'kept');
  assert.equal((await again.commands.run('echo ok')).stdout, 'ok\n');
});

test('list filters by metadata and state, and pages', T, async () => {
  const run = randomBytes(4).toString('hex');
  const a = await create({ metadata: { run, n: '1' } });
  const b = await create({ metadata: { run, n: '2' } });
  const second = await Sandbox.list({ query: { metadata: { run, n: '2' } } }).nextItems();
  assert.deepEqual(
    second.map((s) => s.sandboxId),
    [b.sandboxId],
  );
  const both = await Sandbox.list({ query: { metadata: { run }, state: ['running'] } }).nextItems();
  assert.deepEqual(both.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort());
  assert.deepEqual(await Sandbox.list({ query: { metadata: { run }, state: ['paused'] } }).nextItems(), []);
  const pager = Sandbox.list({ query: { metadata: { run } }, limit: 1 });
  const first = await pager.nextItems();
  assert.equal(first.length, 1);
  assert.ok(pager.hasNext);
  const rest = await pager.nextItems();
  assert.equal(rest.length, 1);
  assert.notEqual(rest[0]!.sandboxId, first[0]!.sandboxId);
});

test('fork: copies from one instant, each on its own', T, async () => {
  await sbx.files.write('/home/user/f.txt', 'before');
  const forks = await Sandbox.fork(sbx.sandboxId, { count: 2, ...LONG });
  assert.equal(forks.length, 2);
  const [a, b] = forks as Sandbox[];
  made.push(a!, b!);
  await a!.files.write('/home/user/f.txt', 'a');
  assert.equal(await a!.files.read('/home/user/f.txt'), 'a');
  assert.equal(await b!.files.read('/home/user/f.txt'), 'before');
  assert.equal(await sbx.files.read('/home/user/f.txt'), 'before');
});

/** A GET through the daemon with a Host header (fetch cannot set one). */
function getVia(host: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port: new URL(d.url).port, path: '/', headers: { host, ...headers } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

test('getHost: a port of the sandbox through the daemon, with the traffic token only', T, async () => {
  await sbx.files.write('/home/user/site/hello.txt', 'hello');
  await sbx.commands.run('python3 -m http.server 8080 --directory /home/user/site >/dev/null 2>&1', { background: true, timeoutMs: 0 });
  const host = sbx.getHost(8080);
  assert.equal(host, `8080-${sbx.sandboxId}.localhost:${new URL(d.url).port}`);
  const token = (sbx as unknown as { trafficAccessToken?: string }).trafficAccessToken;
  assert.ok(token, 'the create gave a traffic token');
  const served = await eventually(
    async () => {
      const r = await getVia(host, { 'e2b-traffic-access-token': token });
      return r.status === 200 ? r : undefined;
    },
    15_000,
    'the server answers through the port host',
  );
  assert.match(served.body, /hello\.txt/);
  assert.equal((await getVia(host)).status, 401);
  assert.equal((await getVia(host, { 'e2b-traffic-access-token': 'wt_forged' })).status, 401);
  // The token is warren's: the server in the sandbox never sees it.
  await sbx.files.write('/home/user/echo.py', ECHO_HEADERS);
  await sbx.commands.run('python3 /home/user/echo.py 8081 >/dev/null 2>&1', { background: true, timeoutMs: 0 });
  const echoHost = sbx.getHost(8081);
  const seen = await eventually(
    async () => {
      const r = await getVia(echoHost, { 'e2b-traffic-access-token': token, 'x-app': 'mine' });
      return r.status === 200 ? r.body.toLowerCase() : undefined;
    },
    15_000,
    'the header echo server answers',
  );
  assert.match(seen, /x-app: mine/);
  assert.doesNotMatch(seen, /e2b-traffic-access-token|wt_/);
});

/** A server that answers with the request headers it got. */
const ECHO_HEADERS = `import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(self.headers).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("", int(sys.argv[1])), H).serve_forever()
`;

test('envd on its own host name (49983-<id>) is the same envd, with the same token', T, async () => {
  const token = (sbx as unknown as { envdAccessToken?: string }).envdAccessToken!;
  const host = `49983-${sbx.sandboxId}.localhost:${new URL(d.url).port}`;
  const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: new URL(d.url).port,
        method: 'POST',
        path: '/filesystem.Filesystem/Stat',
        headers: { host, 'content-type': 'application/json', 'x-access-token': token },
      },
      (r) => {
        let body = '';
        r.setEncoding('utf8');
        r.on('data', (c: string) => (body += c));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify({ path: '/home/user' }));
  });
  assert.equal(res.status, 200, res.body);
  assert.equal((JSON.parse(res.body) as { entry: { path: string } }).entry.path, '/home/user');
});

test('the access token never enters the sandbox: not in the environment of commands or terminals, not in its files', T, async () => {
  const token = (sbx as unknown as { envdAccessToken?: string }).envdAccessToken!;
  assert.doesNotMatch((await sbx.commands.run('env', { user: 'root' })).stdout, new RegExp(token));
  assert.doesNotMatch((await sbx.commands.run('env')).stdout, /wt_/);
  const found = await sbx.commands.run(`grep -rls -- ${JSON.stringify(token)} /etc /home /root /tmp /proc/self/environ || true`, { user: 'root' });
  assert.equal(found.stdout, '');
});

test('refusals: a bad key, no token, another sandbox with this token, bad input', T, async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'wk_not-a-key' }), AuthenticationError);
  const other = await create();
  const token = (sbx as unknown as { envdAccessToken?: string }).envdAccessToken!;
  const rpc = (headers: Record<string, string>) =>
    fetch(`${d.url}/e2b/envd/process.Process/List`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: '{}' });
  assert.equal((await rpc({ 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': token })).status, 200);
  assert.equal((await rpc({ 'e2b-sandbox-id': sbx.sandboxId })).status, 401);
  assert.equal((await rpc({ 'e2b-sandbox-id': other.sandboxId, 'x-access-token': token })).status, 404);
  // A template that does not exist, a bad timeout: 4xx naming the problem.
  const post = (body: unknown) =>
    fetch(`${d.url}/e2b/sandboxes`, { method: 'POST', headers: { 'x-api-key': d.apiKey, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const noTemplate = await post({ templateID: 'no-such-template' });
  assert.equal(noTemplate.status, 404);
  assert.match(((await noTemplate.json()) as { message: string }).message, /no-such-template/);
  const badTimeout = await post({ templateID: 'base', timeout: -5 });
  assert.equal(badTimeout.status, 400);
  assert.match(((await badTimeout.json()) as { message: string }).message, /timeout/);
  // What warren does not have says so, naming the route.
  const snapshots = await fetch(`${d.url}/e2b/snapshots`, { headers: { 'x-api-key': d.apiKey } });
  assert.equal(snapshots.status, 404);
  assert.match(((await snapshots.json()) as { message: string }).message, /not part of warren's E2B-compatible API/);
});

/** An envd call as E2B's SDKs make it, the user in Basic auth; Connect's code and message of its answer. */
async function envdCall(rpc: 'process.Process/Start' | 'filesystem.Filesystem/Stat', user: string): Promise<{ code?: string; message?: string }> {
  const token = (sbx as unknown as { envdAccessToken?: string }).envdAccessToken!;
  const stream = rpc === 'process.Process/Start';
  const json = Buffer.from(JSON.stringify(stream ? { process: { cmd: '/usr/bin/touch', args: ['/tmp/envd-user-ran'] } } : { path: '/tmp' }));
  // A streaming call's message goes in an envelope: a flags byte and a 32-bit length.
  const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), json]);
  envelope.writeUInt32BE(json.length, 1);
  const res = await fetch(`${d.url}/e2b/envd/${rpc}`, {
    method: 'POST',
    headers: {
      'content-type': stream ? 'application/connect+json' : 'application/json',
      'e2b-sandbox-id': sbx.sandboxId,
      'x-access-token': token,
      authorization: `Basic ${Buffer.from(`${user}:`).toString('base64')}`,
    },
    body: stream ? envelope : json,
  });
  const body = Buffer.from(await res.arrayBuffer());
  if (!stream) return res.status === 200 ? {} : ((JSON.parse(body.toString()) as { code: string; message: string }) ?? {});
  // The stream's error is in its end message (flag 2).
  for (let at = 0; at + 5 <= body.length; at += 5 + body.readUInt32BE(at + 1)) {
    if (body[at]! & 2)
      return (JSON.parse(body.subarray(at + 5, at + 5 + body.readUInt32BE(at + 1)).toString()) as { error?: { code: string; message: string } }).error ?? {};
  }
  return {};
}

test('envd: a malformed user in Basic auth is invalid_argument naming it, and nothing runs', T, async () => {
  for (const user of ['0', 'root\n', '', 'u'.repeat(33), 'root;id']) {
    for (const rpc of ['process.Process/Start', 'filesystem.Filesystem/Stat'] as const) {
      const answer = await envdCall(rpc, user);
      assert.equal(answer.code, 'invalid_argument', `${rpc} as ${JSON.stringify(user)}: ${JSON.stringify(answer)}`);
      assert.ok(answer.message?.includes(`user ${JSON.stringify(user.slice(0, 40))}`), `${rpc}: ${answer.message}`);
    }
  }
  assert.equal((await sbx.commands.run('test -e /tmp/envd-user-ran || echo none', { user: 'root' })).stdout, 'none\n');
  // E2B's SDK sees its own error class for it.
  await assert.rejects(sbx.commands.run('true', { user: '0' as 'user' }), (e: unknown) => e instanceof InvalidArgumentError && /user "0"/.test(e.message));
  // A well-formed name still works.
  assert.deepEqual(await envdCall('process.Process/Start', 'root'), {});
  assert.deepEqual(await envdCall('filesystem.Filesystem/Stat', 'user'), {});
});

test('kill: gone for getInfo, false for a second kill, and its access token is dead', T, async () => {
  const s = await create();
  const token = (s as unknown as { envdAccessToken?: string }).envdAccessToken!;
  await s.kill();
  await assert.rejects(Sandbox.getInfo(s.sandboxId), SandboxNotFoundError);
  assert.equal(await Sandbox.kill(s.sandboxId), false);
  assert.equal(await s.isRunning(), false);
  const res = await fetch(`${d.url}/e2b/envd/process.Process/List`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'e2b-sandbox-id': s.sandboxId, 'x-access-token': token },
    body: '{}',
  });
  assert.equal(res.status, 401);
});

test('Template.build: a template from base with run, env and workdir steps, then a sandbox of it', T, async () => {
  const logs: string[] = [];
  const template = Template().fromTemplate('base').runCmd('echo built-by-e2b > /etc/e2b-built').setEnvs({ FROM_TEMPLATE: 'yes' }).setWorkdir('/tmp');
  const built = await Template.build(template, 'e2b-made', { onBuildLogs: (entry) => logs.push(entry.message) });
  assert.equal(built.templateId, 'e2b-made');
  assert.ok(
    logs.some((l) => /built e2b-made version/.test(l)),
    logs.join('\n'),
  );
  assert.equal(await Template.exists('e2b-made'), true);
  const s = await create({ template: 'e2b-made' } as SandboxOpts);
  assert.equal((await s.commands.run('cat /etc/e2b-built; echo $FROM_TEMPLATE')).stdout, 'built-by-e2b\nyes\n');
  await s.kill();
  // A failing step is a BuildError with its message; what warren cannot build says so.
  const failing = Template().fromTemplate('base').runCmd('exit 7');
  await assert.rejects(Template.build(failing, 'e2b-failing'), (err: unknown) => err instanceof BuildError && /7/.test(err.message));
  await assert.rejects(
    Template.build(Template().fromImage('python:3.12'), 'e2b-image'),
    (err: unknown) => err instanceof Error && /does not pull container images/.test(err.message),
  );
  const removed = await fetch(`${d.url}/e2b/templates/e2b-made`, { method: 'DELETE', headers: { 'x-api-key': d.apiKey } });
  assert.equal(removed.status, 204);
  assert.equal(await Template.exists('e2b-made'), false);
});
