/**
 * End-to-end test harness: starts a real warren daemon (a separate process, as users run
 * it) on a private WARREN_HOME and a free port, with real runsc sandboxes, and checks that
 * nothing is left behind when it stops.
 */
import { spawn, spawnSync, execFileSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { HttpClient, Sandbox, type CreateOptions } from '@warren/sdk';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const CLI = path.join(REPO, 'packages/cli/dist/main.js');
export const TEMPLATES = process.env.WARREN_TEMPLATES ?? '/var/lib/warren/templates';
const TEST_ROOT = '/var/lib/warren-test';
/** What test daemons run with unless the test's env says otherwise ('' gives the daemon's own default). */
export const TEST_DEFAULTS = { WARREN_DEFAULT_POOL: '0', WARREN_BAKE: 'start' };

/** Fails loudly (never skips) when the machine lacks what the tests need. */
export function requirePrerequisites(): void {
  try {
    execFileSync('runsc', ['--version'], { stdio: 'pipe' });
  } catch {
    throw new Error('runsc is not installed: run `bash scripts/setup.sh` first (installs runsc from bookworm-backports)');
  }
  if (!existsSync(path.join(TEMPLATES, 'base/current/rootfs/bin/bash'))) {
    throw new Error(`template base is not built in ${TEMPLATES}: run \`bash scripts/setup.sh\``);
  }
  if (!existsSync(CLI)) throw new Error('warren is not built: run `npm run build`');
}

export interface DaemonHandle {
  home: string;
  url: string;
  apiKey: string;
  pid: number;
  process: ChildProcess;
  log: () => string;
  /**
   * Resolves with the first entry of the daemon's log (its pino JSON lines) that matches,
   * looking only at what was logged from offset `from` of log() on; rejects after
   * timeoutMs, or if the daemon exits first. For events the daemon reports only in its log.
   */
  waitForLog(match: (entry: LogEntry) => boolean, timeoutMs: number, what: string, from?: number): Promise<LogEntry>;
  /** Options for SDK calls against this daemon. */
  conn: { url: string; apiKey: string; ca?: string };
  http: HttpClient;
  create(opts?: CreateOptions): Promise<Sandbox>;
  /** Graceful stop (SIGTERM), sandboxes keep running. */
  stop(): Promise<void>;
  /** kill -9 */
  crash(): Promise<void>;
  /** Rss of the daemon process in bytes. */
  rss(): number;
}

/** One line of the daemon's log: pino's fields (level, time, msg) and the call's own. */
export type LogEntry = Record<string, unknown> & { msg?: string };

/** The complete JSON lines of a log text, parsed; other lines (a crash's stack) are skipped. */
function logEntries(text: string): LogEntry[] {
  const entries: LogEntry[] = [];
  for (const line of text.slice(0, text.lastIndexOf('\n') + 1).split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      entries.push(JSON.parse(line) as LogEntry);
    } catch {
      // not one of the daemon's entries
    }
  }
  return entries;
}

