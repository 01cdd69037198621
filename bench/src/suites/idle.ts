/**
 * Idle cost (issue 13): host CPU, in % of one core, of gVisor sandboxes that do nothing:
 * raw `runsc run sleep` with the packaged runsc and with the runsc the daemon uses (the
 * same-run baselines), idle warren sandboxes, shells (runsc containers created ahead for
 * restores) and warm-pool members. All are measured over the same window, from utime+stime
 * of their host processes (/proc/PID/stat, all threads), in 10 s slices: a row's samples are
 * every member's every slice. Target: ≤ 0.2% of a core each (docs/runsc.md). The daemon's
 * own CPU over the same slices, divided by the sandboxes and pool members it watches, is
 * what its heartbeat costs per sandbox (docs/sandboxes.md, "Heartbeat"): the suite makes no
 * calls during the window.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { getPool, setPoolSize, type HealthInfo } from '@warren/sdk';
import { allRunscContainers, containerOf } from '@warren/tests/harness';
import type { Context } from '../context.js';
import { sleep } from '../context.js';
import { sandboxPids } from '../procmem.js';
import { RawRunsc } from '../raw.js';

const SUITE = 'idle';
const PACKAGED = '/usr/bin/runsc';
const SANDBOXES = 3;
const POOL = 2;
const RAW_EACH = 2;
// One tick (10 ms) in a 10 s slice is 0.1% of a core: the resolution of a sample.
const SLICE_S = 10;
/** Let start-up work (the agent loading, a restore's page-in) finish before measuring. */
const SETTLE_MS = 5000;
/** USER_HZ: /proc/PID/stat counts CPU time in these ticks (100 on Linux for decades). */
const TICKS_PER_S = 100;
const TARGET_PERCENT = 0.2;

/** utime+stime of a set of processes, in ticks; a process gone meanwhile counts 0. */
function ticks(pids: number[]): number {
  let sum = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // Fields 14 and 15 of stat(5), counted from the state field (3) here.
      sum += Number(f[11]) + Number(f[12]);
    } catch {
      // exited
    }
  }
  return sum;
}

interface Member {
  group: string;
  name: string;
  /** runsc container id: its processes are found by that id, plus their descendants. */
  container: string;
}

/** Pool members and unclaimed shells: the containers under the home that are no sandbox of ours. */
function others(home: string, ours: Set<string>): Member[] {
  const out: Member[] = [];
  for (const cid of allRunscContainers(home)) {
    if (ours.has(cid)) continue;
    if (cid.startsWith('shell-')) {
      const taken = readdirSync(path.join(home, 'shells', cid)).includes('sandbox');
      if (!taken) out.push({ group: 'shell', name: cid, container: cid });
    } else out.push({ group: 'pool', name: cid, container: cid });
  }
  return out;
}

async function until(what: string, timeoutMs: number, ok: () => Promise<boolean> | boolean): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await ok()) return true;
    await sleep(500);
  }
  console.log(`  (gave up waiting for ${what} after ${timeoutMs / 1000} s)`);
  return false;
}

