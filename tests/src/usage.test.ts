/**
 * Metering against a real daemon: sandboxes are billed for their allocated vCPUs and memory
 * for every second they run, at the prices the daemon was configured with; usage of killed
 * sandboxes stays reported; a window clips it; a daemon restart keeps billing the survivors
 * and stops billing the ones that died while it was down. The CLI prints the same report.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { getUsage, InvalidArgumentError, Sandbox, type SandboxUsage, type UsageReport, type UsageTotals } from '@warren/sdk';
import { REPO, eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

// Round prices so expected costs are easy to read: 1 vCPU-s costs $0.001, 1 GiB-s $0.0001.
const PRICES = { WARREN_PRICE_VCPU_HOUR: '3.6', WARREN_PRICE_GIB_HOUR: '0.36' };
const T = { timeout: 180_000 };
let d: DaemonHandle | undefined;

before(async () => {
  d = await startDaemon({ env: PRICES });
});
after(async () => {
  await stopAndCheckClean(d);
});

function daemon(): DaemonHandle {
  assert.ok(d, 'the daemon started');
  return d;
}

function find(report: UsageReport, id: string): SandboxUsage | undefined {
  return report.sandboxes.find((s) => s.sandboxId === id);
}

function close(actual: number, expected: number, what: string, tolerance = 0.01): void {
  assert.ok(Math.abs(actual - expected) <= tolerance, `${what}: ${actual}, expected ${expected} ± ${tolerance}`);
}

/** The numbers of one sandbox's usage agree with its resources and the daemon's prices. */
function checkBilled(u: SandboxUsage, cpus: number, memoryMB: number): void {
  close(u.vcpuSeconds, cpus * u.activeSeconds, `${u.sandboxId} vcpuSeconds`);
  close(u.gibSeconds, (memoryMB / 1024) * u.activeSeconds, `${u.sandboxId} gibSeconds`);
  close(u.cost, (u.vcpuSeconds / 3600) * 3.6 + (u.gibSeconds / 3600) * 0.36, `${u.sandboxId} cost`, 1e-5);
}

function sum(items: UsageTotals[]): UsageTotals {
  const t = { activeSeconds: 0, vcpuSeconds: 0, gibSeconds: 0, cost: 0 };
  for (const i of items) for (const k of Object.keys(t) as Array<keyof UsageTotals>) t[k] += i[k];
  return t;
}

function sameTotals(actual: UsageTotals, expected: UsageTotals, what: string): void {
  close(actual.activeSeconds, expected.activeSeconds, `${what} activeSeconds`);
  close(actual.vcpuSeconds, expected.vcpuSeconds, `${what} vcpuSeconds`);
  close(actual.gibSeconds, expected.gibSeconds, `${what} gibSeconds`);
  close(actual.cost, expected.cost, `${what} cost`, 1e-5);
}

/**
 * Runs the CLI without blocking the event loop: spawnSync held the SDK's idle keep-alive
 * socket past the daemon's keep-alive timeout, and the next test's first request met a
 * closed connection ("other side closed").
 */
function warren(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      path.join(REPO, 'bin/warren'),
      args,
      { encoding: 'utf8', env: { ...process.env, WARREN_URL: daemon().url, WARREN_API_KEY: daemon().apiKey }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
    );
  });
}