/** `args`: more `warren daemon` flags (a daemon with --tls-self-signed is trusted through its certificate). */
export async function startDaemon(opts: { home?: string; env?: Record<string, string>; args?: string[] } = {}): Promise<DaemonHandle> {
  requirePrerequisites();
  const home = opts.home ?? mkdtempSync(path.join(ensureDir(TEST_ROOT), 'home-'));
  const child = spawn(process.execPath, [CLI, 'daemon', '--port', '0', '--home', home, ...(opts.args ?? [])], {
    // No default warm pool and no bake of templates without a start command, unless a test
    // asks (defaults.test.ts runs the real defaults): every test file starts daemons of its
    // own, and a pool of 2 plus a base bake in each would multiply the sandboxes on a 2-core
    // machine and change what tests that count sandboxes or their boot kind see.
    env: { ...process.env, WARREN_TEMPLATES: TEMPLATES, ...TEST_DEFAULTS, ...(opts.env ?? {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  // Kept beside the test homes so a daemon that dies mid-test leaves its last words behind.
  const logFile = `${home}.log`;
  const keep = (d: Buffer) => {
    output += d.toString();
    appendFileSync(logFile, d);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Not left running: its pipes would hold the test process open after the failure.
      child.kill('SIGTERM');
      reject(new Error(`daemon did not start in 30s:\n${output}`));
    }, 30_000);
    const onData = () => {
      const [, url] = /listening on (https?:\/\/[0-9.:]+)/.exec(output) ?? [];
      if (url) {
        clearTimeout(timer);
        resolve(url);
      }
    };
    child.stderr!.on('data', onData);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`daemon exited with ${code}:\n${output}`));
    });
  });
  const apiKey = readFileSync(path.join(home, 'admin.key'), 'utf8').trim();
  const ca = url.startsWith('https:') ? readFileSync(path.join(home, 'tls', 'self-signed.pem'), 'utf8') : undefined;
  const conn = { url, apiKey, ...(ca ? { ca } : {}) };
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  return {
    home,
    url,
    apiKey,
    pid: child.pid!,
    process: child,
    log: () => output,
    waitForLog(match, timeoutMs, what, from = 0) {
      return new Promise<LogEntry>((resolve, reject) => {
        const finish = (result: { hit: LogEntry } | { err: Error }) => {
          clearTimeout(timer);
          child.stdout!.off('data', check);
          child.stderr!.off('data', check);
          child.off('exit', exited);
          if ('hit' in result) resolve(result.hit);
          else reject(result.err);
        };
        // Runs after `keep` (registered first), so output already holds the new chunk.
        function check(): boolean {
          const hit = logEntries(output.slice(from)).find(match);
          if (hit) finish({ hit });
          return hit !== undefined;
        }
        function exited() {
          if (!check()) finish({ err: new Error(`the daemon exited while waiting for ${what} in its log`) });
        }
        const timer = setTimeout(() => finish({ err: new Error(`timed out after ${timeoutMs} ms waiting for ${what} in the daemon log`) }), timeoutMs);
        child.stdout!.on('data', check);
        child.stderr!.on('data', check);
        child.on('exit', exited);
        if (!check() && (child.exitCode !== null || child.signalCode !== null)) exited();
      });
    },
    conn,
    http: new HttpClient(conn),
    create: (o = {}) => Sandbox.create({ ...conn, ...o }),
    async stop() {
      child.kill('SIGTERM');
      await exited;
    },
    async crash() {
      child.kill('SIGKILL');
      await exited;
    },
    rss() {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
      return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
    },
  };
}

function ensureDir(dir: string): string {
  execFileSync('mkdir', ['-p', dir]);
  return dir;
}

/** Every runsc container registered under a daemon home, by its runsc id. */
export function allRunscContainers(home: string): string[] {
  const out = execFileSync('runsc', ['--root', path.join(home, 'runsc'), 'list', '--quiet'], { encoding: 'utf8' });
  return out.split('\n').filter(Boolean);
}

/**
 * The sandboxes that have a runsc container under a daemon home. A sandbox restored into a
 * shell (a container the daemon created ahead, drivers/gvisor/shells.ts) runs in a container
 * named after the shell, whose directory names the sandbox; shells nobody took are left out.
 */
export function runscContainers(home: string): string[] {
  return allRunscContainers(home).flatMap((id) => {
    if (!id.startsWith('shell-')) return [id];
    const owner = path.join(home, 'shells', id, 'sandbox');
    return existsSync(owner) ? [readFileSync(owner, 'utf8').trim()] : [];
  });
}

/** The runsc container a sandbox runs in, and the directory of its bundle. */
export function containerOf(home: string, id: string): { id: string; dir: string } {
  for (const cid of allRunscContainers(home)) {
    if (!cid.startsWith('shell-')) continue;
    const dir = path.join(home, 'shells', cid);
    if (existsSync(path.join(dir, 'sandbox')) && readFileSync(path.join(dir, 'sandbox'), 'utf8').trim() === id) return { id: cid, dir };
  }
  return { id, dir: path.join(home, 'sandboxes', id) };
}

/** Host processes that belong to a daemon home (sandboxes, gofers, relays). */
export function hostProcessesFor(home: string): string[] {
  const out = execFileSync('ps', ['-eo', 'pid,args'], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.includes(home) && !l.includes('ps -eo'));
}

