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

test('registry pages through thousands of records by state and metadata, in id order, without gaps or repeats', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-reg-'));
  const reg = new Registry(path.join(dir, 'db'));
  try {
    const states = ['running', 'hibernated', 'hibernated', 'dead'] as const;
    const all: SandboxRecord[] = [];
    // Inserted out of id order: the listing's order must come from the ids, not the inserts.
    for (let i = 2499; i >= 0; i--) {
      const r = {
        ...record(`sb-${String(i).padStart(5, '0')}`, { team: `t${i % 7}`, idx: String(i) }),
        state: states[i % 4]!,
        env: { SECRET_ENV: 'x' },
        credentials: [{ host: 'api.example.com', headers: { authorization: 'Bearer s3cret' } }],
      };
      reg.insert(r);
      all.push(r);
    }
    const walk = (q: { state?: SandboxRecord['state']; metadata?: Record<string, string> }, limit: number) => {
      const ids: string[] = [];
      let after: string | undefined;
      for (;;) {
        const page = reg.list({ ...q, limit, ...(after ? { after } : {}) });
        for (const s of page) {
          assert.equal('env' in s || 'credentials' in s || 'network' in s, false, 'a listing reads no env, policy or credentials');
          if (q.state) assert.equal(s.state, q.state);
        }
        ids.push(...page.map((s) => s.id));
        if (page.length < limit) return ids;
        after = page.at(-1)!.id;
      }
    };
    const expect = (pred: (r: SandboxRecord) => boolean) =>
      all
        .filter(pred)
        .map((r) => r.id)
        .sort();
    assert.deepEqual(
      walk({}, 100),
      expect(() => true),
    );
    assert.deepEqual(
      walk({ state: 'hibernated' }, 97),
      expect((r) => r.state === 'hibernated'),
    );
    assert.deepEqual(walk({ state: 'creating' }, 100), []);
    assert.deepEqual(
      walk({ metadata: { team: 't3' } }, 50),
      expect((r) => r.metadata.team === 't3'),
    );
    assert.deepEqual(walk({ metadata: { idx: '1234' } }, 100), ['sb-01234']);
    assert.deepEqual(
      walk({ state: 'dead', metadata: { team: 't2' } }, 1000),
      expect((r) => r.state === 'dead' && r.metadata.team === 't2'),
    );
    assert.deepEqual(
      reg
        .statesOf(['hibernated', 'running'])
        .map((r) => `${r.id}:${r.state}`)
        .sort(),
      all
        .filter((r) => r.state === 'hibernated' || r.state === 'running')
        .map((r) => `${r.id}:${r.state}`)
        .sort(),
    );
  } finally {
    reg.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
test('registry indexes the metadata of records written before its metadata table existed, and keeps it in step', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-reg-'));
  const file = path.join(dir, 'db');
  let reg = new Registry(file);
  try {
    reg.insert(record('sb-old', { team: 'x' }));
    // What a registry of an earlier release looks like: no metadata table, no triggers.
    reg.database.exec(
      'DROP TRIGGER sandbox_metadata_insert; DROP TRIGGER sandbox_metadata_update; DROP TRIGGER sandbox_metadata_delete; DROP TABLE sandbox_metadata;',
    );
    reg.close();
    reg = new Registry(file);
    assert.deepEqual(
      reg.list({ metadata: { team: 'x' }, limit: 10 }).map((r) => r.id),
      ['sb-old'],
    );
    reg.insert(record('sb-new', { team: 'x', extra: 'y' }));
    reg.delete('sb-old');
    // Same id again with other metadata: nothing of the deleted record's is left to match.
    reg.insert(record('sb-old', { team: 'z' }));
    assert.deepEqual(
      reg.list({ metadata: { team: 'x' }, limit: 10 }).map((r) => r.id),
      ['sb-new'],
    );
    assert.deepEqual(
      reg.list({ metadata: { team: 'x', extra: 'y' }, limit: 10 }).map((r) => r.id),
      ['sb-new'],
    );
    reg.database.prepare('UPDATE sandboxes SET metadata = ? WHERE id = ?').run(JSON.stringify({ team: 'x' }), 'sb-old');
    assert.deepEqual(
      reg.list({ metadata: { team: 'x' }, limit: 10 }).map((r) => r.id),
      ['sb-new', 'sb-old'],
    );
    assert.deepEqual(
      reg.list({ metadata: { team: 'z' }, limit: 10 }).map((r) => r.id),
      [],
    );
  } finally {
    reg.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('registry: metadata keys and values that look like SQL, JSON paths or wildcards match only themselves', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-reg-'));
  const reg = new Registry(path.join(dir, 'db'));
  try {
    const hostile: Record<string, string> = { "' OR 1=1 --": 'x', '$.team': '%', 'a.b[0]': '_', team: "x' OR '1'='1" };
    reg.insert(record('sb-h', hostile));
    reg.insert(record('sb-o', { team: 'x', 'a.b': '0' }));
    for (const [k, v] of Object.entries(hostile)) {
      assert.deepEqual(
        reg.list({ metadata: { [k]: v }, limit: 10 }).map((r) => r.id),
        ['sb-h'],
        `filter ${k}=${v}`,
      );
    }
    assert.deepEqual(
      reg.list({ metadata: { team: 'x' }, limit: 10 }).map((r) => r.id),
      ['sb-o'],
    );
    assert.deepEqual(reg.list({ metadata: { '$.team': 'x' }, limit: 10 }), []);
    assert.deepEqual(reg.list({ metadata: { team: '%' }, limit: 10 }), []);
  } finally {
    reg.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
