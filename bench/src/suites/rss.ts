/**
 * Memory: the daemon's RSS idle (no sandboxes, then one idle sandbox) vs a bare idle node
 * process, and the host memory of one idle sandbox (all its host processes, RSS and PSS) vs
 * a raw runsc container idling in node.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { Context } from '../context.js';
import { sleep } from '../context.js';
import { RawRunsc, GUEST_NODE } from '../raw.js';
import { cgroupMemory, MB, processMem, sandboxPids, sumMem } from '../procmem.js';

const SUITE = 'rss';
const IDLE_NODE = 'setInterval(() => {}, 1 << 30)';
/** Let a fresh sandbox finish starting up and its memory settle before sampling. */
const SETTLE_MS = 3000;
/** Sandboxes kept idle at once to measure what one more costs the host. */
const DENSITY_N = 10;

function memAvailable(): number {
  return Number(/MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? NaN) * 1024;
}

async function samples(count: number, fn: () => number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    if (i) await sleep(200);
    out.push(fn());
  }
  return out;
}

export async function runRss(ctx: Context): Promise<void> {
  const k = ctx.iters.rss;
  const r = ctx.report;

  // A bare idle node process: what any node daemon costs before it does anything.
  const bare = spawn(process.execPath, ['-e', IDLE_NODE], { stdio: 'ignore' });
  const stopBare = ctx.defer('stop bare node', () => void bare.kill('SIGKILL'));
  await sleep(1000);
  const bareRss = await samples(k, () => processMem(bare.pid!).rss / MB);
  await stopBare();

  // A fresh daemon, so that earlier suites' garbage does not count.
  const d = await ctx.getDaemon(true);
  await sleep(1000);
  const idle0 = await samples(k, () => d.rss() / MB);
  const idle0Pss = await samples(k, () => processMem(d.pid).pss / MB);

  const { sbx, kill } = await ctx.sandbox();
  await sbx.exec(['true']);
  await sleep(SETTLE_MS);
  const idle1 = await samples(k, () => d.rss() / MB);
  const pids = sandboxPids(sbx.id, 'warren');
  const sbxRss = await samples(k, () => sumMem(sandboxPids(sbx.id, 'warren')).rss / MB);
  const sbxPss = await samples(k, () => sumMem(sandboxPids(sbx.id, 'warren')).pss / MB);
  const cg = await samples(k, () => (cgroupMemory('warren', sbx.id) ?? NaN) / MB);
  const detail = pids.map((p) => `${p}:${(processMem(p).pss / MB).toFixed(1)}`).join(' ');
  await kill();

  // Density: PSS charges shared pages (the node and runsc binaries, the Sentry's text) to
  // whoever maps them, so one sandbox alone on a quiet host carries all of them. What one
  // more sandbox costs is the drop in MemAvailable with DENSITY_N of them idling.
  await sleep(1000);
  const availBefore = memAvailable();
  const many: Array<Awaited<ReturnType<Context['sandbox']>>> = [];
  for (let i = 0; i < DENSITY_N; i++) many.push(await ctx.sandbox());
  await Promise.all(many.map(({ sbx: s }) => s.exec(['true'])));
  await sleep(SETTLE_MS);
  const marginal = await samples(k, () => (availBefore - memAvailable()) / DENSITY_N / MB);
  const pssEach = await samples(k, () => many.reduce((sum, { sbx: s }) => sum + sumMem(sandboxPids(s.id, 'warren')).pss, 0) / DENSITY_N / MB);
  for (const m of many) await m.kill();

  // Baseline sandbox: raw runsc, read-only root, idling in node.
  const raw = new RawRunsc(ctx);
  const c = await raw.runDetached([GUEST_NODE, '-e', IDLE_NODE]);
  await sleep(SETTLE_MS);
  const rawRss = await samples(k, () => sumMem(sandboxPids(c.id)).rss / MB);
  const rawPss = await samples(k, () => sumMem(sandboxPids(c.id)).pss / MB);
  const rawPids = sandboxPids(c.id).length;
  await c.remove();

  r.add({ key: 'bare-node-rss', suite: SUITE, label: 'bare idle `node -e setInterval` RSS', unit: 'MB', values: bareRss, isBaseline: true });
  r.add({ key: 'daemon-rss-0', suite: SUITE, label: 'daemon RSS, no sandboxes', unit: 'MB', values: idle0, baseline: 'bare-node-rss' });
  r.add({ key: 'daemon-pss-0', suite: SUITE, label: 'daemon PSS, no sandboxes', unit: 'MB', values: idle0Pss, baseline: 'bare-node-rss' });
  r.add({ key: 'daemon-rss-1', suite: SUITE, label: 'daemon RSS, 1 idle sandbox', unit: 'MB', values: idle1, baseline: 'bare-node-rss' });
  r.add({ key: 'raw-sandbox-pss', suite: SUITE, label: `raw runsc idle node: host PSS (${rawPids} procs)`, unit: 'MB', values: rawPss, isBaseline: true });
  r.add({ key: 'raw-sandbox-rss', suite: SUITE, label: 'raw runsc idle node: host RSS sum', unit: 'MB', values: rawRss, baseline: 'raw-sandbox-pss' });
  r.add({
    key: 'sandbox-pss',
    suite: SUITE,
    label: `idle sandbox: host PSS (${pids.length} procs, each address space once)`,
    unit: 'MB',
    values: sbxPss,
    baseline: 'raw-sandbox-pss',
    note: `PSS per pid: ${detail}`,
  });
  r.add({
    key: 'sandbox-rss',
    suite: SUITE,
    label: 'idle sandbox: host RSS, each address space once (counts shared binaries in full)',
    unit: 'MB',
    values: sbxRss,
    baseline: 'raw-sandbox-rss',
  });
  r.add({ key: 'sandbox-cgroup', suite: SUITE, label: 'idle sandbox: memory cgroup usage (incl. cache)', unit: 'MB', values: cg });
  r.add({
    key: 'sandbox-marginal',
    suite: SUITE,
    label: `${DENSITY_N} idle sandboxes: MemAvailable drop per sandbox`,
    unit: 'MB',
    values: marginal,
    baseline: 'raw-sandbox-pss',
    note: 'what one more idle sandbox costs the host',
  });
  r.add({
    key: 'sandbox-pss-dense',
    suite: SUITE,
    label: `${DENSITY_N} idle sandboxes: host PSS per sandbox`,
    unit: 'MB',
    values: pssEach,
    baseline: 'raw-sandbox-pss',
  });

  r.target(
    'daemon idle RSS ≤ 120 MB (no sandboxes)',
    r.p50('daemon-rss-0') <= 120,
    `${r.p50('daemon-rss-0').toFixed(1)} MB; with 1 idle sandbox ${r.p50('daemon-rss-1').toFixed(1)} MB`,
  );
  r.target(
    'one idle sandbox ≤ 80 MB host memory (PSS)',
    r.p50('sandbox-pss') <= 80,
    `PSS ${r.p50('sandbox-pss').toFixed(1)} MB; RSS ${r.p50('sandbox-rss').toFixed(1)} MB (counts the runsc and node executables' shared pages in full)`,
  );
  r.target(
    `one more idle sandbox ≤ 80 MB host memory (with ${DENSITY_N} idle)`,
    r.p50('sandbox-marginal') <= 80,
    `MemAvailable drop ${r.p50('sandbox-marginal').toFixed(1)} MB per sandbox; PSS ${r.p50('sandbox-pss-dense').toFixed(1)} MB per sandbox`,
  );
}
