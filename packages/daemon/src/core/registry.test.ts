import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DEFAULT_RESOURCES } from '@warren/protocol';
import { Registry, type SandboxRecord } from './registry.js';

function record(id: string, metadata: Record<string, string>, expiresAt = Date.now() + 60_000): SandboxRecord {
  return {
    id,
    template: 'base',
    state: 'running',
    createdAt: Date.now(),
    expiresAt,
    metadata,
    env: {},
    resources: DEFAULT_RESOURCES,
    rootfs: '/x',
    apiKeyId: 'admin',
    boot: 'cold',
    network: [],
  };
}

test('registry filters by metadata and state, pages by id, finds expired records', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-reg-'));
  const reg = new Registry(path.join(dir, 'db'));
  try {
    reg.insert(record('sb-a', { team: 'x', 'we"ird': 'q' }));
    reg.insert(record('sb-b', { team: 'x' }, Date.now() - 1));
    reg.insert(record('sb-c', { team: 'y' }));
    reg.setState('sb-c', 'dead', 'out of memory');
    assert.deepEqual(
      reg.list({ metadata: { team: 'x' }, limit: 10 }).map((r) => r.id),
      ['sb-a', 'sb-b'],
    );
    assert.deepEqual(
      reg.list({ metadata: { 'we"ird': 'q' }, limit: 10 }).map((r) => r.id),
      ['sb-a'],
    );
    assert.deepEqual(
      reg.list({ state: 'dead', limit: 10 }).map((r) => [r.id, r.error]),
      [['sb-c', 'out of memory']],
    );
    assert.deepEqual(
      reg.list({ limit: 1, after: 'sb-a' }).map((r) => r.id),
      ['sb-b'],
    );
    assert.deepEqual(
      reg.expired(Date.now()).map((r) => r.id),
      ['sb-b'],
    );
    assert.equal(reg.countLive(), 2);
  } finally {
    reg.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('registry keeps how a policy was given beside the rules the proxy applies', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-reg-'));
  const reg = new Registry(path.join(dir, 'db'));
  try {
    const given = { allow: ['@npm', 'api.example.com:443'], presets: { '@npm': ['pkg.example.com:443'] }, default: 'template' as const };
    reg.insert({ ...record('sb-p', {}), network: ['pkg.example.com:443', 'api.example.com:443'], networkGiven: given });
    assert.deepEqual(reg.get('sb-p')?.networkGiven, given);
    assert.deepEqual(reg.get('sb-p')?.network, ['pkg.example.com:443', 'api.example.com:443']);
    reg.setNetwork('sb-p', ['api.example.com:443']);
    assert.equal(reg.get('sb-p')?.networkGiven, undefined, 'a policy given as plain rules has nothing beside them');
    assert.equal('networkGiven' in reg.get('sb-p')!, false);
  } finally {
    reg.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
