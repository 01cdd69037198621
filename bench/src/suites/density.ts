/**
 * Density (issue 13, part 3): how many sandboxes one host holds, and what the daemon's API
 * costs while they are there.
 *
 * Running: N idle sandboxes through the real daemon API (`--n density=N`). A create that
 * fails, or host MemAvailable under MEM_FLOOR, stops the ramp early with a message: the
 * rest of the suite runs with the sandboxes that came up. Reported: host MemAvailable before
 * and after and per sandbox; CPU per idle sandbox (utime+stime of this daemon's runsc
 * processes over CPU_WINDOW_MS) and the daemon's own CPU in the same window (heartbeats);
 * `GET /v1/sandboxes` and `exec true` into random sandboxes while N are up, each against the
 * same calls with one sandbox up (same run, same daemon) and a host spawn of /bin/true.
 *
 * Hibernated: a few of the idle sandboxes are hibernated; the image's allocated size (`du`)
 * against the free disk of the images' filesystem says how many the disk holds. The image's
 * memory file is kept zstd-packed (core/image-pages.ts): its unpacked size (what runsc wrote,
 * and what a restore reads) is reported beside it, and each is then resumed by `exec true`,
 * against `exec true` on it running (same sandbox, same run). Then the
 * registry: a second daemon home is seeded through the daemon's own Registry module with
 * `--n records=10000` hibernated records (tiny placeholder images: recovery treats a
 * hibernated record without a complete image as lost, so an absent image is not realistic),
 * and that daemon's start time, list and filter latencies and idle CPU are measured against
 * an empty home in the same run. Its records are checked to survive recovery and the reaper.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, statfsSync, statSync } from 'node:fs';
import path from 'node:path';
import { ImageStore, layout, Registry, type SandboxRecord } from '@warren/daemon';
import type { SandboxInfo, SandboxList } from '@warren/protocol';
import { DEFAULT_RESOURCES } from '@warren/protocol';
import type { Sandbox } from '@warren/sdk';
import { allRunscContainers, startDaemon, unmountUnder, type DaemonHandle } from '@warren/tests/harness';
import { sleep, type Context } from '../context.js';
import { fmt, percentile } from '../stats.js';

const RUN = 'density (running)';
const HIB = 'density (hibernated)';
const REG = 'density (registry)';
const GiB = 2 ** 30;
/** Host MemAvailable below which no more sandboxes are started: the machine is shared. */
const MEM_FLOOR = 2 * GiB;
/** CPU sampling window for idle sandboxes and the daemon. */
const CPU_WINDOW_MS = 20_000;
/** Creates in flight at once while ramping up (the daemon serialises little; runsc is CPU-bound). */
const CREATE_CONCURRENCY = 3;
/** Calls per latency row. */
const CALLS = 200;
/** Sandboxes hibernated to measure a real image (p50 over at least 5). */
const HIBERNATE_SAMPLES = 5;
/** Clock ticks per second of /proc/PID/stat times. */
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

export async function runDensity(ctx: Context): Promise<void> {
  await runRunning(ctx);
  await runRegistry(ctx);
}

