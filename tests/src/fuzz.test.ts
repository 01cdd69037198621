/**
 * A bounded, seeded fuzz of the HTTP API: random methods, routes (with real, dead and
 * garbage sandbox ids, traversal strings, very long and non-ASCII segments), query strings,
 * headers and bodies. The daemon must survive, never answer 500, always answer errors as
 * {error:{code,message}} with a known code, and never leak a stack trace or host path.
 *
 * Reproduce a run with WARREN_FUZZ_SEED=<seed> (printed as a diagnostic); the request
 * index in a failure identifies the request within that run. WARREN_FUZZ_REQUESTS runs
 * longer (or shorter) campaigns.
 */
import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { ErrorCodes, isErrorCode } from '@warren/protocol';
import type { Sandbox } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const SEED = Number(process.env.WARREN_FUZZ_SEED ?? 0x5eed_2026) >>> 0;
const REQUESTS = Number(process.env.WARREN_FUZZ_REQUESTS ?? 400);
/** Response bytes kept per request; bigger bodies (file downloads) are cut off, which also
 *  exercises clients that go away mid-download. */
const MAX_BODY = 256 * 1024;

let d: DaemonHandle;
let sbx: Sandbox;
let deadId: string;

before(async () => {
  // The fuzz sends thousands of calls, many with a wrong key, all from one address.
  d = await startDaemon({ env: { WARREN_AUTH_FAILURES_PER_MINUTE: '1000000' } });
  sbx = await d.create();
  const dead = await d.create();
  deadId = dead.id;
  await dead.kill();
});
after(async () => {
  await stopAndCheckClean(d);
});

/** mulberry32: small, fast and good enough to pick fuzz inputs reproducibly. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface FuzzRequest {
  index: number;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
  /** Send the body in pieces without a Content-Length. */
  chunked: boolean;
}

interface FuzzResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  truncated: boolean;
}

class Generator {
  private rnd: () => number;
  constructor(
    seed: number,
    private ids: { live: string; dead: string },
  ) {
    this.rnd = prng(seed);
  }

  private int(n: number): number {
    return Math.floor(this.rnd() * n);
  }
  private chance(p: number): boolean {
    return this.rnd() < p;
  }
  private pick<T>(items: readonly T[]): T {
    const item = items[this.int(items.length)];
    if (item === undefined) throw new Error('pick from an empty list');
    return item;
  }

  private readonly strings = [
    '',
    ' ',
    '.',
    '..',
    '/',
    '~',
    '~/x',
    '../../../../etc/shadow',
    '/../../etc/passwd',
    '/etc/passwd',
    '/etc/shadow',
    '/root/.bashrc',
    '/proc/self/environ',
    '/proc/1/maps',
    '/dev/zero',
    '/dev/null',
    '/opt/warren/agent.cjs',
    '/tmp',
    '/tmp/fuzz.txt',
    '/home/user',
    'fuzz/a/b',
    'notes.txt',
    'x'.repeat(300),
    'y'.repeat(5000),
    '💥',
    'é/ü/ß',
    '日本語.txt',
    '\u0000',
    'a\u0000b',
    '\n',
    '%00',
    '%ZZ',
    '%',
    '-1',
    '0',
    '1',
    '33',
    '777',
    '0755',
    '1e309',
    'NaN',
    'Infinity',
    '0x1f',
    '9999999999999999999999',
    'true',
    'null',
    'undefined',
    '__proto__',
    'constructor',
    'root',
    'user',
    'nobody',
    'running',
    'dead',
    'SIGKILL',
    'SIGFOO',
    'base',
    "'; DROP TABLE sandboxes; --",
    '<script>alert(1)</script>',
    '${HOME}',
    '$(id)',
  ];

  private readonly idPool = (): string[] => [
    // Half the time the live sandbox, so requests get past the lookup into the services.
    ...Array<string>(14).fill(this.ids.live),
    this.ids.dead,
    'sb-000000000000',
    'sb-',
    `sb-${'a'.repeat(1000)}`,
    '..',
    '%2e%2e',
    '..%2f..%2fhealth',
    '%2F',
    '%00',
    '%ZZ',
    encodeURIComponent('💥'),
    'x'.repeat(8000),
    '-1',
    'null',
    '__proto__',
  ];

