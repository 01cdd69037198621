/**
 * What the Sandbox, Files, Processes and Snapshots calls send (method, path, query, body)
 * and how they read the answers, against a fake daemon on 127.0.0.1.
 */
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { CommandError, ConflictError, FailedPreconditionError, InternalError, UnavailableError } from './errors.js';
import { Sandbox } from './sandbox.js';
import { Snapshots } from './snapshots.js';
import { FakeDaemon, sandboxInfo, type RecordedRequest } from './testing.js';

let fake: FakeDaemon;
let conn: { url: string; apiKey: string };

before(async () => {
  fake = await FakeDaemon.start();
  conn = { url: fake.url, apiKey: 'k-test' };
});
after(() => fake.close());
beforeEach(() => fake.reset());

const SB = '/v1/sandboxes/sb-test1';

/** A connected sandbox; the GET that connected it is forgotten. */
async function connected(): Promise<Sandbox> {
  fake.on('GET', SB, { json: sandboxInfo() });
  const sbx = await Sandbox.connect('sb-test1', conn);
  fake.requests.length = 0;
  return sbx;
}

function only(method: string, path: string): RecordedRequest {
  const sent = fake.sent(method, path);
  assert.equal(sent.length, 1, `one ${method} ${path}; all requests: ${fake.requests.map((r) => `${r.method} ${r.path}`).join(', ')}`);
  return sent[0]!;
}

test('create posts the request (not the connection options) and returns the sandbox', async () => {
  fake.on('POST', '/v1/sandboxes', { status: 201, json: sandboxInfo('sb-new', { metadata: { task: 'fix-1' } }) });
  const sbx = await Sandbox.create({
    ...conn,
    template: 'node-dev',
    ttlSeconds: 60,
    metadata: { task: 'fix-1' },
    env: { A: 'B' },
    resources: { cpus: 0.5, memoryMB: 256 },
    idleSeconds: 30,
    network: { allow: ['example.com:443'] },
  });
  assert.equal(sbx.id, 'sb-new');
  assert.deepEqual(sbx.info.metadata, { task: 'fix-1' });
  const req = only('POST', '/v1/sandboxes');
  assert.equal(req.headers.authorization, 'Bearer k-test');
  assert.equal(req.headers['content-type'], 'application/json');
  assert.deepEqual(req.json, {
    template: 'node-dev',
    ttlSeconds: 60,
    metadata: { task: 'fix-1' },
    env: { A: 'B' },
    resources: { cpus: 0.5, memoryMB: 256 },
    idleSeconds: 30,
    network: { allow: ['example.com:443'] },
  });
  fake.reset();
  fake.on('POST', '/v1/sandboxes', { status: 201, json: sandboxInfo() });
  await Sandbox.create(conn);
  assert.deepEqual(only('POST', '/v1/sandboxes').json, {});
});

test('connect gets the sandbox by its id, escaped; refresh gets it again', async () => {
  fake.on('GET', '/v1/sandboxes/sb-a%2Fb', { json: sandboxInfo('sb-a/b') });
  const odd = await Sandbox.connect('sb-a/b', conn);
  assert.equal(odd.id, 'sb-a/b');
  const sbx = await connected();
  fake.on('GET', SB, { json: sandboxInfo('sb-test1', { state: 'hibernated' }) });
  assert.equal((await sbx.refresh()).state, 'hibernated');
  assert.equal(sbx.info.state, 'hibernated');
});

test('list filters by state and metadata.<key>, and follows nextCursor to the last page', async () => {
  fake.on('GET', '/v1/sandboxes', { json: { sandboxes: [sandboxInfo('sb-1')], nextCursor: 'c2' } }, { json: { sandboxes: [sandboxInfo('sb-2')] } });
  const list = await Sandbox.list({ ...conn, state: 'running', metadata: { task: 'x y', owner: 'me' } });
  assert.deepEqual(
    list.map((s) => s.id),
    ['sb-1', 'sb-2'],
  );
  const [first, second] = fake.sent('GET', '/v1/sandboxes');
  assert.deepEqual(first?.query, { state: 'running', 'metadata.task': 'x y', 'metadata.owner': 'me' });
  assert.deepEqual(second?.query, { state: 'running', 'metadata.task': 'x y', 'metadata.owner': 'me', cursor: 'c2' });
  fake.reset();
  fake.on('GET', '/v1/sandboxes', { json: { sandboxes: [] } });
  assert.deepEqual(await Sandbox.list(conn), []);
  assert.deepEqual(fake.requests[0]?.query, {});
});

