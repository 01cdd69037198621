/**
 * Admission and bounds (docs/security.md, "admission"): resources below the measured
 * minimums or beyond this host's capacity, oversized metadata and environments, and counts
 * past their limits are refused with a 400 `invalid_argument` whose message names the field
 * and the limit, before anything is started: no sandbox is listed and no runsc container
 * appears. Creates, forks and restores from a snapshot are each checked. Real HTTP against a
 * real daemon.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, statfsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { InvalidArgumentError, Sandbox, type SnapshotInfo } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, runscContainers, REPO, type DaemonHandle } from './harness.js';

const T = { timeout: 180_000 };
let d: DaemonHandle | undefined;
/** A running sandbox to fork and snapshot; the only one that may exist. */
let parent: Sandbox;
let snapshot: SnapshotInfo;
/** What a regression made and call() removed; the next case does not count it. */
const removed = new Set<string>();

/** This host as the daemon measures it (core/admission.ts), computed here independently. */
const host = (() => {
  const read = (f: string) => Number(readFileSync(f, 'utf8').trim());
  const pidMax = Math.min(read('/proc/sys/kernel/pid_max'), read('/proc/sys/kernel/threads-max'));
  return { cpus: os.availableParallelism(), memoryMB: Math.floor(os.totalmem() / 1048576), pids: Math.floor((pidMax - 512) / 4) };
})();

before(async () => {
  d = await startDaemon();
  // The defaults are admitted on this host.
  parent = await d.create();
  snapshot = await parent.snapshot();
});
after(async () => {
  await stopAndCheckClean(d);
});

/**
 * The request as it goes over the wire. Whatever it made despite being out of bounds (a
 * regression) is removed at once, so each case fails on its own and not the ones after it.
 */
