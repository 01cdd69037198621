/**
 * Snapshot, fork and hibernate (issue 4): the whole machine, against raw `runsc checkpoint`
 * + `runsc restore` of the same state in the same run.
 *
 * - A busy sandbox: python3 holding about 100 MiB resident (checked through /proc inside).
 *   Interleaved: a raw checkpoint (`--leave-running`, against the daemon's own container)
 *   plus a raw restore of that image under a private runsc root (the baseline), and forks
 *   of 1 and of 3 children, each timed from the call until every child has answered
 *   `exec(['true'])`. Then forks of 8 children (fewer samples: about 1 GB of restores each).
 *   The children are killed after each sample. Also timed: hibernate of the busy sandbox
 *   and resume to exec-ready, and snapshot().
 * - An idle sandbox (warren-init and the agent only): hibernate (the SDK call) and resume to
 *   exec-ready (an `exec(['true'])` on the hibernated sandbox), interleaved with a raw
 *   checkpoint + restore of it; the daemon's own times from its log lines. The hibernate
 *   baseline puts the raw restored copy down as a hibernate does: `runsc checkpoint`
 *   without --leave-running, then `runsc delete`.
 * - Disk: raw image sizes, hibernation images (`diskBytes` while hibernated), snapshot
 *   `sizeBytes`, and a fork child's `diskBytes` right after the fork against its parent's.
 */
import { Sandbox, Snapshots, WarrenError } from '@warren/sdk';
import type { DaemonHandle } from '@warren/tests/harness';
import { sleep, type Context } from '../context.js';
import { RawCheckpoint } from '../raw.js';
import { fmt, percentile } from '../stats.js';

const FORK = 'machine (fork)';
const HIB = 'machine (hibernate)';
const DISK = 'machine (disk)';
const HOLD_MIB = 100;
/** Touches one byte per page, so every page of the buffer is resident. */
const HOLDER = `b = bytearray(${HOLD_MIB} * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(10**6)`;
const MB = 1e6;
const CHILD_OPTS = { ttlSeconds: 600, metadata: { bench: 'machine-child' } };

interface ForkSample {
  /** forkTree() until it resolved (the daemon says every child is ready). */
  call: number;
  /** Until every child answered exec(['true']). */
  all: number;
  childIds: string[];
}

interface RawSample {
  cp: number;
  restore: number;
  bytes: number;
  /** Checkpoint without --leave-running of the restored copy (it stops), then its delete. */
  stop: number;
  del: number;
}

