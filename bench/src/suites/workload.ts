/**
 * "How much slower is an agent's real work inside a sandbox than on the host?" The commands a
 * coding agent runs all day, on the same files (workload-files.ts), host and sandbox
 * interleaved in the same run: each command's ratio (sandbox p50 / host p50) and their
 * geometric mean. Timed inside the shell that runs the command (bash $EPOCHREALTIME), so
 * the exec round trip is not part of it; output goes to a file on both sides.
 *
 * The host's copy is in /dev/shm (see hostRoot); BENCH_WORKLOAD_HOST_DISK=1 puts it in /tmp.
 * BENCH_WORKLOAD_ENV='K=V;K2=V2' adds a third row per command: the sandbox with that extra
 * environment (e.g. 'GLIBC_TUNABLES=' to measure without the default malloc tunables).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Sandbox } from '@warren/sdk';
import type { Context } from '../context.js';
import { LIB_FILES, stage, WHEEL } from '../workload-files.js';

const execFileP = promisify(execFile);
const SUITE = 'workload (host vs sandbox)';
const SANDBOX_WS = '/work/wl';
const MAX_RATIO = 3;
const MAX_GEOMEAN = 2;

interface Command {
  key: string;
  label: string;
  /** Runs first, untimed, in the workspace; leaves the shell where `cmd` runs. */
  setup?: string;
  cmd: string;
}

const COMMANDS: Command[] = [
  {
    key: 'git-commit',
    label: 'git init + add -A + commit (5,000 files)',
    setup: 'rm -rf ../g && cp -a repo ../g && cd ../g',
    cmd: 'git init -q && git add -A && git commit -qm init',
  },
  { key: 'git-status', label: 'git status (5,000 files, clean)', setup: 'cd ../g', cmd: 'git status --porcelain' },
  { key: 'grep', label: 'grep -rn over 5,000 files', cmd: 'grep -rn TODO repo/src' },
  { key: 'find-cat', label: `find | xargs cat (${LIB_FILES.toLocaleString('en')} files)`, cmd: 'find repo/src/lib -type f -print0 | xargs -0 cat >/dev/null' },
  { key: 'tsc', label: 'tsc --noEmit (daemon package)', cmd: 'node ts/node_modules/typescript/bin/tsc --noEmit -p ts/packages/daemon' },
  { key: 'unittest', label: 'python3 -m unittest (300 tests)', cmd: 'python3 -B -m unittest discover -s pytests -q' },
  {
    key: 'npm-ci',
    label: 'npm ci --offline (file: tarballs)',
    setup: 'cd npmproj && rm -rf node_modules',
    cmd: 'node ../tools/npm/bin/npm-cli.js ci --offline --ignore-scripts --no-audit --no-fund --cache "$HOME/.npm-wl"',
  },
  {
    key: 'pip',
    label: 'pip install --no-index (local wheel)',
    setup: 'rm -rf ../pipt',
    cmd: `python3 tools/pip.whl/pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check -q --target ../pipt ${WHEEL}`,
  },
];

/** The same fixed environment on both sides (besides PATH and HOME): git identity, no system git config. */
const COMMON_ENV: Record<string, string> = {
  LANG: 'C.UTF-8',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_AUTHOR_NAME: 'bench',
  GIT_AUTHOR_EMAIL: 'bench@example.invalid',
  GIT_COMMITTER_NAME: 'bench',
  GIT_COMMITTER_EMAIL: 'bench@example.invalid',
  GIT_AUTHOR_DATE: '2026-01-01T00:00:00Z',
  GIT_COMMITTER_DATE: '2026-01-01T00:00:00Z',
  npm_config_update_notifier: 'false',
};

/** bash that runs setup, times cmd, and prints `WL <exit code> <start> <end>` (then the output's tail on failure). */
function script(c: Command): string {
  return [
    'set -e',
    c.setup ?? ':',
    'set +e',
    's=$EPOCHREALTIME',
    `{ ${c.cmd} ; } >"$HOME/wl-out.txt" 2>&1`,
    'rc=$?',
    'e=$EPOCHREALTIME',
    'echo "WL $rc $s $e"',
    '[ $rc = 0 ] || tail -c 1500 "$HOME/wl-out.txt"',
  ].join('\n');
}

function parse(stdout: string, where: string, c: Command): number {
  const m = /^WL (\d+) ([\d.]+) ([\d.]+)$/m.exec(stdout);
  if (!m) throw new Error(`${c.key} on ${where} printed no timing: ${stdout.slice(-500)}`);
  if (m[1] !== '0') throw new Error(`${c.key} on ${where} exited ${m[1]}: ${stdout.slice(-1500)}`);
  return (Number(m[3]) - Number(m[2])) * 1000;
}

async function onHost(c: Command, ws: string, home: string): Promise<number> {
  // /usr/bin first: the host's python3 may be another build on PATH (pyenv); the sandbox has Debian's.
  const env = { ...COMMON_ENV, PATH: '/usr/bin:/bin', HOME: home };
  const { stdout } = await execFileP('/bin/bash', ['-c', script(c)], { cwd: ws, env, maxBuffer: 16 * 2 ** 20 });
  return parse(stdout, 'the host', c);
}

