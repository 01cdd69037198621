import { test } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import pino from 'pino';
import { WarrenError } from '@warren/protocol';
import { SandboxTokens } from './tokens.js';
import type { Principal } from './service.js';

const maker: Principal = { keyId: 'key-a', scopes: new Set(['sandboxes:exec', 'sandboxes:read']), admin: false };

test('a token acts as its maker on its sandbox with its scopes, until it expires; a token cannot make tokens', () => {
  let now = 1_000_000;
  const tokens = new SandboxTokens(new Database(':memory:'), pino({ level: 'silent' }), () => now);
  const made = tokens.create(maker, 'sb-1', { scopes: ['exec', 'exec'], ttlSeconds: 60 });
  assert.deepEqual(made.scopes, ['exec']);
  const p = tokens.authenticate(made.token);
  assert.deepEqual(
    { ...p, scopes: [...p.scopes] },
    {
      keyId: 'key-a',
      scopes: ['sandboxes:exec'],
      admin: false,
      sandboxId: 'sb-1',
      tokenId: made.id,
      expiresAt: 1_000_000 + 60_000,
    },
  );
  assert.throws(
    () => tokens.create(p, 'sb-1', { scopes: ['exec'] }),
    (e: Error) => e instanceof WarrenError && e.code === 'permission_denied',
  );
  assert.throws(() => tokens.create(maker, 'sb-1', { scopes: ['manage'] }), /lacks the scope sandboxes:manage/);
  now += 60_000;
  assert.throws(() => tokens.authenticate(made.token), new RegExp(`token ${made.id} expired at`));
  assert.equal(tokens.list('sb-1')[0]?.state, 'expired');
  assert.throws(() => tokens.authenticate('wt_unknown'), /invalid token/);
  tokens.removeSandbox('sb-1');
  assert.deepEqual(tokens.list('sb-1'), []);
});

test('requireLive (a port URL a token made): the token, for that sandbox, not revoked, not expired', () => {
  let now = 1_000_000;
  const tokens = new SandboxTokens(new Database(':memory:'), pino({ level: 'silent' }), () => now);
  const made = tokens.create(maker, 'sb-1', { scopes: ['exec'], ttlSeconds: 60 });
  const revoked = tokens.create(maker, 'sb-1', { scopes: ['exec'], ttlSeconds: 60 });
  tokens.revoke('sb-1', revoked.id);
  const refused = (id: string, sandboxId: string, why: RegExp) =>
    assert.throws(
      () => tokens.requireLive(id, sandboxId, 'this port URL'),
      (e: Error) => e instanceof WarrenError && e.code === 'unauthenticated' && why.test(e.message),
    );
  tokens.requireLive(made.id, 'sb-1', 'this port URL');
  refused(revoked.id, 'sb-1', new RegExp(`^this port URL was made by token ${revoked.id}, which was revoked at `));
  refused(made.id, 'sb-2', /which no longer exists/);
  refused('tok-unknown', 'sb-1', /which no longer exists/);
  now += 60_000;
  refused(made.id, 'sb-1', new RegExp(`which expired at ${new Date(now).toISOString()}`));
  tokens.removeSandbox('sb-1');
  refused(made.id, 'sb-1', /which no longer exists/);
});