export async function runMachine(ctx: Context): Promise<void> {
  const n = ctx.iters.machine;
  const n8 = ctx.iters.fork8;
  /** Busy-sandbox hibernate cycles and snapshots: each writes about 100 MB. */
  const nBusy = Math.min(n, 3);
  const d = await ctx.getDaemon();
  const raw = new RawCheckpoint(ctx);

  /**
   * Raw checkpoint (leave-running) + raw restore of the same image, then the restored copy is
   * put down as a hibernate does it (checkpoint without --leave-running, delete); the images
   * are removed.
   */
  const rawOnce = async (id: string): Promise<RawSample> => {
    const c = await raw.checkpoint(d.home, id);
    try {
      const rs = await raw.restore(d.home, id, c.image, { hibernate: true });
      return { cp: c.ms, restore: rs.ms, bytes: c.bytes, stop: rs.stopMs ?? NaN, del: rs.deleteMs ?? NaN };
    } finally {
      raw.removeImage(c.image);
    }
  };

  // 1. The busy sandbox.
  const { sbx: busy } = await ctx.sandbox({ ttlSeconds: 1800, metadata: { bench: 'machine' } });
  const holder = await busy.exec(['python3', '-c', HOLDER], { background: true, tag: 'holder' });
  const rss0 = await waitHolder(busy, holder.pid);
  console.log(`  (busy sandbox ${busy.id}: python3 pid ${holder.pid} holds ${fmt(rss0 / MB)} MB resident)`);

  /** forkTree(count) → every child exec-ready; `inspect` runs before the children are killed. */
  const forkOnce = async (count: number, inspect?: (kids: Sandbox[]) => Promise<void>): Promise<ForkSample> => {
    const t0 = performance.now();
    const kids = await busy.forkTree(count, CHILD_OPTS);
    const call = performance.now() - t0;
    const kills = kids.map((k) => ctx.defer(`kill sandbox ${k.id}`, () => k.kill().catch(() => undefined)));
    try {
      if (kids.length !== count) throw new Error(`forkTree(${count}) returned ${kids.length} sandboxes`);
      await Promise.all(
        kids.map(async (k) => {
          const r = await k.exec(['true']);
          if (r.exitCode !== 0) throw new Error(`first exec in fork child ${k.id} exited ${r.exitCode}`);
        }),
      );
      const all = performance.now() - t0;
      await inspect?.(kids);
      return { call, all, childIds: kids.map((k) => k.id) };
    } finally {
      await Promise.all(kills.map((k) => k()));
    }
  };

  // Warm-up, not recorded; also checks that the sandbox survives a raw checkpoint and that a
  // child really holds the parent's memory.
  await rawOnce(busy.id);
  const alive = await busy.exec(['true']);
  if (alive.exitCode !== 0) throw new Error(`busy sandbox ${busy.id} does not answer after a raw checkpoint`);
  await forkOnce(1, async ([child]) => {
    if (!child) throw new Error('forkTree(1) returned no sandbox');
    const rss = await holderRss(child, holder.pid);
    if (rss < HOLD_MIB * 1024 * 1024)
      throw new Error(`fork child ${child.id}: the python3 holder has ${fmt(rss / MB)} MB resident, expected ≥ ${HOLD_MIB} MiB`);
  });

  const rawBusy: RawSample[] = [];
  const fork1: ForkSample[] = [];
  const fork3: ForkSample[] = [];
  const fork8: ForkSample[] = [];
  const parentDisk: number[] = [];
  const childDisk: number[] = [];
  const diskAfterFork = async ([child]: Sandbox[]) => {
    if (!child) throw new Error('forkTree returned no sandbox');
    const [c, p] = await Promise.all([Sandbox.connect(child.id, d.conn), Sandbox.connect(busy.id, d.conn)]);
    childDisk.push((c.info.diskBytes ?? NaN) / MB);
    parentDisk.push((p.info.diskBytes ?? NaN) / MB);
  };
  for (let i = 0; i < n; i++) {
    if (i % 2 === 0) {
      rawBusy.push(await rawOnce(busy.id));
      fork1.push(await forkOnce(1, diskAfterFork));
    } else {
      fork1.push(await forkOnce(1, diskAfterFork));
      rawBusy.push(await rawOnce(busy.id));
    }
    fork3.push(await forkOnce(3));
    process.stdout.write('.');
  }
  for (let i = 0; i < n8; i++) {
    fork8.push(await forkOnce(8));
    process.stdout.write('8');
  }
  process.stdout.write('\n');

  // Snapshots of the busy sandbox (it keeps running), deleted at once.
  const snapMs: number[] = [];
  const snapSize: number[] = [];
  for (let i = 0; i < nBusy; i++) {
    const t0 = performance.now();
    const snap = await busy.snapshot({ metadata: { bench: 'machine' } });
    snapMs.push(performance.now() - t0);
    const forget = ctx.defer(`delete snapshot ${snap.id}`, () => Snapshots.delete(snap.id, d.conn).catch(() => undefined));
    snapSize.push(snap.sizeBytes / MB);
    await Snapshots.delete(snap.id, d.conn);
    await forget();
  }

  // Hibernate and resume of the busy sandbox.
  const busyHib: number[] = [];
  const busyResume: number[] = [];
  const busyImage: number[] = [];
  for (let i = 0; i < nBusy; i++) {
    const c = await hibernateCycle(d, busy);
    busyHib.push(c.hibernate);
    busyResume.push(c.resume);
    busyImage.push(c.imageBytes / MB);
  }
  const rss1 = await holderRss(busy, holder.pid);
  if (rss1 < HOLD_MIB * 1024 * 1024) throw new Error(`after ${nBusy} hibernate cycles the python3 holder has ${fmt(rss1 / MB)} MB resident`);
  const forkLog = forkEvents(d);
  const busyHibSrv = lastN(logMs(d, 'sandbox hibernated', busy.id), nBusy);
  const busyResumeSrv = lastN(logMs(d, 'sandbox resumed', busy.id), nBusy);

  // 2. The idle sandbox.
  const { sbx: idle } = await ctx.sandbox({ ttlSeconds: 1800, metadata: { bench: 'machine' } });
  await rawOnce(idle.id);
  await hibernateCycle(d, idle);
  const rawIdle: RawSample[] = [];
  const idleHib: number[] = [];
  const idleResume: number[] = [];
  const idleExec: number[] = [];
  const idleImage: number[] = [];
  for (let i = 0; i < n; i++) {
    rawIdle.push(await rawOnce(idle.id));
    const c = await hibernateCycle(d, idle);
    idleHib.push(c.hibernate);
    idleResume.push(c.resume);
    idleImage.push(c.imageBytes / MB);
    const t0 = performance.now();
    const r = await idle.exec(['true']);
    idleExec.push(performance.now() - t0);
    if (r.exitCode !== 0) throw new Error(`exec in ${idle.id} after resume exited ${r.exitCode}`);
    process.stdout.write('.');
  }
  process.stdout.write('\n');
  const idleHibSrv = lastN(logMs(d, 'sandbox hibernated', idle.id), n);
  const idleResumeSrv = lastN(logMs(d, 'sandbox resumed', idle.id), n);

  // The report.
  const r = ctx.report;
  // A fork's log line names every child; the first finds it.
  const logOf = ({ childIds: [first] }: ForkSample) => (first === undefined ? undefined : forkLog.get(first));
  const paused = (s: ForkSample[]) => s.map((x) => logOf(x)?.parentPausedMs).filter((v): v is number => v !== undefined);
  const held = (s: ForkSample[]) => s.map((x) => logOf(x)?.channelHeldMs).filter((v): v is number => v !== undefined);
  const total = (s: ForkSample[]) => s.map((x) => logOf(x)?.totalMs).filter((v): v is number => v !== undefined);
  const pausedAll = [...paused(fork1), ...paused(fork3), ...paused(fork8)];
  if (pausedAll.length !== fork1.length + fork3.length + fork8.length)
    throw new Error(`found ${pausedAll.length} "sandbox forked" log lines for ${fork1.length + fork3.length + fork8.length} forks`);

  r.add({
    key: 'm-raw-cp',
    suite: FORK,
    label: `raw \`runsc checkpoint --leave-running\` (busy, ${HOLD_MIB} MiB python3)`,
    unit: 'ms',
    values: rawBusy.map((x) => x.cp),
    isBaseline: true,
    note: "against the daemon's container, --compression=none as the daemon does",
  });
  r.add({
    key: 'm-raw-restore',
    suite: FORK,
    label: 'raw `runsc restore --detach` of that image',
    unit: 'ms',
    values: rawBusy.map((x) => x.restore),
    isBaseline: true,
    note: 'private --root, copy of the sandbox bundle (own cgroup, fresh overlay dir), stdio socketpairs; until runsc exits',
  });
  r.add({
    key: 'm-raw',
    suite: FORK,
    label: 'raw checkpoint + restore (the same state)',
    unit: 'ms',
    values: rawBusy.map((x) => x.cp + x.restore),
    isBaseline: true,
  });
  r.add({ key: 'm-fork1', suite: FORK, label: 'forkTree(1) → child exec-ready', unit: 'ms', values: fork1.map((x) => x.all), baseline: 'm-raw' });
  r.add({ key: 'm-fork1-call', suite: FORK, label: 'forkTree(1) resolves', unit: 'ms', values: fork1.map((x) => x.call), baseline: 'm-raw' });
  r.add({ key: 'm-fork1-total', suite: FORK, label: 'daemon: fork totalMs (1 child)', unit: 'ms', values: total(fork1), baseline: 'm-raw' });
  r.add({
    key: 'm-fork-paused',
    suite: FORK,
    label: 'daemon: parentPausedMs (all forks: 1, 3 and 8 children)',
    unit: 'ms',
    values: pausedAll,
    baseline: 'm-raw-cp',
    note: "the daemon's `runsc checkpoint --leave-running` of the parent: the only time its processes are stopped",
  });
  r.add({
    key: 'm-fork-held',
    suite: FORK,
    label: 'daemon: channelHeldMs (all forks)',
    unit: 'ms',
    values: [...held(fork1), ...held(fork3), ...held(fork8)],
    baseline: 'm-raw-cp',
    note: 'quiesce of the guest channel + the checkpoint: how long API calls on the parent waited',
  });
  r.add({ key: 'm-fork3', suite: FORK, label: 'forkTree(3) → all 3 exec-ready', unit: 'ms', values: fork3.map((x) => x.all), baseline: 'm-raw' });
  r.add({ key: 'm-fork3-total', suite: FORK, label: 'daemon: fork totalMs (3 children)', unit: 'ms', values: total(fork3), baseline: 'm-raw' });
  r.add({ key: 'm-fork8', suite: FORK, label: 'forkTree(8) → all 8 exec-ready', unit: 'ms', values: fork8.map((x) => x.all), baseline: 'm-raw' });
  r.add({ key: 'm-fork8-total', suite: FORK, label: 'daemon: fork totalMs (8 children)', unit: 'ms', values: total(fork8), baseline: 'm-raw' });
  r.add({ key: 'm-snap', suite: FORK, label: 'snapshot() of the busy sandbox', unit: 'ms', values: snapMs, baseline: 'm-raw-cp' });

  r.add({
    key: 'm-idle-raw-cp',
    suite: HIB,
    label: 'raw `runsc checkpoint --leave-running` (idle)',
    unit: 'ms',
    values: rawIdle.map((x) => x.cp),
    isBaseline: true,
  });
  r.add({
    key: 'm-idle-raw-stop',
    suite: HIB,
    label: 'raw `runsc checkpoint` (idle, stops it)',
    unit: 'ms',
    values: rawIdle.map((x) => x.stop),
    isBaseline: true,
    note: 'of the raw restored copy, without --leave-running',
  });
  r.add({ key: 'm-idle-raw-del', suite: HIB, label: 'raw `runsc delete` after it (idle)', unit: 'ms', values: rawIdle.map((x) => x.del), isBaseline: true });
  r.add({
    key: 'm-idle-raw-hib',
    suite: HIB,
    label: 'raw checkpoint (stops) + delete (idle)',
    unit: 'ms',
    values: rawIdle.map((x) => x.stop + x.del),
    isBaseline: true,
    note: 'what a hibernate does with runsc',
  });
  r.add({
    key: 'm-idle-raw-restore',
    suite: HIB,
    label: 'raw `runsc restore --detach` (idle)',
    unit: 'ms',
    values: rawIdle.map((x) => x.restore),
    isBaseline: true,
  });
  r.add({ key: 'm-hib', suite: HIB, label: 'idle: hibernate() round trip', unit: 'ms', values: idleHib, baseline: 'm-idle-raw-hib' });
  if (idleHibSrv.length)
    r.add({ key: 'm-hib-srv', suite: HIB, label: 'idle: daemon "sandbox hibernated" ms', unit: 'ms', values: idleHibSrv, baseline: 'm-idle-raw-hib' });
  r.add({
    key: 'm-resume',
    suite: HIB,
    label: 'idle: exec(true) on the hibernated sandbox (resume → exec-ready)',
    unit: 'ms',
    values: idleResume,
    baseline: 'm-idle-raw-restore',
  });
  if (idleResumeSrv.length)
    r.add({ key: 'm-resume-srv', suite: HIB, label: 'idle: daemon "sandbox resumed" ms', unit: 'ms', values: idleResumeSrv, baseline: 'm-idle-raw-restore' });
  r.add({
    key: 'm-exec-warm',
    suite: HIB,
    label: 'idle: the next exec(true) (running)',
    unit: 'ms',
    values: idleExec,
    note: 'the exec part of the resume row',
  });
  r.add({
    key: 'm-raw-hib',
    suite: HIB,
    label: 'raw checkpoint (stops) + delete (busy)',
    unit: 'ms',
    values: rawBusy.map((x) => x.stop + x.del),
    isBaseline: true,
    note: `checkpoint ${fmt(
      percentile(
        rawBusy.map((x) => x.stop),
        50,
      ),
    )} + delete ${fmt(
      percentile(
        rawBusy.map((x) => x.del),
        50,
      ),
    )} ms (p50s)`,
  });
  r.add({ key: 'm-busy-hib', suite: HIB, label: 'busy: hibernate() round trip', unit: 'ms', values: busyHib, baseline: 'm-raw-hib' });
  if (busyHibSrv.length)
    r.add({ key: 'm-busy-hib-srv', suite: HIB, label: 'busy: daemon "sandbox hibernated" ms', unit: 'ms', values: busyHibSrv, baseline: 'm-raw-hib' });
  r.add({
    key: 'm-busy-resume',
    suite: HIB,
    label: 'busy: exec(true) on the hibernated sandbox (resume → exec-ready)',
    unit: 'ms',
    values: busyResume,
    baseline: 'm-raw-restore',
  });
  if (busyResumeSrv.length)
    r.add({ key: 'm-busy-resume-srv', suite: HIB, label: 'busy: daemon "sandbox resumed" ms', unit: 'ms', values: busyResumeSrv, baseline: 'm-raw-restore' });

  r.add({
    key: 'm-disk-raw-busy',
    suite: DISK,
    label: 'raw checkpoint image, busy (allocated)',
    unit: 'MB',
    values: rawBusy.map((x) => x.bytes / MB),
    isBaseline: true,
  });
  r.add({
    key: 'm-disk-hib-busy',
    suite: DISK,
    label: 'busy: hibernation image (diskBytes while hibernated)',
    unit: 'MB',
    values: busyImage,
    baseline: 'm-disk-raw-busy',
  });
  r.add({ key: 'm-disk-snap-busy', suite: DISK, label: 'busy: snapshot sizeBytes', unit: 'MB', values: snapSize, baseline: 'm-disk-raw-busy' });
  r.add({
    key: 'm-disk-raw-idle',
    suite: DISK,
    label: 'raw checkpoint image, idle (allocated)',
    unit: 'MB',
    values: rawIdle.map((x) => x.bytes / MB),
    isBaseline: true,
  });
  r.add({
    key: 'm-disk-hib-idle',
    suite: DISK,
    label: 'idle: hibernation image (diskBytes while hibernated)',
    unit: 'MB',
    values: idleImage,
    baseline: 'm-disk-raw-idle',
  });
  r.add({ key: 'm-disk-parent', suite: DISK, label: 'busy parent: diskBytes while running (own writes)', unit: 'MB', values: parentDisk, isBaseline: true });
  r.add({
    key: 'm-disk-child',
    suite: DISK,
    label: 'fork child: diskBytes right after the fork',
    unit: 'MB',
    values: childDisk,
    baseline: 'm-disk-parent',
    note: "the fork's temporary image (about the raw busy image) is removed when the fork returns",
  });

  const rawP50 = r.p50('m-raw');
  const f1 = r.p50('m-fork1');
  r.target(
    'first fork child exec-ready p50 ≤ 1.2× raw checkpoint + restore p50',
    f1 <= 1.2 * rawP50,
    `${fmt(f1)} vs ${fmt(rawP50)} ms = ${(f1 / rawP50).toFixed(2)}× (busy sandbox, ${fmt(rss0 / MB)} MB held)`,
  );
  r.target('first fork child exec-ready p50 ≤ 1500 ms', f1 <= 1500, `${fmt(f1)} ms`);
  r.target('3 children all exec-ready p50 ≤ 2500 ms', r.p50('m-fork3') <= 2500, `${fmt(r.p50('m-fork3'))} ms`);
  r.target(
    '8 children all exec-ready p50 ≤ 6000 ms',
    r.p50('m-fork8') <= 6000,
    `${fmt(r.p50('m-fork8'))} ms over ${fork8.length} forks (max ${fmt(Math.max(...fork8.map((x) => x.all)))})`,
  );
  const pausedP50 = r.p50('m-fork-paused');
  const cpP50 = r.p50('m-raw-cp');
  // The parent's processes stop only inside its checkpoint, so this compares two runs of the
  // same checkpoint (the daemon's and the interleaved raw one): equal within noise, taken as 10%.
  r.target(
    'parent paused ≤ the checkpoint itself (within 10% run-to-run noise)',
    pausedP50 <= 1.1 * cpP50,
    `daemon parentPausedMs p50 ${fmt(pausedP50)} ms (all forks; its processes stop only inside this checkpoint) vs raw \`runsc checkpoint --leave-running\` p50 ${fmt(cpP50)} ms of the same sandbox = ${(pausedP50 / cpP50).toFixed(2)}×; calls waited ${fmt(r.p50('m-fork-held'))} ms`,
  );
  r.target(
    'idle hibernate ≤ 500 ms (p50)',
    r.p50('m-hib') <= 500,
    `${fmt(r.p50('m-hib'))} ms (SDK round trip; p95 ${fmt(percentile(idleHib, 95))}; daemon ${fmt(r.p50('m-hib-srv'))} ms; raw checkpoint that stops it + delete ${fmt(r.p50('m-idle-raw-hib'))} ms)`,
  );
  r.target(
    'idle resume → exec-ready p50 ≤ 300 ms',
    r.p50('m-resume') <= 300,
    `${fmt(r.p50('m-resume'))} ms (daemon restore ${fmt(r.p50('m-resume-srv'))} ms; a running exec ${fmt(r.p50('m-exec-warm'))} ms)`,
  );
}