const EXEC_EVENTS = [
  { type: 'start', pid: 7 },
  { type: 'keepalive' },
  { type: 'stdout', data: 'a' },
  { type: 'stderr', data: 'warn' },
  { type: 'stdout', data: 'b\n' },
  { type: 'exit', pid: 7, exitCode: 0, timedOut: false, durationMs: 12 },
];

test('exec of a string sends cmd and the options on the streaming form, and gathers the output', async () => {
  const sbx = await connected();
  fake.on('POST', `${SB}/exec`, { ndjson: EXEC_EVENTS });
  const seen: string[] = [];
  const r = await sbx.exec('npm test', {
    cwd: '/work',
    env: { CI: '1' },
    user: 'root',
    stdin: 'yes\n',
    timeoutSeconds: 900,
    onStdout: (d) => seen.push(`out:${d}`),
    onStderr: (d) => seen.push(`err:${d}`),
  });
  assert.deepEqual(r, { pid: 7, exitCode: 0, timedOut: false, durationMs: 12, stdout: 'ab\n', stderr: 'warn' });
  assert.deepEqual(seen, ['out:a', 'err:warn', 'out:b\n']);
  const req = only('POST', `${SB}/exec`);
  assert.deepEqual(req.query, { stream: '1' });
  assert.deepEqual(req.json, { cmd: 'npm test', cwd: '/work', env: { CI: '1' }, user: 'root', stdin: 'yes\n', timeoutSeconds: 900 });
});

test('exec with bytes or a stream as stdin: the exec keeps stdin open and the bytes follow raw to the started pid', async () => {
  const sbx = await connected();
  fake.on('POST', `${SB}/exec`, { ndjson: EXEC_EVENTS });
  fake.on('PUT', `${SB}/processes/7/stdin`, { json: { bytes: 2 } }, { json: { bytes: 4 } });
  assert.equal((await sbx.exec('cat', { stdin: Buffer.from([0, 255]) })).stdout, 'ab\n');
  assert.equal((await sbx.exec('cat', { stdin: Readable.from([Buffer.from('ab'), Buffer.from('cd')]) })).stdout, 'ab\n');
  for (const req of fake.sent('POST', `${SB}/exec`)) assert.deepEqual(req.json, { cmd: 'cat', keepStdinOpen: true });
  const puts = fake.sent('PUT', `${SB}/processes/7/stdin`);
  assert.deepEqual(
    puts.map((r) => [r.query, r.headers['content-type'], r.body]),
    [
      [{ close: '1' }, 'application/octet-stream', Buffer.from([0, 255])],
      [{ close: '1' }, 'application/octet-stream', Buffer.from('abcd')],
    ],
  );
});

test('exec of an array sends argv; check: true throws CommandError on a non-zero exit or a timeout', async () => {
  const sbx = await connected();
  fake.on(
    'POST',
    `${SB}/exec`,
    {
      ndjson: [
        { type: 'stderr', data: 'boom\n' },
        { type: 'exit', pid: 8, exitCode: 3, timedOut: false, durationMs: 1 },
      ],
    },
    { ndjson: [{ type: 'exit', pid: 9, exitCode: null, signal: 'SIGKILL', timedOut: true, durationMs: 1000 }] },
    { ndjson: [{ type: 'exit', pid: 10, exitCode: 3, timedOut: false, durationMs: 1 }] },
  );
  await assert.rejects(sbx.exec(['git', 'status', '--short'], { check: true }), (e: Error) => {
    assert.ok(e instanceof CommandError);
    assert.equal(e.exitCode, 3);
    assert.equal(e.stderr, 'boom\n');
    assert.equal(e.message, 'command "git status --short" exited with code 3: boom');
    return true;
  });
  await assert.rejects(sbx.exec('sleep 99', { check: true, timeoutSeconds: 1 }), (e: Error) => e instanceof CommandError && e.timedOut);
  // Without check, a non-zero exit is a result.
  assert.equal((await sbx.exec(['false'])).exitCode, 3);
  assert.deepEqual(
    fake.sent('POST', `${SB}/exec`).map((r) => r.json),
    [{ argv: ['git', 'status', '--short'] }, { cmd: 'sleep 99', timeoutSeconds: 1 }, { argv: ['false'] }],
  );
});