test('a killed sandbox is billed for its allocated resources while it ran, at the configured prices', T, async () => {
  const d = daemon();
  const windowStart = new Date();
  const big = await d.create({ metadata: { suite: 'usage' } });
  const small = await d.create({ metadata: { suite: 'usage' }, resources: { cpus: 1, memoryMB: 512 } });
  const created = Date.now();
  // Billed while they run: wait until the report shows each billed for 1.5 s since the
  // creates (the clipped window below starts a second after them and must hold some of it).
  const running = await eventually(
    async () => {
      const r = await getUsage({ since: new Date(created) }, d.conn);
      return [big, small].every((s) => find(r, s.id)?.active && find(r, s.id)!.activeSeconds >= 1.5) ? r : undefined;
    },
    30_000,
    'the report to show each sandbox billed for 1.5 s since the creates',
    100,
  );
  assert.equal(find(running, big.id)?.active, true, 'a running sandbox is being billed');
  const killing = Date.now();
  await big.kill();
  await small.kill();
  const killed = Date.now();
  const lived = (killed - windowStart.getTime()) / 1000;

  const r = await getUsage({ since: windowStart }, d.conn);
  assert.deepEqual(r.prices, { currency: 'USD', vcpuHour: 3.6, gibHour: 0.36 });
  for (const [sbx, cpus, memoryMB] of [
    [big, 2, 2048],
    [small, 1, 512],
  ] as const) {
    assert.deepEqual([sbx.info.resources.cpus, sbx.info.resources.memoryMB], [cpus, memoryMB]);
    const u = find(r, sbx.id);
    assert.ok(u, `${sbx.id} is in the report after its kill`);
    assert.equal(u.active, false, 'a killed sandbox is no longer billed');
    assert.equal(u.template, 'base');
    assert.equal(u.apiKeyId, 'admin');
    // At least from the create's answer to the kill, at most from before the create to after the kill.
    const ran = (killing - created) / 1000;
    assert.ok(u.activeSeconds >= find(running, sbx.id)!.activeSeconds, `${sbx.id} active ${u.activeSeconds}s, less than while it ran`);
    assert.ok(
      u.activeSeconds >= ran - 0.01 && u.activeSeconds <= Math.min(30, lived + 0.01),
      `${sbx.id} active ${u.activeSeconds}s, ran at least ${ran}s, lived at most ${lived}s`,
    );
    checkBilled(u, cpus, memoryMB);
  }
  // Resources make the difference: 2 vCPU + 2 GiB against 1 vCPU + 0.5 GiB for about as long.
  assert.ok(find(r, big.id)!.cost > find(r, small.id)!.cost);

  // Per API key and overall totals are the sums of the sandboxes.
  assert.equal(r.apiKeys.length, 1);
  const [adminKey] = r.apiKeys;
  assert.ok(adminKey);
  assert.equal(adminKey.apiKeyId, 'admin');
  assert.equal(adminKey.sandboxes, r.sandboxes.length);
  sameTotals(adminKey, sum(r.sandboxes), 'admin key');
  sameTotals(r.total, sum(r.sandboxes), 'total');
  assert.equal(r.total.sandboxes, r.sandboxes.length);

  // The same window for one API key, and for a key that ran nothing.
  const admin = await getUsage({ since: windowStart, apiKey: 'admin' }, d.conn);
  assert.deepEqual(admin.sandboxes.map((s) => s.sandboxId).sort(), r.sandboxes.map((s) => s.sandboxId).sort());
  const nobody = await getUsage({ since: windowStart, apiKey: 'nobody' }, d.conn);
  assert.deepEqual([nobody.sandboxes, nobody.apiKeys, nobody.total.cost], [[], [], 0]);

  // A window that starts a second after the creates counts a second less of each.
  const clipped = await getUsage({ since: new Date(created + 1000), until: new Date(killed + 1000) }, d.conn);
  const full = find(r, big.id)!.activeSeconds;
  const part = find(clipped, big.id)!.activeSeconds;
  assert.ok(full - part >= 0.99 && part > 0, `clipped ${part}s of ${full}s`);

  // Windows after the kill and before the create see nothing of them (until is explicit: the
  // default, now, may still be before since).
  const later = await getUsage({ since: new Date(killed + 10), until: new Date(killed + 60_000) }, d.conn);
  assert.equal(find(later, big.id), undefined);
  assert.equal(find(later, small.id), undefined);
  const earlier = await getUsage({ since: new Date(windowStart.getTime() - 3_600_000), until: new Date(windowStart.getTime() - 1000) }, d.conn);
  assert.equal(find(earlier, big.id), undefined);
});

test('bad windows are refused with 400 naming the field', T, async () => {
  const d = daemon();
  await assert.rejects(
    getUsage({ since: 'yesterday' }, d.conn),
    (err: Error) => err instanceof InvalidArgumentError && /since: must be an ISO 8601 date/.test(err.message),
  );
  await assert.rejects(
    getUsage({ until: '2024-13-45T00:00:00Z' }, d.conn),
    (err: Error) => err instanceof InvalidArgumentError && /until: must be an ISO 8601 date/.test(err.message),
  );
  await assert.rejects(
    getUsage({ since: '2024-05-02T00:00:00Z', until: '2024-05-01T00:00:00Z' }, d.conn),
    (err: Error) => err instanceof InvalidArgumentError && /since .* is after until/.test(err.message),
  );
  await assert.rejects(
    d.http.json('GET', '/v1/usage', { query: { from: '2024-05-01' } }),
    (err: Error) => err instanceof InvalidArgumentError && /unknown query parameter from/.test(err.message),
  );
  // Date-only and offset forms are ISO 8601 too.
  const r = await getUsage({ since: '2024-05-01', until: '2024-05-02T00:00:00+02:00' }, d.conn);
  assert.equal(r.since, '2024-05-01T00:00:00.000Z');
  assert.equal(r.until, '2024-05-01T22:00:00.000Z');
  // The default window is the last 24 hours.
  const def = await getUsage({}, d.conn);
  close(Date.parse(def.until) - Date.parse(def.since), 24 * 3600 * 1000, 'default window ms', 0);
});