/**
 * hibernate() (retried while the daemon still counts a finished call as in progress), the
 * image size while hibernated, then exec(['true']) on the hibernated sandbox, which resumes it.
 */
async function hibernateCycle(d: DaemonHandle, sbx: Sandbox): Promise<{ hibernate: number; imageBytes: number; resume: number }> {
  let hibernate = 0;
  for (let attempt = 0; ; attempt++) {
    const t0 = performance.now();
    try {
      const info = await sbx.hibernate();
      hibernate = performance.now() - t0;
      if (info.state !== 'hibernated') throw new Error(`hibernate of ${sbx.id} left it '${info.state}'`);
      break;
    } catch (err) {
      if (!(err instanceof WarrenError && err.status === 409) || attempt >= 50) throw err;
      await sleep(20);
    }
  }
  const info = (await Sandbox.connect(sbx.id, d.conn)).info;
  if (info.state !== 'hibernated') throw new Error(`GET of hibernated ${sbx.id} says '${info.state}'`);
  const t1 = performance.now();
  const r = await sbx.exec(['true']);
  const resume = performance.now() - t1;
  if (r.exitCode !== 0) throw new Error(`exec in ${sbx.id} on resume exited ${r.exitCode}`);
  return { hibernate, imageBytes: info.diskBytes ?? NaN, resume };
}

