/**
 * What every suite shares: iteration counts, the report, one daemon (started on first use,
 * on a private home), temp dirs, and a cleanup stack that also runs on Ctrl-C.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, readdirSync, rmdirSync } from 'node:fs';
import path from 'node:path';
import { startDaemon, stopAndCheckClean, unmountUnder, type DaemonHandle } from '@warren/tests/harness';
import type { Sandbox, CreateOptions } from '@warren/sdk';
import { percentile, Report } from './stats.js';

export const SUITES = [
  'rss',
  'create',
  'defaults',
  'exec',
  'files',
  'spawn',
  'mcp',
  'egress',
  'templates',
  'machine',
  'tools',
  'python',
  'idle',
  'workload',
  'syscalls',
  'density',
  'cli',
  'terminal',
  'dirs',
  'stdin',
  'watch',
  'databases',
  'auth',
  'e2b',
  'dashboard',
] as const;
export type SuiteName = (typeof SUITES)[number];

/** Default iteration counts, sized so that all suites together take about 3-5 minutes. */
export const DEFAULT_ITERS = {
  /** SDK creates, interleaved with as many raw `runsc run`s of each kind. */
  create: 8,
  /** Rounds per daemon of the defaults suite's refill check (claim the default pool empty, exec while it refills). */
  defaults: 4,
  /** sbx.exec(['true']) round trips. */
  exec: 100,
  /** bash `true` tool calls of each kind: MCP over stdio, MCP over HTTP, Toolset.call (with and without a session). */
  mcp: 100,
  /** In-sandbox spawn loop length, per method (spawn suite and exec floor). */
  spawn: 30,
  /** 100 MiB write/read repetitions. */
  files: 2,
  /** Upload and download rounds of the 5,000-file tree (dirs suite), each beside a local tar. */
  dirs: 3,
  /** 100 MiB streamed-stdin execs (each beside a host pipe of the same bytes). */
  stdin: 3,
  /** RSS samples per measurement (200 ms apart). */
  rss: 5,
  /** Template creates of each kind: baked and cold (interleaved), then pooled. */
  templates: 5,
  /** Template builds of each kind: full, and with only the last step changed (interleaved). */
  rebuild: 3,
  /** Snapshot/fork/hibernate (machine suite): samples of each fork of 1 and 3, hibernate cycles, raw baselines. */
  machine: 5,
  /** Forks of 8 children (machine suite): about 1 GB of restores each. */
  fork8: 2,
  /** HTTPS requests per egress latency row (proxied and direct interleaved). */
  egress: 100,
  /** 256 MiB downloads per egress throughput row (the four paths interleaved). */
  egressbulk: 3,
  /** Rounds of 200 concurrent connections from one sandbox, through the proxy and direct. */
  egressconc: 3,
  /** bash tool calls printing 50 MB (each against the same command to /dev/null); 5x as many of `true`. */
  tools: 5,
  /** Calls of each kind per SDK in the python suite (Python and TS SDK interleaved). */
  python: 100,
  /** Seconds the idle suite measures idle sandboxes, shells, pool members and raw runsc over. */
  idle: 30,
  /** Rounds of the workload suite: every agent command once on the host and once in a sandbox. */
  workload: 3,
  /** Rounds of the syscalls suite: bench/scripts/syscalls.py once on the host and once in a sandbox. */
  syscalls: 5,
  /** `warren ls` runs (bundled and module tree), each beside a `node -e 0`. */
  cli: 30,
  /** Idle sandboxes started at once (density suite); it stops early at a failed create or under 2 GiB MemAvailable. */
  density: 20,
  /** Hibernated records seeded into a bench daemon's registry (density suite). */
  records: 10_000,
  /** API keys seeded beside the records (auth suite): each owns records / keys sandboxes. */
  keys: 1000,
  /** Keystrokes timed per row of the terminal suite (and round trips of each floor). */
  terminal: 200,
  /** Files created inside while a watch waits for their events (watch suite). */
  watch: 100,
  /** Database creates and branches of a 100 MB database (each beside a plain fork of a base sandbox and of the database's sandbox). */
  databases: 5,
  /** Round trips of `true` and creates through E2B's official SDK, each beside the same through warren's. */
  e2b: 100,
  /** Creates of the e2b suite (each SDK, interleaved). */
  e2bcreate: 10,
  /** Page loads of the dashboard suite (each beside a load of the login page). */
  dashboard: 10,
  /** Hibernated records the dashboard suite lists (seeded as the density suite does). */
  dashboardrows: 500,
};
export type Iters = typeof DEFAULT_ITERS;