  private readonly routes = [
    '/v1/health',
    '/v1/templates',
    '/v1/sandboxes',
    '/v1/sandboxes/{id}',
    '/v1/sandboxes/{id}/ttl',
    '/v1/sandboxes/{id}/exec',
    '/v1/sandboxes/{id}/processes',
    '/v1/sandboxes/{id}/processes/{pid}/output',
    '/v1/sandboxes/{id}/processes/{pid}/stdin',
    '/v1/sandboxes/{id}/processes/{pid}/signal',
    '/v1/sandboxes/{id}/files',
    '/v1/sandboxes/{id}/files',
    '/v1/sandboxes/{id}/files/stat',
    '/v1/sandboxes/{id}/files/exists',
    '/v1/sandboxes/{id}/files/list',
    '/v1/sandboxes/{id}/files/mkdir',
    '/v1/sandboxes/{id}/files/move',
    '/v1/{junk}',
    '/v1/sandboxes/{id}/{junk}',
    '/v2/sandboxes',
    '/',
  ];

  private readonly queryKeys = [
    'path',
    'path',
    'path',
    'user',
    'depth',
    'mode',
    'state',
    'limit',
    'cursor',
    'stream',
    'follow',
    'stdoutOffset',
    'stderrOffset',
    'metadata.task',
    'metadata.',
    '__proto__',
    'constructor',
    '',
    'x'.repeat(200),
  ];

  private readonly bodyKeys = [
    'cmd',
    'argv',
    'cwd',
    'env',
    'user',
    'stdin',
    'timeoutSeconds',
    'background',
    'tag',
    'keepStdinOpen',
    'template',
    'ttlSeconds',
    'metadata',
    'resources',
    'cpus',
    'memoryMB',
    'pids',
    'diskMB',
    'path',
    'from',
    'to',
    'data',
    'close',
    'signal',
    '__proto__',
    'constructor',
    '',
  ];

  private readonly commands = ['true', 'echo hi', 'ls /', 'id', 'cat /etc/hostname', 'exit 3', 'echo err >&2', 'printf "\\x00\\xff"', 'pwd', 'env'];