/** Resident bytes of the holder (guest pid), checking that the pid is the holder. */
async function holderRss(sbx: Sandbox, pid: number): Promise<number> {
  const r = await sbx.exec(['sh', '-c', 'tr "\\0" " " < /proc/$1/cmdline; echo; grep VmRSS /proc/$1/status', 'sh', String(pid)]);
  if (r.exitCode !== 0 || !r.stdout.includes('bytearray'))
    throw new Error(`pid ${pid} in ${sbx.id} is not the python3 holder: ${r.stdout.trim()} ${r.stderr.trim()}`);
  const kb = /VmRSS:\s+(\d+) kB/.exec(r.stdout);
  if (!kb) throw new Error(`no VmRSS for pid ${pid} in ${sbx.id}: ${r.stdout.trim()}`);
  return Number(kb[1]) * 1024;
}

async function waitHolder(sbx: Sandbox, pid: number): Promise<number> {
  const deadline = performance.now() + 60_000;
  for (;;) {
    const rss = await holderRss(sbx, pid).catch(() => 0);
    if (rss >= HOLD_MIB * 1024 * 1024) return rss;
    if (performance.now() > deadline) throw new Error(`python3 holder in ${sbx.id} has ${fmt(rss / MB)} MB resident after 60 s, expected ≥ ${HOLD_MIB} MiB`);
    await sleep(200);
  }
}