async function runRunning(ctx: Context): Promise<void> {
  const n = ctx.iters.density;
  const { daemon: d, stop } = await ctx.startDaemon('density daemon', {});
  const runscRoot = path.join(d.home, 'runsc');
  const netnsBefore = netnsList();
  const sandboxes: Sandbox[] = [];
  const killAll = ctx.defer(`kill density sandboxes`, () => killLimited(sandboxes.splice(0), 8));
  const r = ctx.report;

  const memBefore = memAvailable();
  const create = async () => {
    const sbx = await d.create({ ttlSeconds: 1800, metadata: { bench: 'density' } });
    sandboxes.push(sbx);
  };
  await create();

  // Baselines with one sandbox up, same daemon, same run.
  const hostTrue = await timeCalls(CALLS, spawnTrue);
  const list1 = await timeCalls(CALLS, () => d.http.json<SandboxList>('GET', '/v1/sandboxes'));
  const exec1 = await timeCalls(CALLS, () => execTrue(sandboxes[0]!));

  // Ramp up to N, stopping at the first failed create or at the memory floor.
  let stopReason = '';
  const t0 = performance.now();
  while (sandboxes.length < n && !stopReason) {
    if (memAvailable() < MEM_FLOOR) {
      stopReason = `host MemAvailable ${(memAvailable() / GiB).toFixed(2)} GiB is under the ${MEM_FLOOR / GiB} GiB floor`;
      break;
    }
    const batch = Math.min(CREATE_CONCURRENCY, n - sandboxes.length);
    const results = await Promise.allSettled(Array.from({ length: batch }, create));
    const failed = results.find((x): x is PromiseRejectedResult => x.status === 'rejected');
    if (failed) stopReason = `a create failed at ${sandboxes.length} sandboxes: ${(failed.reason as Error).message}`;
    process.stdout.write(`\r  ${sandboxes.length}/${n} sandboxes up (MemAvailable ${(memAvailable() / GiB).toFixed(2)} GiB)`);
  }
  process.stdout.write('\n');
  const up = sandboxes.length;
  const rampS = (performance.now() - t0) / 1000;
  if (stopReason) {
    console.log(`  stopped early: ${stopReason}`);
    r.note(`density: stopped at ${up} of ${n} sandboxes: ${stopReason}`);
  }

  // Let the creates' page cache and JIT settle, then measure memory and the idle CPU.
  await sleep(5000);
  const memAfter = memAvailable();
  const cpu = await cpuOver(CPU_WINDOW_MS, runscRoot, d.pid);
  const perSandboxPct = cpu.runscPct / up;

  const listN = await timeCalls(CALLS, () => d.http.json<SandboxList>('GET', '/v1/sandboxes'));
  const execN = await timeCalls(CALLS, () => execTrue(sandboxes[Math.floor(Math.random() * up)]!));

  r.add({ key: 'dens-host-true', suite: RUN, label: 'host spawn /bin/true', unit: 'ms', values: hostTrue, isBaseline: true });
  r.add({ key: 'dens-list-1', suite: RUN, label: 'GET /v1/sandboxes, 1 sandbox up', unit: 'ms', values: list1, isBaseline: true });
  r.add({ key: 'dens-list-n', suite: RUN, label: `GET /v1/sandboxes, ${up} sandboxes up`, unit: 'ms', values: listN, baseline: 'dens-list-1' });
  r.add({ key: 'dens-exec-1', suite: RUN, label: 'exec true, 1 sandbox up', unit: 'ms', values: exec1, baseline: 'dens-host-true' });
  r.add({ key: 'dens-exec-n', suite: RUN, label: `exec true into a random one of ${up}`, unit: 'ms', values: execN, baseline: 'dens-exec-1' });
  r.add({
    key: 'dens-mem-per',
    suite: RUN,
    label: 'host MemAvailable taken per idle sandbox',
    unit: 'MB',
    values: [(memBefore - memAfter) / up / 1e6],
    note: `MemAvailable ${(memBefore / GiB).toFixed(2)} GiB before, ${(memAfter / GiB).toFixed(2)} GiB with ${up} up (ramp ${rampS.toFixed(0)} s); other helpers' work moves this too`,
  });
  r.note(
    `density: ${up} idle sandboxes: their runsc processes used ${fmt(cpu.runscPct)}% of a core over ${CPU_WINDOW_MS / 1000} s = ${fmt(perSandboxPct)}% each; ` +
      `the daemon itself ${fmt(cpu.daemonPct)}% (${fmt(cpu.daemonPct / up)}% per sandbox: heartbeats, reaper)`,
  );
  const p99 = (v: number[]) => percentile(v, 99);
  r.target(`exec true p99 ≤ 150 ms with 150 idle sandboxes (measured at ${up})`, up >= 150 && p99(execN) <= 150, `${fmt(p99(execN))} ms at ${up} up`);
  r.target(`GET /v1/sandboxes p99 ≤ 50 ms with 150 idle sandboxes (measured at ${up})`, up >= 150 && p99(listN) <= 50, `${fmt(p99(listN))} ms at ${up} up`);

  await measureHibernated(ctx, d, sandboxes.slice(0, Math.min(HIBERNATE_SAMPLES, up)));

  await killAll();
  await stop();
  const left = allRunscContainers(d.home).length;
  const netnsLeft = netnsList().filter((x) => !netnsBefore.includes(x));
  if (left || netnsLeft.length) throw new Error(`density left ${left} runsc containers and network namespaces [${netnsLeft.join(', ')}]`);
}

