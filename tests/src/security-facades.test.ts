/**
 * Authentication at each facade's entry and body limits before any body is read
 * (docs/security.md, "The battery"). Every route the daemon has, from its own route table
 * (GET /v1/routes, the real app's, so a route added later is walked too), on every facade
 * (/v1, /e2b, /e2b/envd also on its 49983-<id> host name, /mcp, /ui), called without a
 * credential, with a revoked key and with another tenant's key, its paths filled with the
 * first tenant's real ids: 401, 401, 403 or 404, and nothing changed. Then bodies over the
 * limit on every prefix: refused at once, before the body is sent, with a key or without.
 * One real daemon, one sandbox; the only addresses used are on 127.0.0.0/8.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { randomBytes } from 'node:crypto';
import { Template } from '@warren/sdk';
import type { RouteInfo, RouteTable } from '@warren/protocol';
import { startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 300_000 };
const LIMIT = 16 * 1024 * 1024;
let d: DaemonHandle | undefined;

interface Answer {
  status: number;
  body: string;
}

/**
 * One request on its own connection. A body that is still coming after 1.5 s (an event
 * stream) is cut there: what came is enough to check.
 */
function send(method: string, path: string, headers: Record<string, string> = {}, body?: Buffer | string): Promise<Answer> {
  const url = new URL(d!.url);
  return new Promise((resolve, reject) => {
    // Content-Length always: node sends a DELETE's body without one, which is no HTTP at all.
    const length = body === undefined ? {} : { 'content-length': String(Buffer.byteLength(body)) };
    const req = http.request({ host: url.hostname, port: url.port, method, path, headers: { connection: 'close', ...length, ...headers }, agent: false });
    req.setTimeout(30_000, () => req.destroy(new Error(`${method} ${path}: no answer in 30 s`)));
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      const cut = setTimeout(() => {
        res.destroy();
        resolve({ status: res.statusCode ?? 0, body: text });
      }, 1500);
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        clearTimeout(cut);
        resolve({ status: res.statusCode ?? 0, body: text });
      });
      res.on('error', () => undefined);
    });
    req.on('error', reject);
    req.end(body);
  });
}

const json = (body: unknown) => ({ headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** A call with a key, parsed; anything but 2xx fails the test here, naming the call. */
async function ok<R>(key: string, method: string, path: string, body?: unknown): Promise<R> {
  const j = body === undefined ? { headers: {}, body: undefined } : json(body);
  const res = await send(method, path, { authorization: `Bearer ${key}`, ...j.headers }, j.body);
  assert.ok(res.status >= 200 && res.status < 300, `${method} ${path}: ${res.status} ${res.body}`);
  return (res.body ? JSON.parse(res.body) : undefined) as R;
}

/** The first tenant's key and what it owns (its sandbox, and its database's), whose ids fill the walk's paths. */
interface Tenant {
  key: string;
  keyId: string;
  sandbox: string;
  /** A sandbox token of `sandbox` (what E2B's envd calls carry). */
  token: string;
  tokenId: string;
  pid: number;
  terminal: string;
  snapshot: string;
  database: string;
  template: string;
  build: string;
  e2bTemplate: string;
  e2bBuild: string;
  tool: string;
}
let a: Tenant;
/** The other tenant's key and dashboard session. */
let other: { key: string; session: string };
/** A revoked key, and a dashboard session it opened before it was revoked. */
let revoked: { key: string; session: string };

/** A dashboard session opened by logging in with `key`, as the login form does. */
async function sessionOf(key: string): Promise<string> {
  const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
    const req = http.request(`${d!.url}/ui/login`, { method: 'POST', headers: { origin: d!.url, 'content-type': 'application/json' } });
    req.on('response', resolve);
    req.on('error', reject);
    req.end(JSON.stringify({ key }));
  });
  res.resume();
  assert.equal(res.statusCode, 200);
  const cookie = /^(warren_session=[^;]+)/.exec(res.headers['set-cookie']?.[0] ?? '')?.[1];
  assert.ok(cookie, 'the login set a session cookie');
  return cookie;
}