test('exec stream failures: an error event is its code class with the status the code stands for; no exit event is UnavailableError', async () => {
  const sbx = await connected();
  fake.on(
    'POST',
    `${SB}/exec`,
    {
      ndjson: [
        { type: 'start', pid: 1 },
        { type: 'error', code: 'failed_precondition', message: 'sandbox sb-test1 is dead' },
      ],
    },
    {
      ndjson: [
        { type: 'start', pid: 1 },
        { type: 'stdout', data: 'x' },
      ],
    },
  );
  await assert.rejects(sbx.exec('true'), (e: Error) => e instanceof FailedPreconditionError && e.status === 409 && e.message === 'sandbox sb-test1 is dead');
  await assert.rejects(sbx.exec('true'), (e: Error) => e instanceof UnavailableError && /ended without an exit event/.test(e.message));
});

test('background exec returns a handle; the handle reads output, waits, writes stdin and signals', async () => {
  const sbx = await connected();
  fake.on('POST', `${SB}/exec`, { json: { pid: 42 } });
  const h = await sbx.exec('python3 -m http.server', { background: true, tag: 'web', keepStdinOpen: true, cwd: '/srv' });
  assert.equal(h.pid, 42);
  assert.equal(h.sandboxId, 'sb-test1');
  const req = only('POST', `${SB}/exec`);
  assert.deepEqual(req.query, {});
  assert.deepEqual(req.json, { cmd: 'python3 -m http.server', cwd: '/srv', background: true, tag: 'web', keepStdinOpen: true });

  const P = `${SB}/processes/42`;
  const output = { pid: 42, stdout: 'o', stderr: '', stdoutOffset: 11, stderrOffset: 0, running: true, exitCode: null };
  fake.on(
    'GET',
    `${P}/output`,
    { json: output },
    {
      ndjson: [
        { type: 'stdout', data: 'more' },
        { type: 'exit', pid: 42, exitCode: 0, timedOut: false, durationMs: 5 },
      ],
    },
  );
  assert.deepEqual(await h.output({ stdoutOffset: 10 }), output);
  const result = await h.wait({ stdoutOffset: 11 });
  assert.equal(result.stdout, 'more');
  assert.deepEqual(
    fake.sent('GET', `${P}/output`).map((r) => r.query),
    [{ stdoutOffset: '10' }, { follow: '1', stdoutOffset: '11' }],
  );

  fake.on('POST', `${P}/stdin`);
  fake.on('POST', `${P}/signal`);
  await h.sendStdin('hello\n');
  await h.closeStdin();
  await h.signal();
  await h.kill();
  assert.deepEqual(
    fake.sent('POST', `${P}/stdin`).map((r) => r.json),
    [{ data: 'hello\n' }, { data: '', close: true }],
  );
  assert.deepEqual(
    fake.sent('POST', `${P}/signal`).map((r) => r.json),
    [{ signal: 'SIGTERM' }, { signal: 'SIGKILL' }],
  );
  fake.on('POST', `${P}/stdin`, { status: 409, json: { error: { code: 'failed_precondition', message: 'process 42 has already exited' } } });
  await assert.rejects(h.sendStdin('late'), ConflictError);
});

test('processes.list and processes.get', async () => {
  const sbx = await connected();
  fake.on('GET', `${SB}/processes`, { json: { processes: [{ pid: 3, cmd: 'sleep 9', running: true }] } });
  assert.deepEqual(await sbx.processes.list(), [{ pid: 3, cmd: 'sleep 9', running: true }]);
  const h = sbx.processes.get(3);
  assert.equal(h.pid, 3);
  assert.equal(h.sandboxId, 'sb-test1');
});

test('lifecycle calls: ttl, hibernate, resume, kill; each keeps the latest state', async () => {
  const sbx = await connected();
  fake.on('POST', `${SB}/ttl`, { json: sandboxInfo('sb-test1', { expiresAt: '2024-05-01T12:10:00.000Z' }) });
  fake.on('POST', `${SB}/hibernate`, { json: sandboxInfo('sb-test1', { state: 'hibernated' }) });
  fake.on('POST', `${SB}/resume`, { json: sandboxInfo('sb-test1', { state: 'running' }) });
  fake.on('DELETE', SB);
  assert.equal((await sbx.setTtl(600)).expiresAt, '2024-05-01T12:10:00.000Z');
  assert.deepEqual(only('POST', `${SB}/ttl`).json, { ttlSeconds: 600 });
  await sbx.hibernate();
  assert.equal(sbx.info.state, 'hibernated');
  await sbx.resume();
  assert.equal(sbx.info.state, 'running');
  assert.equal(await sbx.kill(), undefined);
  only('DELETE', SB);
  for (const r of fake.requests) assert.equal(r.headers.authorization, 'Bearer k-test');
});

