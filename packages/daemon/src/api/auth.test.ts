import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import pino from 'pino';
import { WarrenError } from '@warren/protocol';
import { buildApp, type ApiDeps } from './app.js';
import { requireAccess, requireScope, ruleFor, type Owners } from './auth.js';
import { KeyService } from '../keys/service.js';
import { KeyStore } from '../keys/store.js';

/** Deps that are never called: building the app only registers its routes. */
function inertDeps(): ApiDeps {
  const inert: object = new Proxy(() => inert, { get: (_t, p) => (p === 'then' ? undefined : inert), apply: () => inert });
  return new Proxy({} as ApiDeps, { get: () => inert });
}

test('every route of the API has a rule of its own (a route without one needs admin)', () => {
  const app = buildApp(inertDeps());
  const routes = [...new Set(app.routes.filter((r) => r.method !== 'ALL').map((r) => `${r.method} ${r.path}`))];
  assert.ok(routes.length > 60, `only ${routes.length} routes found`);
  const missing = routes.filter((r) => {
    const [method, path] = r.split(' ') as [string, string];
    if (path.startsWith('/v1/keys') || path === '/v1/logs' || path === '/v1/audit' || path === '/v1/routes' || path === '/metrics') return false; // admin by design
    // E2B's API: each call is calls of /v1 with the caller's key (e2b/warren-calls.ts); envd takes a sandbox token.
    if (path.startsWith('/e2b/')) return false;
    // The dashboard's page and login (routes/ui.ts): no key yet; its session then goes through the key check.
    if (path === '/ui' || path.startsWith('/ui/')) return false;
    return ruleFor(method, path.replace(/:[a-z]+/g, 'x1')) === undefined;
  });
  assert.deepEqual(missing, []);
});

test('rules: scopes by kind of call, the resource a path names', () => {
  assert.deepEqual(ruleFor('GET', '/v1/events'), { scope: 'sandboxes:read' });
  assert.deepEqual(ruleFor('POST', '/v1/ui/login-links'), { scope: null });
  assert.deepEqual(ruleFor('GET', '/v1/templates/base/builds/17-abc'), { scope: null });
  assert.deepEqual(ruleFor('POST', '/v1/sandboxes/sb-1/exec'), { scope: 'sandboxes:exec', owns: 'sandbox', id: 'sb-1' });
  assert.deepEqual(ruleFor('PUT', '/v1/sandboxes/sb-1/files'), { scope: 'sandboxes:files', owns: 'sandbox', id: 'sb-1' });
  assert.deepEqual(ruleFor('PUT', '/v1/sandboxes/sb-1/network'), { scope: 'network:write', owns: 'sandbox', id: 'sb-1' });
  assert.deepEqual(ruleFor('GET', '/v1/sandboxes/sb-1/network'), { scope: 'sandboxes:read', owns: 'sandbox', id: 'sb-1' });
  // The sandbox itself: read, or any scope that acts on it (the SDKs read it before they act).
  assert.deepEqual(ruleFor('GET', '/v1/sandboxes/sb-1'), {
    scope: 'sandboxes:read',
    owns: 'sandbox',
    id: 'sb-1',
    orScopes: ['sandboxes:exec', 'sandboxes:files', 'sandboxes:manage', 'sandboxes:fork'],
  });
  assert.deepEqual(ruleFor('DELETE', '/v1/sandboxes/sb-1'), { scope: 'sandboxes:manage', owns: 'sandbox', id: 'sb-1' });
  assert.deepEqual(ruleFor('POST', '/v1/databases/app/branches'), { scope: 'databases', owns: 'database', id: 'app' });
  assert.deepEqual(ruleFor('DELETE', '/v1/snapshots/snap-1'), { scope: 'sandboxes:fork', owns: 'snapshot', id: 'snap-1' });
  assert.deepEqual(ruleFor('GET', '/v1/templates/base'), { scope: null });
  assert.deepEqual(ruleFor('POST', '/v1/templates/base/bake'), { scope: 'templates:build' });
  assert.equal(ruleFor('GET', '/v1/keys'), undefined);
  assert.equal(ruleFor('GET', '/v1/logs'), undefined);
  assert.equal(ruleFor('POST', '/v1/sandboxes/sb-1/unknown'), undefined);
  // Not valid percent-encoding: named as sent, never a 500.
  assert.deepEqual(ruleFor('PUT', '/v1/sandboxes/%ZZ/files'), { scope: 'sandboxes:files', owns: 'sandbox', id: '%ZZ' });
});