/** Hibernates a few idle sandboxes and sizes their images against the free disk. */
async function measureHibernated(ctx: Context, d: DaemonHandle, some: Sandbox[]): Promise<void> {
  const images = path.join(d.home, 'images', 'hibernated');
  const sizes: number[] = [];
  const unpacked: number[] = [];
  const times: number[] = [];
  const resumes: number[] = [];
  const running: number[] = [];
  for (const sbx of some) {
    running.push(...(await timeCalls(5, () => execTrue(sbx))));
    const t = performance.now();
    await sbx.hibernate();
    times.push(performance.now() - t);
    const dir = path.join(images, sbx.id);
    // Allocated bytes, as du counts them: what the disk really loses per image.
    sizes.push(Number(execFileSync('du', ['-s', '--block-size=1', dir], { encoding: 'utf8' }).split('\t')[0]));
    unpacked.push(unpackedBytes(path.join(dir, 'image')));
    const r0 = performance.now();
    await execTrue(sbx);
    resumes.push(performance.now() - r0);
  }
  if (!sizes.length) return;
  const fs = statfsSync(images);
  const free = fs.bavail * fs.bsize;
  const mean = sizes.reduce((a, b) => a + b, 0) / sizes.length;
  const r = ctx.report;
  r.add({ key: 'dens-hib-time', suite: HIB, label: 'hibernate an idle sandbox (checkpoint + pack)', unit: 'ms', values: times });
  r.add({ key: 'dens-exec-running', suite: HIB, label: 'exec true on the same sandboxes, running', unit: 'ms', values: running, isBaseline: true });
  r.add({
    key: 'dens-resume',
    suite: HIB,
    label: 'exec true on a hibernated one (unpack + restore)',
    unit: 'ms',
    values: resumes,
    baseline: 'dens-exec-running',
  });
  r.add({
    key: 'dens-hib-unpacked',
    suite: HIB,
    label: 'its image as runsc wrote it (unpacked)',
    unit: 'MB',
    values: unpacked.map((s) => s / 1e6),
    isBaseline: true,
  });
  r.add({
    key: 'dens-hib-size',
    suite: HIB,
    label: 'hibernated image of an idle sandbox on disk (du)',
    unit: 'MB',
    values: sizes.map((s) => s / 1e6),
    baseline: 'dens-hib-unpacked',
  });
  r.note(
    `density: an idle sandbox's hibernated image takes ${fmt(mean / 1e6)} MB on disk; ${fmt(free / GiB)} GiB free on the images' filesystem ` +
      `holds about ${Math.floor(free / mean)} of them (free / size, before other files grow)`,
  );
  r.target('disk holds 10,000 hibernated idle sandboxes', free / mean >= 10_000, `${Math.floor(free / mean)} fit in ${fmt(free / GiB)} GiB free`);
}

