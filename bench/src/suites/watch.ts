/**
 * File watch latency: a process inside the sandbox creates files, each named after the
 * moment (wall clock, µs) just before its create; a watch open through the SDK notes when
 * each create event reaches it. The sandbox's wall clock is the host's (gVisor reads the
 * host's time), so the difference is the whole path: inotify in the Sentry, the agent's
 * coalescing, the guest channel, the daemon and its HTTP stream. Same-run floor: an
 * exec(['true']) round trip, a request that crosses the same channel and daemon both ways.
 */
import type { WatchChange } from '@warren/sdk';
import type { Context } from '../context.js';

const SUITE = 'watch';
const DIR = '/home/user/bench-watch';
/** Between creates: longer than the agent's 25 ms send throttle, so none is coalesced. */
const GAP_MS = 60;

/** Node inside: N creates, GAP_MS apart, each named `<i>-<wall clock ms, 3 decimals>`. */
function writer(n: number): string {
  const js = `const fs=require('fs');let i=0;const t=setInterval(()=>{const at=(performance.timeOrigin+performance.now()).toFixed(3);fs.writeFileSync('${DIR}/'+i+'-'+at,'');if(++i>=${n})clearInterval(t);},${GAP_MS});`;
  return `node -e "${js}"`;
}

export async function runWatch(ctx: Context): Promise<void> {
  const n = ctx.iters.watch;
  const { sbx, kill } = await ctx.sandbox();
  await sbx.files.mkdir(DIR);
  const latencies: number[] = [];
  const arrived = new Map<string, number>();
  const watch = await sbx.files.watch(DIR, {}, (e) => {
    if (e.type === 'create') arrived.set((e as WatchChange).path, performance.timeOrigin + performance.now());
  });
  try {
    const r = await sbx.exec(writer(n + 5), { timeoutSeconds: 120 });
    if (r.exitCode !== 0) throw new Error(`the writer failed: ${r.stderr}`);
    const deadline = Date.now() + 10_000;
    while (arrived.size < n + 5 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50));
    for (const [p, at] of arrived) {
      const [i, made] = p.slice(DIR.length + 1).split('-');
      if (Number(i) < 5) continue; // warm-up: the first creates start node's timers and JIT
      latencies.push(at - Number(made));
    }
    if (latencies.length < n) throw new Error(`only ${latencies.length} of ${n} create events arrived`);
  } finally {
    watch.close();
  }
  const floor: number[] = [];
  for (let i = 0; i < Math.max(20, n); i++) {
    const t0 = performance.now();
    await sbx.exec(['true']);
    floor.push(performance.now() - t0);
  }
  await kill();
  const r = ctx.report;
  const base = r.add({
    key: 'watch-exec-true',
    suite: SUITE,
    label: "exec(['true']) round trip (same run, for scale)",
    unit: 'ms',
    values: floor,
    isBaseline: true,
  });
  r.add({
    key: 'watch-event',
    suite: SUITE,
    label: 'create inside → watch event at the SDK',
    unit: 'ms',
    values: latencies,
    baseline: base.key,
  });
}