  /** Percent-encodes what node:http refuses in a request line, leaves the rest raw. */
  private urlPart(s: string): string {
    if (this.chance(0.7)) return encodeURIComponent(s);
    return s.replace(/[^\x21-\x7e]/gu, (ch) => encodeURIComponent(ch)).replace(/[?#]/g, (ch) => encodeURIComponent(ch));
  }

  private value(depth = 0): unknown {
    const kind = this.int(depth > 3 ? 6 : 9);
    switch (kind) {
      case 0:
        return null;
      case 1:
        return this.chance(0.5);
      case 2:
        return this.pick([0, -1, 1, 1.5, 3600, 2 ** 31, 2 ** 53 + 1, 1e308, -1e308, 1e-300, Number.MAX_SAFE_INTEGER]);
      case 3:
      case 4:
        return this.pick(this.strings);
      case 5:
        return this.pick(this.commands);
      case 6:
      case 7: {
        const o: Record<string, unknown> = {};
        for (let i = this.int(5); i > 0; i--) o[this.pick(this.bodyKeys)] = this.value(depth + 1);
        return o;
      }
      default:
        return Array.from({ length: this.int(4) }, () => this.value(depth + 1));
    }
  }

  /** A body that the route might accept, so the fuzz also gets past validation. */
  private plausible(route: string): unknown {
    if (route.endsWith('/exec')) {
      const r: Record<string, unknown> = this.chance(0.5)
        ? { cmd: this.pick(this.commands) }
        : { argv: this.pick([['true'], ['echo', this.pick(this.strings)], ['ls', '-la', '/tmp'], ['/no/such/binary'], []]) };
      if (this.chance(0.3)) r.user = this.pick(['user', 'root', 'nobody', 'Bad User', '']);
      if (this.chance(0.3)) r.cwd = this.pick(this.strings);
      if (this.chance(0.3)) r.env = this.chance(0.5) ? { A: 'b' } : { [this.pick(this.strings)]: this.value(2) };
      if (this.chance(0.2)) r.timeoutSeconds = this.pick([0.5, 5, 0, -1, 1e308, 'x']);
      if (this.chance(0.2)) r.background = this.value(3);
      if (this.chance(0.2)) r.stdin = this.value(3);
      if (this.chance(0.1)) r.keepStdinOpen = true;
      if (this.chance(0.2)) r[this.pick(this.bodyKeys)] = this.value(2);
      return r;
    }
    if (route.endsWith('/ttl')) return { ttlSeconds: this.pick([3600, 600, 0, -5, 1.5, 'x', null, 1e308, 31 * 24 * 3600]) };
    if (route.endsWith('/mkdir')) return { path: this.chance(0.8) ? this.pick(this.strings) : this.value(2) };
    if (route.endsWith('/move')) return { from: this.pick(this.strings), to: this.chance(0.8) ? this.pick(this.strings) : this.value(2) };
    if (route.endsWith('/stdin')) return { data: this.value(3), close: this.value(3) };
    if (route.endsWith('/signal')) return { signal: this.pick(['SIGTERM', 'SIGKILL', 'SIGFOO', 'TERM', '', 9]) };
    if (route === '/v1/sandboxes') {
      const r: Record<string, unknown> = {};
      for (const k of ['ttlSeconds', 'metadata', 'env', 'resources'] as const) if (this.chance(0.4)) r[k] = this.value(1);
      if (this.chance(0.3)) r.resources = { cpus: this.value(3), memoryMB: this.value(3), diskMB: this.value(3) };
      return r;
    }
    return this.value();
  }

  private body(route: string, method: string): Buffer | undefined {
    const roll = this.int(10);
    if (roll === 0 || (method === 'GET' && roll < 6)) return undefined;
    if (roll === 1) return Buffer.from(this.pick(['{', '{"a":', '[1,2', 'nul', '{"cmd": "echo}', "{'a':1}", '{"a":1}}', '\u0000', '']));
    if (roll === 2) return Buffer.from(Array.from({ length: this.int(4096) }, () => this.int(256)));
    if (roll === 3) {
      // Deep nesting: parsers and validators must not blow the stack into a 500.
      const depth = this.pick([100, 5000, 50_000]);
      const open = this.chance(0.5) ? '[' : '{"a":';
      const close = open === '[' ? ']' : '}';
      return Buffer.from(`${open.repeat(depth)}1${close.repeat(depth)}`);
    }
    if (roll === 4 && this.chance(0.3)) return Buffer.from(JSON.stringify({ cmd: 'echo', stdin: 'z'.repeat(this.pick([1, 2, 17]) * 1024 * 1024) }));
    if (method === 'PUT' && route.endsWith('/files') && this.chance(0.5)) return Buffer.from(this.pick(this.strings).repeat(this.int(100) + 1));
    return Buffer.from(JSON.stringify(roll < 8 ? this.plausible(route) : this.value()));
  }

  /** Methods each route answers, so most requests get past routing. */
  private methodFor(route: string): string {
    if (/\/(exec|ttl|mkdir|move|stdin|signal)$/.test(route)) return 'POST';
    if (route.endsWith('/files')) return this.pick(['GET', 'PUT', 'DELETE']);
    if (route === '/v1/sandboxes') return this.pick(['GET', 'POST']);
    if (route === '/v1/sandboxes/{id}') return this.pick(['GET', 'DELETE']);
    return 'GET';
  }

  next(index: number): FuzzRequest {
    const route = this.pick(this.routes);
    const method = this.chance(0.6) ? this.methodFor(route) : this.pick(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS', 'PROPFIND', 'TRACE']);
    let id = this.pick(this.idPool());
    // Fuzzing must not kill or expire the sandbox it uses; a dead one answers every call alike.
    if (method === 'DELETE' && route === '/v1/sandboxes/{id}' && id === this.ids.live) id = this.ids.dead;
    let path = route
      .replace('{id}', id)
      .replace('{pid}', this.pick(['1', '2', '0', '-1', '99999999', '1.5', 'abc', '1e3', '9'.repeat(40), '%00']))
      .replace('{junk}', this.urlPart(this.pick(this.strings)) || 'x');
    if (this.chance(0.1)) path += '/';
    if (this.chance(0.05)) path = path.replace('/v1/', '/v1//');
    if (this.chance(0.05)) path += '/../health';
    const query: string[] = [];
    for (let i = this.int(4); i > 0; i--) {
      let key = this.pick(this.queryKeys);
      let value = this.pick(this.strings);
      // Running as root may do real damage inside the sandbox (rm -rf /usr) that makes later
      // answers meaningless; root is fuzzed on reads only.
      if (key === 'user' && value === 'root' && method !== 'GET' && method !== 'HEAD') value = 'user';
      if (key === 'path' && this.chance(0.5))
        value = this.pick(['/tmp/fuzz.txt', '/tmp', 'fuzz/a/b', 'notes.txt', '/home/user', '/proc/self/status', '/etc/hostname']);
      if (this.chance(0.1)) key = this.urlPart(key);
      query.push(`${this.urlPart(key)}=${this.urlPart(value)}`);
    }
    if (this.chance(0.05)) query.push('&&==&');
    if (query.length) path += `?${query.join('&')}`;

    const headers: Record<string, string> = {};
    const auth = this.int(20);
    if (auth === 0) {
      // no credentials
    } else if (auth === 1) headers.authorization = 'Bearer wk_wrong';
    else if (auth === 2) headers.authorization = `Basic ${d.apiKey}`;
    else if (auth === 3) headers['x-api-key'] = d.apiKey;
    else headers.authorization = `Bearer ${d.apiKey}`;
    const body = method === 'HEAD' || method === 'TRACE' ? undefined : this.body(route, method);
    if (body && this.chance(0.8))
      headers['content-type'] = this.pick([
        'application/json',
        'application/json',
        'text/plain',
        'application/octet-stream',
        'multipart/form-data; boundary=x',
        'application/x-www-form-urlencoded',
      ]);
    let finalBody = body;
    // Keep a real ttl from expiring the sandbox that the fuzz relies on.
    if (route.endsWith('/ttl') && id === this.ids.live && body) {
      try {
        const parsed = JSON.parse(body.toString()) as { ttlSeconds?: unknown };
        if (typeof parsed.ttlSeconds === 'number' && parsed.ttlSeconds >= 1 && parsed.ttlSeconds < 600)
          finalBody = Buffer.from(JSON.stringify({ ttlSeconds: 3600 }));
      } catch {
        // not JSON: stays as it is
      }
    }
    return { index, method, path, headers, body: finalBody, chunked: !!finalBody && this.chance(0.3) };
  }
}

function send(agent: http.Agent, req: FuzzRequest, timeoutMs: number): Promise<FuzzResponse> {
  const url = new URL(d.url);
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (fn: () => void) => {
      if (!settled) {
        settled = true;
        fn();
      }
    };
    const r = http.request(
      { host: url.hostname, port: url.port, method: req.method, path: req.path, headers: req.headers, agent, timeout: timeoutMs },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        const done = (truncated: boolean) =>
          finish(() => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), truncated }));
        res.on('data', (chunk: Buffer) => {
          if (size >= MAX_BODY) return;
          chunks.push(chunk);
          size += chunk.length;
          if (size >= MAX_BODY) {
            res.destroy();
            done(true);
          }
        });
        res.on('end', () => done(false));
        res.on('error', (err) => finish(() => reject(err)));
      },
    );
    r.on('timeout', () => r.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    r.on('error', (err) => finish(() => reject(Object.assign(err, { reusedSocket: r.reusedSocket }))));
    if (!req.body) r.end();
    else if (!req.chunked) {
      r.setHeader('content-length', req.body.length);
      r.end(req.body);
    } else {
      // Node frames bodies of GET, DELETE and OPTIONS only when told to.
      r.setHeader('transfer-encoding', 'chunked');
      const half = req.body.length >> 1;
      r.write(req.body.subarray(0, half));
      setImmediate(() => r.end(req.body!.subarray(half)));
    }
  });
}