async function inSandbox(sbx: Sandbox, c: Command, extraEnv: Record<string, string>): Promise<number> {
  const env = { ...COMMON_ENV, ...extraEnv };
  const r = await sbx.exec(['/bin/bash', '-c', script(c)], { cwd: SANDBOX_WS, env, timeoutSeconds: 600 });
  return parse(r.stdout, 'the sandbox', c);
}

/**
 * The host's copy lives in memory (/dev/shm) when there is one: the sandbox's workspace is
 * its overlay, whose writes stay in memory until written back, while the host's /tmp is ext4
 * on a virtual disk shared with every other session's images and builds. On a busy machine
 * disk stalls made host commands 5-10x slower than the same commands in a sandbox (host tsc
 * 174 s against 16 s, git commit 54 s against 8 s): a baseline on disk measures the disk.
 */
function hostRoot(ctx: Context): string {
  if (process.env.BENCH_WORKLOAD_HOST_DISK === '1' || !existsSync('/dev/shm')) return ctx.tmp('workload');
  const dir = mkdtempSync('/dev/shm/warren-bench-workload-');
  ctx.defer(`remove ${dir}`, () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function parseEnv(spec: string | undefined): Record<string, string> | undefined {
  if (spec === undefined) return undefined;
  const env: Record<string, string> = {};
  for (const part of spec.split(';').filter(Boolean)) {
    const i = part.indexOf('=');
    if (i < 1) throw new Error(`BENCH_WORKLOAD_ENV: "${part}" is not K=V`);
    env[part.slice(0, i)] = part.slice(i + 1);
  }
  return env;
}

export async function runWorkload(ctx: Context): Promise<void> {
  const n = ctx.iters.workload;
  const variant = parseEnv(process.env.BENCH_WORKLOAD_ENV);
  const root = hostRoot(ctx);
  const t0 = performance.now();
  const staged = stage(root);
  console.log(
    `  (workspace staged in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${staged.npmPackages} npm packages; tar ${(readFileSync(staged.tar).length / 2 ** 20).toFixed(0)} MiB)`,
  );
  // Rounds take minutes on a loaded machine: the default bench TTL (600 s) is too short.
  const { sbx, kill } = await ctx.sandbox({ ttlSeconds: 4 * 3600 });
  await sbx.files.write('/work/wl.tar', readFileSync(staged.tar));
  await sbx.exec(`mkdir -p ${SANDBOX_WS} && tar xf /work/wl.tar -C ${SANDBOX_WS} && rm /work/wl.tar`, { check: true, timeoutSeconds: 600 });
  const home = path.join(root, 'home');

  const host = new Map<string, number[]>(COMMANDS.map((c) => [c.key, []]));
  const inside = new Map<string, number[]>(COMMANDS.map((c) => [c.key, []]));
  const withVariant = new Map<string, number[]>(COMMANDS.map((c) => [c.key, []]));
  // Rounds of every command, host and sandbox back to back: drift on a busy machine hits both alike.
  for (let round = 0; round < n; round++) {
    for (const c of COMMANDS) {
      host.get(c.key)!.push(await onHost(c, staged.dir, home));
      inside.get(c.key)!.push(await inSandbox(sbx, c, {}));
      if (variant) withVariant.get(c.key)!.push(await inSandbox(sbx, c, variant));
    }
    // A round takes minutes on a loaded machine: show where the run is.
    const last = (m: Map<string, number[]>, k: string) => m.get(k)!.at(-1)!.toFixed(0);
    console.log(
      `  round ${round + 1}/${n} (ms, host/sandbox${variant ? '/variant' : ''}): ${COMMANDS.map((c) => `${c.key} ${last(host, c.key)}/${last(inside, c.key)}${variant ? `/${last(withVariant, c.key)}` : ''}`).join(', ')}`,
    );
  }
  await kill();

  const r = ctx.report;
  const ratios: number[] = [];
  for (const c of COMMANDS) {
    const hk = `wl-host-${c.key}`;
    r.add({ key: hk, suite: SUITE, label: `${c.label}: host`, unit: 'ms', values: host.get(c.key)!, isBaseline: true });
    r.add({ key: `wl-sbx-${c.key}`, suite: SUITE, label: `${c.label}: sandbox`, unit: 'ms', values: inside.get(c.key)!, baseline: hk });
    if (variant) {
      r.add({
        key: `wl-var-${c.key}`,
        suite: SUITE,
        label: `${c.label}: sandbox + BENCH_WORKLOAD_ENV`,
        unit: 'ms',
        values: withVariant.get(c.key)!,
        baseline: hk,
      });
    }
    const ratio = r.p50(`wl-sbx-${c.key}`) / r.p50(hk);
    ratios.push(ratio);
    r.target(`workload ${c.key} ≤ ${MAX_RATIO}x host (p50)`, ratio <= MAX_RATIO, `${ratio.toFixed(2)}x`);
  }
  const geomean = Math.exp(ratios.reduce((a, x) => a + Math.log(x), 0) / ratios.length);
  r.target(`workload geometric mean ≤ ${MAX_GEOMEAN}x host`, geomean <= MAX_GEOMEAN, `${geomean.toFixed(2)}x over ${ratios.length} commands`);
  if (variant) r.note(`workload: BENCH_WORKLOAD_ENV rows ran with ${JSON.stringify(variant)}`);
}
