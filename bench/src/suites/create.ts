/**
 * Create to exec-ready through the SDK vs raw `runsc run` of a minimal bundle running
 * `node -e 0`. The kinds are interleaved so that load from whatever else runs on the machine
 * hits them alike.
 *
 * The suite's shared daemon runs like every test daemon: no default pool, and base (no start
 * command) is not baked, so its creates are cold boots. Then a second daemon with the real
 * defaults (docs/fast-creates.md) gives the create a user gets with no options and no
 * settings: a claim from base's default warm pool, and, with that pool turned off, a restore
 * of base's baked image. Both against raw `runsc run /bin/true` of the same run, interleaved.
 */
import { getBake, getPool, Sandbox, setPoolSize, type BootKind } from '@warren/sdk';
import type { DaemonHandle } from '@warren/tests/harness';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { sleep, waitFor, type Context } from '../context.js';
import { RawRunsc, GUEST_NODE } from '../raw.js';

const SUITE = 'create';
/** After the shell is ready: its making (at a low CPU weight) has ended, the machine is quiet. */
const SETTLE_MS = 300;

/**
 * Shells of the daemon's driver (drivers/gvisor/shells.ts) that are made (runsc state
 * 'created') and not yet filled by a restore.
 */
function readyShells(home: string): number {
  const out = execFileSync('runsc', ['--root', path.join(home, 'runsc'), 'list', '--format=json'], { encoding: 'utf8' });
  const containers = JSON.parse(out || '[]') as Array<{ id: string; status: string }>;
  return containers.filter((c) => c.id.startsWith('shell-') && c.status === 'created' && !existsSync(path.join(home, 'shells', c.id, 'sandbox'))).length;
}

/**
 * Each default-create sample starts from the daemon's steady state, as a user creating at a
 * human pace finds it: besides a full pool, a shell made for the next restore (the last
 * restore's, made in the background at a low CPU weight), then a moment for the machine to go
 * quiet. Right after the previous sample's kill, its refill and the raw baseline, that work
 * was still running.
 */