test('warren usage prints the report as a table and as JSON', T, async () => {
  const d = daemon();
  const sbx = await d.create({ metadata: { suite: 'usage-cli' }, resources: { cpus: 1, memoryMB: 1024 } });
  await eventually(async () => (find(await getUsage({}, d.conn), sbx.id)?.activeSeconds ?? 0) >= 1, 30_000, 'a second of it billed', 100);
  await sbx.kill();

  const json = await warren('usage', '--since', '10m', '--json');
  assert.equal(json.code, 0, json.stderr);
  const r = JSON.parse(json.stdout) as UsageReport;
  const u = find(r, sbx.id);
  assert.ok(u && u.activeSeconds >= 1 && u.activeSeconds <= 30, `usage of ${sbx.id}: ${JSON.stringify(u)}`);
  checkBilled(u, 1, 1024);
  close(Date.now() - Date.parse(r.since), 10 * 60_000, '--since 10m', 60_000);

  const text = await warren('usage', '--since', '1h');
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /^SANDBOX\s+TEMPLATE\s+ACTIVE\s+VCPU-S\s+GIB-S\s+COST/m);
  assert.match(text.stdout, new RegExp(`^${sbx.id}\\s+base\\s+\\d+\\.\\ds\\s+[\\d.]+\\s+[\\d.]+\\s+\\$\\d+\\.\\d{6}`, 'm'));
  assert.match(text.stdout, /^API KEY\s+SANDBOXES/m);
  assert.match(text.stdout, /^admin\s+\d+\s+/m);
  assert.match(text.stdout, /^total: \d+ sandbox(es)?, [\d.hms]+ active, [\d.]+ vCPU-s, [\d.]+ GiB-s, \$\d+\.\d{6}$/m);
  assert.match(text.stdout, /prices: \$3\.6 per vCPU-hour, \$0\.36 per GiB-hour/);

  const empty = await warren('usage', '--since', '2020-01-01', '--until', '2020-01-02');
  assert.equal(empty.code, 0, empty.stderr);
  assert.match(empty.stdout, /no sandbox ran in this window/);

  const bad = await warren('usage', '--since', 'last tuesday');
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /--since must be an ISO 8601 date or time .* or a duration/);
});

test('a daemon restart keeps billing survivors and stops billing sandboxes that died meanwhile', T, async () => {
  const first = daemon();
  const survivor = await first.create({ metadata: { suite: 'usage-restart' } });
  const victim = await first.create({ metadata: { suite: 'usage-restart' } });
  const since = new Date(Date.now() - 60_000);
  await first.crash();
  execFileSync('runsc', ['--root', path.join(first.home, 'runsc'), 'delete', '--force', victim.id]);

  d = await startDaemon({ home: first.home, env: PRICES });
  const r1 = await getUsage({ since }, d.conn);
  assert.equal(find(r1, survivor.id)?.active, true, 'the survivor is still billed');
  assert.equal(find(r1, victim.id)?.active, false, 'the sandbox that died is billed no more');
  // The survivor accrues (the report counts an open interval to the millisecond); a dead one
  // still billed would have accrued just as much meanwhile.
  const r2 = await eventually(
    async () => {
      const r = await getUsage({ since }, d!.conn);
      return find(r, survivor.id)!.activeSeconds >= find(r1, survivor.id)!.activeSeconds + 0.25 ? r : undefined;
    },
    10_000,
    'the survivor to accrue a quarter of a second',
    100,
  );
  assert.equal(find(r2, victim.id)!.activeSeconds, find(r1, victim.id)!.activeSeconds, 'the dead one does not');
  // `survivor` talks to the crashed daemon; kill it through the new one.
  await (await Sandbox.connect(survivor.id, d.conn)).kill();
});

test('invalid prices stop the daemon from starting, naming the variable', T, async () => {
  const home = mkdtempSync('/var/lib/warren-test/home-');
  try {
    await assert.rejects(startDaemon({ home, env: { WARREN_PRICE_GIB_HOUR: '-1' } }), /WARREN_PRICE_GIB_HOUR must be a non-negative number/);
    await assert.rejects(startDaemon({ home, env: { WARREN_PRICE_VCPU_HOUR: 'cheap' } }), /WARREN_PRICE_VCPU_HOUR must be a non-negative number/);
  } finally {
    rmSync(home, { recursive: true, force: true });
    rmSync(`${home}.log`, { force: true });
  }
});
