/**
 * warren benchmarks. Not part of the tests.
 *
 *   npx tsc -b bench && npm run bench                       # everything (about 3-5 minutes)
 *   node bench/dist/run.js create exec files spawn rss     # a subset, any order
 *   node bench/dist/run.js templates --n templates=8,rebuild=4  # baked/pooled creates, rebuilds
 *   node bench/dist/run.js machine --n machine=8,fork8=3     # fork, hibernate, snapshot vs raw checkpoint/restore
 *   node bench/dist/run.js egress --n egress=200,egressbulk=5   # HTTPS through the egress proxy vs direct
 *   node bench/dist/run.js exec --n exec=300,spawn=200      # iteration counts
 *   node bench/dist/run.js tools --n tools=10               # agent tools: bash on 50 MB of output
 *   node bench/dist/run.js python --n python=200            # Python SDK vs TS SDK exec round trips
 *   node bench/dist/run.js mcp --n mcp=200                  # an MCP tool call (stdio, HTTP) vs Toolset.call
 *   node bench/dist/run.js idle --n idle=60                 # idle CPU of sandboxes, shells, pool members vs raw runsc
 *   node bench/dist/run.js workload --n workload=3          # agent commands (git, grep, tsc, npm ci, pip...) host vs sandbox
 *   node bench/dist/run.js syscalls --n syscalls=5          # per-call cost of getppid, lstat, open+close: host vs sandbox
 *   node bench/dist/run.js cli --n cli=30                   # warren ls start-up vs node -e 0
 *   node bench/dist/run.js stdin --n stdin=3                # exec stdin (what warren exec -i streams) vs a host pipe
 *   node bench/dist/run.js density --n density=150,records=10000  # N idle sandboxes; 10,000 hibernated records
 *   node bench/dist/run.js databases --n databases=5        # database create and branch of 100 MB vs plain forks
 *   node bench/dist/run.js terminal --n terminal=200        # keystroke echo through a terminal vs in-sandbox pipe and pty
 *   node bench/dist/run.js dashboard --n dashboard=10,dashboardrows=500  # the dashboard in chromium: page load with 500 listed, idle CPU, keystroke echo
 *   node bench/dist/run.js e2b --n e2b=100,e2bcreate=10     # E2B's official SDK vs warren's: commands.run('true'), Sandbox.create()
 *   BENCH_N=create=4 BENCH_SCALE=0.5 npm run bench         # the same through the environment
 *   node bench/dist/run.js --json results.json              # also write all samples as JSON
 *   BENCH_SPAWN_HOST=1 node bench/dist/run.js spawn        # spawn table on the host too
 *   BENCH_WORKLOAD_ENV='GLIBC_TUNABLES=' node bench/dist/run.js workload  # plus sandbox rows with this env (K=V;K2=V2)
 *   BENCH_WORKLOAD_HOST_DISK=1 node bench/dist/run.js workload  # host copy in /tmp instead of /dev/shm
 *
 * Needs what the e2e tests need (runsc, the base template, a built warren) and root.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { Context, cpuSample, DEFAULT_ITERS, loadavg, QUIET_IDLE_PERCENT, runningSandboxes, speedProbe, SUITES, type Iters, type SuiteName } from './context.js';
import { runDefaults } from './suites/defaults.js';
import { runCreate } from './suites/create.js';
import { runExec } from './suites/exec.js';
import { runFiles } from './suites/files.js';
import { runRss } from './suites/rss.js';
import { runSpawn } from './suites/spawn.js';
import { runTemplates } from './suites/templates.js';
import { runMachine } from './suites/machine.js';
import { runEgress } from './suites/egress.js';
import { runTools } from './suites/tools.js';
import { runPython } from './suites/python.js';
import { runMcp } from './suites/mcp.js';
import { runIdle } from './suites/idle.js';
import { runWorkload } from './suites/workload.js';
import { runSyscalls } from './suites/syscalls.js';
import { runCli } from './suites/cli.js';
import { runDensity } from './suites/density.js';
import { runTerminal } from './suites/terminal.js';
import { runDirs } from './suites/dirs.js';
import { runStdin } from './suites/stdin.js';
import { runWatch } from './suites/watch.js';
import { runDatabases } from './suites/databases.js';
import { runDashboard } from './suites/dashboard.js';
import { runAuth } from './suites/auth.js';
import { runE2b } from './suites/e2b.js';
import { chooseRunsc, resolveConfig } from '@warren/daemon';

const RUNNERS: Record<SuiteName, (ctx: Context) => Promise<void>> = {
  rss: runRss,
  create: runCreate,
  defaults: runDefaults,
  exec: runExec,
  files: runFiles,
  spawn: runSpawn,
  templates: runTemplates,
  machine: runMachine,
  egress: runEgress,
  tools: runTools,
  python: runPython,
  mcp: runMcp,
  idle: runIdle,
  workload: runWorkload,
  syscalls: runSyscalls,
  cli: runCli,
  density: runDensity,
  terminal: runTerminal,
  dirs: runDirs,
  stdin: runStdin,
  watch: runWatch,
  databases: runDatabases,
  auth: runAuth,
  e2b: runE2b,
  dashboard: runDashboard,
};
const PRINT_GROUPS: Record<SuiteName, string[]> = {
  rss: ['rss'],
  create: ['create'],
  defaults: ['defaults (memory)', 'defaults (refill)'],
  exec: ['exec'],
  files: ['files'],
  spawn: ['spawn (inside gVisor)', 'spawn (host, for comparison)'],
  templates: ['templates (create)', 'templates (rebuild)'],
  machine: ['machine (fork)', 'machine (hibernate)', 'machine (disk)'],
  egress: ['egress (latency)', 'egress (throughput)', 'egress (concurrency)'],
  tools: ['tools'],
  python: ['python'],
  mcp: ['mcp'],
  idle: ['idle'],
  workload: ['workload (host vs sandbox)'],
  syscalls: ['syscalls (host vs sandbox)'],
  cli: ['cli'],
  density: ['density (running)', 'density (hibernated)', 'density (registry)'],
  terminal: ['terminal'],
  dirs: ['dirs'],
  stdin: ['stdin'],
  watch: ['watch'],
  databases: ['databases'],
  auth: ['auth'],
  e2b: ['e2b'],
  dashboard: ['dashboard'],
};

function usage(msg?: string, code = 2): never {
  if (msg) console.error(msg);
  console.error(`usage: node bench/dist/run.js [${SUITES.join('|')} ...] [--n suite=N,...] [--scale X] [--json FILE]
  defaults: ${Object.entries(DEFAULT_ITERS)
    .map(([k, v]) => `${k}=${v}`)
    .join(',')}; env BENCH_N and BENCH_SCALE work like --n and --scale`);
  process.exit(code);
}

function parseIters(spec: string | undefined, iters: Iters): void {
  if (!spec) return;
  for (const part of spec.split(',').filter(Boolean)) {
    const [k = '', v] = part.split('='); // split always yields a first field
    if (!(k in iters) || !/^\d+$/.test(v ?? '') || Number(v) < 1) usage(`bad iteration count "${part}"`);
    iters[k as keyof Iters] = Number(v);
  }
}

function parseArgs(argv: string[]): { suites: SuiteName[]; iters: Iters; json?: string } {
  const iters: Iters = { ...DEFAULT_ITERS };
  const scale = Number(process.env.BENCH_SCALE ?? 1);
  let scaleArg: number | undefined;
  let nSpec: string | undefined;
  let json: string | undefined;
  const picked: SuiteName[] = [];
  // One iterator: an option that takes the next argument takes it from the same walk.
  const args = argv.values();
  for (const a of args) {
    if (a === '--n') nSpec = args.next().value;
    else if (a.startsWith('--n=')) nSpec = a.slice(4);
    else if (a === '--scale') scaleArg = Number(args.next().value);
    else if (a.startsWith('--scale=')) scaleArg = Number(a.slice(8));
    else if (a === '--json') json = args.next().value;
    else if (a.startsWith('--json=')) json = a.slice(7);
    else if (a === '-h' || a === '--help') usage(undefined, 0);
    else if ((SUITES as readonly string[]).includes(a)) picked.push(a as SuiteName);
    else usage(`unknown argument "${a}"`);
  }
  const s = scaleArg ?? scale;
  if (!(s > 0)) usage('scale must be a positive number');
  for (const k of Object.keys(iters) as (keyof Iters)[])
    iters[k] = Math.max(
      k === 'files' ||
        k === 'rss' ||
        k === 'create' ||
        k === 'templates' ||
        k === 'rebuild' ||
        k === 'machine' ||
        k === 'fork8' ||
        k === 'egressbulk' ||
        k === 'egressconc' ||
        k === 'idle' ||
        k === 'workload' ||
        k === 'dirs' ||
        k === 'databases'
        ? 2
        : k === 'density' || k === 'keys'
          ? 1
          : 5,
      Math.round(iters[k] * s),
    );
  parseIters(process.env.BENCH_N, iters);
  parseIters(nSpec, iters);
  // rss first: it wants a fresh daemon before anything else has run in it.
  const suites = SUITES.filter((x) => picked.length === 0 || picked.includes(x));
  return { suites, iters, json };
}

/**
 * The packaged runsc (the raw baselines' binary) and the one the bench's daemons run, chosen
 * as a daemon chooses it (WARREN_RUNSC, else the patched build, else the packaged one).
 */