export async function runIdle(ctx: Context): Promise<void> {
  const windowS = Math.max(SLICE_S, ctx.iters.idle);
  const r = ctx.report;
  const d = await ctx.getDaemon();
  const health = await d.http.json<HealthInfo>('GET', '/v1/health');
  const daemonRunsc = health.runsc.binary;
  console.log(`  daemon runsc: ${health.runsc.kind} ${daemonRunsc} (${health.runsc.reason})`);

  const members: Member[] = [];
  // Same-run baselines: raw `runsc run sleep`, packaged and the daemon's.
  const rawPackaged = new RawRunsc(ctx, PACKAGED, 'raw-packaged');
  const rawDaemon = new RawRunsc(ctx, daemonRunsc, 'raw-daemon');
  for (let i = 0; i < RAW_EACH; i++) {
    const a = await rawPackaged.runDetached(['sleep', '1000000']);
    members.push({ group: 'raw-packaged', name: a.id, container: a.id });
    const b = await rawDaemon.runDetached(['sleep', '1000000']);
    members.push({ group: 'raw-daemon', name: b.id, container: b.id });
  }

  // Idle sandboxes; one goes through hibernate and resume, a restore, so shells get made for its shape.
  const sbxs = [];
  for (let i = 0; i < SANDBOXES; i++) sbxs.push(await ctx.sandbox());
  for (const { sbx } of sbxs) await sbx.exec(['true']);
  await sbxs[0]!.sbx.hibernate();
  await sbxs[0]!.sbx.exec(['true']);
  const ours = new Map(sbxs.map(({ sbx }) => [containerOf(d.home, sbx.id).id, sbx.id]));
  for (const [cid, id] of ours) members.push({ group: 'sandbox', name: id, container: cid });

  const resetPool = ctx.defer('pool base → 0', async () => {
    await setPoolSize('base', 0, d.conn);
  });
  await setPoolSize('base', POOL, d.conn);
  await until(`${POOL} pool members`, 120_000, async () => (await getPool('base', d.conn)).ready >= POOL);
  await until('shells', 60_000, () => others(d.home, new Set(ours.keys())).some((m) => m.group === 'shell'));
  members.push(...others(d.home, new Set(ours.keys())));
  await sleep(SETTLE_MS);

  // Every member over the same slices, so machine load hits all rows alike.
  const pidsOf = new Map(members.map((m) => [m, sandboxPids(m.container)]));
  const samples = new Map<string, number[]>();
  const watched = members.filter((m) => m.group === 'sandbox' || m.group === 'pool').length;
  const daemonSamples: number[] = [];
  let daemonBefore = ticks([d.pid]);
  let before = new Map(members.map((m) => [m, ticks(pidsOf.get(m)!)]));
  for (let s = 0; s < Math.round(windowS / SLICE_S); s++) {
    const t0 = performance.now();
    await sleep(SLICE_S * 1000);
    const seconds = (performance.now() - t0) / 1000;
    const after = new Map(members.map((m) => [m, ticks(pidsOf.get(m)!)]));
    for (const m of members) {
      const percent = ((after.get(m)! - before.get(m)!) / TICKS_PER_S / seconds) * 100;
      samples.set(m.group, [...(samples.get(m.group) ?? []), percent]);
    }
    const daemonAfter = ticks([d.pid]);
    daemonSamples.push(((daemonAfter - daemonBefore) / TICKS_PER_S / seconds) * 100);
    daemonBefore = daemonAfter;
    before = after;
  }
  await resetPool();

  const count = (g: string) => members.filter((m) => m.group === g).length;
  const add = (key: string, label: string, baseline?: string) => {
    const values = samples.get(key);
    if (!values) {
      r.note(`idle: no ${label} to measure`);
      return;
    }
    r.add({
      key: `idle-${key}`,
      suite: SUITE,
      label: `${label} (${count(key)})`,
      unit: '% core',
      values,
      ...(baseline ? { baseline: `idle-${baseline}` } : { isBaseline: true }),
    });
  };
  add('raw-packaged', `raw runsc run sleep, packaged ${PACKAGED}`);
  add('raw-daemon', `raw runsc run sleep, daemon's runsc (${health.runsc.kind})`, 'raw-packaged');
  add('sandbox', 'idle warren sandbox', 'raw-packaged');
  add('shell', 'shell (runsc create, not yet used)', 'raw-packaged');
  add('pool', 'warm-pool member (base)', 'raw-packaged');
  r.add({
    key: 'idle-daemon',
    suite: SUITE,
    label: `warren daemon, whole process (watching ${watched})`,
    unit: '% core',
    values: daemonSamples,
    isBaseline: true,
  });
  r.add({
    key: 'idle-daemon-per-sandbox',
    suite: SUITE,
    label: 'warren daemon ÷ sandboxes and pool members watched (upper bound: includes its fixed cost)',
    unit: '% core',
    values: daemonSamples.map((v) => v / Math.max(1, watched)),
    baseline: 'idle-daemon',
  });
  r.note(
    `idle: ${windowS} s window in ${SLICE_S} s slices; daemon runsc ${health.runsc.kind} ${daemonRunsc} (${health.runsc.version}); CPU time of other helpers' work does not count, but a loaded machine delays wake-ups`,
  );
  for (const [key, label] of [
    ['sandbox', 'idle sandbox'],
    ['shell', 'shell'],
    ['pool', 'pool member'],
  ] as const) {
    if (!r.get(`idle-${key}`)) continue;
    r.target(
      `${label} idles at ≤ ${TARGET_PERCENT}% of a core`,
      r.p50(`idle-${key}`) <= TARGET_PERCENT,
      `p50 ${r.p50(`idle-${key}`).toFixed(3)}% (raw packaged runsc ${r.p50('idle-raw-packaged').toFixed(2)}%)`,
    );
  }
}
