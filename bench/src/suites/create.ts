/**
 * Create to exec-ready through the SDK vs raw `runsc run` of a minimal bundle running
 * `node -e 0`. The kinds are interleaved so that load from whatever else runs on the machine
 * hits them alike.
 */
import { Sandbox } from '@warren/sdk';
import type { Context } from '../context.js';
import { RawRunsc, GUEST_NODE } from '../raw.js';

const SUITE = 'create';

export async function runCreate(ctx: Context): Promise<void> {
  const n = ctx.iters.create;
  const d = await ctx.getDaemon();
  const raw = new RawRunsc(ctx);
  const create: number[] = [];
  const firstExec: number[] = [];
  const kill: number[] = [];
  const rawNode: number[] = [];
  const rawTrue: number[] = [];

  const sdkOnce = async (record: boolean) => {
    const t0 = performance.now();
    const sbx = await Sandbox.create({ ...d.conn, ttlSeconds: 300, metadata: { bench: 'create' } });
    const t1 = performance.now();
    const forget = ctx.defer(`kill sandbox ${sbx.id}`, () => sbx.kill().catch(() => undefined));
    const r = await sbx.exec(['true']);
    const t2 = performance.now();
    if (r.exitCode !== 0) throw new Error(`first exec in ${sbx.id} exited ${r.exitCode}`);
    await forget();
    const t3 = performance.now();
    if (record) {
      create.push(t1 - t0);
      firstExec.push(t2 - t0);
      kill.push(t3 - t2);
    }
  };

  // Warm-up, not recorded: page cache for runsc, node and the rootfs; the daemon's JIT.
  await raw.runToExit([GUEST_NODE, '-e', '0']);
  await sdkOnce(false);
  for (let i = 0; i < n; i++) {
    rawNode.push(await raw.runToExit([GUEST_NODE, '-e', '0']));
    await sdkOnce(true);
    rawTrue.push(await raw.runToExit(['/bin/true']));
    process.stdout.write('.');
  }
  process.stdout.write('\n');

  const r = ctx.report;
  r.add({ key: 'raw-runsc-node', suite: SUITE, label: 'raw `runsc run` node -e 0 (spawn→exit)', unit: 'ms', values: rawNode, isBaseline: true });
  r.add({
    key: 'raw-runsc-true',
    suite: SUITE,
    label: 'raw `runsc run` /bin/true (spawn→exit)',
    unit: 'ms',
    values: rawTrue,
    baseline: 'raw-runsc-node',
    note: 'sandbox start+teardown without node start-up',
  });
  r.add({ key: 'sdk-create', suite: SUITE, label: 'Sandbox.create → ready', unit: 'ms', values: create, baseline: 'raw-runsc-node' });
  r.add({ key: 'sdk-create-exec', suite: SUITE, label: 'Sandbox.create + first exec(true)', unit: 'ms', values: firstExec, baseline: 'raw-runsc-node' });
  r.add({ key: 'sdk-kill', suite: SUITE, label: 'sbx.kill()', unit: 'ms', values: kill });
  const ratio = r.p50('sdk-create') / r.p50('raw-runsc-node');
  r.target(
    'create p50 ≤ 1.3× raw runsc run (node -e 0)',
    ratio <= 1.3,
    `${r.p50('sdk-create').toFixed(0)} ms vs ${r.p50('raw-runsc-node').toFixed(0)} ms = ${ratio.toFixed(2)}×`,
  );
}