before(async () => {
  // The walk is hundreds of refused calls from one address; the failure limit has its own test.
  d = await startDaemon({ env: { WARREN_AUTH_FAILURES_PER_MINUTE: '100000' } });
  const admin = d.apiKey;
  const made = await ok<{ id: string; key: string }>(admin, 'POST', '/v1/keys', { name: 'walk-owner' });
  const key = made.key;
  const sbx = await ok<{ id: string }>(key, 'POST', '/v1/sandboxes', { ttlSeconds: 1800 });
  const token = await ok<{ id: string; token: string }>(key, 'POST', `/v1/sandboxes/${sbx.id}/tokens`, { scopes: ['read', 'exec', 'files'] });
  const proc = await ok<{ pid: number }>(key, 'POST', `/v1/sandboxes/${sbx.id}/exec`, { argv: ['sleep', '1800'], background: true });
  const term = await ok<{ id: string }>(key, 'POST', `/v1/sandboxes/${sbx.id}/terminals`, {});
  await ok(key, 'POST', `/v1/sandboxes/${sbx.id}/exec`, { argv: ['sh', '-c', 'echo kept > /home/user/marker'] });
  const snap = await ok<{ id: string }>(key, 'POST', `/v1/sandboxes/${sbx.id}/snapshots`, {});
  const db = await ok<{ name: string }>(key, 'POST', '/v1/databases', { name: 'walkdb' });
  // A template of its own (templates live in the shared directory: a fresh name each run).
  const template = `walk-${randomBytes(4).toString('hex')}`;
  await Template.buildRecipe({ name: template, from: 'base', steps: [{ type: 'env', env: { WALK: '1' } }] }, { url: d.url, apiKey: key });
  const builds = await ok<{ builds: Array<{ id: string }> }>(key, 'GET', `/v1/templates/${template}/builds`);
  // An E2B build asked for and not started: its record is the daemon's own, not /v1's.
  const e2bTemplate = `${template}-e2b`;
  const e2b = await send('POST', '/e2b/v3/templates', { 'x-api-key': key, 'content-type': 'application/json' }, JSON.stringify({ name: e2bTemplate }));
  assert.equal(e2b.status, 202, e2b.body);
  const tools = await ok<{ tools: Array<{ name: string }> }>(key, 'GET', '/v1/tools');
  a = {
    key,
    keyId: made.id,
    sandbox: sbx.id,
    token: token.token,
    tokenId: token.id,
    pid: proc.pid,
    terminal: term.id,
    snapshot: snap.id,
    database: db.name,
    template,
    build: builds.builds[0]!.id,
    e2bTemplate,
    e2bBuild: (JSON.parse(e2b.body) as { buildID: string }).buildID,
    tool: tools.tools[0]!.name,
  };
  const b = await ok<{ key: string }>(admin, 'POST', '/v1/keys', { name: 'walk-other' });
  other = { key: b.key, session: await sessionOf(b.key) };
  const c = await ok<{ id: string; key: string }>(admin, 'POST', '/v1/keys', { name: 'walk-revoked' });
  revoked = { key: c.key, session: await sessionOf(c.key) };
  await ok(admin, 'DELETE', `/v1/keys/${c.id}`);
});

after(async () => {
  if (a && d) {
    await send('DELETE', `/v1/templates/${a.template}`, { authorization: `Bearer ${a.key}` });
  }
  await stopAndCheckClean(d);
});

/** A path of the route table with the first tenant's ids in it; `*` is any rest. */
function fill(pattern: string): string {
  const segments = pattern.split('/');
  return segments
    .map((seg, i) => {
      if (seg === '*') return 'walk';
      if (!seg.startsWith(':')) return seg;
      const prev = segments[i - 1];
      const name = seg.slice(1);
      const e2b = pattern.startsWith('/e2b/');
      const byName: Record<string, string | undefined> = {
        id: { sandboxes: a.sandbox, snapshots: a.snapshot, keys: a.keyId, builds: a.build }[prev ?? ''],
        tokenId: a.tokenId,
        pid: String(a.pid),
        tid: a.terminal,
        port: '8080',
        name: { templates: a.template, tools: a.tool, databases: a.database }[prev ?? ''],
        alias: a.template,
        templateID: e2b && pattern.includes(':buildID') ? a.e2bTemplate : a.template,
        buildID: a.e2bBuild,
        hash: 'walk',
        file: 'index.html',
      };
      const value = byName[name];
      // A new kind of path parameter: this test must be told what of the tenant's fills it.
      assert.ok(value !== undefined, `${pattern}: no value for :${name} after ${prev}; add one to fill()`);
      return encodeURIComponent(value);
    })
    .join('/');
}

/** What a public route answers anyone, with any credential or none (they carry no id). */
const PUBLIC_ANSWERS: Record<string, number> = {
  'GET /ui': 301,
  'GET /ui/': 200,
  'GET /ui/:file': 200,
  'GET /ui/login': 303, // no token: back to the page, logged out
  'POST /ui/login': 403, // not from the dashboard's own origin
  'POST /ui/logout': 403,
  'GET /e2b/envd/health': 502, // E2B's "not running": nothing told without the sandbox's token
};

