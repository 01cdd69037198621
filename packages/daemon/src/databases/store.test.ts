import { test } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { WarrenError } from '@warren/protocol';
import { DatabaseStore } from './store.js';

test('a reserved name is taken until deleted; completion records the sandbox and the branch instant', () => {
  const store = new DatabaseStore(new Database(':memory:'));
  store.reserve({ name: 'app', database: 'app', password: 'pw', createdAt: 1, retainSeconds: 60, apiKeyId: 'key-a' });
  assert.throws(
    () => store.reserve({ name: 'app', database: 'app', password: 'other', createdAt: 2, retainSeconds: 60, apiKeyId: 'key-a' }),
    (e: Error) => e instanceof WarrenError && e.code === 'conflict' && /app already exists/.test(e.message),
  );
  assert.equal(store.get('app')?.sandboxId, undefined);
  store.reserve({ name: 'b', database: 'app', password: 'pw', parent: 'app', createdAt: 3, retainSeconds: 60, apiKeyId: 'key-a' });
  store.complete('b', 'sb-1', 42);
  store.setHostPort('b', 5555);
  assert.deepEqual(store.get('b'), {
    name: 'b',
    database: 'app',
    password: 'pw',
    createdAt: 3,
    sandboxId: 'sb-1',
    hostPort: 5555,
    parent: 'app',
    branchedAt: 42,
    retainSeconds: 60,
    apiKeyId: 'key-a',
  });
  assert.deepEqual(
    store.list().map((r) => r.name),
    ['app', 'b'],
  );
  store.delete('app');
  store.reserve({ name: 'app', database: 'app', password: 'new', createdAt: 4, retainSeconds: 60, apiKeyId: 'key-a' });
  assert.equal(store.get('app')?.password, 'new');
});
