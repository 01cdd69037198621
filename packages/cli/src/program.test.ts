/**
 * The command line parsed in-process (buildProgram, every command with exitOverride) against
 * a fake daemon on 127.0.0.1: which requests each command and option turns into, what it
 * prints, and its exit code. What a command writes is captured only for the command's own
 * async context, so the test runner's reports on the same stdout pass untouched.
 */
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CommanderError, type Command } from 'commander';
import { NotFoundError, WarrenError } from '@warren/sdk';
import { FakeDaemon, sandboxInfo, type RecordedRequest } from '@warren/sdk/testing';
import { parseSide } from './cp.js';
import { buildProgram, failure } from './program.js';

interface Captured {
  out: string;
  err: string;
}
const capture = new AsyncLocalStorage<Captured>();

/** process.exit inside a command (template build failures): ends the run with that code. */
class ExitCalled extends Error {
  constructor(readonly code: number) {
    super(`process.exit(${code})`);
  }
}

function divert(stream: NodeJS.WriteStream, key: keyof Captured): void {
  const write = stream.write.bind(stream);
  stream.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const c = capture.getStore();
    if (!c) return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
    c[key] += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    (rest.find((r) => typeof r === 'function') as (() => void) | undefined)?.();
    return true;
  }) as typeof stream.write;
}

let fake: FakeDaemon;
let work: string;
const saved = { url: process.env.WARREN_URL, key: process.env.WARREN_API_KEY, exit: process.exit };

before(async () => {
  fake = await FakeDaemon.start();
  process.env.WARREN_URL = fake.url;
  process.env.WARREN_API_KEY = 'k-cli';
  work = mkdtempSync(path.join(tmpdir(), 'warren-cli-test-'));
  divert(process.stdout, 'out');
  divert(process.stderr, 'err');
  process.exit = ((code?: number) => {
    if (capture.getStore()) throw new ExitCalled(code ?? 0);
    return saved.exit(code);
  }) as typeof process.exit;
});

after(async () => {
  process.exit = saved.exit;
  if (saved.url === undefined) delete process.env.WARREN_URL;
  else process.env.WARREN_URL = saved.url;
  if (saved.key === undefined) delete process.env.WARREN_API_KEY;
  else process.env.WARREN_API_KEY = saved.key;
  rmSync(work, { recursive: true, force: true });
  await fake.close();
});

beforeEach(() => fake.reset());

function exitOverrideAll(cmd: Command): void {
  cmd.exitOverride();
  for (const sub of cmd.commands) exitOverrideAll(sub);
}

interface Run extends Captured {
  code: number;
  error?: unknown;
}

/** `warren ...args` as main.ts runs it: commander's errors and failed commands become an exit code and stderr. */
async function warren(...args: string[]): Promise<Run> {
  const program = buildProgram();
  exitOverrideAll(program);
  const io: Captured = { out: '', err: '' };
  const exitCode = process.exitCode;
  process.exitCode = undefined;
  try {
    await capture.run(io, () => program.parseAsync(['node', 'warren', ...args]));
    return { ...io, code: Number(process.exitCode ?? 0) };
  } catch (error) {
    if (error instanceof CommanderError) return { ...io, code: error.exitCode, error };
    if (error instanceof ExitCalled) return { ...io, code: error.code, error };
    const f = failure(error);
    return { ...io, err: io.err + f.message, code: f.exitCode, error };
  } finally {
    process.exitCode = exitCode;
  }
}

function only(method: string, route: string): RecordedRequest {
  const sent = fake.sent(method, route);
  assert.equal(sent.length, 1, `one ${method} ${route}; all requests: ${fake.requests.map((r) => `${r.method} ${r.path}`).join(', ')}`);
  return sent[0]!;
}

const SB = '/v1/sandboxes/sb-test1';

function connectable(over: Parameters<typeof sandboxInfo>[1] = {}): void {
  fake.on('GET', SB, { json: sandboxInfo('sb-test1', over) });
}