/** Routes that answer every valid key the same, whoever owns what the path names. */
const SAME_FOR_EVERY_KEY: Record<string, number> = {
  'GET /e2b/templates/:templateID/files/:hash': 400, // not supported by warren, for anyone
};

/** A caller: the credential in every form a facade takes, and the session cookie. */
function credentials(key: string | undefined, session: string | undefined): Record<string, string> {
  return {
    ...(key ? { authorization: `Bearer ${key}`, 'x-api-key': key, 'x-access-token': key } : {}),
    ...(session ? { cookie: session } : {}),
  };
}

interface Walked {
  route: RouteInfo;
  via: 'path' | 'host name';
  who: string;
  answer: Answer;
}

/** Calls one route as one caller; envd's also on its host name. */
async function walk(route: RouteInfo, who: string, headers: Record<string, string>): Promise<Walked[]> {
  const method = route.method === 'ALL' ? 'POST' : route.method;
  const path = fill(route.path);
  const withBody = method !== 'GET' && method !== 'HEAD';
  const h = { 'e2b-sandbox-id': a.sandbox, ...headers, ...(withBody ? { 'content-type': 'application/json' } : {}) };
  const out: Walked[] = [{ route, via: 'path', who, answer: await send(method, path, h, withBody ? '{}' : undefined) }];
  if (route.facade === 'envd') {
    const host = `49983-${a.sandbox}.localhost:${new URL(d!.url).port}`;
    out.push({ route, via: 'host name', who, answer: await send(method, path.slice('/e2b/envd'.length) || '/', { ...h, host }, withBody ? '{}' : undefined) });
  }
  return out;
}

/** What the daemon holds, as far as the walk could have changed it. */
async function state(): Promise<unknown> {
  const admin = d!.apiKey;
  const sbx = `/v1/sandboxes/${a.sandbox}`;
  const [sandboxes, templates, snapshots, databases, keys, info, network, tokens, processes, terminals, forwards, marker, e2bBuild] = await Promise.all([
    ok<{ sandboxes: Array<{ id: string; state: string; expiresAt: string }> }>(admin, 'GET', '/v1/sandboxes'),
    ok<{ templates: Array<{ name: string; version: string }> }>(admin, 'GET', '/v1/templates'),
    ok<{ snapshots: Array<{ id: string }> }>(admin, 'GET', '/v1/snapshots'),
    ok<{ databases: Array<{ name: string; state: string }> }>(admin, 'GET', '/v1/databases'),
    ok<{ keys: Array<{ id: string; state: string }> }>(admin, 'GET', '/v1/keys'),
    ok<{ state: string; expiresAt: string; metadata: unknown }>(a.key, 'GET', sbx),
    ok(a.key, 'GET', `${sbx}/network`),
    ok<{ tokens: Array<{ id: string; state: string }> }>(a.key, 'GET', `${sbx}/tokens`),
    ok<{ processes: Array<{ pid: number; running: boolean }> }>(a.key, 'GET', `${sbx}/processes`),
    ok<{ terminals: Array<{ id: string }> }>(a.key, 'GET', `${sbx}/terminals`),
    ok(a.key, 'GET', `${sbx}/forwards`),
    send('GET', `${sbx}/files?path=/home/user/marker`, { authorization: `Bearer ${a.key}` }),
    send('GET', `/e2b/templates/${a.e2bTemplate}/builds/${a.e2bBuild}/status`, { 'x-api-key': a.key }),
  ]);
  return {
    sandboxes: sandboxes.sandboxes.map((s) => [s.id, s.state, s.expiresAt]),
    templates: templates.templates.map((t) => [t.name, t.version]),
    snapshots: snapshots.snapshots.map((s) => s.id),
    databases: databases.databases.map((x) => [x.name, x.state]),
    keys: keys.keys.map((k) => [k.id, k.state]),
    sandbox: [info.state, info.expiresAt, info.metadata],
    network,
    tokens: tokens.tokens.map((t) => [t.id, t.state]),
    processes: processes.processes.map((p) => [p.pid, p.running]),
    terminals: terminals.terminals.map((t) => t.id),
    forwards,
    marker: [marker.status, marker.body],
    e2bBuild: [e2bBuild.status, (JSON.parse(e2bBuild.body) as { status: string }).status],
  };
}