/** Bytes of an image as runsc wrote it: its files, with a packed memory file at its unpacked size. */
function unpackedBytes(image: string): number {
  let total = 0;
  for (const name of readdirSync(image)) {
    const file = path.join(image, name);
    if (name.endsWith('.zst')) {
      // zstd records the content size in the frame header: `zstd -l -v` prints it.
      const out = execFileSync('zstd', ['-l', '-v', file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
      const m = /Decompressed Size:.*\((\d+) B\)/.exec(out);
      if (!m) throw new Error(`zstd -l gave no decompressed size for ${file}: ${out}`);
      total += Number(m[1]);
    } else total += statSync(file).size;
  }
  return total;
}

/**
 * A daemon home seeded with `records` hibernated sandboxes through the daemon's own registry
 * module, and the API on it against an empty home.
 */
async function runRegistry(ctx: Context): Promise<void> {
  const records = ctx.iters.records;
  const r = ctx.report;

  // Baseline: an empty home, started the same way.
  const empty = await startOwnDaemon(ctx, 'empty registry daemon', () => undefined);
  const emptyLists = await listRows(empty.d, 'empty');
  await empty.stop();

  const seeded = await startOwnDaemon(ctx, `daemon with ${records} hibernated records`, (home) => seed(home, records));
  const d = seeded.d;
  // The seeded records must survive recovery and a few reaper ticks.
  await sleep(3000);
  const walked = await walkAll(d);
  if (walked.length !== records || walked.some((s) => s.state !== 'hibernated'))
    throw new Error(
      `after start, ${walked.length} of ${records} records are listed and ${walked.filter((s) => s.state !== 'hibernated').length} are not hibernated`,
    );
  const lists = await listRows(d, 'seeded');
  const walkTimes = await timeCalls(10, () => walkAll(d));
  const cpu = await cpuOver(10_000, '/nonexistent', d.pid);
  await seeded.stop();

  r.add({ key: 'reg-start-0', suite: REG, label: 'daemon start, empty registry', unit: 'ms', values: [empty.startMs], isBaseline: true });
  r.add({
    key: 'reg-start-n',
    suite: REG,
    label: `daemon start, ${records} hibernated`,
    unit: 'ms',
    values: [seeded.startMs],
    baseline: 'reg-start-0',
    note: `seeding took ${fmt(seeded.seedMs)} ms`,
  });
  for (const [name, values] of emptyLists) r.add({ key: `reg-0-${name}`, suite: REG, label: `${name}, empty`, unit: 'ms', values, isBaseline: true });
  for (const [name, values] of lists)
    r.add({ key: `reg-n-${name}`, suite: REG, label: `${name}, ${records} hibernated`, unit: 'ms', values, baseline: `reg-0-${name}` });
  r.add({ key: 'reg-walk', suite: REG, label: `list all ${records} (pages of 1000)`, unit: 'ms', values: walkTimes });
  r.note(`density: the daemon with ${records} hibernated records and no sandbox running used ${fmt(cpu.daemonPct)}% of a core over 10 s (reaper, timers)`);
  const worst = Math.max(...lists.map(([, v]) => percentile(v, 99)));
  r.target(`${records} hibernated: every list/filter p99 < 200 ms`, worst < 200, `worst p99 ${fmt(worst)} ms`);
}

const LIST_QUERIES: Array<[string, string]> = [
  ['GET /v1/sandboxes', '/v1/sandboxes'],
  ['?limit=1000', '/v1/sandboxes?limit=1000'],
  ['?state=hibernated', '/v1/sandboxes?state=hibernated'],
  ['?state=running (no match)', '/v1/sandboxes?state=running'],
  ['?metadata.team=t3 (1 in 10)', '/v1/sandboxes?metadata.team=t3'],
  ['?metadata.idx=7777 (1 match)', '/v1/sandboxes?metadata.idx=7777'],
  ['?state=hibernated&metadata.team=t3&limit=1000', '/v1/sandboxes?state=hibernated&metadata.team=t3&limit=1000'],
];

async function listRows(d: DaemonHandle, _what: string): Promise<Array<[string, number[]]>> {
  const out: Array<[string, number[]]> = [];
  for (const [name, route] of LIST_QUERIES) {
    await d.http.json('GET', route); // warm the statement cache
    out.push([name, await timeCalls(CALLS / 2, () => d.http.json<SandboxList>('GET', route))]);
  }
  return out;
}

async function walkAll(d: DaemonHandle): Promise<SandboxInfo[]> {
  const all: SandboxInfo[] = [];
  let cursor: string | undefined;
  do {
    const page = await d.http.json<SandboxList>('GET', '/v1/sandboxes', { query: { limit: '1000', cursor } });
    all.push(...page.sandboxes);
    cursor = page.nextCursor;
  } while (cursor);
  return all;
}

/**
 * Writes `count` hibernated records with the daemon's Registry, each with a placeholder
 * image directory that ImageStore counts as complete (a real one is ~the size measured above).
 */
export async function seed(home: string, count: number, ownerOf: (i: number) => string = () => 'admin'): Promise<void> {
  const paths = layout(home);
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const reg = new Registry(paths.db);
  const images = new ImageStore(paths.images);
  const now = Date.now();
  try {
    const insert = reg.database.transaction((rows: SandboxRecord[]) => {
      for (const row of rows) reg.insert(row);
    });
    const rows: SandboxRecord[] = [];
    for (let i = 0; i < count; i++) {
      rows.push({
        id: `sb-seed${String(i).padStart(6, '0')}`,
        template: 'base',
        state: 'hibernated',
        createdAt: now - (count - i) * 1000,
        // Far ahead: the reaper must not kill them while the bench runs.
        expiresAt: now + 86_400_000,
        metadata: { bench: 'density', team: `t${i % 10}`, idx: String(i) },
        env: {},
        resources: DEFAULT_RESOURCES,
        rootfs: '/nonexistent',
        apiKeyId: ownerOf(i),
        boot: 'cold',
        network: [],
      });
    }
    insert(rows);
    for (let i = 0; i < count; i += 200) {
      await Promise.all(
        rows.slice(i, i + 200).map(async (row) => {
          const dir = images.hibernated(row.id);
          await images.prepare(dir);
          await images.markComplete(dir);
        }),
      );
    }
  } finally {
    reg.close();
  }
}

/**
 * A bench daemon on a home prepared by `prepare` before it starts. Stopped without the
 * harness's delete-everything check (that would resume or kill thousands of records): it
 * runs no sandbox, so stop, check runsc has nothing under its root, remove the home.
 */
export async function startOwnDaemon(
  ctx: Context,
  label: string,
  prepare: (home: string) => Promise<void> | void,
): Promise<{ d: DaemonHandle; startMs: number; seedMs: number; stop: () => Promise<void> }> {
  const home = path.join(ctx.benchDir('density-'), 'home');
  const t0 = performance.now();
  await prepare(home);
  const seedMs = performance.now() - t0;
  const t1 = performance.now();
  let d: DaemonHandle;
  try {
    d = await startDaemon({ home });
  } catch (err) {
    // It never came up (the harness gives it 30 s): its views may still be mounted.
    unmountUnder(home);
    rmSync(home, { recursive: true, force: true });
    throw err;
  }
  const startMs = performance.now() - t1;
  console.log(`  (${label} up in ${startMs.toFixed(0)} ms, home ${home}, pid ${d.pid})`);
  const stop = ctx.defer(`stop ${label}`, async () => {
    await d.stop();
    const left = allRunscContainers(home);
    unmountUnder(home);
    rmSync(home, { recursive: true, force: true });
    rmSync(`${home}.log`, { force: true });
    if (left.length) throw new Error(`${label} left runsc containers: ${left.join(', ')}`);
  });
  return { d, startMs, seedMs, stop };
}

export async function timeCalls(count: number, fn: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    const t = performance.now();
    await fn();
    out.push(performance.now() - t);
  }
  return out;
}

async function execTrue(sbx: Sandbox): Promise<void> {
  const res = await sbx.exec(['true']);
  if (res.exitCode !== 0) throw new Error(`exec true in ${sbx.id} exited ${res.exitCode}`);
}

function spawnTrue(): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('/bin/true', { stdio: 'ignore' });
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`/bin/true exited ${code}`))));
  });
}

