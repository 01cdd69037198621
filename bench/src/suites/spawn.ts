/**
 * "What is the cheapest way for the agent to start a process inside gVisor?" Per-spawn cost of
 * /bin/true through many mechanisms, inside one sandbox (run as root, like the agent) and, for
 * comparison, the same scripts on the host.
 */
import type { Context } from '../context.js';
import { buildNative, InSandbox, onHost, type ScriptResult } from '../inside.js';

const SUITE_SBX = 'spawn (inside gVisor)';
const SUITE_HOST = 'spawn (host, for comparison)';
const FLOOR = 'node spawnSync /bin/true';

function slug(s: string): string {
  return s
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-|-$/g, '');
}

function addAll(ctx: Context, suite: string, prefix: string, parts: ScriptResult[]): void {
  const floorKey = `${prefix}:${slug(FLOOR)}`;
  for (const part of parts) {
    for (const [name, values] of Object.entries(part.results)) {
      const key = `${prefix}:${slug(name)}`;
      const isFloor = key === floorKey;
      ctx.report.add({ key, suite, label: name, unit: 'ms', values, isBaseline: isFloor, baseline: isFloor ? undefined : floorKey });
    }
    for (const [name, err] of Object.entries(part.errors ?? {})) ctx.report.note(`${suite}: ${name} failed: ${err}`);
  }
}

export async function runSpawn(ctx: Context): Promise<void> {
  const n = ctx.iters.spawn;
  const native = await buildNative(ctx.tmp('spawn-c'));
  if (native.why) ctx.report.note(`spawn: no native (C) rows: ${native.why}`);
  const nativeArgs = (uid: number) => [String(n), '3', String(uid), String(uid), '1024'];
  const { sbx, kill } = await ctx.sandbox();
  const inside = new InSandbox(sbx);
  const cfg = { n, warmup: 3, uid: 1000, gid: 1000, pidsLimit: 1024 };
  const sNode = await inside.node(cfg);
  const sPy = await inside.python(cfg);
  const sC = native.binary ? await inside.native(native.binary, nativeArgs(1000)) : { results: {} };
  const sSh = await inside.shell(n, 3);
  await kill();
  addAll(ctx, SUITE_SBX, 'sbx', [sNode, sPy, sC, sSh]);

  // Off by default to keep the run short: BENCH_SPAWN_HOST=1 adds the same table for the host.
  if (process.env.BENCH_SPAWN_HOST === '1') {
    const hcfg = { n, warmup: 3, uid: 65534, gid: 65534, pidsLimit: 1024 };
    const hNode = await onHost.node(hcfg);
    const hPy = await onHost.python(hcfg).catch((err: Error) => ({ results: {}, errors: { python3: err.message } }));
    const hC = native.binary ? await onHost.native(native.binary, nativeArgs(65534)) : { results: {} };
    const hSh = await onHost.shell(n, 3);
    addAll(ctx, SUITE_HOST, 'host', [hNode, hPy, hC, hSh]);
  }
}