test('fork and forkTree post the count and options; children talk to the same daemon with the same key', async () => {
  const sbx = await connected();
  const forked = (...ids: string[]) => ({
    json: { sandboxes: ids.map((id) => sandboxInfo(id, { boot: 'fork', source: 'sb-test1' })), parentPausedMs: 1, channelHeldMs: 1, totalMs: 2 },
  });
  fake.on('POST', `${SB}/fork`, forked('sb-c1'), forked('sb-c2', 'sb-c3', 'sb-c4'), forked());
  const child = await sbx.fork({ metadata: { attempt: '1' } });
  assert.equal(child.id, 'sb-c1');
  assert.equal(child.info.source, 'sb-test1');
  const tree = await sbx.forkTree(3, { ttlSeconds: 120, idleSeconds: 30 });
  assert.deepEqual(
    tree.map((c) => c.id),
    ['sb-c2', 'sb-c3', 'sb-c4'],
  );
  await assert.rejects(sbx.fork(), (e: Error) => e instanceof InternalError && e.code === 'internal' && /no sandbox/.test(e.message));
  assert.deepEqual(
    fake.sent('POST', `${SB}/fork`).map((r) => r.json),
    [{ count: 1, metadata: { attempt: '1' } }, { count: 3, ttlSeconds: 120, idleSeconds: 30 }, { count: 1 }],
  );
  fake.on('DELETE', '/v1/sandboxes/sb-c2');
  await tree[0]!.kill();
  assert.equal(only('DELETE', '/v1/sandboxes/sb-c2').headers.authorization, 'Bearer k-test');
});

test('snapshot, getUrl, network policy and the egress log', async () => {
  const sbx = await connected();
  fake.on('POST', `${SB}/snapshots`, { status: 201, json: { id: 'snap-1' } });
  assert.equal((await sbx.snapshot({ metadata: { k: 'v' } })).id, 'snap-1');
  assert.deepEqual(only('POST', `${SB}/snapshots`).json, { metadata: { k: 'v' } });

  fake.on('POST', `${SB}/ports/3000/url`, { json: { url: 'http://3000-sb-test1.localhost:7070/?warren_token=t', expiresAt: 'x' } });
  assert.equal(await sbx.getUrl(3000, { expiresInSeconds: 60 }), 'http://3000-sb-test1.localhost:7070/?warren_token=t');
  assert.deepEqual(only('POST', `${SB}/ports/3000/url`).json, { expiresInSeconds: 60 });

  const policy = { allow: ['api.example.com:443'], credentials: [{ host: 'api.example.com:443', headers: { Authorization: 'Bearer t' } }] };
  fake.on('PUT', `${SB}/network`, { json: policy });
  fake.on('GET', `${SB}/network`, { json: { allow: [] } });
  assert.deepEqual(await sbx.setNetwork(policy), policy);
  assert.deepEqual(only('PUT', `${SB}/network`).json, policy);
  assert.deepEqual(await sbx.getNetwork(), { allow: [] });

  const entry = { id: 6, time: 't', host: 'h', port: 443, bytesUp: 1, bytesDown: 2, decision: 'allowed' };
  fake.on('GET', `${SB}/egress`, { json: { entries: [entry] } });
  assert.deepEqual(await sbx.egressLog({ after: 5, limit: 10 }), [entry]);
  await sbx.egressLog();
  assert.deepEqual(
    fake.sent('GET', `${SB}/egress`).map((r) => r.query),
    [{ after: '5', limit: '10' }, {}],
  );
});