test("every route of every facade, from the daemon's own table: no key and a revoked key 401, another tenant 403 or 404, nothing changed", T, async () => {
  const table = await ok<RouteTable>(d!.apiKey, 'GET', '/v1/routes');
  const routes = table.routes;
  assert.ok(routes.length > 120, `only ${routes.length} routes in the table`);
  for (const facade of ['api', 'e2b', 'envd', 'mcp', 'ui'] as const)
    assert.ok(
      routes.some((r) => r.facade === facade),
      `no ${facade} route in the table`,
    );
  for (const rpc of ['POST /e2b/envd/process.Process/Start', 'POST /e2b/envd/filesystem.Filesystem/Stat', 'POST /e2b/envd/files'])
    assert.ok(
      routes.some((r) => `${r.method} ${r.path}` === rpc),
      `${rpc} is not in the table`,
    );
  // The public routes are exactly the ones this test knows the answer of: a new one is a decision.
  assert.deepEqual(
    routes
      .filter((r) => r.public)
      .map((r) => `${r.method} ${r.path}`)
      .sort(),
    Object.keys(PUBLIC_ANSWERS).sort(),
  );

  // The case that opened this: an E2B template build asked for without a key got a 202 and
  // a build record in the daemon's memory.
  const anonymous = await send('POST', '/e2b/v3/templates', { 'content-type': 'application/json' }, JSON.stringify({ name: 'walk-anonymous' }));
  assert.equal(anonymous.status, 401, anonymous.body);
  assert.doesNotMatch(anonymous.body, /buildID/);

  const beforeWalk = await state();
  const walkStart = new Date().toISOString();
  const failures: string[] = [];
  const expect = (w: Walked, allowed: number[]) => {
    if (!allowed.includes(w.answer.status))
      failures.push(
        `${w.who}: ${w.route.method} ${w.route.path} (${w.via}) answered ${w.answer.status}, not ${allowed.join(' or ')}: ${w.answer.body.slice(0, 160)}`,
      );
  };
  const ownIds = [a.sandbox, a.snapshot, a.database, a.template, a.tokenId, a.e2bBuild];
  for (const route of routes) {
    const key = `${route.method} ${route.path}`;
    if (route.public) {
      for (const [who, h] of [
        ['no key', {}],
        ['revoked key', credentials(revoked.key, revoked.session)],
        ['other tenant', credentials(other.key, other.session)],
      ] as const)
        for (const w of await walk(route, who, h)) expect(w, [PUBLIC_ANSWERS[key]!]);
      continue;
    }
    // Outside every facade there is nothing: 404 for anyone.
    const refused = route.facade === null ? [404] : [401];
    for (const w of await walk(route, 'no key', {})) expect(w, refused);
    for (const w of await walk(route, 'revoked key', credentials(revoked.key, revoked.session))) expect(w, refused);
    // Another tenant's own lists and creates are its own business: where no path names the
    // first tenant's resource (envd's calls name its sandbox in a header), a read is walked
    // and must not show them, and anything that would make something is left alone.
    const namesOne = route.path.includes('/:') || route.facade === 'envd';
    if (!namesOne && route.method !== 'GET') continue;
    for (const w of await walk(route, 'other tenant', credentials(other.key, other.session))) {
      if (namesOne) expect(w, route.facade === null ? [404] : [SAME_FOR_EVERY_KEY[key] ?? 404, 403]);
      else if (w.answer.status >= 500 || ownIds.some((id) => w.answer.body.includes(id)))
        failures.push(`other tenant: GET ${route.path} answered ${w.answer.status} showing the first tenant's: ${w.answer.body.slice(0, 160)}`);
    }
  }
  assert.deepEqual(failures, []);

  // Nothing the walk did changed anything: no mutating call of it succeeded, and all is as it was.
  const audit = await ok<{ entries: Array<{ method: string; path: string; status: number }> }>(
    d!.apiKey,
    'GET',
    `/v1/audit?since=${encodeURIComponent(walkStart)}`,
  );
  assert.ok(audit.entries.length > 100, `only ${audit.entries.length} audited calls in the walk`);
  assert.deepEqual(
    audit.entries.filter((e) => e.status < 400).map((e) => `${e.method} ${e.path} ${e.status}`),
    [],
  );
  assert.deepEqual(await state(), beforeWalk);
});

/**
 * Sends only the head of a request declaring `length` bytes and a few of them; the status
 * and how long after the head the answer came.
 */
