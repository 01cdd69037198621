/**
 * Security battery, API keys (docs/security.md, "API keys and scopes"): a key that is not an
 * admin key reaches only what it made, and another key's sandbox, snapshot or database
 * answers exactly like one that does not exist (404), on every route, the terminal WebSocket
 * and the port URLs included; a missing scope is a 403 naming it; revoked and rotated-away
 * secrets are refused; keys and ownership survive a daemon restart. Real daemon, real sandboxes.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { spawnSync } from 'node:child_process';
import {
  ApiKeys,
  getAuditTrail,
  AuthenticationError,
  ConflictError,
  Database,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  Sandbox,
  Snapshots,
  Template,
  type NewApiKey,
  type Scope,
} from '@warren/sdk';
import { CLI, WEBSOCKET_UPGRADE_HEADERS, requestStatus, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 300_000 };
let d: DaemonHandle | undefined;

before(async () => {
  d = await startDaemon();
});
after(() => stopAndCheckClean(d));

const conn = (k: NewApiKey) => ({ url: d!.url, apiKey: k.key });
const key = (name: string, scopes?: Scope[]) => ApiKeys.create({ name, ...(scopes ? { scopes } : {}) }, d!.conn);

/** A raw call as `k`: status and body, so every route is tried the same way. */
async function call(k: NewApiKey, method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(`${d!.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${k.key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, text: await res.text() };
}

/** The status of a WebSocket upgrade to a terminal of the sandbox, as `k`. */
function terminalUpgrade(k: NewApiKey, sandboxId: string): Promise<number> {
  return requestStatus(`${d!.url}/v1/sandboxes/${sandboxId}/pty?cols=80&rows=24`, 'GET', { authorization: `Bearer ${k.key}`, ...WEBSOCKET_UPGRADE_HEADERS });
}

test("another key's sandbox, snapshot and database are a 404 on every route; its owner and the admin key reach them", T, async () => {
  const alice = await key('alice');
  const bob = await key('bob');
  const sbx = await Sandbox.create({ ...conn(alice), template: 'base' });
  const snap = await sbx.snapshot();
  const db = await Database.create('alices', conn(alice));
  try {
    const id = sbx.id;
    const routes: Array<[string, string, unknown?]> = [
      ['GET', `/v1/sandboxes/${id}`],
      ['GET', `/v1/sandboxes/${id}/network`],
      ['PUT', `/v1/sandboxes/${id}/network`, { allow: ['127.0.0.1:1'] }],
      ['GET', `/v1/sandboxes/${id}/egress`],
      ['POST', `/v1/sandboxes/${id}/exec`, { argv: ['true'] }],
      ['GET', `/v1/sandboxes/${id}/processes`],
      ['GET', `/v1/sandboxes/${id}/files?path=/etc/hostname`],
      ['PUT', `/v1/sandboxes/${id}/files?path=/tmp/x`, 'x'],
      ['GET', `/v1/sandboxes/${id}/files/list?path=/`],
      ['GET', `/v1/sandboxes/${id}/files/dir?path=/etc`],
      ['GET', `/v1/sandboxes/${id}/files/watch?path=/tmp`],
      ['POST', `/v1/sandboxes/${id}/fork`, {}],
      ['POST', `/v1/sandboxes/${id}/snapshots`, {}],
      ['POST', `/v1/sandboxes/${id}/hibernate`],
      ['POST', `/v1/sandboxes/${id}/resume`],
      ['POST', `/v1/sandboxes/${id}/ttl`, { ttlSeconds: 60 }],
      ['POST', `/v1/sandboxes/${id}/ports/8080/url`, {}],
      ['POST', `/v1/sandboxes/${id}/ports/8080/forward`, {}],
      ['GET', `/v1/sandboxes/${id}/terminals`],
      ['POST', `/v1/sandboxes/${id}/tools/bash`, { input: { command: 'true' } }],
      ['GET', `/v1/sandboxes/${id}/databases`],
      ['POST', `/v1/sandboxes/${id}/databases`, { name: 'bobs' }],
      ['DELETE', `/v1/sandboxes/${id}`],
      ['GET', `/v1/snapshots/${snap.id}`],
      ['DELETE', `/v1/snapshots/${snap.id}`],
      ['GET', '/v1/databases/alices'],
      ['GET', '/v1/databases/alices/url'],
      ['POST', '/v1/databases/alices/branches', { name: 'stolen' }],
      ['POST', '/v1/databases/alices/restore', { name: 'stolen', to: Date.now() }],
      ['DELETE', '/v1/databases/alices'],
    ];
    for (const [method, path, body] of routes) {
      const r = await call(bob, method, path, body);
      assert.equal(r.status, 404, `${method} ${path} as another key: ${r.status} ${r.text}`);
      assert.doesNotMatch(r.text, /no route for/, `${method} ${path} is not a route`);
      assert.doesNotMatch(r.text, /belongs|owner|another key/i, `${method} ${path} tells the resource exists: ${r.text}`);
    }
    // The same words as for a sandbox that does not exist.
    assert.equal(
      (await call(bob, 'GET', `/v1/sandboxes/${id}`)).text,
      (await call(bob, 'GET', '/v1/sandboxes/sb-doesnotexist')).text.replace('sb-doesnotexist', id),
    );
    assert.equal(await terminalUpgrade(bob, id), 404, 'terminal WebSocket as another key');
    // A create from another key's snapshot, and a database of another key's by name.
    await assert.rejects(Sandbox.create({ ...conn(bob), snapshot: snap.id }), NotFoundError);
    await assert.rejects(Database.create('x', { fromSnapshot: snap.id, ...conn(bob) }), NotFoundError);
    await assert.rejects(Sandbox.create({ ...conn(bob), databases: ['alices'] }), ConflictError);
    // Lists hold only the key's own.
    assert.deepEqual(await Sandbox.list(conn(bob)), []);
    assert.deepEqual(await Snapshots.list(conn(bob)), []);
    assert.deepEqual(await Database.list(conn(bob)), []);
    assert.deepEqual(
      (await Sandbox.list(conn(alice))).map((s) => s.id).filter((s) => s === id),
      [id],
    );
    // Usage: one's own only.
    assert.equal((await call(bob, 'GET', `/v1/usage?apiKey=${alice.id}`)).status, 403);
    // Nothing was touched: the owner still uses all of it, and the admin key sees it.
    assert.equal((await sbx.exec('echo still mine')).stdout, 'still mine\n');
    assert.equal((await Snapshots.get(snap.id, conn(alice))).id, snap.id);
    assert.equal((await Database.get('alices', conn(alice))).name, 'alices');
    assert.ok(
      (await Sandbox.list(d!.conn)).some((s) => s.id === id),
      "the admin key lists every key's sandboxes",
    );
    assert.equal(await terminalUpgrade(alice, id), 101, 'the owner opens a terminal');
  } finally {
    await db.delete();
    await Snapshots.delete(snap.id, conn(alice));
    await sbx.kill();
  }
});

test('scopes: each missing one is a 403 naming it; network:write guards widening egress; only admin keys manage keys', T, async () => {
  const reader = await key('reader', ['sandboxes:read']);
  const worker = await key('worker', ['sandboxes:create', 'sandboxes:read', 'sandboxes:exec', 'sandboxes:manage']);
  const refused = async (k: NewApiKey, method: string, path: string, scope: string, body?: unknown) => {
    const r = await call(k, method, path, body);
    assert.equal(r.status, 403, `${method} ${path}: ${r.text}`);
    assert.match(r.text, new RegExp(`lacks the scope ${scope}`), `${method} ${path}`);
  };
  await refused(reader, 'POST', '/v1/sandboxes', 'sandboxes:create', {});
  const sbx = await Sandbox.create({ ...conn(worker) });
  try {
    assert.equal((await sbx.exec('echo ok')).stdout, 'ok\n');
    await refused(worker, 'PUT', `/v1/sandboxes/${sbx.id}/network`, 'network:write', { allow: ['127.0.0.1:1'] });
    await refused(worker, 'POST', '/v1/sandboxes', 'network:write', { network: { allow: ['127.0.0.1:1'] } });
    await refused(worker, 'GET', `/v1/sandboxes/${sbx.id}/files?path=/etc/hostname`, 'sandboxes:files');
    await refused(worker, 'POST', `/v1/sandboxes/${sbx.id}/fork`, 'sandboxes:fork', {});
    await refused(worker, 'POST', '/v1/templates/build', 'templates:build', {});
    await refused(worker, 'GET', '/v1/databases', 'databases');
    await refused(worker, 'GET', '/v1/keys', 'admin');
    await refused(worker, 'POST', '/v1/keys', 'admin', { name: 'escalate', scopes: ['admin'] });
    await refused(worker, 'GET', '/v1/logs', 'admin');
    await refused(worker, 'GET', '/metrics', 'admin');
    // A key limited to some egress rules grants those and nothing else.
    const limited = await ApiKeys.create(
      { name: 'limited', scopes: ['sandboxes:create', 'sandboxes:manage', 'network:write'], egress: ['127.0.0.1:1', '@github'] },
      d!.conn,
    );
    assert.deepEqual((await ApiKeys.get(limited.id, d!.conn)).egress, ['127.0.0.1:1', '@github']);
    const outside = await call(limited, 'POST', '/v1/sandboxes', { network: { allow: ['127.0.0.1:1', '127.0.0.1:2'] } });
    assert.equal(outside.status, 403, outside.text);
    assert.match(outside.text, /may grant only these egress rules: 127\.0\.0\.1:1, @github; \\"127\.0\.0\.1:2\\" is not one/);
    const inside = await Sandbox.create({ ...conn(limited), network: { allow: ['127.0.0.1:1'] } });
    assert.equal((await call(limited, 'PUT', `/v1/sandboxes/${inside.id}/network`, { allow: ['127.0.0.1:3'] })).status, 403);
    await inside.kill();
    // An explicit empty policy narrows, so it needs no scope.
    const closed = await Sandbox.create({ ...conn(worker), network: { allow: [] } });
    await closed.kill();
    // Reading templates and health needs a valid key and nothing more.
    assert.equal((await call(reader, 'GET', '/v1/templates')).status, 200);
    assert.equal((await call(reader, 'GET', '/v1/health')).status, 200);
    await refused(reader, 'POST', `/v1/sandboxes/${sbx.id}/exec`, 'sandboxes:exec', { argv: ['true'] });
  } finally {
    await sbx.kill();
  }
});

test("templates: a key's own are private to it; shared ones only an admin key changes; no host files, pools or cache prunes for other keys", T, async () => {
  const scopes: Scope[] = ['templates:build', 'sandboxes:create', 'sandboxes:read', 'sandboxes:exec', 'sandboxes:manage'];
  const carol = await key('carol', scopes);
  const dave = await key('dave', scopes);
  const name = `keys-own-${Date.now().toString(36)}`;
  // Its run steps get no network: the daemon on the host's loopback is out of reach (an
  // operator's build steps share the host's network, for apt).
  const port = new URL(d!.url).port;
  const probe = `echo carols > /etc/whose; if bash -c 'exec 3<>/dev/tcp/127.0.0.1/${port}' 2>/dev/null; then echo daemon-reached; else echo daemon-unreachable; fi`;
  const log: string[] = [];
  await Template.buildRecipe(
    { name, from: 'base', steps: [{ type: 'run', cmd: probe, user: 'root' }] },
    { ...conn(carol), onEvent: (e) => e.type === 'log' && log.push(e.line) },
  );
  assert.match(log.join('\n'), /daemon-unreachable/, log.join('\n'));
  try {
    const names = async (k: NewApiKey) => (await Template.list(conn(k))).map((t) => t.name);
    assert.ok((await names(carol)).includes(name));
    assert.ok(
      (await Template.list(d!.conn)).some((t) => t.name === name),
      'the admin key sees every template',
    );
    assert.ok(!(await names(dave)).includes(name));
    const shared = await names(dave);
    assert.ok(shared.includes('base'), 'shared templates are listed for every key');

    // To dave it reads exactly as a name that exists nowhere, the 404's list of templates included.
    const hidden = await call(dave, 'GET', `/v1/templates/${name}`);
    const missing = await call(dave, 'GET', '/v1/templates/keys-own-none');
    assert.equal(hidden.status, 404);
    assert.equal(hidden.text.replaceAll(name, 'X'), missing.text.replaceAll('keys-own-none', 'X'));
    assert.equal((await call(dave, 'POST', '/v1/sandboxes', { template: name })).status, 404);
    assert.equal((await call(dave, 'DELETE', `/v1/templates/${name}`)).status, 404);
    assert.equal((await call(dave, 'GET', `/v1/templates/${name}/pool`)).status, 404);
    await assert.rejects(
      Template.buildRecipe({ name, from: 'base', steps: [{ type: 'run', cmd: 'echo daves > /etc/whose' }] }, conn(dave)),
      (e: Error) => e instanceof ConflictError && /is taken/.test(e.message),
    );
    await assert.rejects(
      Template.buildRecipe({ name: `${name}-x`, from: name, steps: [] }, conn(dave)),
      (e: Error) =>
        e instanceof InvalidArgumentError && e.message === `from: unknown template '${name}' (installed: ${shared.join(', ')}; or use 'debian:bookworm')`,
    );

    const sbx = await Sandbox.create({ ...conn(carol), template: name });
    try {
      assert.equal((await sbx.exec('cat /etc/whose')).stdout, 'carols\n', 'the owner creates from it, built as it built it');
    } finally {
      await sbx.kill();
    }

    // What every key's sandboxes run is the operator's: carol cannot replace or remove base.
    const base = await call(carol, 'DELETE', '/v1/templates/base');
    assert.equal(base.status, 403, base.text);
    assert.match(base.text, /only an admin key may remove it/);
    await assert.rejects(
      Template.buildRecipe({ name: 'base', from: 'debian:bookworm', steps: [] }, conn(carol)),
      (e: Error) => e instanceof PermissionDeniedError && /shared by every key/.test(e.message),
    );
    // A build context is a directory of the daemon's host; its files would land in carol's template.
    const ctx = await call(carol, 'POST', '/v1/templates/build', {
      name: `${name}-ctx`,
      from: 'base',
      contextDir: '/var/lib/warren',
      steps: [{ type: 'copy', src: 'admin.key', dest: '/k' }],
    });
    assert.equal(ctx.status, 403, ctx.text);
    assert.match(ctx.text, /copy steps \(files from the daemon host\)/);
    assert.equal((await call(carol, 'POST', '/v1/templates/prune', {})).status, 403);
    assert.equal((await call(carol, 'PUT', `/v1/templates/${name}/pool`, { size: 5 })).status, 403);
    assert.equal((await Template.list(conn(carol))).filter((t) => t.name.startsWith(`${name}-`)).length, 0, 'refused builds left nothing');
  } finally {
    await Template.delete(name, conn(carol));
  }
  // Removed, the name is free again for any key.
  assert.equal((await call(dave, 'GET', `/v1/templates/${name}`)).status, 404);
});

test('revoked and rotated-away secrets are refused; keys and ownership outlive a daemon restart', T, async () => {
  const carol = await key('carol');
  const dave = await key('dave');
  const sbx = await Sandbox.create({ ...conn(carol) });
  const rotated = await ApiKeys.rotate(carol.id, d!.conn);
  await assert.rejects(Sandbox.list(conn(carol)), AuthenticationError);
  const carolNow = { ...carol, key: rotated.key };
  assert.ok(
    (await Sandbox.list(conn(carolNow))).some((s) => s.id === sbx.id),
    'the new secret reaches the same sandboxes',
  );
  await ApiKeys.revoke(dave.id, d!.conn);
  await assert.rejects(Sandbox.list(conn(dave)), (e: Error) => e instanceof AuthenticationError && /was revoked/.test(e.message));
  assert.equal((await ApiKeys.get(dave.id, d!.conn)).state, 'revoked');
  await assert.rejects(ApiKeys.revoke('admin', d!.conn), /cannot be revoked/);
  await assert.rejects(ApiKeys.create({ name: 'x', scopes: ['root' as Scope] }, d!.conn), /a scope is one of/);
  const listed = JSON.stringify(await ApiKeys.list(d!.conn));
  assert.equal(listed.includes(rotated.key) || listed.includes(carol.key), false, 'no secret in a listing');
  assert.equal(d!.log().includes(rotated.key), false, 'no secret in the daemon log');

  await d!.stop();
  d = await startDaemon({ home: d!.home });
  try {
    assert.ok(
      (await Sandbox.list(conn(carolNow))).some((s) => s.id === sbx.id),
      'after a restart the key still reaches its sandbox',
    );
    await assert.rejects(Sandbox.list(conn(dave)), AuthenticationError);
    const eve = await key('eve');
    await assert.rejects(Sandbox.connect(sbx.id, conn(eve)), NotFoundError);
    await assert.rejects(ApiKeys.list(conn(eve)), PermissionDeniedError);
  } finally {
    await (await Sandbox.connect(sbx.id, conn(carolNow))).kill();
  }
});

test('quotas: past a limit a create or fork is a 429 naming it (Retry-After for a rate), and nothing is made; room comes back', T, async () => {
  const frank = await ApiKeys.create({ name: 'frank', quotas: { sandboxes: 2, createsPerMinute: 3 } }, d!.conn);
  assert.deepEqual((await ApiKeys.get(frank.id, d!.conn)).quotas, { sandboxes: 2, createsPerMinute: 3 });
  const first = await Sandbox.create({ ...conn(frank) });
  const second = await Sandbox.create({ ...conn(frank) });
  try {
    const held = await call(frank, 'POST', '/v1/sandboxes', {});
    assert.equal(held.status, 429, held.text);
    assert.match(held.text, /quota sandboxes = 2/);
    const fork = await call(frank, 'POST', `/v1/sandboxes/${first.id}/fork`, {});
    assert.equal(fork.status, 429, fork.text);
    assert.equal((await Sandbox.list(conn(frank))).length, 2, 'a refused create or fork makes nothing');
    await second.kill();
    // Room again for one, but that is the third create of the minute, and a fourth is over the rate.
    const third = await Sandbox.create({ ...conn(frank) });
    await third.kill();
    const res = await fetch(`${d!.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${frank.key}`, 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(res.status, 429);
    assert.match(await res.text(), /quota createsPerMinute = 3/);
    const retry = Number(res.headers.get('retry-after'));
    assert.ok(retry >= 1 && retry <= 60, `Retry-After ${res.headers.get('retry-after')}`);
  } finally {
    await first.kill();
    await second.kill().catch(() => undefined);
  }
});

test('quotas: creates racing for the last slot do not both pass; a resume, asked for or caused by a call, counts as running', T, async () => {
  const ivan = await ApiKeys.create({ name: 'ivan', quotas: { sandboxes: 1 } }, d!.conn);
  const racing = await Promise.all([1, 2, 3].map(() => call(ivan, 'POST', '/v1/sandboxes', {})));
  const made = racing.filter((r) => r.status === 201).map((r) => (JSON.parse(r.text) as { id: string }).id);
  try {
    assert.deepEqual(racing.map((r) => r.status).sort(), [201, 429, 429], racing.map((r) => r.text).join('\n'));
    const a = await Sandbox.connect(made[0]!, conn(ivan));
    await a.hibernate();
    const b = await Sandbox.create({ ...conn(ivan) });
    made.push(b.id);
    const resume = await call(ivan, 'POST', `/v1/sandboxes/${a.id}/resume`, {});
    assert.equal(resume.status, 429, resume.text);
    assert.match(resume.text, /quota sandboxes = 1: it holds 1 and this resume adds 1/);
    const exec = await call(ivan, 'POST', `/v1/sandboxes/${a.id}/exec`, { cmd: 'true' });
    assert.equal(exec.status, 429, `a call that would resume it is refused too: ${exec.text}`);
    assert.equal((await a.refresh()).state, 'hibernated', 'nothing was resumed');
    await b.kill();
    assert.equal((await a.exec('echo back')).stdout, 'back\n', 'with room again, a call resumes it');
  } finally {
    for (const id of made) await call(ivan, 'DELETE', `/v1/sandboxes/${id}`);
  }
});

test('quotas: past hibernatedDiskMB a hibernate is a 429 and the sandbox keeps running; room comes back', T, async () => {
  const judy = await ApiKeys.create({ name: 'judy', quotas: { hibernatedDiskMB: 1 } }, d!.conn);
  const a = await Sandbox.create({ ...conn(judy) });
  const b = await Sandbox.create({ ...conn(judy) });
  try {
    await a.hibernate();
    const refused = await call(judy, 'POST', `/v1/sandboxes/${b.id}/hibernate`, {});
    assert.equal(refused.status, 429, refused.text);
    assert.match(refused.text, /quota hibernatedDiskMB = 1 MB: its hibernated sandboxes' images take \d+ MB/);
    assert.equal((await b.exec('echo running')).stdout, 'running\n');
    // Idle, it is not hibernated either: the daemon logs why and the sandbox keeps running.
    const from = d!.log().length;
    const idle = await Sandbox.create({ ...conn(judy), idleSeconds: 1 });
    try {
      await d!.waitForLog(
        (e) => e.msg === 'auto-hibernate failed' && e.sandbox === idle.id && /hibernatedDiskMB/.test(String(e.err)),
        60_000,
        'the idle hibernate refused',
        from,
      );
      assert.equal((await idle.exec('echo still running')).stdout, 'still running\n');
    } finally {
      await idle.kill();
    }
    await a.kill();
    assert.equal((await b.hibernate()).state, 'hibernated');
  } finally {
    await a.kill().catch(() => undefined);
    await b.kill();
  }
});

test('quotas: a database is a sandbox: its create counts, and past the limit a create or branch is a 429 that makes nothing', T, async () => {
  const kate = await ApiKeys.create({ name: 'kate', quotas: { sandboxes: 1 } }, d!.conn);
  const db = await Database.create('kates', conn(kate));
  try {
    const second = await call(kate, 'POST', '/v1/databases', { name: 'kates2' });
    assert.equal(second.status, 429, second.text);
    assert.match(second.text, /quota sandboxes = 1/);
    const branch = await call(kate, 'POST', '/v1/databases/kates/branches', { name: 'kates3' });
    assert.equal(branch.status, 429, branch.text);
    assert.deepEqual(
      (await Database.list(conn(kate))).map((x) => x.name),
      ['kates'],
      'nothing was made',
    );
  } finally {
    await db.delete();
  }
  // A workspace's databases count with it: two of them and the workspace are three.
  const leo = await ApiKeys.create({ name: 'leo', quotas: { sandboxes: 2 } }, d!.conn);
  const three = await call(leo, 'POST', '/v1/sandboxes', { databases: ['leos_a', 'leos_b'] });
  assert.equal(three.status, 429, three.text);
  assert.match(three.text, /this create adds 3/);
  const ws = await Sandbox.create({ ...conn(leo), databases: ['leos_a'] });
  try {
    const fork = await call(leo, 'POST', `/v1/sandboxes/${ws.id}/fork`, {});
    assert.equal(fork.status, 429, `a fork with a branch of its database is two more: ${fork.text}`);
    assert.deepEqual(
      (await Database.list(conn(leo))).map((x) => x.name),
      ['leos_a'],
    );
  } finally {
    await ws.kill();
  }
});

test('the audit trail: every call that changed something, refused ones too, with key, sandbox and status; reads are not in it; admin only', T, async () => {
  const grace = await key('grace', ['sandboxes:create', 'sandboxes:read', 'sandboxes:exec', 'sandboxes:manage']);
  const since = new Date();
  const sbx = await Sandbox.create({ ...conn(grace) });
  await sbx.exec('true');
  await sbx.refresh();
  assert.equal((await call(grace, 'POST', `/v1/sandboxes/${sbx.id}/fork`, {})).status, 403);
  const bad = await fetch(`${d!.url}/v1/sandboxes`, { method: 'POST', headers: { authorization: 'Bearer wk_not-a-key' }, body: '{}' });
  assert.equal(bad.status, 401);
  await sbx.kill();
  const mine = await getAuditTrail({ key: grace.id }, d!.conn);
  const seen = mine.map((e) => `${e.method} ${e.path} ${e.status} ${e.sandboxId ?? '-'}`);
  assert.deepEqual(seen, [
    `POST /v1/sandboxes 201 ${sbx.id}`,
    `POST /v1/sandboxes/${sbx.id}/exec 200 ${sbx.id}`,
    `POST /v1/sandboxes/${sbx.id}/fork 403 ${sbx.id}`,
    `DELETE /v1/sandboxes/${sbx.id} 204 ${sbx.id}`,
  ]);
  assert.ok(mine.every((e) => e.requestId && Date.parse(e.time) >= since.getTime() - 1000));
  const all = await getAuditTrail({ since }, d!.conn);
  assert.ok(
    all.some((e) => e.keyId === undefined && e.status === 401 && e.path === '/v1/sandboxes'),
    'a call without a valid key is in the trail too',
  );
  assert.equal(JSON.stringify(all).includes('wk_'), false, 'no secret in the trail');
  assert.deepEqual(
    (await getAuditTrail({ sandbox: sbx.id }, d!.conn)).map((e) => e.keyId),
    [grace.id, grace.id, grace.id, grace.id],
  );
  await assert.rejects(getAuditTrail({}, conn(grace)), PermissionDeniedError);
});

test(
  'sandbox tokens: one sandbox, its scopes only; another sandbox is a 404, everything else a 403; a revoked one is refused; gone with the sandbox',
  T,
  async () => {
    const heidi = await key('heidi', ['sandboxes:create', 'sandboxes:read', 'sandboxes:exec', 'sandboxes:manage']);
    const sbx = await Sandbox.create({ ...conn(heidi) });
    const other = await Sandbox.create({ ...conn(heidi) });
    try {
      const made = await sbx.createToken({ scopes: ['exec'], ttlSeconds: 600 });
      assert.match(made.token, /^wt_/);
      const tok = { ...heidi, key: made.token };
      // What it may do, the way an agent would: the SDK with the token as its key.
      // The SDK as an agent would use it: connect (a GET of the sandbox, which any scope on it allows), then exec.
      const asAgent = await Sandbox.connect(sbx.id, conn(tok));
      assert.equal((await asAgent.exec('echo via the sdk')).stdout, 'via the sdk\n');
      assert.equal((await call(tok, 'GET', `/v1/sandboxes/${sbx.id}/egress`)).status, 403, 'its egress log needs read');
      const ran = await call(tok, 'POST', `/v1/sandboxes/${sbx.id}/exec`, { argv: ['echo', 'via token'] });
      assert.equal(ran.status, 200, ran.text);
      assert.match(ran.text, /via token/);
      assert.equal(await terminalUpgrade(tok, sbx.id), 101, 'exec covers its terminal');
      const r = [
        await call(tok, 'GET', `/v1/sandboxes/${sbx.id}/files?path=/etc/hostname`),
        await call(tok, 'DELETE', `/v1/sandboxes/${sbx.id}`),
        await call(tok, 'POST', `/v1/sandboxes/${sbx.id}/fork`, {}),
        await call(tok, 'POST', `/v1/sandboxes/${sbx.id}/tokens`, { scopes: ['exec'] }),
        await call(tok, 'GET', '/v1/sandboxes'),
        await call(tok, 'POST', '/v1/sandboxes', {}),
        await call(tok, 'GET', '/v1/templates'),
      ];
      assert.deepEqual(
        r.map((x) => x.status),
        [403, 403, 403, 403, 403, 403, 403],
        r.map((x) => x.text).join('\n'),
      );
      assert.equal((await call(tok, 'POST', `/v1/sandboxes/${other.id}/exec`, { argv: ['true'] })).status, 404, "its maker's other sandbox");
      assert.equal(await terminalUpgrade(tok, other.id), 404);
      // A key with exec but not read makes an exec token (what it holds is what counts).
      const execOnly = await key('exec only', ['sandboxes:create', 'sandboxes:exec']);
      const itsOwn = await Sandbox.create({ ...conn(execOnly) });
      assert.equal((await itsOwn.createToken({ scopes: ['exec'] })).scopes[0], 'exec');
      await (await Sandbox.connect(itsOwn.id, d!.conn)).kill();
      // A key cannot grant what it does not hold.
      await assert.rejects(sbx.createToken({ scopes: ['files'] }), (e: Error) => e instanceof PermissionDeniedError && /sandboxes:files/.test(e.message));
      assert.deepEqual(
        (await sbx.tokens()).map((t) => [t.id, t.state]),
        [[made.id, 'active']],
      );
      // The trail names the token and its maker, so the maker's trail has the token's calls.
      const tokenCalls = (await getAuditTrail({ key: heidi.id, sandbox: sbx.id }, d!.conn)).filter((e) => e.tokenId === made.id);
      assert.ok(tokenCalls.length > 0, 'the token exec is in its maker key trail');
      assert.ok(tokenCalls.every((e) => e.keyId === heidi.id));
      await sbx.revokeToken(made.id);
      const revoked = await call(tok, 'POST', `/v1/sandboxes/${sbx.id}/exec`, { argv: ['true'] });
      assert.equal(revoked.status, 401);
      assert.match(revoked.text, /was revoked/);
      // A token ends with its sandbox.
      const second = await other.createToken({ scopes: ['read'] });
      await other.kill();
      assert.equal((await call({ ...heidi, key: second.token }, 'GET', `/v1/sandboxes/${other.id}`)).status, 401);
      assert.equal(d!.log().includes(made.token), false, 'no token secret in the daemon log');
      // A token is worth no more than its maker: revoking the key ends the key's tokens.
      const maker = await key('maker', ['sandboxes:read', 'sandboxes:exec']);
      const handed = await (await Sandbox.connect(sbx.id, d!.conn)).createToken({ scopes: ['exec'] });
      const fromMaker = await call(maker, 'POST', `/v1/sandboxes/${sbx.id}/tokens`, { scopes: ['exec'] });
      assert.equal(fromMaker.status, 404, "another key's sandbox, for making tokens too");
      assert.equal(
        (await call({ ...heidi, key: handed.token }, 'POST', `/v1/sandboxes/${sbx.id}/exec`, { argv: ['true'] })).status,
        200,
        "an admin key's token for another key's sandbox",
      );
      const own = await Sandbox.create({ ...conn(heidi) });
      const heidiToken = await own.createToken({ scopes: ['exec'] });
      await ApiKeys.revoke(heidi.id, d!.conn);
      const orphan = await call({ ...heidi, key: heidiToken.token }, 'POST', `/v1/sandboxes/${own.id}/exec`, { argv: ['true'] });
      assert.equal(orphan.status, 401, orphan.text);
      assert.match(orphan.text, /made by API key .* which was revoked/);
      await (await Sandbox.connect(own.id, d!.conn)).kill();
    } finally {
      // With the admin key: the test revokes heidi's.
      await (await Sandbox.connect(sbx.id, d!.conn)).kill();
      // Killed by the test unless it failed first.
      await Sandbox.connect(other.id, d!.conn)
        .then((s) => s.kill())
        .catch(() => undefined);
    }
  },
);

/** A call from a given loopback address (the daemon sees the socket's address, no header). */
function callFrom(localAddress: string, base: string, secret: string): Promise<{ status: number; retryAfter?: string; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}/v1/sandboxes`, { localAddress, headers: { authorization: `Bearer ${secret}` } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, text, ...(res.headers['retry-after'] ? { retryAfter: String(res.headers['retry-after']) } : {}) }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

test(
  'failed authentications are limited per source address: past the limit even the right key gets 429 from there, other addresses are untouched',
  T,
  async () => {
    const limited = await startDaemon({ env: { WARREN_AUTH_FAILURES_PER_MINUTE: '5' } });
    try {
      for (let i = 0; i < 5; i++) assert.equal((await callFrom('127.0.0.2', limited.url, `wk_guess${i}`)).status, 401);
      const blocked = await callFrom('127.0.0.2', limited.url, limited.apiKey);
      assert.equal(blocked.status, 429, blocked.text);
      assert.match(blocked.text, /too many failed authentications from 127\.0\.0\.2/);
      assert.ok(Number(blocked.retryAfter) >= 1 && Number(blocked.retryAfter) <= 60, `Retry-After ${blocked.retryAfter}`);
      assert.equal((await callFrom('127.0.0.3', limited.url, limited.apiKey)).status, 200, 'another address is not limited');
      assert.equal((await callFrom('127.0.0.3', limited.url, 'wk_wrong')).status, 401);
    } finally {
      await stopAndCheckClean(limited);
    }
  },
);

test("from inside a sandbox: a db: rule naming another key's database reaches nothing, even with its password; the owner's sandbox reaches it", T, async () => {
  const ann = await key('ann');
  const ben = await key('ben');
  const db = await Database.create('anns', conn(ann));
  const password = new URL(await db.url()).password;
  const inside = `postgres://postgres:${password}@anns.db.warren:5432/anns`;
  // The postgres template has psql. Ben's key may write egress rules and names Ann's database in one.
  const bens = await Sandbox.create({ ...conn(ben), template: 'postgres', network: { allow: ['db:anns'] } });
  const anns = await Sandbox.create({ ...conn(ann), template: 'postgres', network: { allow: ['db:anns'] } });
  try {
    for (const user of ['user', 'root']) {
      const stolen = await bens.exec(['psql', inside, '-X', '-At', '-c', 'SELECT 1'], { user, timeoutSeconds: 60 });
      assert.notEqual(stolen.exitCode, 0, `as ${user}: ${stolen.stdout}`);
    }
    const own = await anns.exec(['psql', inside, '-X', '-At', '-c', 'SELECT 42'], { user: 'user', timeoutSeconds: 60 });
    assert.equal(own.stdout.trim(), '42', own.stderr);
  } finally {
    await bens.kill();
    await anns.kill();
    await db.delete();
  }
});

test('warren audit and warren key ls never hand the terminal a control character from a path or a key name', T, async () => {
  const evil = await ApiKeys.create({ name: 'plain name' }, d!.conn);
  // A path with an escape sequence (percent-encoded, as any client may send it).
  await call(evil, 'POST', '/v1/sandboxes/sb-%1b%5b31mred%1b%5b0m/hibernate');
  const run = (args: string[]) =>
    spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, WARREN_URL: d!.url, WARREN_API_KEY: d!.apiKey } });
  const audit = run(['audit', '--key', evil.id]);
  assert.equal(audit.status, 0, audit.stderr);
  assert.match(audit.stdout, /hibernate/);
  assert.equal(audit.stdout.includes('\u001b'), false, `raw ESC in: ${JSON.stringify(audit.stdout)}`);
  // Whatever form the trail keeps the path in, it is there, and the terminal gets it escaped.
  const entry = (await getAuditTrail({ key: evil.id }, d!.conn)).find((e) => e.path.includes('hibernate'));
  assert.ok(entry && /red/.test(entry.path), JSON.stringify(entry));
  // Key names are plain text by rule: one with a control character is refused.
  await assert.rejects(ApiKeys.create({ name: 'bad\x1b[31m' }, d!.conn), /a key name is/);
  const ls = run(['key', 'ls']);
  assert.equal(ls.status, 0, ls.stderr);
  assert.equal(ls.stdout.includes('\u001b'), false);
});