test('files: reads and metadata calls send path and user in the query', async () => {
  const sbx = await connected();
  const F = `${SB}/files`;
  fake.on('GET', F, { text: 'hello ü' });
  assert.equal(await sbx.files.readText('notes.txt', { user: 'root' }), 'hello ü');
  assert.deepEqual((await sbx.files.read('/a b')).toString(), 'hello ü');
  const stream = await sbx.files.readStream('/big');
  let streamed = '';
  for await (const c of stream) streamed += (c as Buffer).toString();
  assert.equal(streamed, 'hello ü');
  assert.deepEqual(
    fake.sent('GET', F).map((r) => r.query),
    [{ path: 'notes.txt', user: 'root' }, { path: '/a b' }, { path: '/big' }],
  );

  const stat = { name: 'w', path: '/w', type: 'directory', size: 0, mode: 0o755, mtime: 'x' };
  fake.on('GET', `${F}/list`, { json: { entries: [stat] } });
  fake.on('GET', `${F}/stat`, { json: stat });
  fake.on('GET', `${F}/exists`, { json: { exists: false } });
  fake.on('POST', `${F}/mkdir`, { json: stat });
  fake.on('POST', `${F}/move`, { json: stat });
  fake.on('DELETE', F, { json: { removed: true } });
  assert.deepEqual(await sbx.files.list('/w', { depth: 2 }), [stat]);
  assert.deepEqual(await sbx.files.stat('/w', { user: 'u2' }), stat);
  assert.equal(await sbx.files.exists('/nope'), false);
  await sbx.files.mkdir('/w/x/y', { user: 'root' });
  await sbx.files.move('/a', '/b');
  assert.equal(await sbx.files.remove('/w'), true);
  assert.deepEqual(only('GET', `${F}/list`).query, { path: '/w', depth: '2' });
  assert.deepEqual(only('GET', `${F}/stat`).query, { path: '/w', user: 'u2' });
  assert.deepEqual(only('GET', `${F}/exists`).query, { path: '/nope' });
  const mkdir = only('POST', `${F}/mkdir`);
  assert.deepEqual([mkdir.query, mkdir.json], [{ user: 'root' }, { path: '/w/x/y' }]);
  const move = only('POST', `${F}/move`);
  assert.deepEqual([move.query, move.json], [{}, { from: '/a', to: '/b' }]);
  assert.deepEqual(only('DELETE', F).query, { path: '/w' });
});

test('files.write: strings, bytes and streams go as octet-stream bodies; mode in octal; large bytes declare their length', async () => {
  const sbx = await connected();
  const F = `${SB}/files`;
  fake.on('PUT', F, (req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ size: req.body.length, path: req.query.path }));
  });
  assert.deepEqual(await sbx.files.write('/w/a.txt', 'héllo', { mode: 0o644, user: 'root' }), { size: 6, path: '/w/a.txt' });
  await sbx.files.write('/w/b.bin', new Uint8Array([0, 1, 2]));
  await sbx.files.write('/w/c.txt', Readable.from([Buffer.from('str'), Buffer.from('eam')]));
  const big = Buffer.alloc(3 * 1024 * 1024 + 5, 7);
  assert.equal((await sbx.files.write('/w/big.bin', big)).size, big.length);
  const [a, b, c, d] = fake.sent('PUT', F);
  assert.deepEqual(a?.query, { path: '/w/a.txt', user: 'root', mode: '644' });
  assert.equal(a?.headers['content-type'], 'application/octet-stream');
  assert.equal(a?.body.toString(), 'héllo');
  assert.deepEqual([...(b?.body ?? [])], [0, 1, 2]);
  assert.equal(c?.body.toString(), 'stream');
  assert.equal(d?.headers['content-length'], String(big.length));
  assert.ok(d?.body.equals(big), 'the large body arrives whole');
});

test('Snapshots: list, get and delete, ids escaped', async () => {
  const snap = { id: 'snap-1', sandboxId: 'sb-1' };
  fake.on('GET', '/v1/snapshots', { json: { snapshots: [snap] } });
  fake.on('GET', '/v1/snapshots/snap-1', { json: snap });
  fake.on('DELETE', '/v1/snapshots/snap%3Fx');
  assert.deepEqual(await Snapshots.list(conn), [snap]);
  assert.deepEqual(await Snapshots.get('snap-1', conn), snap);
  await Snapshots.delete('snap?x', conn);
  assert.deepEqual(
    fake.requests.map((r) => `${r.method} ${r.path} ${r.headers.authorization}`),
    ['GET /v1/snapshots Bearer k-test', 'GET /v1/snapshots/snap-1 Bearer k-test', 'DELETE /v1/snapshots/snap%3Fx Bearer k-test'],
  );
});
