/**
 * What the defaults cost and whether they hurt (docs/fast-creates.md): a daemon with default
 * settings bakes base and keeps a warm pool of it.
 *
 * - Memory: restored sandboxes share no pages with each other, so each one's cost is its own.
 *   Per pool member and per baked-restored sandbox (a default create with the pool off), and
 *   per cold sandbox of the suite's shared daemon for comparison: host PSS and RSS of the
 *   sandbox's runsc-sandbox, gofer and stub processes (each address space once), and the drop
 *   in the host's MemAvailable per sandbox with DENSITY_N of them up. MemAvailable is host-wide:
 *   whatever else runs on the machine moves it too.
 * - Refill vs claimed sandboxes: two creates claim both default-pool members, so the pool boots
 *   two new ones, one after the other; meanwhile the first claimed sandbox runs `exec true` in
 *   a loop. Its latency while the pool refills, against the same loop once the pool is full
 *   again (quiet), on a daemon that boots members at a low CPU weight (the default) and on
 *   one with WARREN_POOL_BACKGROUND=0. Rounds alternate between the two daemons.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { getBake, getPool, Sandbox, setPoolSize, type BootKind } from '@warren/sdk';
import { allRunscContainers, containerOf, type DaemonHandle } from '@warren/tests/harness';
import { sleep, waitFor, type Context } from '../context.js';
import { cgroupMemory, MB, sandboxPids, sumMem, type Mem } from '../procmem.js';

const MEMORY = 'defaults (memory)';
const REFILL = 'defaults (refill)';
/** Sandboxes up at once for the MemAvailable drop. */
const DENSITY_N = 10;
/** Let fresh sandboxes settle before memory is read. */
const SETTLE_MS = 3000;
/** exec(true) calls in the quiet phase of a refill round. */
const QUIET_EXECS = 30;
const DEFAULTS_ENV = { WARREN_DEFAULT_POOL: '', WARREN_BAKE: '' };

function memAvailable(): number {
  return Number(/MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? NaN) * 1024;
}

/** Containers that hold a sandbox or pool member: not the shells nobody took yet. */
function sandboxContainers(home: string): string[] {
  return allRunscContainers(home).filter((c) => !c.startsWith('shell-') || existsSync(path.join(home, 'shells', c, 'sandbox')));
}

type SandboxMem = Mem & { cgroup: number };

/**
 * Host memory of each runsc container's processes (a restored sandbox runs in a shell's
 * container), plus its memory cgroup's usage (the Sentry's memory file, where guest memory
 * lives, and page cache charged to it) in `cgroup`.
 */