test('every command is documented in docs/cli.md, and every documented command exists', () => {
  const names = (cmd: Command, prefix = ''): string[] =>
    cmd.commands.flatMap((c) => (c.commands.length ? names(c, `${prefix}${c.name()} `) : [`${prefix}${c.name()}`]));
  const doc = readFileSync(new URL('../../../docs/cli.md', import.meta.url), 'utf8');
  // Table rows start with the command: | `warren snapshot create ID ...` |; a group's subcommands have rows of their own.
  const documented = new Set([...doc.matchAll(/^\| `warren ([a-z0-9-]+(?: [a-z0-9-]+)?)/gm)].map((m) => m[1] ?? ''));
  const groups = new Set(
    buildProgram()
      .commands.filter((c) => c.commands.length)
      .map((c) => c.name()),
  );
  const docNames = [...documented].map((n) => (groups.has(n.split(' ')[0] ?? '') ? n : (n.split(' ')[0] ?? ''))).sort();
  assert.deepEqual([...new Set(docNames)], names(buildProgram()).sort());
});

test('create: every option becomes its field of the request, with the key from $WARREN_API_KEY; prints the id', async () => {
  fake.on('POST', '/v1/sandboxes', { status: 201, json: sandboxInfo('sb-new1') });
  process.env.WARREN_TEST_TOKEN = 's3cret';
  try {
    const r = await warren(
      ...['create', '--template', 't', '--ttl', '60', '--env', 'A=B', '--env', 'C=D=E', '--metadata', 'k=v', '--metadata', 'empty='],
      ...['--cpus', '0.5', '--memory', '256', '--pids', '64', '--disk', '2048', '--idle', '30', '--snapshot', 'snap-1'],
      ...['--allow', 'example.com:443', '--allow', '*.github.com', '--credential', 'example.com:443=Authorization: @env:WARREN_TEST_TOKEN'],
    );
    assert.equal(r.code, 0, r.err);
    assert.equal(r.out, 'sb-new1\n');
  } finally {
    delete process.env.WARREN_TEST_TOKEN;
  }
  const req = only('POST', '/v1/sandboxes');
  assert.equal(req.headers.authorization, 'Bearer k-cli');
  assert.deepEqual(req.json, {
    template: 't',
    ttlSeconds: 60,
    idleSeconds: 30,
    snapshot: 'snap-1',
    env: { A: 'B', C: 'D=E' },
    metadata: { k: 'v', empty: '' },
    resources: { cpus: 0.5, memoryMB: 256, pids: 64, diskMB: 2048 },
    network: { allow: ['example.com:443', '*.github.com'], credentials: [{ host: 'example.com:443', headers: { Authorization: 's3cret' } }] },
  });
});

test('create with no options: template base, empty metadata and env, nothing else; --json prints the sandbox', async () => {
  fake.on('POST', '/v1/sandboxes', { status: 201, json: sandboxInfo('sb-new2', { metadata: { t: '\u009b' } }) });
  const r = await warren('create', '--json');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(only('POST', '/v1/sandboxes').json, { template: 'base', metadata: {}, env: {} });
  assert.deepEqual(JSON.parse(r.out), sandboxInfo('sb-new2', { metadata: { t: '\u009b' } }));
  assert.ok(r.out.includes('\\u009b'), 'C1 controls are escaped in --json');
});

test('create refuses bad values before sending anything, naming the option', async () => {
  const cases: Array<[string[], RegExp]> = [
    [['--ttl', '0'], /--ttl must be a positive integer, got '0'/],
    [['--ttl', 'abc'], /--ttl must be a positive integer, got 'abc'/],
    [['--ttl', '1.5'], /--ttl must be a positive integer/],
    [['--cpus', '-1'], /--cpus must be a number above 0, got '-1'/],
    [['--cpus', ''], /--cpus must be a number above 0/],
    [['--memory', '12MB'], /--memory must be a positive integer, got '12MB'/],
    [['--env', 'NOVALUE'], /--env must be KEY=VALUE, got 'NOVALUE'/],
    [['--metadata', '=v'], /--metadata must be KEY=VALUE, got '=v'/],
    [['--credential', 'no-header-here'], /--credential 'no-header-here': expected HOST=Header: value/],
    [['--credential', 'h=X-Key: @env:WARREN_TEST_UNSET_VAR'], /environment variable WARREN_TEST_UNSET_VAR is not set/],
  ];
  for (const [args, message] of cases) {
    const r = await warren('create', ...args);
    assert.equal(r.code, 1, args.join(' '));
    assert.match(r.err, message);
    assert.ok(r.err.startsWith('warren: '), r.err);
    assert.equal(r.out, '');
  }
  assert.equal(fake.requests.length, 0, 'no request for a refused command line');
});

test("commander's own errors: unknown options and commands, missing arguments; help goes to stdout with exit 0", async () => {
  const unknown = await warren('create', '--bogus');
  assert.equal(unknown.code, 1);
  assert.equal((unknown.error as CommanderError).code, 'commander.unknownOption');
  assert.match(unknown.err, /error: unknown option '--bogus'/);
  assert.match(unknown.err, /Usage: warren create \[options\]/, 'help after the error');
  const cmd = await warren('frobnicate');
  assert.equal((cmd.error as CommanderError).code, 'commander.unknownCommand');
  assert.match(cmd.err, /error: unknown command 'frobnicate'/);
  const missing = await warren('exec', 'sb-test1');
  assert.equal((missing.error as CommanderError).code, 'commander.missingArgument');
  assert.match(missing.err, /error: missing required argument 'command'/);
  const noId = await warren('ttl');
  assert.equal((noId.error as CommanderError).code, 'commander.missingArgument');
  const help = await warren('exec', '--help');
  assert.equal(help.code, 0);
  assert.match(help.out, /Usage: warren exec \[options\] <id> <command\.\.\.>/);
  assert.match(help.out, /--timeout <seconds>/);
  assert.equal(fake.requests.length, 0);
});

test('exec: argv after -- is passed untouched (its options are not warren options); output passes through raw; exit code is the command’s', async () => {
  connectable();
  fake.on('POST', `${SB}/exec`, {
    ndjson: [
      { type: 'start', pid: 5 },
      { type: 'stdout', data: 'raw \x1b[31mred\x1b[0m\n' },
      { type: 'stderr', data: 'warning\n' },
      { type: 'exit', pid: 5, exitCode: 3, timedOut: false, durationMs: 2 },
    ],
  });
  const r = await warren('exec', 'sb-test1', '--timeout', '5', '--user', 'root', '--cwd', '/w', '--env', 'A=B', '--', 'grep', '--user', '-r', 'x y');
  assert.equal(r.code, 3);
  assert.equal(r.out, 'raw \x1b[31mred\x1b[0m\n', "a command's output is the user's data");
  assert.equal(r.err, 'warning\n');
  const req = only('POST', `${SB}/exec`);
  assert.deepEqual(req.query, { stream: '1' });
  assert.deepEqual(req.json, { argv: ['grep', '--user', '-r', 'x y'], timeoutSeconds: 5, user: 'root', cwd: '/w', env: { A: 'B' } });
  assert.equal(only('GET', SB).headers.authorization, 'Bearer k-cli');
});

test('exec: a timeout exits 124 with a message; null exit code exits 1; bad --timeout is refused', async () => {
  connectable();
  fake.on(
    'POST',
    `${SB}/exec`,
    { ndjson: [{ type: 'exit', pid: 5, exitCode: null, signal: 'SIGKILL', timedOut: true, durationMs: 1000 }] },
    { ndjson: [{ type: 'exit', pid: 6, exitCode: null, signal: 'SIGKILL', timedOut: false, durationMs: 1 }] },
  );
  const slow = await warren('exec', 'sb-test1', '--timeout', '1', '--', 'sleep', '9');
  assert.equal(slow.code, 124);
  assert.equal(slow.err, 'warren: command timed out after 1s\n');
  assert.equal((await warren('exec', 'sb-test1', '--', 'kill', '-9', '$$')).code, 1);
  fake.reset();
  for (const bad of ['abc', '0', '-3']) {
    const r = await warren('exec', 'sb-test1', '--timeout', bad, '--', 'true');
    assert.equal(r.code, 1, bad);
    assert.match(r.err, new RegExp(`--timeout must be a number above 0, got '${bad}'`));
  }
  assert.equal(fake.requests.length, 0);
});

test('a missing sandbox exits 2 with the daemon’s message, escaped', async () => {
  fake.on('GET', '/v1/sandboxes/sb-gone', { status: 404, json: { error: { code: 'not_found', message: 'no sandbox with id sb-gone\x1b]0;x\x07' } } });
  const r = await warren('info', 'sb-gone');
  assert.equal(r.code, 2);
  assert.equal(r.err, 'warren: no sandbox with id sb-gone\\x1b]0;x\\x07\n');
  assert.ok(r.error instanceof NotFoundError);
});

test('failure(): 2 for not_found, 1 for anything else, message escaped and one line', () => {
  assert.deepEqual(failure(new NotFoundError('not_found', 'no sandbox sb-1')), { message: 'warren: no sandbox sb-1\n', exitCode: 2 });
  assert.deepEqual(failure(new WarrenError('conflict', 'in use')), { message: 'warren: in use\n', exitCode: 1 });
  assert.deepEqual(failure(new Error('line1\nline2')), { message: 'warren: line1\\nline2\n', exitCode: 1 });
  assert.deepEqual(failure('thrown string'), { message: 'warren: thrown string\n', exitCode: 1 });
});

test('ls: filters in the query; a table with escaped cells, or JSON', async () => {
  const list = [
    sandboxInfo('sb-a1', { metadata: { task: 'fix-1', who: 'me' } }),
    sandboxInfo('sb-b22', { state: 'hibernated', template: 'node-dev', metadata: { evil: '\x1b[2J' } }),
  ];
  fake.on('GET', '/v1/sandboxes', { json: { sandboxes: list } });
  const r = await warren('ls', '--metadata', 'task=fix-1', '--state', 'running');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(only('GET', '/v1/sandboxes').query, { state: 'running', 'metadata.task': 'fix-1' });
  assert.equal(
    r.out,
    [
      'ID      STATE       TEMPLATE  CREATED              EXPIRES              METADATA',
      'sb-a1   running     base      2024-05-01 12:00:00  2024-05-01 13:00:00  task=fix-1,who=me',
      'sb-b22  hibernated  node-dev  2024-05-01 12:00:00  2024-05-01 13:00:00  evil=\\x1b[2J',
      '',
    ].join('\n'),
  );
  const json = await warren('ls', '--json');
  assert.deepEqual(JSON.parse(json.out), list);
});

test('info: one labelled line per fact, how it booted in words, escaped', async () => {
  connectable({
    boot: 'fork',
    source: 'sb-parent',
    state: 'dead',
    error: 'out of memory\x07',
    idleSeconds: 300,
    diskBytes: 12_345_678,
    metadata: { a: '1', b: '2' },
  });
  const r = await warren('info', 'sb-test1');
  assert.equal(r.code, 0, r.err);
  assert.equal(
    r.out,
    [
      'id         sb-test1',
      'state      dead (out of memory\\x07)',
      'template   base (version v1)',
      'boot       forked from sb-parent',
      'created    2024-05-01T12:00:00.000Z',
      'expires    2024-05-01T13:00:00.000Z',
      'idle       hibernates after 300s without activity',
      'disk       12.3 MB',
      'resources  1 cpus, 512 MB memory, 256 pids, 1024 MB disk',
      'metadata   a=1, b=2',
      '',
    ].join('\n'),
  );
  connectable({ boot: 'pool', state: 'hibernated', diskBytes: 5e6 });
  const pooled = await warren('info', 'sb-test1');
  assert.match(pooled.out, /^boot +claimed from the warm pool$/m);
  assert.match(pooled.out, /^idle +never hibernates by itself$/m);
  assert.match(pooled.out, /^disk +5\.0 MB \(its saved image\)$/m);
  assert.match(pooled.out, /^metadata +-$/m);
  connectable();
  assert.match((await warren('info', 'sb-test1')).out, /^disk +-$/m);
});

test('rm, ttl, hibernate and resume: one request per id, in order', async () => {
  for (const id of ['sb-1', 'sb-2']) {
    fake.on('GET', `/v1/sandboxes/${id}`, { json: sandboxInfo(id) });
    fake.on('DELETE', `/v1/sandboxes/${id}`);
  }
  const rm = await warren('rm', 'sb-1', 'sb-2');
  assert.equal(rm.out, 'sb-1\nsb-2\n');
  assert.deepEqual(
    fake.requests.filter((r) => r.method === 'DELETE').map((r) => r.path),
    ['/v1/sandboxes/sb-1', '/v1/sandboxes/sb-2'],
  );

  connectable();
  fake.on('POST', `${SB}/ttl`, { json: sandboxInfo('sb-test1', { expiresAt: '2024-05-01T12:10:00.000Z' }) });
  const ttl = await warren('ttl', 'sb-test1', '600');
  assert.equal(ttl.out, 'sb-test1 expires at 2024-05-01T12:10:00.000Z\n');
  assert.deepEqual(only('POST', `${SB}/ttl`).json, { ttlSeconds: 600 });
  const badTtl = await warren('ttl', 'sb-test1', '-1');
  assert.equal(badTtl.code, 1);
  assert.match(badTtl.err, /seconds must be a positive integer, got '-1'/);

  fake.on('POST', `${SB}/hibernate`, { json: sandboxInfo('sb-test1', { state: 'hibernated' }) });
  fake.on('POST', `${SB}/resume`, { json: sandboxInfo('sb-test1') });
  assert.match((await warren('hibernate', 'sb-test1')).out, /^sb-test1 hibernated in \d+ ms\n$/);
  assert.match((await warren('resume', 'sb-test1')).out, /^sb-test1 running \(resumed in \d+ ms\)\n$/);
});

test('fork: count, metadata and ttl in the body; prints the children', async () => {
  connectable();
  const children = [sandboxInfo('sb-c1'), sandboxInfo('sb-c2')];
  fake.on('POST', `${SB}/fork`, { json: { sandboxes: children, parentPausedMs: 1, channelHeldMs: 1, totalMs: 1 } });
  const r = await warren('fork', 'sb-test1', '--count', '2', '--metadata', 'attempt=1', '--ttl', '120');
  assert.equal(r.out, 'sb-c1\nsb-c2\n');
  assert.deepEqual(only('POST', `${SB}/fork`).json, { count: 2, metadata: { attempt: '1' }, ttlSeconds: 120 });
  fake.reset();
  connectable();
  fake.on('POST', `${SB}/fork`, { json: { sandboxes: children.slice(0, 1), parentPausedMs: 1, channelHeldMs: 1, totalMs: 1 } });
  const plain = await warren('fork', 'sb-test1', '--json');
  assert.deepEqual(only('POST', `${SB}/fork`).json, { count: 1 }, "no metadata: the parent's");
  assert.deepEqual(JSON.parse(plain.out), children.slice(0, 1));
  assert.match((await warren('fork', 'sb-test1', '--count', '0')).err, /--count must be a positive integer/);
});

test('snapshot create, ls and rm', async () => {
  connectable();
  const snap = {
    id: 'snap-1',
    sandboxId: 'sb-test1',
    template: 'base',
    templateVersion: 'v1',
    createdAt: '2024-05-01T12:30:00.000Z',
    sizeBytes: 123_456_789,
    metadata: {},
    resources: {},
  };
  fake.on('POST', `${SB}/snapshots`, { status: 201, json: snap });
  fake.on('GET', '/v1/snapshots', { json: { snapshots: [snap] } });
  fake.on('DELETE', '/v1/snapshots/snap-1');
  assert.equal((await warren('snapshot', 'create', 'sb-test1', '--metadata', 'k=v')).out, 'snap-1\n');
  assert.deepEqual(only('POST', `${SB}/snapshots`).json, { metadata: { k: 'v' } });
  assert.equal(
    (await warren('snapshot', 'ls')).out,
    'ID      SANDBOX   TEMPLATE  CREATED              SIZE\nsnap-1  sb-test1  base      2024-05-01 12:30:00  123.5 MB\n',
  );
  assert.equal((await warren('snapshot', 'rm', 'snap-1')).out, 'snap-1\n');
  only('DELETE', '/v1/snapshots/snap-1');
});

test('net: show, replace the rules, add credentials keeping the rules, deny all; values never printed', async () => {
  connectable();
  const N = `${SB}/network`;
  fake.on('GET', N, { json: { allow: ['a.example:443'] } });
  fake.on('PUT', N, (req, res) => {
    const policy = req.json as { allow: string[]; credentials?: Array<{ host: string; headers: Record<string, string> }> };
    const redacted = policy.credentials?.map((c) => ({ host: c.host, headers: Object.fromEntries(Object.keys(c.headers).map((h) => [h, '[redacted]'])) }));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ allow: policy.allow, ...(redacted ? { credentials: redacted } : {}) }));
  });
  assert.equal((await warren('net', 'sb-test1')).out, 'allow a.example:443\n');

  assert.equal((await warren('net', 'sb-test1', '--allow', 'b.example', '--allow', '10.0.0.0/8:22')).out, 'allow b.example\nallow 10.0.0.0/8:22\n');
  assert.deepEqual(fake.sent('PUT', N)[0]?.json, { allow: ['b.example', '10.0.0.0/8:22'] });

  const cred = await warren('net', 'sb-test1', '--credential', 'a.example:443=X-Api-Key: k123', '--credential', 'a.example:443=X-Other: v');
  assert.equal(cred.out, 'allow a.example:443\ncredential a.example:443: X-Api-Key, X-Other (values are kept by the daemon)\n');
  assert.ok(!cred.out.includes('k123'));
  assert.deepEqual(fake.sent('PUT', N)[1]?.json, {
    allow: ['a.example:443'],
    credentials: [{ host: 'a.example:443', headers: { 'X-Api-Key': 'k123', 'X-Other': 'v' } }],
  });

  assert.equal((await warren('net', 'sb-test1', '--deny-all')).out, 'nothing allowed (all egress is refused)\n');
  assert.deepEqual(fake.sent('PUT', N)[2]?.json, { allow: [] });
  const both = await warren('net', 'sb-test1', '--deny-all', '--allow', 'x');
  assert.equal(both.code, 1);
  assert.match(both.err, /give --allow\/--credential or --deny-all, not both/);
  assert.equal(fake.sent('PUT', N).length, 3);
});

test('url and egress', async () => {
  connectable();
  fake.on('POST', `${SB}/ports/3000/url`, { json: { url: 'http://3000-sb-test1.localhost:7070/?warren_token=t', expiresAt: 'x' } });
  assert.equal((await warren('url', 'sb-test1', '3000', '--ttl', '60')).out, 'http://3000-sb-test1.localhost:7070/?warren_token=t\n');
  assert.deepEqual(only('POST', `${SB}/ports/3000/url`).json, { expiresInSeconds: 60 });
  assert.match((await warren('url', 'sb-test1', 'http')).err, /port must be a positive integer, got 'http'/);

  const entries = [
    { id: 1, time: '2024-05-01T12:00:00.123456Z', host: 'a.example', port: 443, method: 'CONNECT', bytesUp: 10, bytesDown: 20, decision: 'allowed' },
    { id: 2, time: '2024-05-01T12:00:01.000Z', host: 'evil\x1b[2J', port: 80, path: '/x', bytesUp: 0, bytesDown: 0, decision: 'denied', reason: 'no rule' },
  ];
  fake.on('GET', `${SB}/egress`, { json: { entries } });
  const table = await warren('egress', 'sb-test1');
  assert.equal(
    table.out,
    [
      'TIME                     DECISION  METHOD   HOST         PORT  PATH  UP  DOWN  REASON',
      '2024-05-01 12:00:00.123  allowed   CONNECT  a.example    443   -     10  20',
      '2024-05-01 12:00:01.000  denied    -        evil\\x1b[2J  80    /x    0   0     no rule',
      '',
    ].join('\n'),
  );
  assert.deepEqual(only('GET', `${SB}/egress`).query, { after: '0', limit: '1000' });
  const lines = (await warren('egress', 'sb-test1', '--json')).out.trimEnd().split('\n');
  assert.deepEqual(
    lines.map((l) => JSON.parse(l) as unknown),
    entries,
  );
});

test('pool and bake: size parsing, the text forms, a failed bake exits 1', async () => {
  const pool = {
    template: 'node-dev',
    size: 2,
    ready: 1,
    booting: 1,
    hits: 5,
    misses: 1,
    reclaimed: 0,
    bootFailures: 1,
    lastError: 'boot\x1b failed',
    claimMs: { p50: 12.34, p95: 20, p99: 30.06, count: 5 },
  };
  fake.on('GET', '/v1/templates/node-dev/pool', { json: pool });
  fake.on('PUT', '/v1/templates/node-dev/pool', { json: { ...pool, size: 0, claimMs: null, lastError: undefined } });
  assert.equal(
    (await warren('pool', 'node-dev')).out,
    'node-dev: size 2, ready 1, booting 1\nhits 5, misses 1, reclaimed 0, boot failures 1; claim p50 12.3 ms, p99 30.1 ms (5)\nlast boot error: boot\\x1b failed\n',
  );
  assert.match((await warren('pool', 'node-dev', '--size', '0')).out, /size 0.*\n.*no claims yet\n$/);
  assert.deepEqual(only('PUT', '/v1/templates/node-dev/pool').json, { size: 0 });
  for (const bad of ['-1', 'two', '1.5', '']) {
    const r = await warren('pool', 'node-dev', '--size', bad);
    assert.equal(r.code, 1, bad);
    assert.match(r.err, /--size must be an integer of at least 0/);
  }
  assert.equal(fake.sent('PUT', '/v1/templates/node-dev/pool').length, 1);

  fake.on(
    'POST',
    '/v1/templates/node-dev/bake',
    { json: { state: 'ready', template: 'node-dev', version: 'v3', bakedAt: '2024-05-01T12:00:00Z', ms: 4321 } },
    { json: { state: 'failed', template: 'node-dev', version: 'v3', error: 'ready check timed out' } },
  );
  const ok = await warren('bake', 'node-dev');
  assert.equal(ok.code, 0);
  assert.equal(ok.out, 'node-dev v3: ready (baked 2024-05-01T12:00:00Z in 4.3s)\n');
  assert.match(ok.err, /^baking node-dev/);
  const failed = await warren('bake', 'node-dev', '--json');
  assert.equal(failed.code, 1);
  assert.equal(failed.err, '', 'no progress line with --json');
  assert.equal((JSON.parse(failed.out) as { error: string }).error, 'ready check timed out');
});

test('template build: the recipe file (or its directory) with --name, the context directory beside it; progress printed; a failed step exits 1', async () => {
  const dir = path.join(work, 'app');
  const recipe = { name: 'from-file', from: 'base', steps: [{ type: 'run', cmd: 'make' }] };
  mkdirSync(dir);
  writeFileSync(path.join(dir, 'recipe.json'), JSON.stringify(recipe));
  const template = { name: 'renamed', version: 'v9' };
  fake.on(
    'POST',
    '/v1/templates/build',
    {
      ndjson: [
        { type: 'step', step: 1, total: 2, kind: 'from', description: 'from base', cached: true },
        { type: 'step', step: 2, total: 2, kind: 'run', description: 'run make', cached: false },
        { type: 'log', step: 2, stream: 'stdout', line: 'cc -o app\tmain.c' },
        { type: 'step_done', step: 2, total: 2, cached: false, elapsedMs: 1500 },
        { type: 'done', template, elapsedMs: 2000 },
      ],
    },
    {
      ndjson: [
        { type: 'step', step: 2, total: 2, kind: 'run', description: 'run make', cached: false },
        { type: 'error', code: 'failed_precondition', message: 'step 2/2 (run make) failed with exit code 2', step: 2, exitCode: 2, output: 'x' },
      ],
    },
  );
  const r = await warren('template', 'build', dir, '--name', 'renamed');
  assert.equal(r.code, 0, r.err);
  assert.equal(r.out, '[1/2] from base (cached)\n[2/2] run make\n    cc -o app\tmain.c\n    done in 1.5s\nbuilt renamed version v9 in 2.0s\n');
  assert.deepEqual(only('POST', '/v1/templates/build').json, { ...recipe, name: 'renamed', contextDir: dir });
  const failed = await warren('template', 'build', path.join(dir, 'recipe.json'));
  assert.equal(failed.code, 1);
  assert.equal(failed.err, 'warren: build failed: step 2/2 (run make) failed with exit code 2\n');
  assert.deepEqual(fake.sent('POST', '/v1/templates/build')[1]?.json, { ...recipe, contextDir: dir }, "the recipe's own name without --name");
  const missing = await warren('template', 'build', path.join(work, 'nope.json'));
  assert.equal(missing.code, 1);
  assert.match(missing.err, /cannot read recipe .*nope\.json/);
});

test('template ls, rm and prune', async () => {
  fake.on('GET', '/v1/templates', {
    json: {
      templates: [
        { name: 'base', version: 'v1', builtAt: '2024-05-01T12:00:00.000Z' },
        { name: 'app', version: 'v2', from: 'base', start: { cmd: 'node s.js' } },
      ],
    },
  });
  assert.equal(
    (await warren('template', 'ls')).out,
    'NAME  VERSION  FROM  BUILT                START      NETWORK\nbase  v1       -     2024-05-01 12:00:00  -          -\napp   v2       base  -                    node s.js  -\n',
  );
  fake.on('DELETE', '/v1/templates/app');
  fake.on('DELETE', '/v1/templates/base', {
    status: 409,
    json: { error: { code: 'conflict', message: "template 'base' is in use by sb-1; kill those first" } },
  });
  const rm = await warren('template', 'rm', 'app', 'base');
  assert.equal(rm.out, 'app\n');
  assert.equal(rm.code, 1);
  assert.equal(rm.err, "warren: template 'base' is in use by sb-1; kill those first\n");

  fake.on('POST', '/v1/templates/prune', { json: { removed: 1, freedBytes: 2_500_000, kept: 3 } });
  assert.equal((await warren('template', 'prune')).out, 'removed 1 cached layer, 2.5 MB freed; kept 3 that template versions were built from\n');
  await warren('template', 'prune', '--all');
  assert.deepEqual(
    fake.sent('POST', '/v1/templates/prune').map((r) => r.json),
    [{ all: false }, { all: true }],
  );
});

test('usage: --since/--until as durations or ISO dates, --api-key; bad forms refused', async () => {
  fake.on('GET', '/v1/usage', {
    json: {
      since: '2024-05-01T00:00:00.000Z',
      until: '2024-05-02T00:00:00.000Z',
      prices: { currency: 'USD', vcpuHour: 0.05, gibHour: 0.01 },
      sandboxes: [],
      apiKeys: [],
      total: { sandboxes: 0, activeSeconds: 0, vcpuSeconds: 0, gibSeconds: 0, cost: 0 },
    },
  });
  const startedAt = Date.now();
  const r = await warren('usage', '--since', '2h', '--until', '2024-05-02', '--api-key', 'key-1');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /^usage from 2024-05-01 00:00:00 to 2024-05-02 00:00:00 UTC\nno sandbox ran in this window\n/);
  const q = only('GET', '/v1/usage').query;
  assert.equal(q.until, '2024-05-02T00:00:00.000Z');
  assert.equal(q.apiKey, 'key-1');
  const since = Date.parse(q.since ?? '');
  assert.ok(since >= startedAt - 2 * 3600_000 && since <= Date.now() - 2 * 3600_000, `since ${q.since} is 2h ago`);
  const bad = await warren('usage', '--since', 'yesterday');
  assert.equal(bad.code, 1);
  assert.match(bad.err, /--since must be an ISO 8601 date or time .* got 'yesterday'/);
});

test('cp: ID:/path marks the sandbox side; uploads keep the mode, downloads write the file', async () => {
  assert.deepEqual(parseSide('sb-abc123:/w/f.txt'), { sandbox: 'sb-abc123', path: '/w/f.txt' });
  assert.deepEqual(parseSide('sb-abc123:rel/f'), { sandbox: 'sb-abc123', path: 'rel/f' });
  assert.deepEqual(parseSide('./local:file'), { path: './local:file' });
  assert.deepEqual(parseSide('sb-ABC:/x'), { path: 'sb-ABC:/x' }, 'ids are lower case');

  connectable();
  const local = path.join(work, 'up.sh');
  writeFileSync(local, '#!/bin/sh\necho hi\n', { mode: 0o750 });
  fake.on('PUT', `${SB}/files`, (req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ size: req.body.length, path: req.query.path }));
  });
  const up = await warren('cp', local, 'sb-test1:/w/up.sh', '--user', 'root');
  assert.equal(up.code, 0, up.err);
  assert.equal(up.err, 'copied 18 bytes\n');
  const put = only('PUT', `${SB}/files`);
  assert.deepEqual(put.query, { path: '/w/up.sh', user: 'root', mode: '750' });
  assert.equal(put.body.toString(), '#!/bin/sh\necho hi\n');

  fake.on('GET', `${SB}/files`, { text: 'downloaded ü' });
  const dest = path.join(work, 'down.txt');
  const down = await warren('cp', 'sb-test1:/w/d.txt', dest);
  assert.equal(down.code, 0, down.err);
  assert.equal(readFileSync(dest, 'utf8'), 'downloaded ü');
  assert.equal(down.err, 'copied 13 bytes\n');
  assert.deepEqual(only('GET', `${SB}/files`).query, { path: '/w/d.txt' });

  assert.match((await warren('cp', 'a', 'b')).err, /one side must be a sandbox path, written ID:\/path/);
  assert.match((await warren('cp', 'sb-a:/x', 'sb-b:/y')).err, /copy between two sandboxes is not supported/);
  assert.match((await warren('cp', work, 'sb-test1:/w/dir')).err, /is not a regular file/);
});