async function call(method: string, route: string, body: unknown): Promise<{ status: number; error: { code: string; message: string } }> {
  const res = await fetch(`${d!.url}${route}`, {
    method,
    headers: { authorization: `Bearer ${d!.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  const parsed = JSON.parse(text || '{}') as { error: { code: string; message: string }; id?: string; sandboxes?: Array<{ id: string }> };
  if (res.ok) {
    for (const id of [parsed.id, ...(parsed.sandboxes ?? []).map((s) => s.id)]) {
      if (id) removed.add(id);
      if (id?.startsWith('sb-')) await d!.http.json('DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
      if (id?.startsWith('snap-')) await d!.http.json('DELETE', `/v1/snapshots/${id}`).catch(() => undefined);
    }
  }
  return { status: res.status, ...parsed, error: parsed.error ?? { code: '', message: text.slice(0, 300) } };
}

/** Nothing beyond the parent exists: no other sandbox listed, no other runsc container, no other snapshot. */
async function assertNothingCreated(what: string): Promise<void> {
  const listed = (await Sandbox.list(d!.conn)).map((s) => s.id).filter((id) => !removed.has(id));
  assert.deepEqual(listed, [parent.id], `${what}: sandboxes listed`);
  assert.deepEqual(
    runscContainers(d!.home).filter((id) => !removed.has(id)),
    [parent.id],
    `${what}: runsc containers`,
  );
  const snaps = (await d!.http.json<{ snapshots: SnapshotInfo[] }>('GET', '/v1/snapshots')).snapshots.map((s) => s.id).filter((id) => !removed.has(id));
  assert.deepEqual(snaps, [snapshot.id], `${what}: snapshots`);
}

/** One refused request: 400, invalid_argument, a message naming the field and the limit, nothing made. */
async function refused(what: string, method: string, route: string, body: unknown, field: string, limit: number | string): Promise<string> {
  const r = await call(method, route, body);
  assert.equal(r.status, 400, `${what}: ${JSON.stringify(r)}`);
  assert.equal(r.error.code, 'invalid_argument', what);
  assert.ok(r.error.message.includes(field), `${what}: the message names ${field}: ${r.error.message}`);
  assert.ok(
    new RegExp(`\\b${String(limit).replace(/\./g, '\\.')}\\b`).test(r.error.message),
    `${what}: the message names the limit ${limit}: ${r.error.message}`,
  );
  await assertNothingCreated(what);
  return r.error.message;
}

const create = (what: string, body: unknown, field: string, limit: number | string) => refused(what, 'POST', '/v1/sandboxes', body, field, limit);

test('cpus: below the minimum (it used to fail inside runsc with a 500) and beyond the host', T, async () => {
  assert.equal(await create('cpus 0.001', { resources: { cpus: 0.001 } }, 'resources.cpus', 0.1), 'resources.cpus must be at least 0.1 (got 0.001)');
  await create('cpus 0', { resources: { cpus: 0 } }, 'resources.cpus', 0.1);
  const over = await create('cpus 64', { resources: { cpus: 64 } }, 'resources.cpus', host.cpus);
  assert.equal(over, `resources.cpus must be at most ${host.cpus}, this host's CPUs (got 64)`);
  await create('cpus host + 0.5', { resources: { cpus: host.cpus + 0.5 } }, 'resources.cpus', host.cpus);
});

test('memoryMB: below the minimum and beyond the host', T, async () => {
  await create('memoryMB 16', { resources: { memoryMB: 16 } }, 'resources.memoryMB', 64);
  const over = await create('memoryMB 256 GiB', { resources: { memoryMB: 256 * 1024 } }, 'resources.memoryMB', host.memoryMB);
  assert.equal(over, `resources.memoryMB must be at most ${host.memoryMB}, this host's memory (got 262144)`);
  await create('memoryMB host + 1', { resources: { memoryMB: host.memoryMB + 1 } }, 'resources.memoryMB', host.memoryMB);
});

test('pids: below the minimum, beyond what gVisor runs, and beyond the host', T, async () => {
  await create('pids 8', { resources: { pids: 8 } }, 'resources.pids', 32);
  await create('pids 10^6', { resources: { pids: 1_000_000 } }, 'resources.pids', 65536);
  if (host.pids < 65536) await create('pids host + 1', { resources: { pids: host.pids + 1 } }, 'resources.pids', host.pids);
});

test('diskMB: below the minimum and beyond the filesystem that holds the sandboxes', T, async () => {
  await create('diskMB 1', { resources: { diskMB: 1 } }, 'resources.diskMB', 64);
  const fs = statfsSync(d!.home);
  const diskMB = Math.floor(((fs.blocks - fs.bfree + fs.bavail) * fs.bsize) / 1048576);
  // 10 TiB: the old schema's maximum, accepted before on a disk of a few hundred GB.
  await create('diskMB 10 TiB', { resources: { diskMB: 10 * 1024 * 1024 } }, 'resources.diskMB', diskMB);
});

test('metadata: number of keys, key and value length, total size', T, async () => {
  const keys = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v']));
  assert.equal(await create('65 keys', { metadata: keys }, 'metadata', 64), 'metadata must have at most 64 keys (got 65)');
  await create('5000 keys', { metadata: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata', 64);
  await create('key of 129', { metadata: { ['k'.repeat(129)]: 'v' } }, 'metadata key', 128);
  await create('value of 1025', { metadata: { k: 'v'.repeat(1025) } }, 'metadata.k', 1024);
  const total = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'.repeat(1000)]));
  await create('17 KB in all', { metadata: total }, 'metadata', 16384);
});

test('env: one variable past the kernel limit, and in total', T, async () => {
  await create('one variable of 128 KiB', { env: { A: 'x'.repeat(128 * 1024) } }, 'env.A', 131071);
  const total = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`V${i}`, 'y'.repeat(120_000)]));
  await create('1.08 MB of env', { env: total }, 'env', 1048576);
  // exec takes the same environment bounds; nothing runs.
  const r = await call('POST', `/v1/sandboxes/${parent.id}/exec`, { argv: ['true'], env: total });
  assert.equal(r.status, 400, JSON.stringify(r));
  assert.match(r.error.message, /^env must be at most 1048576 bytes/);
});

test('ttl and idle: zero and beyond 30 days', T, async () => {
  await create('ttl 0', { ttlSeconds: 0 }, 'ttlSeconds', 1);
  await create('ttl 31 days', { ttlSeconds: 31 * 86400 }, 'ttlSeconds', 30 * 86400);
  await create('idle 0', { idleSeconds: 0 }, 'idleSeconds', 1);
});

test("forks: count and the children's metadata and ttl are checked before the parent is touched", T, async () => {
  const fork = (what: string, body: unknown, field: string, limit: number) => refused(what, 'POST', `/v1/sandboxes/${parent.id}/fork`, body, field, limit);
  await fork('count 0', { count: 0 }, 'count', 1);
  assert.match(await fork('count 17', { count: 17 }, 'count', 16), /^count must be at most 16 children per fork, WARREN_MAX_FORK \(got 17\)$/);
  await fork('children with 65 metadata keys', { metadata: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata', 64);
  await fork('children with a ttl of 0', { ttlSeconds: 0 }, 'ttlSeconds', 1);
  assert.equal((await parent.exec(['true'])).exitCode, 0, 'the parent runs on');
});

test('restores from a snapshot: the merged resources are checked; snapshot metadata is bounded', T, async () => {
  await create('restore with 256 GiB', { snapshot: snapshot.id, resources: { memoryMB: 256 * 1024 } }, 'resources.memoryMB', host.memoryMB);
  await create('restore with 64 cpus', { snapshot: snapshot.id, resources: { cpus: 64 } }, 'resources.cpus', host.cpus);
  await create('restore with cpus 0.001', { snapshot: snapshot.id, resources: { cpus: 0.001 } }, 'resources.cpus', 0.1);
  await refused(
    'snapshot with 65 metadata keys',
    'POST',
    `/v1/sandboxes/${parent.id}/snapshots`,
    { metadata: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v'])) },
    'metadata',
    64,
  );
});

test('warm pool size beyond 64', T, async () => {
  await refused('pool size 65', 'PUT', '/v1/templates/base/pool', { size: 65 }, 'size', 64);
});

test('a file mode with trailing garbage is refused, not read as its octal prefix', T, async () => {
  const target = '/home/user/mode.txt';
  const res = await fetch(`${d!.url}/v1/sandboxes/${parent.id}/files?path=${encodeURIComponent(target)}&mode=644abc`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${d!.apiKey}` },
    body: 'x',
  });
  const body = (await res.json()) as { error: { code: string; message: string } };
  assert.equal(res.status, 400, JSON.stringify(body));
  assert.equal(body.error.code, 'invalid_argument');
  assert.match(body.error.message, /^mode must be octal from 0 to 7777.*\(got '644abc'\)$/);
  assert.equal(await parent.files.exists(target), false);
});

test('the SDK and the CLI pass the refusal on readably', T, async () => {
  await assert.rejects(
    d!.create({ resources: { cpus: 0.001 } }),
    (e: Error) => e instanceof InvalidArgumentError && e.message === 'resources.cpus must be at least 0.1 (got 0.001)',
  );
  await assert.rejects(
    d!.create({ resources: { memoryMB: 256 * 1024 } }),
    (e: Error) => e instanceof InvalidArgumentError && e.message.startsWith(`resources.memoryMB must be at most ${host.memoryMB}`),
  );
  const cli = (...args: string[]) =>
    spawnSync(path.join(REPO, 'bin/warren'), args, {
      encoding: 'utf8',
      env: { ...process.env, WARREN_URL: d!.url, WARREN_API_KEY: d!.apiKey },
      timeout: 60_000,
    });
  const low = cli('create', '--cpus', '0.001');
  assert.equal(low.status, 1, low.stderr);
  assert.equal(low.stderr, 'warren: resources.cpus must be at least 0.1 (got 0.001)\n');
  const zero = cli('create', '--cpus', '0');
  assert.equal(zero.status, 1, 'the CLI no longer drops --cpus 0 silently');
  assert.match(zero.stderr, /--cpus must be a number above 0, got '0'/);
  const big = cli('create', '--memory', String(256 * 1024), '--pids', '1000000');
  assert.equal(big.status, 1, big.stderr);
  assert.match(big.stderr, /^warren: resources\.pids must be at most 65536 \(got 1000000\)\n$/);
  await assertNothingCreated('the CLI and SDK cases');
});