test("scopes and ownership: 403 names the scope; another key's resource reads as missing; admin reaches all", () => {
  const keys = new KeyService(new KeyStore(new Database(':memory:')), pino({ level: 'silent' }));
  const reader = keys.authenticate(keys.create({ name: 'reader', scopes: ['sandboxes:read'] }).key);
  const owners: Owners = {
    sandbox: (id) => (id === 'sb-mine' ? reader.keyId : id === 'sb-other' ? 'key-other' : undefined),
    snapshot: () => undefined,
    database: () => undefined,
  };
  requireScope(reader, 'sandboxes:read', 'x');
  assert.throws(
    () => requireScope(reader, 'sandboxes:exec', 'POST /v1/sandboxes/sb-mine/exec'),
    (e: Error) => e instanceof WarrenError && e.code === 'permission_denied' && /lacks the scope sandboxes:exec/.test(e.message),
  );
  requireAccess(reader, owners, 'sandbox', 'sb-mine');
  assert.throws(
    () => requireAccess(reader, owners, 'sandbox', 'sb-other'),
    (e: Error) => e instanceof WarrenError && e.code === 'not_found' && e.message === 'no sandbox with id sb-other',
  );
  // A token an admin key made for another key's sandbox reaches that sandbox, and only it.
  const token = { keyId: 'admin', scopes: new Set(['sandboxes:exec'] as const), admin: false, sandboxId: 'sb-other', tokenId: 'tok-1' };
  requireAccess(token, owners, 'sandbox', 'sb-other');
  assert.throws(
    () => requireAccess(token, owners, 'sandbox', 'sb-mine'),
    (e: Error) => e instanceof WarrenError && e.code === 'not_found',
  );
  const admin = { keyId: 'admin', scopes: new Set(['admin'] as const), admin: true };
  requireAccess(admin, owners, 'sandbox', 'sb-other');
  requireScope(admin, 'templates:build', 'x');
});

test('keys: the secret works until rotated or revoked; an expired key says so; the admin key follows its file', () => {
  let now = 1_000_000;
  const keys = new KeyService(new KeyStore(new Database(':memory:')), pino({ level: 'silent' }), () => now);
  const made = keys.create({ name: 'ci bot', expiresInSeconds: 3600 });
  assert.match(made.key, /^wk_[A-Za-z0-9_-]{32}$/);
  assert.equal(keys.authenticate(made.key).keyId, made.id);
  assert.deepEqual(made.scopes.includes('admin'), false, 'no admin scope unless named');
  assert.equal(JSON.stringify(keys.list()).includes(made.key), false, 'a listing never holds a secret');
  const rotated = keys.rotate(made.id);
  assert.throws(() => keys.authenticate(made.key), /invalid API key/);
  assert.equal(keys.authenticate(rotated.key).keyId, made.id);
  now += 3601_000;
  assert.throws(() => keys.authenticate(rotated.key), new RegExp(`API key ${made.id} expired at`));
  assert.equal(keys.get(made.id).state, 'expired');
  const other = keys.create({ name: 'other', scopes: ['sandboxes:read', 'sandboxes:read'] });
  assert.deepEqual(other.scopes, ['sandboxes:read']);
  keys.revoke(other.id);
  assert.throws(() => keys.authenticate(other.key), new RegExp(`API key ${other.id} was revoked`));
  assert.throws(() => keys.rotate(other.id), /is revoked/);

  const file = path.join(mkdtempSync(path.join(tmpdir(), 'warren-keys-')), 'admin.key');
  const first = keys.ensureAdminKey(file);
  assert.equal(first.created, true);
  assert.equal(keys.authenticate(first.key).admin, true);
  assert.throws(
    () => keys.revoke('admin'),
    (e: Error) => e instanceof WarrenError && e.code === 'failed_precondition',
  );
  writeFileSync(file, 'wk_replaced-by-the-operator\n');
  assert.equal(keys.ensureAdminKey(file).created, false);
  assert.throws(() => keys.authenticate(first.key), /invalid API key/);
  assert.equal(keys.authenticate('wk_replaced-by-the-operator').keyId, 'admin');
});