/** Where bench daemons' homes go (removed when empty). Not /var/lib/warren-test: that is the tests'. */
const BENCH_ROOT = '/var/lib/warren-bench';

type Cleanup = { what: string; fn: () => Promise<void> | void };

export class Context {
  readonly report = new Report();
  private cleanups: Cleanup[] = [];
  private daemon?: DaemonHandle;
  private tmpRoot?: string;

  constructor(readonly iters: Iters) {}

  /** Registers a cleanup; returns a function that runs it now (and forgets it). */
  defer(what: string, fn: () => Promise<void> | void): () => Promise<void> {
    const entry = { what, fn };
    this.cleanups.push(entry);
    return async () => {
      const i = this.cleanups.indexOf(entry);
      if (i < 0) return;
      this.cleanups.splice(i, 1);
      await fn();
    };
  }

  async cleanupAll(): Promise<void> {
    while (this.cleanups.length) {
      const c = this.cleanups.pop()!;
      try {
        await c.fn();
      } catch (err) {
        console.error(`cleanup "${c.what}" failed: ${(err as Error).message}`);
        process.exitCode = 1;
      }
    }
  }

  /** A private temp dir for this run (removed at the end). */
  tmp(name: string): string {
    if (!this.tmpRoot) {
      const root = mkdtempSync('/tmp/warren-bench-');
      this.tmpRoot = root;
      this.defer(`remove ${root}`, () => rmSync(root, { recursive: true, force: true }));
    }
    const dir = path.join(this.tmpRoot, name);
    mkdirSync(dir, { recursive: true });
    return dir;
  }

  /** The run's daemon, started on first use. `fresh` stops the current one first. */
  async getDaemon(fresh = false): Promise<DaemonHandle> {
    if (this.daemon && fresh) await this.stopDaemon();
    if (!this.daemon) {
      const { daemon, stop } = await this.launchDaemon('daemon', {});
      this.daemon = daemon;
      this.stopDaemonNow = async () => {
        this.daemon = undefined;
        await stop();
      };
    }
    return this.daemon;
  }

  /**
   * Another daemon with its own home under /var/lib/warren-bench and extra environment
   * (e.g. WARREN_TEMPLATES). It is stopped with stopAndCheckClean() at cleanup time, or
   * earlier through the returned `stop`.
   */
  async startDaemon(label: string, env: Record<string, string>): Promise<{ daemon: DaemonHandle; stop: () => Promise<void> }> {
    return this.launchDaemon(label, env);
  }

  private async launchDaemon(label: string, env: Record<string, string>): Promise<{ daemon: DaemonHandle; stop: () => Promise<void> }> {
    mkdirSync(BENCH_ROOT, { recursive: true });
    const home = mkdtempSync(path.join(BENCH_ROOT, 'home-'));
    const t0 = performance.now();
    let d: DaemonHandle;
    try {
      d = await startDaemon({ home, env });
    } catch (err) {
      // It never came up, so nothing runs under the home: remove its views, it and its log.
      unmountUnder(home);
      rmSync(home, { recursive: true, force: true });
      rmSync(`${home}.log`, { force: true });
      removeIfEmpty(BENCH_ROOT);
      throw err;
    }
    const extra = Object.entries(env)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ');
    console.log(`  (${label} up in ${(performance.now() - t0).toFixed(0)} ms, home ${home}, pid ${d.pid}${extra ? `, ${extra}` : ''})`);
    let stopping = false;
    d.process.on('exit', (code, signal) => {
      if (!stopping) console.error(`\n  ${label} (pid ${d.pid}) exited unexpectedly: ${signal ? `signal ${signal}` : `exit code ${code}`}`);
    });
    const stop = this.defer(`stop ${label}`, async () => {
      stopping = true;
      await stopAndCheckClean(d);
      removeIfEmpty(BENCH_ROOT);
    });
    return { daemon: d, stop };
  }