function logEntries(d: DaemonHandle, msg: string): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const line of d.log().split('\n')) {
    if (!line.includes(`"${msg}"`)) continue;
    try {
      const e = JSON.parse(line) as Record<string, unknown>;
      if (e.msg === msg) out.push(e);
    } catch {
      // not a JSON line
    }
  }
  return out;
}

/** The daemon's "sandbox forked" lines, by each child id. */
function forkEvents(d: DaemonHandle): Map<string, { parentPausedMs: number; channelHeldMs: number; totalMs: number }> {
  const byChild = new Map<string, { parentPausedMs: number; channelHeldMs: number; totalMs: number }>();
  for (const e of logEntries(d, 'sandbox forked')) {
    if (typeof e.parentPausedMs !== 'number' || typeof e.channelHeldMs !== 'number' || typeof e.totalMs !== 'number' || !Array.isArray(e.children)) continue;
    for (const c of e.children)
      if (typeof c === 'string') byChild.set(c, { parentPausedMs: e.parentPausedMs, channelHeldMs: e.channelHeldMs, totalMs: e.totalMs });
  }
  return byChild;
}

/** The `ms` of a sandbox's log lines with this message, in order. */
function logMs(d: DaemonHandle, msg: string, id: string): number[] {
  return logEntries(d, msg)
    .filter((e) => e.sandbox === id && typeof e.ms === 'number')
    .map((e) => e.ms as number);
}

function lastN(values: number[], n: number): number[] {
  return values.length >= n ? values.slice(-n) : [];
}