async function settled(d: DaemonHandle): Promise<void> {
  await waitFor(async () => readyShells(d.home) > 0, 60_000, 'a runsc shell ready for the next restore');
  await sleep(SETTLE_MS);
}

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

  // The real defaults: WARREN_DEFAULT_POOL and WARREN_BAKE unset ('' overrides the harness's test settings).
  const { daemon: def, stop: stopDefaults } = await ctx.startDaemon('daemon (defaults)', { WARREN_DEFAULT_POOL: '', WARREN_BAKE: '' });
  await waitFor(async () => (await getBake('base', def.conn)).state === 'ready', 180_000, 'base baked by the defaults daemon');
  const size = (await getPool('base', def.conn)).size;
  if (size === 0) throw new Error('the defaults daemon sized the default pool 0 (too little MemAvailable on this host): no pool hits to measure');
  const full = async () => {
    const p = await getPool('base', def.conn);
    if (p.bootFailures > 0) throw new Error(`default pool: ${p.bootFailures} boot failures: ${p.lastError ?? ''}`);
    return p.ready === size && p.booting === 0;
  };
  const defaultOnce = async (d: DaemonHandle, want: BootKind): Promise<[number, number]> => {
    const t0 = performance.now();
    const sbx = await Sandbox.create({ ...d.conn, ttlSeconds: 300, metadata: { bench: 'create' } });
    const t1 = performance.now();
    const forget = ctx.defer(`kill sandbox ${sbx.id}`, () => sbx.kill().catch(() => undefined));
    try {
      const r = await sbx.exec(['true']);
      if (sbx.info.boot !== want) throw new Error(`default create ${sbx.id} booted '${sbx.info.boot}', expected '${want}'`);
      if (r.exitCode !== 0) throw new Error(`first exec in ${sbx.id} exited ${r.exitCode}`);
      return [t1 - t0, performance.now() - t0];
    } finally {
      await forget();
    }
  };
  const poolHit: Array<[number, number]> = [];
  const bakedMiss: Array<[number, number]> = [];
  // Pool hits: every sample starts with a full pool (waited for, untimed).
  await waitFor(full, 180_000, `default pool of base filled (${size})`);
  await defaultOnce(def, 'pool');
  for (let i = 0; i < n; i++) {
    await waitFor(full, 120_000, 'default pool refilled');
    await settled(def);
    poolHit.push(await defaultOnce(def, 'pool'));
    rawTrue.push(await raw.runToExit(['/bin/true']));
    process.stdout.write('.');
  }
  // Pool empty, image ready: the pool is turned off, so every create restores the image.
  await setPoolSize('base', 0, def.conn);
  await waitFor(
    async () => {
      const p = await getPool('base', def.conn);
      return p.ready === 0 && p.booting === 0;
    },
    60_000,
    'default pool emptied',
  );
  await defaultOnce(def, 'baked');
  for (let i = 0; i < n; i++) {
    await settled(def);
    bakedMiss.push(await defaultOnce(def, 'baked'));
    rawTrue.push(await raw.runToExit(['/bin/true']));
    process.stdout.write('.');
  }
  process.stdout.write('\n');
  await stopDefaults();

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
  r.add({
    key: 'sdk-create',
    suite: SUITE,
    label: 'Sandbox.create → ready (cold: shared daemon bakes no base, has no pool)',
    unit: 'ms',
    values: create,
    baseline: 'raw-runsc-node',
  });
  r.add({ key: 'sdk-create-exec', suite: SUITE, label: 'Sandbox.create + first exec(true)', unit: 'ms', values: firstExec, baseline: 'raw-runsc-node' });
  r.add({ key: 'sdk-kill', suite: SUITE, label: 'sbx.kill()', unit: 'ms', values: kill });
  const col = (s: Array<[number, number]>, i: 0 | 1) => s.map((x) => x[i]);
  r.add({
    key: 'default-pool',
    suite: SUITE,
    label: `default create (no options), pool hit → ready`,
    unit: 'ms',
    values: col(poolHit, 0),
    baseline: 'raw-runsc-true',
    note: `daemon with default settings: base's default pool (${size}) full before each sample`,
  });
  r.add({
    key: 'default-pool-exec',
    suite: SUITE,
    label: 'default create, pool hit + first exec(true)',
    unit: 'ms',
    values: col(poolHit, 1),
    baseline: 'raw-runsc-true',
  });
  r.add({
    key: 'default-baked',
    suite: SUITE,
    label: 'default create (no options), pool empty, baked → ready',
    unit: 'ms',
    values: col(bakedMiss, 0),
    baseline: 'raw-runsc-true',
    note: 'the pool set to 0: a restore of base’s baked image, into a shell when one is ready',
  });
  r.add({
    key: 'default-baked-exec',
    suite: SUITE,
    label: 'default create, baked + first exec(true)',
    unit: 'ms',
    values: col(bakedMiss, 1),
    baseline: 'raw-runsc-true',
  });
  r.target(
    'default create, pool hit p50 ≤ 30 ms',
    r.p50('default-pool') <= 30,
    `${r.p50('default-pool').toFixed(0)} ms (raw runsc run /bin/true ${r.p50('raw-runsc-true').toFixed(0)} ms)`,
  );
  r.target(
    'default create, pool empty but baked p50 ≤ 250 ms',
    r.p50('default-baked') <= 250,
    `${r.p50('default-baked').toFixed(0)} ms (raw runsc run /bin/true ${r.p50('raw-runsc-true').toFixed(0)} ms)`,
  );
  const ratio = r.p50('sdk-create') / r.p50('raw-runsc-node');
  r.target(
    'create p50 ≤ 1.3× raw runsc run (node -e 0)',
    ratio <= 1.3,
    `${r.p50('sdk-create').toFixed(0)} ms vs ${r.p50('raw-runsc-node').toFixed(0)} ms = ${ratio.toFixed(2)}×`,
  );
}