  /** A private dir under /var/lib/warren-bench (beside the daemon homes), removed at cleanup. */
  benchDir(prefix: string): string {
    mkdirSync(BENCH_ROOT, { recursive: true });
    const dir = mkdtempSync(path.join(BENCH_ROOT, prefix));
    this.defer(`remove ${dir}`, () => {
      rmSync(dir, { recursive: true, force: true });
      removeIfEmpty(BENCH_ROOT);
    });
    return dir;
  }

  private stopDaemonNow?: () => Promise<void>;

  async stopDaemon(): Promise<void> {
    await this.stopDaemonNow?.();
    this.stopDaemonNow = undefined;
  }

  /** Creates a sandbox that is killed at cleanup time unless the caller kills it first. */
  async sandbox(opts: CreateOptions = {}): Promise<{ sbx: Sandbox; kill: () => Promise<void> }> {
    const d = await this.getDaemon();
    const sbx = await d.create({ ttlSeconds: 600, metadata: { bench: '1' }, ...opts });
    const kill = this.defer(`kill sandbox ${sbx.id}`, () => sbx.kill().catch(() => undefined));
    return { sbx, kill };
  }
}

function removeIfEmpty(dir: string): void {
  try {
    if (readdirSync(dir).length === 0) rmdirSync(dir);
  } catch {
    // not there, or someone else's files in it
  }
}

/** Polls fn every 100 ms until it returns true; throws after timeoutMs naming what it waited for. */
export async function waitFor(fn: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await fn())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

export function loadavg(): string {
  return readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
}

/**
 * How fast this machine is right now, beyond idle CPU: on this VM a quiet machine's speed
 * still drifts by up to 1.6x over an hour (host loopback TLS 2.3 vs 3.8 ms), and the
 * cross-process wake-ups that tunnels are made of drift most. Two probes, ~0.3 s: the p50 of
 * 300 one-byte round trips with a child process over pipes, and sha256 of 32 MiB.
 */
export async function speedProbe(): Promise<{ pingPongUs: number; sha256Ms: number }> {
  const t = performance.now();
  createHash('sha256')
    .update(Buffer.alloc(32 * 2 ** 20, 1))
    .digest();
  const sha256Ms = performance.now() - t;
  const child = spawn(process.execPath, ['-e', "process.stdin.on('data', (d) => process.stdout.write(d))"], { stdio: ['pipe', 'pipe', 'ignore'] });
  const rtts: number[] = [];
  try {
    for (let i = 0; i < 320; i++) {
      const t0 = performance.now();
      await new Promise<void>((resolve, reject) => {
        // Removed once answered: a listener left per round trip piled up 320 of them (Node's
        // MaxListenersExceededWarning in every bench run).
        child.once('error', reject);
        child.stdout!.once('data', () => {
          child.off('error', reject);
          resolve();
        });
        child.stdin!.write('x');
      });
      if (i >= 20) rtts.push((performance.now() - t0) * 1000);
    }
  } finally {
    child.kill();
  }
  return { pingPongUs: percentile(rtts, 50), sha256Ms };
}

/** Below this share of idle CPU before a suite, its numbers are flagged: on this VM they swing 2x with load. */
export const QUIET_IDLE_PERCENT = 90;

/** The whole machine's CPU over `ms`: idle (with iowait) and steal, in percent of all CPU time. */
export async function cpuSample(ms = 1000): Promise<{ idle: number; steal: number }> {
  const read = () => {
    // cpu  user nice system idle iowait irq softirq steal guest guest_nice
    const [cpu = ''] = readFileSync('/proc/stat', 'utf8').split('\n');
    const f = cpu.trim().split(/\s+/).slice(1, 9).map(Number);
    // A field the kernel left out makes the sample NaN, not 0.
    const [, , , idle = NaN, iowait = NaN, , , steal = NaN] = f;
    return { total: f.reduce((a, b) => a + b, 0), idle: idle + iowait, steal };
  };
  const a = read();
  await new Promise((r) => setTimeout(r, ms));
  const b = read();
  const total = b.total - a.total || 1;
  return { idle: (100 * (b.idle - a.idle)) / total, steal: (100 * (b.steal - a.steal)) / total };
}

/** Number of gVisor sandboxes running on the host (ours and everyone else's), a noise hint. */
export function runningSandboxes(): number {
  let n = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('runsc-sandbox\0')) n++;
    } catch {
      // exited
    }
  }
  return n;
}

export function sleep(msec: number): Promise<void> {
  return new Promise((r) => setTimeout(r, msec));
}