/**
 * Kills every sandbox of the daemon, stops it, and asserts that no runsc container, host
 * process or sandbox directory is left. Whatever is left is then removed by force, so a
 * failing test still leaves the machine clean. Call from `after()`.
 */
export async function stopAndCheckClean(d: DaemonHandle | undefined): Promise<void> {
  if (!d) return; // start-up failed; that failure is already reported
  if (d.process.exitCode === null && d.process.signalCode === null) {
    const list = await Sandbox.list(d.conn).catch(() => []);
    await Promise.all(list.map((s) => d.http.json('DELETE', `/v1/sandboxes/${s.id}`).catch(() => undefined)));
    await d.stop();
  }
  const containers = allRunscContainers(d.home);
  const procs = hostProcessesFor(d.home);
  const dirs = ['sandboxes', 'shells'].flatMap((sub) =>
    existsSync(path.join(d.home, sub)) ? readdirNames(path.join(d.home, sub)).map((x) => `${sub}/${x}`) : [],
  );
  const problems = [
    ...containers.map((c) => `runsc container left: ${c}`),
    ...procs.map((p) => `host process left: ${p}`),
    ...dirs.map((x) => `directory left: ${x}`),
  ];
  forceClean(d.home, containers);
  if (!problems.length && !process.env.KEEP_LOGS) rmSync(`${d.home}.log`, { force: true });
  if (problems.length) throw new Error(`leftovers after the test:\n${problems.join('\n')}\n--- daemon log (tail) ---\n${d.log().slice(-4000)}`);
}

function forceClean(home: string, containers: string[]): void {
  for (const id of containers) {
    try {
      execFileSync('runsc', ['--root', path.join(home, 'runsc'), 'delete', '--force', id], { stdio: 'ignore', timeout: 20_000 });
    } catch {
      // reported above; keep cleaning
    }
  }
  for (const line of hostProcessesFor(home)) {
    try {
      process.kill(Number(line.trim().split(/\s+/)[0]), 'SIGKILL');
    } catch {
      // gone already
    }
  }
  unmountUnder(home);
  rmSync(home, { recursive: true, force: true });
}

/** Host mount points under dir (the daemon's read-only views), deepest first. */
export function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((t): t is string => typeof t === 'string' && t.startsWith(`${dir}/`))
    .sort()
    .reverse();
}

/**
 * Unmounts the read-only views a daemon made under its home (storage/read-only-views.ts).
 * They outlive the daemon on purpose (its sandboxes outlive it too), so whoever removes a
 * home removes them, after the sandboxes are gone.
 */
export function unmountUnder(dir: string): void {
  for (const target of mountsUnder(dir)) execFileSync('umount', ['-l', target]);
}

function readdirNames(dir: string): string[] {
  return execFileSync('ls', ['-A', dir], { encoding: 'utf8' }).split('\n').filter(Boolean);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Polls (every intervalMs) until `fn` returns a truthy value (which it returns) or the
 * deadline passes.
 */
export async function eventually<T>(fn: () => Promise<T> | T, timeoutMs: number, what: string, intervalMs = 200): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      // Truthy, so neither null nor undefined.
      if (v) return v as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
}

/** Runs bin/warren against the daemon `d` (its URL and key in the environment); waits for it to exit. */
export function runWarren(d: DaemonHandle, args: string[], timeoutMs = 120_000): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(path.join(REPO, 'bin/warren'), args, {
    encoding: 'utf8',
    env: { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey },
    timeout: timeoutMs,
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** Headers of a WebSocket handshake, for checking whether an upgrade is refused before it happens. */
export const WEBSOCKET_UPGRADE_HEADERS = {
  connection: 'Upgrade',
  upgrade: 'websocket',
  'sec-websocket-version': '13',
  'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
} as const;

/** The status of a raw request with exactly these headers; 101 when it was upgraded (the socket is then closed). */
export function requestStatus(url: string, method: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('upgrade', (_res, socket) => {
      socket.destroy();
      resolve(101);
    });
    req.on('error', reject);
    req.end();
  });
}
