import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/protocol';
import { QuotaGate, type SandboxSize } from './quotas.js';
import type { Principal } from './service.js';

const small: SandboxSize = { cpus: 1, memoryMB: 512 };
const refusedFor = (limit: string) => (e: Error) => e instanceof WarrenError && e.code === 'resource_exhausted' && e.details?.limit === limit;

test('quotas: held sandboxes, vCPUs and memory; a key without quotas is not limited', () => {
  const held: SandboxSize[] = [small, small];
  const gate = new QuotaGate(() => held);
  const p: Principal = { keyId: 'key-a', scopes: new Set(), admin: false, quotas: { sandboxes: 3, vcpus: 3.5, memoryMB: 2048 } };
  gate.admit(p, 'create', 1, small).release();
  assert.throws(() => gate.admit(p, 'fork', 2, small), refusedFor('sandboxes'));
  assert.throws(() => gate.admit(p, 'create', 1, { cpus: 2, memoryMB: 64 }), refusedFor('vcpus'));
  assert.throws(() => gate.admit(p, 'create', 1, { cpus: 1, memoryMB: 1536 }), refusedFor('memoryMB'));
  gate.admit({ ...p, quotas: undefined }, 'fork', 50, small);
});

test('quotas per minute: refused with the seconds until the oldest start leaves the window', () => {
  let now = 0;
  const gate = new QuotaGate(
    () => [],
    () => now,
  );
  const p: Principal = { keyId: 'key-a', scopes: new Set(), admin: false, quotas: { createsPerMinute: 2, forksPerMinute: 3 } };
  gate.admit(p, 'create', 1, small);
  now = 10_000;
  gate.admit(p, 'create', 1, small);
  now = 20_000;
  assert.throws(
    () => gate.admit(p, 'create', 1, small),
    (e: Error) => refusedFor('createsPerMinute')(e) && (e as WarrenError).details?.retryAfterSeconds === 40,
  );
  gate.admit(p, 'fork', 3, small);
  assert.throws(() => gate.admit(p, 'fork', 1, small), refusedFor('forksPerMinute'));
  now = 60_001;
  gate.admit(p, 'create', 1, small);
});

test('quotas: room is held from admission to release, so calls racing for the last slot do not both pass; resumes count', () => {
  const held: SandboxSize[] = [small];
  const gate = new QuotaGate(() => held);
  const p: Principal = { keyId: 'key-a', scopes: new Set(), admin: false, quotas: { sandboxes: 2 } };
  const first = gate.admit(p, 'create', 1, small);
  // The registry does not show the first one yet; the gate does.
  assert.throws(() => gate.admit(p, 'create', 1, small), refusedFor('sandboxes'));
  first.release();
  const second = gate.admit(p, 'create', 1, small);
  held.push(small); // it is in the registry now
  second.release();
  assert.throws(
    () => gate.admitResume('key-a', p.quotas, small),
    (e: Error) => refusedFor('sandboxes')(e) && /this resume adds 1/.test(e.message),
  );
  held.pop(); // one of them hibernated
  gate.admitResume('key-a', p.quotas, small).release();
  gate.admitResume('key-a', undefined, small).release();
});

test("quotas: a hibernate is refused once the key's hibernated images reach hibernatedDiskMB", () => {
  let bytes = 0;
  const gate = new QuotaGate(
    () => [],
    Date.now,
    () => bytes,
  );
  gate.admitHibernate('key-a', { hibernatedDiskMB: 100 });
  bytes = 99 * 1024 * 1024;
  gate.admitHibernate('key-a', { hibernatedDiskMB: 100 });
  bytes = 100 * 1024 * 1024;
  assert.throws(() => gate.admitHibernate('key-a', { hibernatedDiskMB: 100 }), refusedFor('hibernatedDiskMB'));
  gate.admitHibernate('key-a', { sandboxes: 1 });
  gate.admitHibernate('key-a', undefined);
});

test('quotas: what a call makes along with its sandboxes (a workspace databases) counts with them, rate included', () => {
  const gate = new QuotaGate(() => []);
  const p: Principal = { keyId: 'key-a', scopes: new Set(), admin: false, quotas: { sandboxes: 3, createsPerMinute: 10 } };
  assert.throws(
    () => gate.admit(p, 'create', 1, small, [small, small, small]),
    (e: Error) => refusedFor('sandboxes')(e) && /this create adds 4/.test(e.message),
  );
  gate.admit(p, 'create', 1, small, [small, small]).release();
});