async function killLimited(list: Sandbox[], limit: number): Promise<void> {
  const errors: string[] = [];
  const worker = async () => {
    for (let sbx = list.pop(); sbx; sbx = list.pop()) await sbx.kill().catch((err: Error) => errors.push(`${sbx?.id}: ${err.message}`));
  };
  await Promise.all(Array.from({ length: limit }, worker));
  if (errors.length) throw new Error(`could not kill: ${errors.join('; ')}`);
}

function memAvailable(): number {
  return Number(/^MemAvailable:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? NaN) * 1024;
}

function netnsList(): string[] {
  try {
    return execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
      .split('\n')
      .map((l) => l.split(' ')[0] ?? '')
      .filter(Boolean);
  } catch {
    return [];
  }
}

/** utime+stime ticks of the processes runsc runs under this root, and of the daemon. */
function ticks(runscRoot: string, daemonPid: number): { runsc: number; daemon: number } {
  let runsc = 0;
  let daemon = 0;
  const flag = `--root=${runscRoot}`;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const isDaemon = Number(pid) === daemonPid;
      if (!isDaemon && !readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(flag)) continue;
      // Fields after the command name, which may hold spaces: utime and stime are 14 and 15.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const t = Number(f[11]) + Number(f[12]);
      if (isDaemon) daemon += t;
      else runsc += t;
    } catch {
      // exited meanwhile
    }
  }
  return { runsc, daemon };
}

/**
 * CPU of this daemon's runsc processes and of the daemon over `ms`, in percent of one core.
 * A process that exits inside the window is missed: idle sandboxes start none.
 */
async function cpuOver(ms: number, runscRoot: string, daemonPid: number): Promise<{ runscPct: number; daemonPct: number }> {
  const a = ticks(runscRoot, daemonPid);
  const t = performance.now();
  await sleep(ms);
  const b = ticks(runscRoot, daemonPid);
  const secs = (performance.now() - t) / 1000;
  const pct = (x: number) => (100 * x) / CLK_TCK / secs;
  return { runscPct: pct(b.runsc - a.runsc), daemonPct: pct(b.daemon - a.daemon) };
}