async function runscVersions(): Promise<string> {
  let packaged: string;
  try {
    packaged = execFileSync('runsc', ['--version'], { encoding: 'utf8' }).split('\n')[0] ?? '';
  } catch {
    packaged = 'runsc: not found';
  }
  try {
    const config = resolveConfig();
    const chosen = await chooseRunsc({ ...(config.runscBinary ? { override: config.runscBinary } : {}), cacheDir: config.runscCache });
    return `${packaged} (raw baselines); daemons: ${chosen.kind} ${chosen.version}`;
  } catch (err) {
    return `${packaged}; daemons: no usable runsc (${(err as Error).message})`;
  }
}

async function main(): Promise<void> {
  const { suites, iters, json } = parseArgs(process.argv.slice(2));
  if (process.getuid?.() !== 0) console.warn('warning: not root; runsc and cgroups need root');
  const ctx = new Context(iters);
  let stopping = false;
  const onSignal = (sig: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    console.error(`\n${sig}: cleaning up…`);
    void ctx.cleanupAll().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const started = new Date();
  const t0 = performance.now();
  const header = [
    `warren bench, ${started.toISOString()}`,
    `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, kernel ${os.release()}, node ${process.version}, ${await runscVersions()}`,
    `suites: ${suites.join(' ')}; iterations: ${Object.entries(iters)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ')}`,
    `at start: load ${loadavg()}, ${describeCpu(await cpuSample())}, ${describeSpeed(await speedProbe())}, ${runningSandboxes()} gVisor sandboxes running on this host`,
  ];
  console.log(header.join('\n'));

  let failed = false;
  for (const s of suites) {
    const ts = performance.now();
    const cpu = await cpuSample();
    console.log(`\n[${s}] running… (load ${loadavg()}, ${describeCpu(cpu)}, ${describeSpeed(await speedProbe())}, ${runningSandboxes()} sandboxes on host)`);
    if (cpu.idle < QUIET_IDLE_PERCENT) {
      ctx.report.note(
        `the machine was busy in the second before suite ${s} (${describeCpu(cpu)}, under ${QUIET_IDLE_PERCENT}% idle): its numbers may be off by up to 2x; run it again when the machine is quiet`,
      );
    }
    try {
      await RUNNERS[s](ctx);
      console.log(`[${s}] done in ${((performance.now() - ts) / 1000).toFixed(1)} s`);
    } catch (err) {
      failed = true;
      console.error(`[${s}] FAILED: ${(err as Error).stack ?? err}`);
      ctx.report.note(`suite ${s} failed: ${(err as Error).message}`);
    }
    if (stopping) return;
  }
  await ctx.cleanupAll();

  const footer = `at end: load ${loadavg()}, ${runningSandboxes()} gVisor sandboxes running on this host; total ${((performance.now() - t0) / 1000).toFixed(0)} s`;
  console.log(`\n${header[0]}\n${header[1]}\n${header[3]}\n${footer}`);
  console.log('p95/p99 are the bad tail: high for ms and MB, low for MiB/s. Ratios compare p50s.');
  for (const s of suites) for (const g of PRINT_GROUPS[s]) ctx.report.printSuite(g);
  ctx.report.printTargets();
  for (const n of ctx.report.notes) console.log(`note: ${n}`);
  if (json) {
    writeFileSync(json, JSON.stringify({ started: started.toISOString(), header, footer, iters, suites, ...(ctx.report.toJSON() as object) }, null, 1));
    console.log(`\nsamples written to ${json}`);
  }
  if (failed) process.exitCode = 1;
}

function describeCpu(cpu: { idle: number; steal: number }): string {
  return `CPU ${cpu.idle.toFixed(0)}% idle, ${cpu.steal.toFixed(1)}% steal over 1 s`;
}

/** Compare between runs: a slower machine shows here before it shows in the results. */
function describeSpeed(p: { pingPongUs: number; sha256Ms: number }): string {
  return `speed probe: process ping-pong ${p.pingPongUs.toFixed(0)} µs p50, sha256 of 32 MiB ${p.sha256Ms.toFixed(0)} ms`;
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
