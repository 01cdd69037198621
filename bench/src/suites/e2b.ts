/**
 * E2B's official SDK against warren (docs/e2b.md), beside warren's own SDK in the same run:
 * `commands.run('true')` vs `sbx.exec(['true'])`, and `Sandbox.create()` of each. E2B's
 * commands.run runs `/bin/bash -l -c CMD`, so a third row runs that same command line through
 * warren's SDK: the difference to it is what the E2B layer costs, the rest is the login shell.
 */
import { Sandbox as E2bSandbox } from 'e2b';
import { Sandbox } from '@warren/sdk';
import type { Context } from '../context.js';

const SUITE = 'e2b';

export async function runE2b(ctx: Context): Promise<void> {
  const d = await ctx.getDaemon();
  const env = { E2B_API_URL: `${d.url}/e2b`, E2B_SANDBOX_URL: `${d.url}/e2b/envd`, E2B_API_KEY: d.apiKey, E2B_VALIDATE_API_KEY: 'false' };
  Object.assign(process.env, env);
  const n = ctx.iters.e2b;

  const { sbx, kill } = await ctx.sandbox();
  const e2b = await E2bSandbox.create({ timeoutMs: 3_600_000 });
  const killE2b = ctx.defer(`kill e2b sandbox ${e2b.sandboxId}`, () => e2b.kill().then(() => undefined));
  for (let i = 0; i < 10; i++) {
    await sbx.exec(['true']);
    await e2b.commands.run('true');
  }
  const native: number[] = [];
  const nativeLogin: number[] = [];
  const viaE2b: number[] = [];
  for (let i = 0; i < n; i++) {
    let t0 = performance.now();
    await sbx.exec(['true']);
    native.push(performance.now() - t0);
    t0 = performance.now();
    await sbx.exec(['/bin/bash', '-l', '-c', 'true'], { user: 'user' });
    nativeLogin.push(performance.now() - t0);
    t0 = performance.now();
    const r = await e2b.commands.run('true');
    viaE2b.push(performance.now() - t0);
    if (r.exitCode !== 0) throw new Error(`e2b commands.run('true') exited ${r.exitCode}`);
  }
  await killE2b();
  await kill();

  const creates: number[] = [];
  const e2bCreates: number[] = [];
  for (let i = 0; i < ctx.iters.e2bcreate; i++) {
    let t0 = performance.now();
    const s = await Sandbox.create(d.conn);
    creates.push(performance.now() - t0);
    await s.kill();
    t0 = performance.now();
    const e = await E2bSandbox.create();
    e2bCreates.push(performance.now() - t0);
    await e.kill();
  }

  const r = ctx.report;
  r.add({ key: 'e2b-native-true', suite: SUITE, label: "warren SDK: sbx.exec(['true'])", unit: 'ms', values: native, isBaseline: true });
  r.add({
    key: 'e2b-native-login',
    suite: SUITE,
    label: "warren SDK: sbx.exec(['/bin/bash', '-l', '-c', 'true'])",
    unit: 'ms',
    values: nativeLogin,
    baseline: 'e2b-native-true',
    note: 'the command line E2B runs for commands.run',
  });
  r.add({ key: 'e2b-run-true', suite: SUITE, label: "E2B SDK: commands.run('true')", unit: 'ms', values: viaE2b, baseline: 'e2b-native-true' });
  r.add({ key: 'e2b-native-create', suite: SUITE, label: 'warren SDK: Sandbox.create()', unit: 'ms', values: creates, isBaseline: true });
  r.add({ key: 'e2b-create', suite: SUITE, label: 'E2B SDK: Sandbox.create()', unit: 'ms', values: e2bCreates, baseline: 'e2b-native-create' });
  const runOver = r.p50('e2b-run-true') - r.p50('e2b-native-true');
  const layerOver = r.p50('e2b-run-true') - r.p50('e2b-native-login');
  r.target(
    "E2B commands.run('true') p50 ≤ warren sbx.exec(['true']) p50 + 3 ms",
    runOver <= 3,
    `+${runOver.toFixed(2)} ms; of it the E2B layer (vs the same bash -l -c through warren's SDK) ${layerOver >= 0 ? '+' : ''}${layerOver.toFixed(2)} ms`,
  );
  const createOver = r.p50('e2b-create') - r.p50('e2b-native-create');
  r.target('E2B Sandbox.create() p50 ≤ warren Sandbox.create() p50 + 5 ms', createOver <= 5, `${createOver >= 0 ? '+' : ''}${createOver.toFixed(2)} ms`);
}
