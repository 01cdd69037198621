/**
 * Exec round trip of `true` through the SDK vs the spawn floor inside a sandbox (a node
 * process timing spawnSync('/bin/true'); a bash loop) and host spawns.
 */
import { spawn } from 'node:child_process';
import type { Context } from '../context.js';
import { InSandbox, valuesOf } from '../inside.js';

const SUITE = 'exec';

function hostSpawn(argv: [command: string, ...args: string[]]): Promise<void> {
  const [command, ...args] = argv;
  return new Promise((resolve, reject) => {
    const c = spawn(command, args, { stdio: 'ignore' });
    c.on('error', reject);
    c.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${argv.join(' ')} exited ${code}`))));
  });
}

export async function runExec(ctx: Context): Promise<void> {
  const n = ctx.iters.exec;
  const { sbx, kill } = await ctx.sandbox();
  const rt: number[] = [];
  const guest: number[] = [];
  for (let i = 0; i < 10; i++) await sbx.exec(['true']); // warm-up
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const r = await sbx.exec(['true']);
    rt.push(performance.now() - t0);
    if (r.exitCode !== 0) throw new Error(`exec true exited ${r.exitCode}: ${r.stderr}`);
    guest.push(r.durationMs);
  }

  // Start only: a background exec answers with the pid once spawn() has returned in the agent.
  const start: number[] = [];
  for (let i = 0; i < Math.min(n, 50); i++) {
    const t0 = performance.now();
    await sbx.exec(['true'], { background: true });
    start.push(performance.now() - t0);
  }

  // What the round trip costs without a spawn: a guest call (stat) and a daemon-only call.
  const guestCall: number[] = [];
  const daemonCall: number[] = [];
  for (let i = 0; i < Math.min(n, 50); i++) {
    let t0 = performance.now();
    await sbx.files.exists('/tmp');
    guestCall.push(performance.now() - t0);
    t0 = performance.now();
    await sbx.refresh();
    daemonCall.push(performance.now() - t0);
  }

  // The floor, in the same sandbox right after.
  const inside = new InSandbox(sbx);
  const floor = await inside.node({ n: ctx.iters.spawn, methods: ['node spawnSync /bin/true'] });
  const shell = await inside.shell(ctx.iters.spawn, 3, 'time');
  await kill();

  const host: number[] = [];
  for (let i = 0; i < 5; i++) await hostSpawn(['sh', '-c', 'true']);
  for (let i = 0; i < ctx.iters.spawn; i++) {
    const t0 = performance.now();
    await hostSpawn(['sh', '-c', 'true']);
    host.push(performance.now() - t0);
  }

  const r = ctx.report;
  r.add({
    key: 'sbx-spawnsync-true',
    suite: SUITE,
    label: 'in sandbox: node spawnSync(/bin/true) (floor)',
    unit: 'ms',
    values: valuesOf(floor, (name) => name === 'node spawnSync /bin/true', 'spawn.cjs'),
    isBaseline: true,
  });
  r.add({
    key: 'sbx-bash-time-loop',
    suite: SUITE,
    label: 'in sandbox: bash time(for … /bin/true)/N',
    unit: 'ms',
    values: valuesOf(shell, (name) => name.startsWith('bash time'), 'spawn.sh'),
    baseline: 'sbx-spawnsync-true',
    note: 'each value is the mean of one loop of N spawns',
  });
  r.add({ key: 'host-sh-c-true', suite: SUITE, label: 'host: node spawn(sh -c true) → exit', unit: 'ms', values: host, isBaseline: true });
  r.add({ key: 'sdk-exec-true', suite: SUITE, label: "sbx.exec(['true']) round trip", unit: 'ms', values: rt, baseline: 'sbx-spawnsync-true' });
  r.add({
    key: 'sdk-exec-guest',
    suite: SUITE,
    label: '  of which result.durationMs',
    unit: 'ms',
    values: guest,
    baseline: 'sbx-spawnsync-true',
    note: "the agent's clock starts once warren-init has started the command (vfork+execve done), so the spawn is not in it",
  });
  r.add({
    key: 'sdk-exec-start',
    suite: SUITE,
    label: "exec(['true'], {background}) → pid",
    unit: 'ms',
    values: start,
    note: 'transport + the agent + warren-init up to the command having been exec()ed',
  });
  r.add({ key: 'sdk-files-exists', suite: SUITE, label: 'files.exists round trip (guest call, no spawn)', unit: 'ms', values: guestCall });
  r.add({ key: 'sdk-refresh', suite: SUITE, label: 'sbx.refresh() round trip (daemon only)', unit: 'ms', values: daemonCall });
  const over = r.p50('sdk-exec-true') - r.p50('sbx-spawnsync-true');
  r.target(
    'exec p50 ≤ in-sandbox spawnSync floor p50 + 10 ms',
    over <= 10,
    `${r.p50('sdk-exec-true').toFixed(1)} ms vs floor ${r.p50('sbx-spawnsync-true').toFixed(1)} ms (${over >= 0 ? '+' : ''}${over.toFixed(1)} ms); host sh -c true ${r.p50('host-sh-c-true').toFixed(1)} ms`,
  );
}