function declared(path: string, headers: Record<string, string>, length: number, host?: string): Promise<{ status: number; ms: number }> {
  const url = new URL(d!.url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname);
    let got = '';
    const started = Date.now();
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ status: 0, ms: Date.now() - started });
    }, 5000);
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      got += chunk;
      if (!got.includes('\r\n')) return;
      clearTimeout(timer);
      socket.destroy();
      resolve({ status: Number(got.split(' ')[1]), ms: Date.now() - started });
    });
    socket.on('error', reject);
    const head = Object.entries({ host: host ?? url.host, 'content-type': 'application/json', 'content-length': String(length), ...headers })
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    socket.write(`POST ${path} HTTP/1.1\r\n${head}\r\n{"a":`);
  });
}

/** A body of `size` bytes sent chunked (no Content-Length): read by the daemon as it comes. */
function chunked(path: string, headers: Record<string, string>, size: number): Promise<Answer> {
  const url = new URL(d!.url);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: url.hostname,
      port: url.port,
      method: 'POST',
      path,
      agent: false,
      headers: { 'content-type': 'application/json', ...headers },
    });
    let answered = false;
    req.on('response', (res) => {
      answered = true;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('close', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    // Once answered, the rest of the body no longer matters: the daemon may close on it.
    // A write can fail (EPIPE, ECONNRESET) just before the answer is read: give it a moment.
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (answered) return;
      if (err.code !== 'EPIPE' && err.code !== 'ECONNRESET') return reject(err);
      setTimeout(() => (answered ? undefined : reject(err)), 2000);
    });
    const chunk = Buffer.alloc(1024 * 1024, 0x20);
    chunk.write('{"a":"');
    let sent = 0;
    const more = () => {
      while (sent < size) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', more);
      }
      req.end();
    };
    more();
  });
}

test('bodies: without a credential 401 before the body is read, with one 413 past 16 MiB, on /v1, /e2b, envd and /mcp', T, async () => {
  const port = new URL(d!.url).port;
  const envdHeaders = (token?: string) => ({ 'e2b-sandbox-id': a.sandbox, ...(token ? { 'x-access-token': token } : {}) });
  const bearer = (key?: string): Record<string, string> => (key ? { authorization: `Bearer ${key}` } : {});
  const apiKey = (key?: string): Record<string, string> => (key ? { 'x-api-key': key } : {});
  const targets: Array<{ name: string; path: string; headers: (key?: string) => Record<string, string>; host?: string }> = [
    { name: '/v1', path: '/v1/sandboxes', headers: bearer },
    { name: '/e2b create', path: '/e2b/sandboxes', headers: apiKey },
    { name: '/e2b template build', path: '/e2b/v3/templates', headers: apiKey },
    { name: 'envd', path: '/e2b/envd/filesystem.Filesystem/Stat', headers: (key) => envdHeaders(key && a.token) },
    {
      name: 'envd host name',
      path: '/filesystem.Filesystem/Stat',
      headers: (key) => envdHeaders(key && a.token),
      host: `49983-${a.sandbox}.localhost:${port}`,
    },
    { name: '/mcp', path: '/mcp', headers: (key) => ({ accept: 'application/json, text/event-stream', ...bearer(key) }) },
  ];
  const failures: string[] = [];
  for (const t of targets) {
    // 2 GB declared, a few bytes sent: the answer comes before the rest would have.
    const anonymous = await declared(t.path, t.headers(), 2 ** 31, t.host);
    if (anonymous.status !== 401 || anonymous.ms > 1000)
      failures.push(`${t.name} without a credential, 2 GB declared: ${anonymous.status} after ${anonymous.ms} ms`);
    const keyed = await declared(t.path, t.headers(a.key), 2 ** 31, t.host);
    if (keyed.status !== 413 || keyed.ms > 1000) failures.push(`${t.name} with a key, 2 GB declared: ${keyed.status} after ${keyed.ms} ms`);
    if (t.host) continue;
    // 17 MB sent chunked, nothing declared: read up to the limit and refused there.
    const big = await chunked(t.path, t.headers(a.key), 17 * 1024 * 1024);
    if (big.status !== 413 || !big.body.includes(`exceeds ${LIMIT} bytes`))
      failures.push(`${t.name} with a key, 17 MB chunked: ${big.status} ${big.body.slice(0, 160)}`);
  }
  // 17 MB sent whole without a key: refused by the entry, nothing parsed.
  const whole = Buffer.alloc(17 * 1024 * 1024, 0x20);
  const e2b = await send('POST', '/e2b/v3/templates', { 'content-type': 'application/json' }, whole);
  if (e2b.status !== 401) failures.push(`/e2b template build without a key, 17 MB: ${e2b.status} ${e2b.body.slice(0, 160)}`);
  else assert.equal((JSON.parse(e2b.body) as { code: number }).code, 401, "E2B's error shape");
  assert.deepEqual(failures, []);
});