function containersMem(containers: string[]): SandboxMem[] {
  return containers.map((cid) => ({ ...sumMem(sandboxPids(cid, 'warren')), cgroup: cgroupMemory('warren', cid) ?? NaN }));
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / (xs.length || 1);

async function poolSettled(d: DaemonHandle, size: number): Promise<boolean> {
  const p = await getPool('base', d.conn);
  if (p.bootFailures > 0) throw new Error(`default pool: ${p.bootFailures} boot failures: ${p.lastError ?? ''}`);
  return p.ready === size && p.booting === 0;
}

export async function runDefaults(ctx: Context): Promise<void> {
  const r = ctx.report;
  const { daemon: d } = await ctx.startDaemon('daemon (defaults)', DEFAULTS_ENV);
  const { daemon: fg } = await ctx.startDaemon('daemon (defaults, WARREN_POOL_BACKGROUND=0)', { ...DEFAULTS_ENV, WARREN_POOL_BACKGROUND: '0' });
  for (const x of [d, fg]) await waitFor(async () => (await getBake('base', x.conn)).state === 'ready', 180_000, 'base baked');
  const size = (await getPool('base', d.conn)).size;
  if (size === 0) throw new Error('the defaults daemon sized the default pool 0 (too little MemAvailable on this host)');

  // 1. Memory: pool members, then baked-restored sandboxes, then cold ones.
  await setPoolSize('base', 0, fg.conn); // its members are not the ones measured
  await setPoolSize('base', 0, d.conn);
  await waitFor(() => poolSettled(d, 0), 60_000, 'default pool emptied');
  await sleep(SETTLE_MS);
  const before = memAvailable();
  await setPoolSize('base', DENSITY_N, d.conn);
  await waitFor(() => poolSettled(d, DENSITY_N), 300_000, `pool of ${DENSITY_N}`);
  await sleep(SETTLE_MS);
  const memberDrop = (before - memAvailable()) / DENSITY_N / MB;
  const members = sandboxContainers(d.home);
  if (members.length !== DENSITY_N) throw new Error(`found ${members.length} sandbox containers, expected ${DENSITY_N} pool members`);
  const memberMem = containersMem(members);
  await setPoolSize('base', 0, d.conn);
  await waitFor(() => poolSettled(d, 0), 60_000, 'default pool emptied');

  const measureCreates = async (daemon: DaemonHandle, want: BootKind): Promise<{ drop: number; mem: SandboxMem[] }> => {
    await sleep(SETTLE_MS);
    const start = memAvailable();
    const made: Sandbox[] = [];
    try {
      for (let i = 0; i < DENSITY_N; i++) {
        const sbx = await Sandbox.create({ ...daemon.conn, ttlSeconds: 600, metadata: { bench: 'defaults' } });
        made.push(sbx);
        if (sbx.info.boot !== want) throw new Error(`${sbx.id} booted '${sbx.info.boot}', expected '${want}'`);
      }
      await Promise.all(made.map((s) => s.exec(['true'])));
      await sleep(SETTLE_MS);
      const drop = (start - memAvailable()) / DENSITY_N / MB;
      return { drop, mem: containersMem(made.map((s) => containerOf(daemon.home, s.id).id)) };
    } finally {
      await Promise.all(made.map((s) => s.kill().catch(() => undefined)));
    }
  };
  const baked = await measureCreates(d, 'baked');
  const cold = await measureCreates(await ctx.getDaemon(), 'cold');

  const row = (key: string, label: string, values: number[], extra: { baseline?: string; isBaseline?: boolean; note?: string } = {}) =>
    r.add({ key, suite: MEMORY, label, unit: 'MB', values, ...extra });
  row(
    'mem-cold-pss',
    `cold sandbox (shared daemon): host PSS each, ${DENSITY_N} up`,
    cold.mem.map((m) => m.pss / MB),
    { isBaseline: true },
  );
  row('mem-cold-drop', `cold sandbox: MemAvailable drop per sandbox, ${DENSITY_N} up`, [cold.drop], { isBaseline: true });
  row(
    'mem-baked-pss',
    `baked-restored sandbox (default create, pool off): host PSS each`,
    baked.mem.map((m) => m.pss / MB),
    { baseline: 'mem-cold-pss' },
  );
  row(
    'mem-baked-rss',
    'baked-restored sandbox: host RSS each (shared binaries in full)',
    baked.mem.map((m) => m.rss / MB),
  );
  row(
    'mem-cold-cgroup',
    'cold sandbox: memory cgroup usage each',
    cold.mem.map((m) => m.cgroup / MB),
    { isBaseline: true },
  );
  row(
    'mem-baked-cgroup',
    'baked-restored sandbox: memory cgroup usage each',
    baked.mem.map((m) => m.cgroup / MB),
    { baseline: 'mem-cold-cgroup' },
  );
  row('mem-baked-drop', `baked-restored sandbox: MemAvailable drop per sandbox, ${DENSITY_N} up`, [baked.drop], { baseline: 'mem-cold-drop' });
  row(
    'mem-member-pss',
    `pool member (unclaimed, ${DENSITY_N} pooled): host PSS each`,
    memberMem.map((m) => m.pss / MB),
    { baseline: 'mem-cold-pss' },
  );
  row(
    'mem-member-rss',
    'pool member: host RSS each',
    memberMem.map((m) => m.rss / MB),
  );
  row(
    'mem-member-cgroup',
    'pool member: memory cgroup usage each',
    memberMem.map((m) => m.cgroup / MB),
    { baseline: 'mem-cold-cgroup' },
  );
  row('mem-member-drop', `pool member: MemAvailable drop per member, ${DENSITY_N} pooled`, [memberDrop], {
    baseline: 'mem-cold-drop',
    note: `MemAvailable is host-wide: other work on the machine moves it. The defaults keep ${size} members`,
  });

  // 2. Exec latency in a claimed sandbox while the pool refills.
  for (const x of [d, fg]) await setPoolSize('base', size, x.conn);
  const samples = new Map<DaemonHandle, { refill: number[]; quiet: number[] }>([
    [d, { refill: [], quiet: [] }],
    [fg, { refill: [], quiet: [] }],
  ]);
  const round = async (daemon: DaemonHandle) => {
    const out = samples.get(daemon)!;
    await waitFor(() => poolSettled(daemon, size), 120_000, 'default pool filled');
    const claimed: Sandbox[] = [];
    try {
      for (let i = 0; i < size; i++) {
        const sbx = await Sandbox.create({ ...daemon.conn, ttlSeconds: 300, metadata: { bench: 'defaults' } });
        claimed.push(sbx);
        if (sbx.info.boot !== 'pool') throw new Error(`${sbx.id} booted '${sbx.info.boot}', expected a pool hit`);
      }
      const sbx = claimed[0]!;
      let refilling = true;
      const poller = (async () => {
        while (refilling) {
          refilling = !(await poolSettled(daemon, size));
          if (refilling) await sleep(50);
        }
      })();
      const deadline = performance.now() + 60_000;
      while (refilling && performance.now() < deadline) {
        const t0 = performance.now();
        await sbx.exec(['true']);
        if (refilling) out.refill.push(performance.now() - t0);
      }
      await poller;
      for (let i = 0; i < QUIET_EXECS; i++) {
        const t0 = performance.now();
        await sbx.exec(['true']);
        out.quiet.push(performance.now() - t0);
      }
    } finally {
      await Promise.all(claimed.map((s) => s.kill().catch(() => undefined)));
    }
  };
  const rounds = ctx.iters.defaults;
  for (let i = 0; i < rounds; i++) {
    for (const daemon of i % 2 === 0 ? [d, fg] : [fg, d]) await round(daemon);
    process.stdout.write('.');
  }
  process.stdout.write('\n');
  for (const x of [d, fg]) await setPoolSize('base', 0, x.conn);

  const low = samples.get(d)!;
  const normal = samples.get(fg)!;
  r.add({
    key: 'refill-quiet',
    suite: REFILL,
    label: 'exec(true) in a claimed sandbox, pool full (quiet)',
    unit: 'ms',
    values: [...low.quiet, ...normal.quiet],
    isBaseline: true,
  });
  r.add({
    key: 'refill-low',
    suite: REFILL,
    label: 'exec(true) while the pool refills, members at low CPU weight (default)',
    unit: 'ms',
    values: low.refill,
    baseline: 'refill-quiet',
  });
  r.add({
    key: 'refill-normal',
    suite: REFILL,
    label: 'exec(true) while the pool refills, WARREN_POOL_BACKGROUND=0',
    unit: 'ms',
    values: normal.refill,
    baseline: 'refill-quiet',
  });
  r.target(
    'pool refill does not slow claimed sandboxes: exec p50 while refilling ≤ 1.5× quiet',
    r.p50('refill-low') <= 1.5 * r.p50('refill-quiet'),
    `${r.p50('refill-low').toFixed(1)} ms vs quiet ${r.p50('refill-quiet').toFixed(1)} ms (WARREN_POOL_BACKGROUND=0: ${r.p50('refill-normal').toFixed(1)} ms); ${mean([low.refill.length, normal.refill.length]).toFixed(0)} samples while refilling per kind`,
  );
}
