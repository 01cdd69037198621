/**
 * Baked templates and warm pools, against a real daemon: a template with a start command (an
 * HTTP server holding a counter in memory) is built from base, baked (booted, started, ready,
 * checkpointed) and restored; pools are filled, claimed and refilled. The daemon builds into
 * its own templates dir, where `base` links to the machine's base template. Nothing here
 * leaves 127.0.0.1: the server listens inside the sandbox and is reached with curl there.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { bake, getBake, getPool, setPoolSize, Template, type Recipe, type Sandbox } from '@warren/sdk';
import {
  REPO,
  TEMPLATES,
  allRunscContainers,
  containerOf,
  eventually,
  runscContainers,
  sleep,
  startDaemon,
  stopAndCheckClean,
  type DaemonHandle,
} from './harness.js';

const TEST_ROOT = '/var/lib/warren-test';
const T = { timeout: 240_000 };
let d: DaemonHandle | undefined;
let tplDir: string;
let ctx: string;

interface Hello {
  hits: number;
  pid: number;
  startedAt: string;
}

before(async () => {
  mkdirSync(TEST_ROOT, { recursive: true });
  tplDir = mkdtempSync(path.join(TEST_ROOT, 'tpl-'));
  ctx = mkdtempSync(path.join(TEST_ROOT, 'ctx-'));
  symlinkSync(realpathSync(path.join(TEMPLATES, 'base')), path.join(tplDir, 'base'));
  d = await startDaemon({ env: { WARREN_TEMPLATES: tplDir } });
  // The shipped node-dev recipe, built under another name so it cannot clash with anything.
  const recipe = JSON.parse(readFileSync(path.join(REPO, 'templates/node-dev/recipe.json'), 'utf8')) as Recipe;
  await Template.buildRecipe({ ...recipe, name: 'web' }, { ...d.conn, contextDir: path.join(REPO, 'templates/node-dev') });
});

after(async () => {
  try {
    await stopAndCheckClean(d);
  } finally {
    rmSync(tplDir, { recursive: true, force: true });
    rmSync(ctx, { recursive: true, force: true });
  }
});

async function hello(sbx: Sandbox): Promise<Hello> {
  const r = await sbx.exec(['curl', '-sf', 'http://127.0.0.1:3000/'], { check: true });
  return JSON.parse(r.stdout) as Hello;
}

test('a cold create of a template with a start command runs it and waits until ready', T, async () => {
  // A daemon that never bakes, on the same templates: every create boots cold.
  const cold = await startDaemon({ env: { WARREN_TEMPLATES: tplDir, WARREN_BAKE: '0' } });
  const sbx = await cold.create({ template: 'web' });
  try {
    assert.equal(sbx.info.boot, 'cold');
    assert.match(sbx.info.templateVersion, /^[0-9a-f]{12}$/);
    // Ready means the port answers at once, with no retry needed.
    const first = await hello(sbx);
    assert.equal(first.hits, 1);
    assert.equal((await getBake('web', cold.conn)).reason, 'baking is turned off (WARREN_BAKE=0)');
  } finally {
    await sbx.kill();
    await stopAndCheckClean(cold);
  }
});

test('a build queues the bake of a template with a start command', T, async () => {
  const info = await eventually(
    async () => {
      const b = await getBake('web', d!.conn);
      return b.state === 'ready' || b.state === 'failed' ? b : undefined;
    },
    120_000,
    'the bake queued by the build',
  );
  assert.equal(info!.state, 'ready', info!.error);
});

test('baked: every create restores the started server, with the same in-memory state', T, async () => {
  const baked = await bake('web', d!.conn); // already baked: answers at once
  assert.equal(baked.state, 'ready', `bake failed: ${baked.error ?? baked.reason}`);
  assert.equal((await getBake('web', d!.conn)).state, 'ready');
  const a = await d!.create({ template: 'web' });
  const b = await d!.create({ template: 'web' });
  try {
    assert.equal(a.info.boot, 'baked');
    assert.equal(b.info.boot, 'baked');
    const a1 = await hello(a);
    const a2 = await hello(a);
    const b1 = await hello(b);
    // One process, started once at bake time, continues in both: same pid and start time.
    assert.equal(a1.startedAt, b1.startedAt);
    assert.equal(a1.pid, b1.pid);
    // Its memory is copied, not shared: each sandbox counts on from the baked value.
    assert.equal(a2.hits, a1.hits + 1);
    assert.equal(b1.hits, a1.hits);
    const ps = await a.exec('ps -eo args', { check: true });
    assert.match(ps.stdout, /node \/app\/server\.js/);
    // The start process is a tracked process of the agent, tagged 'start'.
    const procs = await a.processes.list();
    assert.ok(
      procs.some((p) => p.tag === 'start' && p.running),
      JSON.stringify(procs),
    );
    assert.ok(!procs.some((p) => p.tag === 'ready-check'), `the bake's ready checks are not listed: ${JSON.stringify(procs)}`);
  } finally {
    await Promise.all([a.kill(), b.kill()]);
  }
});

test('late binding: a restored sandbox gets its own id, hostname, env and metadata', T, async () => {
  assert.equal((await getBake('web', d!.conn)).state, 'ready');
  const sbx = await d!.create({ template: 'web', env: { GREETING: 'hi there' }, metadata: { job: 'late' }, ttlSeconds: 120 });
  try {
    assert.equal(sbx.info.boot, 'baked');
    assert.deepEqual(sbx.info.metadata, { job: 'late' });
    const r = await sbx.exec('echo "$GREETING|$(hostname)|$PORT|$(pwd)|$(id -un)"', { check: true });
    // Per-create env on top of the template's env (PORT); the template's workdir and user.
    assert.equal(r.stdout.trim(), `hi there|${sbx.id}|3000|/app|user`);
    // Root inside gets no CAP_SYS_ADMIN, although warren-init holds it to set the hostname.
    const caps = await sbx.exec(['grep', 'CapEff', '/proc/self/status'], { user: 'root', check: true });
    const eff = BigInt(`0x${caps.stdout.trim().split(/\s+/)[1]}`);
    assert.equal(eff & (1n << 21n), 0n, caps.stdout);
  } finally {
    await sbx.kill();
  }
});

test('a ready check that never passes fails the bake with its output; creates still work, cold', T, async () => {
  await Template.from('base')
    .run('true')
    .start('sleep 600')
    .readyCommand('echo still-not-ready; exit 3', { timeoutSeconds: 2 })
    .build({ ...d!.conn, name: 'never-ready', contextDir: ctx });
  const result = await bake('never-ready', d!.conn);
  assert.equal(result.state, 'failed');
  assert.match(result.error ?? '', /did not pass within 2s/);
  assert.match(result.error ?? '', /exit 3: still-not-ready/);
  const sbx = await d!.create({ template: 'never-ready' });
  try {
    assert.equal(sbx.info.boot, 'cold');
    assert.equal((await sbx.exec('echo ok', { check: true })).stdout, 'ok\n');
    const ps = await sbx.exec('ps -eo args', { check: true });
    assert.match(ps.stdout, /sleep 600/, 'the start command runs in a cold sandbox too');
  } finally {
    await sbx.kill();
  }
  assert.equal((await getBake('never-ready', d!.conn)).state, 'failed');
});

test('a template without a start command is not baked, not even on request', T, async () => {
  const info = await getBake('base', d!.conn);
  assert.equal(info.state, 'none');
  assert.match(info.reason ?? '', /no start command/);
  const asked = await bake('base', d!.conn);
  assert.equal(asked.state, 'none');
  assert.match(asked.reason ?? '', /no start command/);
  const sbx = await d!.create({ template: 'base' });
  assert.equal(sbx.info.boot, 'cold');
  await sbx.kill();
});

test('warm pool: claims are pool hits with any resources, the pool refills, size 0 empties it', T, async () => {
  const conn = d!.conn;
  await assert.rejects(setPoolSize('web', -1, conn), /size/);
  await assert.rejects(setPoolSize('no-such-template', 1, conn), /unknown template/);
  await setPoolSize('web', 2, conn);
  await eventually(async () => (await getPool('web', conn)).ready === 2, 120_000, 'pool of 2 ready');
  const a = await d!.create({ template: 'web', env: { WHO: 'a' } });
  try {
    assert.equal(a.info.boot, 'pool');
    assert.equal((await a.exec('echo $WHO $(hostname)', { check: true })).stdout.trim(), `a ${a.id}`);
    // The member took its id as hostname and loopback name while it waited (prebind), and the
    // daemon's warm-up command is not among the user's processes.
    assert.match(await a.files.readText('/etc/hosts'), new RegExp(`^127\\.0\\.1\\.1\\s.*\\b${a.id}\\b`, 'm'));
    const procs = await a.processes.list();
    assert.ok(!procs.some((p) => p.tag === 'warren-warm-up'), `the warm-up is not listed: ${JSON.stringify(procs)}`);
    assert.equal((await hello(a)).hits >= 1, true);
    let p = await getPool('web', conn);
    assert.equal(p.hits, 1);
    assert.ok(p.claimMs && p.claimMs.count === 1, JSON.stringify(p));
    // Other resources are applied as the member is claimed: its host cgroups get them.
    const custom = await d!.create({ template: 'web', resources: { memoryMB: 1024, cpus: 1, pids: 256 } });
    assert.equal(custom.info.boot, 'pool');
    assert.deepEqual(custom.info.resources, { cpus: 1, memoryMB: 1024, pids: 256, diskMB: 10240 });
    // A member restored into a shell (drivers/gvisor/shells.ts) has the shell's cgroup.
    const cgroup = containerOf(d!.home, custom.id).id;
    const cg = (controller: string, file: string) => readFileSync(`/sys/fs/cgroup/${controller}/warren/${cgroup}/${file}`, 'utf8').trim();
    assert.equal(cg('memory', 'memory.limit_in_bytes'), String(1024 * 1024 * 1024));
    assert.equal(cg('cpu', 'cpu.cfs_quota_us'), '100000');
    assert.equal(cg('pids', 'pids.max'), String(256 * 4 + 512));
    // And the pids limit inside (RLIMIT_NPROC, set per command by the agent).
    assert.equal((await custom.exec('ulimit -u', { check: true })).stdout.trim(), '256');
    await custom.kill();
    await eventually(async () => (await getPool('web', conn)).ready === 2, 120_000, 'pool refilled to 2');
    p = await getPool('web', conn);
    assert.equal(p.hits, 2);
    assert.equal(p.misses, 0);
    const metrics = await (await d!.http.request('GET', '/metrics')).text();
    assert.match(metrics, /warren_pool_hits_total\{template="web"\} 2/);
    assert.match(metrics, /warren_pool_ready\{template="web"\} 2/);
    assert.match(metrics, /warren_pool_claim_seconds\{template="web",quantile="0.5"\}/);
    const before = runscContainers(d!.home).length;
    await setPoolSize('web', 0, conn);
    await eventually(() => runscContainers(d!.home).length === before - 2, 30_000, 'pool members destroyed');
    const empty = await d!.create({ template: 'web' });
    assert.notEqual(empty.info.boot, 'pool');
    await empty.kill();
  } finally {
    await a.kill();
  }
});

test('pool sizes survive a daemon restart; pooled sandboxes are not leaked by a crash', T, async () => {
  const conn = d!.conn;
  await setPoolSize('web', 1, conn);
  await eventually(async () => (await getPool('web', conn)).ready === 1, 120_000, 'pool of 1 ready');
  await d!.crash();
  d = await startDaemon({ home: d!.home, env: { WARREN_TEMPLATES: tplDir } });
  // The crashed daemon's member was unknown to the registry: recovery destroyed it, and the
  // new daemon fills the pool again from the saved size.
  const p = await eventually(
    async () => {
      const info = await getPool('web', d!.conn);
      return info.ready === 1 ? info : undefined;
    },
    120_000,
    'pool refilled after restart',
  );
  assert.equal(p?.size, 1);
  assert.equal(runscContainers(d!.home).length, 1, `containers: ${allRunscContainers(d!.home).join(', ')}`);
  await setPoolSize('web', 0, d!.conn);
  await eventually(() => runscContainers(d!.home).length === 0, 30_000, 'pool emptied');
});

test('under host memory pressure the pool does not fill', T, async () => {
  // A threshold above the machine's memory: the pool must yield at once.
  const tight = await startDaemon({ env: { WARREN_TEMPLATES: tplDir, WARREN_POOL_MIN_FREE_MB: String(10 * 1024 * 1024) } });
  try {
    await setPoolSize('web', 2, tight.conn);
    // Kept as a wait: a refill tick that yields to memory pressure leaves no trace (no log
    // line, no counter) to wait for. So the pool is watched over the ticks that would fill it,
    // the one setPoolSize runs at once and at least one of the 1 s refill timer, and a boot
    // (booting 1 for the second or so it takes) is caught as soon as one starts.
    const watchUntil = Date.now() + 1500;
    while (Date.now() < watchUntil) {
      const seen = await getPool('web', tight.conn);
      assert.equal(seen.ready + seen.booting, 0, `the pool started to fill under memory pressure: ${JSON.stringify(seen)}`);
      await sleep(100);
    }
    const p = await getPool('web', tight.conn);
    assert.equal(p.ready, 0);
    assert.equal(p.booting, 0);
    assert.equal(runscContainers(tight.home).length, 0);
    const sbx = await tight.create({ template: 'web' });
    assert.notEqual(sbx.info.boot, 'pool');
    assert.equal((await getPool('web', tight.conn)).misses, 1);
    await sbx.kill();
    await setPoolSize('web', 0, tight.conn);
  } finally {
    await stopAndCheckClean(tight);
  }
});
