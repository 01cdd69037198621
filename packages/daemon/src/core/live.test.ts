import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { SandboxInfo, SandboxList } from '@warren/protocol';
import { DEFAULT_RESOURCES } from '@warren/protocol';
import type { SandboxDriver } from '../drivers/driver.js';
import type { SandboxService } from './sandboxes.js';
import { LiveFeed } from './live.js';

function record(id: string, state: SandboxInfo['state'], apiKeyId = 'k1'): SandboxInfo & { key: string } {
  return {
    id,
    key: apiKeyId,
    template: 'base',
    templateVersion: 'v1',
    boot: 'cold',
    state,
    createdAt: '2026-12-05T00:00:00.000Z',
    expiresAt: '2026-12-05T01:00:00.000Z',
    metadata: {},
    resources: DEFAULT_RESOURCES,
  };
}

/** A registry of records and a driver whose counters the test moves. */
function fixture() {
  const records = [record('sb-a', 'running'), record('sb-b', 'hibernated'), record('sb-c', 'running', 'k2')];
  let generation = 1;
  let lists = 0;
  const cpu = new Map([
    ['sb-a', 0],
    ['sb-c', 0],
  ]);
  const sandboxes = {
    list: (q: { apiKeyId?: string }): SandboxList => {
      lists++;
      return { sandboxes: records.filter((r) => !q.apiKeyId || r.key === q.apiKeyId).map(({ key: _key, ...r }) => r) };
    },
  } as unknown as SandboxService;
  const driver = {
    usageNow: async (id: string) => (cpu.has(id) ? { cpuNanos: cpu.get(id) ?? 0, memoryBytes: 64 << 20 } : undefined),
    diskUsage: async () => 4096,
  } as unknown as SandboxDriver;
  const feed = new LiveFeed(sandboxes, driver, () => generation, 25);
  return {
    feed,
    records,
    cpu,
    bump: () => generation++,
    lists: () => lists,
  };
}

/** The feed's timer does not hold the process open (a daemon exits without waiting on it); the test's does. */
function holdOpen(): () => void {
  const t = setInterval(() => undefined, 1000);
  return () => clearInterval(t);
}

function nextTick(feed: LiveFeed): Promise<void> {
  return new Promise((resolve) => {
    const stop = feed.subscribe(() => {
      stop();
      resolve();
    });
  });
}

test('records are read again only when the registry changed, and an unchanged row keeps its JSON', async () => {
  const f = fixture();
  const release = holdOpen();
  const keep = f.feed.subscribe(() => undefined);
  try {
    const first = f.feed.list({ admin: true });
    assert.deepEqual(
      first.rows.map((r) => r.id),
      ['sb-a', 'sb-b', 'sb-c'],
    );
    const reads = f.lists();
    await nextTick(f.feed);
    await nextTick(f.feed);
    const again = f.feed.list({ admin: true });
    assert.equal(f.lists(), reads, 'no new read of the records while nothing changed');
    assert.equal(again.json.get('sb-b'), first.json.get('sb-b'), 'a hibernated row is the same string');
    // Running rows carry usage once sampled: memory now, CPU from the second sample on.
    assert.equal(again.rows.find((r) => r.id === 'sb-a')?.memoryBytes, 64 << 20);
    assert.equal(again.rows.find((r) => r.id === 'sb-a')?.diskBytes, 4096);
    assert.equal(again.rows.find((r) => r.id === 'sb-b')?.memoryBytes, undefined);

    f.records[1] = record('sb-b', 'running');
    f.bump();
    await nextTick(f.feed);
    assert.equal(f.feed.list({ admin: true }).rows.find((r) => r.id === 'sb-b')?.state, 'running');
    assert.ok(f.lists() > reads, 'a change is read');
    // Another key sees only its own.
    assert.deepEqual(
      f.feed.list({ admin: false, apiKeyId: 'k2' }).rows.map((r) => r.id),
      ['sb-c'],
    );
  } finally {
    keep();
    release();
  }
});

test('CPU is the share of a core between two samples', async () => {
  const f = fixture();
  const release = holdOpen();
  const keep = f.feed.subscribe(() => undefined);
  try {
    await nextTick(f.feed);
    // Half a core: 1 ms of CPU per 2 ms of wall time, whatever the tick length turns out to be.
    const started = Date.now();
    f.cpu.set('sb-a', 1e9);
    await nextTick(f.feed);
    const row = f.feed.list({ admin: true }).rows.find((r) => r.id === 'sb-a');
    assert.ok(row?.cpu !== undefined && row.cpu > 0, JSON.stringify(row));
    // 1 s of CPU over at most this wall time since the first sample.
    assert.ok(row.cpu >= 1000 / (Date.now() - started + 50), `cpu ${row.cpu}`);
  } finally {
    keep();
    release();
  }
});

test('the sampler runs only while someone listens', async () => {
  const f = fixture();
  const release = holdOpen();
  let ticks = 0;
  const stop = f.feed.subscribe(() => ticks++);
  await new Promise((resolve) => setTimeout(resolve, 120));
  stop();
  const seen = ticks;
  assert.ok(seen >= 2, `ticked ${seen} times`);
  await new Promise((resolve) => setTimeout(resolve, 120));
  assert.equal(ticks, seen, 'no tick after the last listener left');
  release();
});