/** Marks of a stack trace or of the daemon's own files in a response body. */
const LEAKS: Array<[string, RegExp]> = [
  ['stack frame', /\n\s+at \S/],
  ['stack frame', /\bat (?:async )?[\w$.<>]+ \((?:file:|node:|\/)/],
  ['node internals', /node:internal/],
  ['host path', /\/work\/|\/var\/lib\/warren|file:\/\/\//],
  ['source location', /\.(?:[cm]?js|ts):\d+:\d+/],
];

function describeRequest(req: FuzzRequest): string {
  const body = req.body ? ` body(${req.body.length}${req.chunked ? ', chunked' : ''})=${JSON.stringify(req.body.subarray(0, 160).toString('latin1'))}` : '';
  const path = req.path.length > 300 ? `${req.path.slice(0, 300)}…(${req.path.length})` : req.path;
  return `#${req.index} ${req.method} ${path}${body}`;
}

test(`fuzz the HTTP API with ${REQUESTS} seeded random requests`, { timeout: 20 * 60_000 }, async (t: TestContext) => {
  t.diagnostic(`seed ${SEED} (set WARREN_FUZZ_SEED to reproduce or vary)`);
  const gen = new Generator(SEED, { live: sbx.id, dead: deadId });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  const problems: string[] = [];
  const statuses = new Map<number, number>();
  const logStart = d.log().length;
  const staleRetries: string[] = [];
  let previous: FuzzRequest | undefined;
  try {
    for (let i = 0; i < REQUESTS; i++) {
      const req = gen.next(i);
      let res: FuzzResponse;
      const prior = previous;
      previous = req;
      try {
        res = await send(agent, req, 60_000);
      } catch (err) {
        // A reused keep-alive connection that fails with no answer was dropped by the daemon.
        // Requests go one after another on the most recently used connection, so it was not
        // idle long enough to time out: the request before left it broken (say, a body the
        // daemon never drained). That counts; the request is retried on a fresh connection
        // so the run goes on. Any other failure counts too.
        const code = (err as NodeJS.ErrnoException).code;
        const reused = (err as { reusedSocket?: boolean }).reusedSocket === true;
        if (!reused || (code !== 'ECONNRESET' && (err as Error).message !== 'socket hang up')) {
          problems.push(`${describeRequest(req)} -> no answer: ${code ?? ''} ${(err as Error).message}`);
          continue;
        }
        problems.push(`${describeRequest(req)} -> its connection was dropped, after ${prior ? describeRequest(prior) : 'nothing'}`);
        staleRetries.push(`#${req.index}`);
        try {
          res = await send(new http.Agent({ keepAlive: false }), req, 60_000);
        } catch (again) {
          problems.push(`${describeRequest(req)} -> no answer, twice: ${(again as Error).message}`);
          continue;
        }
      }
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      const text = res.body.toString('utf8');
      if (res.status >= 500 && res.status !== ErrorCodes.unavailable && res.status !== ErrorCodes.deadline_exceeded) {
        problems.push(`${describeRequest(req)} -> ${res.status} ${text.slice(0, 300)}`);
      }
      const isFile = String(res.headers['content-type'] ?? '').startsWith('application/octet-stream');
      if (!isFile) {
        for (const [what, re] of LEAKS) {
          if (re.test(text)) problems.push(`${describeRequest(req)} -> ${what} in the body: ${text.slice(0, 300)}`);
        }
      }
      if (res.status >= 400 && req.method !== 'HEAD') {
        let parsed: { error?: { code?: unknown; message?: unknown } } | undefined;
        try {
          parsed = JSON.parse(text) as typeof parsed;
        } catch {
          problems.push(`${describeRequest(req)} -> ${res.status} with a body that is not JSON: ${JSON.stringify(text.slice(0, 200))}`);
          continue;
        }
        const e = parsed?.error;
        if (!e || !isErrorCode(e.code) || typeof e.message !== 'string' || !e.message) {
          problems.push(`${describeRequest(req)} -> ${res.status} without {error:{code,message}}: ${text.slice(0, 200)}`);
        } else if (ErrorCodes[e.code] !== res.status) {
          problems.push(`${describeRequest(req)} -> status ${res.status} does not match code ${e.code}`);
        }
        if (!String(res.headers['content-type'] ?? '').includes('application/json')) {
          problems.push(`${describeRequest(req)} -> ${res.status} with content-type ${res.headers['content-type']}`);
        }
      }
    }
  } finally {
    agent.destroy();
  }
  t.diagnostic(
    `statuses: ${[...statuses]
      .sort((a, b) => a[0] - b[0])
      .map(([s, n]) => `${s}×${n}`)
      .join(' ')}; dropped keep-alive connections: ${staleRetries.length ? staleRetries.join(' ') : 'none'}`,
  );

  // Still alive and well: the process, the API, and the sandbox it was fuzzed against.
  assert.equal(d.process.exitCode, null, `the daemon exited:\n${d.log().slice(-3000)}`);
  assert.equal(d.process.signalCode, null);
  const health = await fetch(`${d.url}/v1/health`, { headers: { authorization: `Bearer ${d.apiKey}` } });
  assert.equal(health.status, 200);
  assert.equal(((await health.json()) as { ok: boolean }).ok, true);
  const r = await sbx.exec('echo still here');
  assert.equal(r.stdout, 'still here\n');

  const log = d.log().slice(logStart);
  for (const line of log.split('\n')) {
    if (/unhandled|uncaught|"level":50/i.test(line)) problems.push(`daemon log: ${line.slice(0, 400)}`);
  }
  assert.equal(problems.length, 0, `${problems.length} problem(s) with seed ${SEED}:\n${problems.join('\n')}`);
});

test("requests node's HTTP parser rejects get a JSON 400 too", async () => {
  const { connect } = await import('node:net');
  const port = Number(new URL(d.url).port);
  const raw = (request: string) =>
    new Promise<string>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => socket.write(request));
      let text = '';
      socket.on('data', (chunk) => (text += chunk.toString('utf8')));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
  for (const request of [
    'GET /v1/health HTTP/1.1\r\nHost: x\r\nthis is not a header\r\n\r\n',
    `GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(64 * 1024)}\r\n\r\n`,
    'NOT-A-METHOD\r\n\r\n',
  ]) {
    const answer = await raw(request);
    assert.match(answer, /^HTTP\/1\.1 400 /, answer.slice(0, 200));
    const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'invalid_argument');
    assert.ok(body.error.message.length > 0);
  }
  const health = await d.http.request('GET', '/v1/health');
  assert.equal(health.status, 200, 'the daemon keeps serving');
});
