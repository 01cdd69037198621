/**
 * Continuous WAL archiving of one database to daemon-side storage, for point-in-time restore
 * (restore.ts, docs/databases.md). On the host, beside the daemon:
 *
 *   <dir>/wal/    pg_receivewal --synchronous over the database's TCP forward, on a
 *                 replication slot, so the server keeps WAL the archive has not taken yet;
 *                 the segment being written is `<segment>.partial` (pg_receivewal's own
 *                 rename-when-complete, fsynced on every flush)
 *   <dir>/base/<finished ms>/   base backups (pg_basebackup -Ft -z -X stream: base.tar.gz
 *                 with the WAL of its own span in pg_wal.tar.gz, streamed on a temporary
 *                 slot, so the server needs no wal_keep_size), written into `.partial-*` and
 *                 renamed when whole,
 *                 with meta.json {startedAt, finishedAt, firstSegment}
 *
 * Nothing is ever rewritten in place, so a daemon killed -9, a database sandbox that dies or
 * a full disk leave complete files and at most a `.partial` that the next run continues or
 * ignores. The children run in their own process group, their pids in <dir>/pids, so a new
 * daemon kills what a killed one left before it starts its own.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { WarrenError } from '@warren/protocol';

export const PG_BIN = '/usr/lib/postgresql/15/bin';
const SLOT = 'warren_archive';
const RESTART_DELAY_MS = 2000;
/** How long a restore waits for the archive to catch up with its server. */
const ARCHIVE_CATCH_UP_MS = 60_000;
/** Restarts back off up to this while pg_receivewal keeps failing (a full disk, a server that is down). */
const MAX_RESTART_DELAY_MS = 30_000;
/** A pg_receivewal that streamed this long was fine: the next restart is quick again. */
const HEALTHY_RUN_MS = 60_000;
const SEGMENT_NAME = /^[0-9A-F]{24}$/;
/** The postgres template's WAL segment size (initdb's default). */
const WAL_SEGMENT_BYTES = 16 * 1024 * 1024;

/** Where the database's server is reachable from the host, and its password. */
export interface ArchiveEndpoint {
  port: number;
  password: string;
}

export interface WalArchiveOptions {
  dir: string;
  /** The database's forward; undefined while it has none (the archive waits). */
  endpoint: () => ArchiveEndpoint | undefined;
  /** WAL and base backups older than this go (one base backup and what follows it always stay). */
  retainMs: number;
  baseBackupEveryMs: number;
  log: Logger;
}

export interface BaseBackup {
  dir: string;
  startedAt: number;
  finishedAt: number;
  /** The newest complete segment in wal/ when the backup began: replay needs segments from here on. */
  firstSegment?: string;
}

export class WalArchive {
  private stopped = false;
  private backupTimer?: NodeJS.Timeout;
  private restartTimer?: NodeJS.Timeout;
  private backingUp?: Promise<void>;
  /** pg_receivewal runs that failed in a row (restart backoff). */
  private failures = 0;
  /** When the running pg_receivewal started; undefined while none runs. */
  private streamingSince?: number;
  /** Running pg tools (the receiver, a slot creation, a base backup). */
  private readonly children = new Set<ChildProcess>();

  constructor(private readonly opts: WalArchiveOptions) {}

  get walDir(): string {
    return path.join(this.opts.dir, 'wal');
  }

  get baseDir(): string {
    return path.join(this.opts.dir, 'base');
  }

  async start(): Promise<void> {
    await mkdir(this.walDir, { recursive: true, mode: 0o700 });
    await mkdir(this.baseDir, { recursive: true, mode: 0o700 });
    killLeftovers(this.opts.dir, this.opts.log);
    this.runReceiver();
    // The first base backup right away: without one nothing is restorable.
    if (this.baseBackups().length === 0) this.backupSoon(0);
    else this.backupSoon(this.opts.baseBackupEveryMs);
  }

  /** Ends archiving; resolves once every child has exited, so the directory can be removed. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.backupTimer);
    clearTimeout(this.restartTimer);
    await Promise.all([...this.children].map((child) => endChild(child)));
    await this.backingUp?.catch(() => undefined);
  }

  /** Takes a base backup now (also what the schedule calls). */
  async baseBackup(): Promise<BaseBackup> {
    const ep = this.opts.endpoint();
    if (!ep) throw new Error('the database has no forward yet');
    const startedAt = Date.now();
    const firstSegment = this.segments().at(-1);
    const partial = path.join(this.baseDir, `.partial-${startedAt}`);
    await rm(partial, { recursive: true, force: true });
    try {
      await this.run(
        'pg_basebackup',
        ['-D', partial, '-Ft', '-z', '-X', 'stream', '-c', 'fast', '-h', '127.0.0.1', '-p', String(ep.port), '-U', 'postgres', '-w'],
        ep,
      );
      const finishedAt = Date.now();
      const meta: BaseBackup = { dir: '', startedAt, finishedAt, ...(firstSegment ? { firstSegment } : {}) };
      await writeFile(path.join(partial, 'meta.json'), JSON.stringify(meta));
      const dest = path.join(this.baseDir, String(finishedAt));
      await rename(partial, dest);
      this.opts.log.info({ dir: this.opts.dir, ms: finishedAt - startedAt }, 'database base backup taken');
      return { ...meta, dir: dest };
    } catch (err) {
      await rm(partial, { recursive: true, force: true });
      throw err;
    }
  }

  /** Complete base backups, oldest first. */
  baseBackups(): BaseBackup[] {
    if (!existsSync(this.baseDir)) return [];
    return readdirSync(this.baseDir)
      .filter((d) => /^\d+$/.test(d))
      .flatMap((d) => {
        try {
          const meta = JSON.parse(readFileSync(path.join(this.baseDir, d, 'meta.json'), 'utf8')) as BaseBackup;
          return [{ ...meta, dir: path.join(this.baseDir, d) }];
        } catch {
          return []; // a backup without its meta was never completed
        }
      })
      .sort((a, b) => a.finishedAt - b.finishedAt);
  }

  /** Complete WAL segment names, in order. */
  segments(): string[] {
    if (!existsSync(this.walDir)) return [];
    return readdirSync(this.walDir)
      .filter((f) => SEGMENT_NAME.test(f))
      .sort();
  }

  /**
   * What a restore can reach: from the end of the oldest complete base backup to now while
   * pg_receivewal streams, else to the last moment WAL arrived (the newest file's mtime:
   * pg_receivewal writes and fsyncs the `.partial` segment as the server flushes).
   */
  window(now = Date.now()): { from?: number; to?: number } {
    const oldest = this.baseBackups()[0];
    if (!oldest) return {};
    // While pg_receivewal streams (synchronously), every commit is archived as it happens: the window reaches now.
    if (this.streamingSince !== undefined && now - this.streamingSince > RESTART_DELAY_MS) return { from: oldest.finishedAt, to: now };
    let to = oldest.finishedAt;
    for (const f of readdirSync(this.walDir)) to = Math.max(to, statSync(path.join(this.walDir, f)).mtimeMs);
    return { from: oldest.finishedAt, to: Math.floor(to) };
  }

  /** Drops what is older than the retention, keeping the newest base backup before the cut and the WAL after it. */
  async prune(now = Date.now()): Promise<void> {
    const backups = this.baseBackups();
    const cut = now - this.opts.retainMs;
    const keepFrom = backups.filter((b) => b.finishedAt <= cut).at(-1) ?? backups[0];
    if (!keepFrom) return;
    for (const b of backups) if (b.finishedAt < keepFrom.finishedAt) await rm(b.dir, { recursive: true, force: true });
    if (keepFrom.firstSegment) {
      for (const s of this.segments()) if (s < keepFrom.firstSegment) await rm(path.join(this.walDir, s), { force: true });
    }
  }

  private backupSoon(delayMs: number): void {
    if (this.stopped) return;
    this.backupTimer = setTimeout(() => {
      this.backingUp = this.baseBackup()
        .then(() => this.prune())
        .catch((err: Error) => this.opts.log.warn({ dir: this.opts.dir, err: err.message }, 'database base backup failed; retrying at the next interval'))
        .finally(() => this.backupSoon(this.baseBackups().length ? this.opts.baseBackupEveryMs : RESTART_DELAY_MS * 5));
    }, delayMs);
    this.backupTimer.unref();
  }

  /** pg_receivewal until stopped, started again after any exit (the server restarted, hibernated, the disk filled). */
  private runReceiver(): void {
    if (this.stopped) return;
    const again = () => {
      if (this.stopped) return;
      const delay = Math.min(RESTART_DELAY_MS * 2 ** this.failures, MAX_RESTART_DELAY_MS);
      this.failures++;
      this.restartTimer = setTimeout(() => this.runReceiver(), delay);
      this.restartTimer.unref();
    };
    const ep = this.opts.endpoint();
    if (!ep) {
      again();
      return;
    }
    const conn = ['-h', '127.0.0.1', '-p', String(ep.port), '-U', 'postgres', '-w'];
    this.clearCutSegments();
    this.run('pg_receivewal', ['--create-slot', '--if-not-exists', '--slot', SLOT, ...conn], ep)
      .then(() => {
        if (this.stopped) return;
        const child = this.spawnChild('pg_receivewal', ['-D', this.walDir, '--slot', SLOT, '--synchronous', '--no-loop', ...conn], ep);
        this.streamingSince = Date.now();
        let stderr = '';
        child.stderr?.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
        child.on('error', (err) => this.opts.log.error({ dir: this.opts.dir, err: err.message }, 'pg_receivewal could not be started'));
        child.on('close', (code) => {
          if (this.streamingSince !== undefined && Date.now() - this.streamingSince >= HEALTHY_RUN_MS) this.failures = 0;
          this.streamingSince = undefined;
          this.forgetPid(child.pid);
          if (!this.stopped)
            this.opts.log.info({ dir: this.opts.dir, code, err: errorLines(stderr), failures: this.failures }, 'pg_receivewal ended; starting it again');
          again();
        });
      })
      .catch((err: Error) => {
        this.opts.log.info({ dir: this.opts.dir, err: err.message }, 'the replication slot could not be made yet; trying again');
        again();
      });
  }

  /**
   * pg_receivewal fills a new segment's `.partial` with zeros up to 16 MiB before it writes WAL
   * into it, and it refuses to start while a `.partial` has any other size ("should be 0 or
   * 16777216"). So a disk that filled up during that fill stopped archiving for good, even
   * once there was room again. Such a file holds no WAL yet: it is removed, and the
   * replication slot has the server send that WAL again. One that holds anything but zeros
   * is moved aside (`.cut`, which no tool reads) instead, and logged.
   */
  private clearCutSegments(): void {
    if (!existsSync(this.walDir)) return;
    for (const name of readdirSync(this.walDir)) {
      if (!name.endsWith('.partial')) continue;
      const file = path.join(this.walDir, name);
      const size = statSync(file).size;
      if (size === 0 || size === WAL_SEGMENT_BYTES) continue;
      if (onlyZeros(file)) {
        rmSync(file, { force: true });
        this.opts.log.warn(
          { dir: this.opts.dir, segment: name, bytes: size },
          'removed a WAL segment whose zero-fill was cut (a full disk); the server sends it again',
        );
      } else {
        renameSync(file, `${file}.cut`);
        this.opts.log.error({ dir: this.opts.dir, segment: name, bytes: size }, 'moved aside a WAL segment of an unexpected size; the server sends it again');
      }
    }
  }

  private spawnChild(tool: string, args: string[], ep: ArchiveEndpoint, readStdout = false): ChildProcess {
    // The password travels in the child's environment only: never argv, never logs.
    const child = spawn(path.join(PG_BIN, tool), args, {
      env: { PATH: process.env.PATH, PGPASSWORD: ep.password, PGCONNECT_TIMEOUT: '10' },
      stdio: ['ignore', readStdout ? 'pipe' : 'ignore', 'pipe'],
      detached: true,
    });
    if (child.pid) this.notePid(child.pid);
    this.children.add(child);
    child.once('close', () => this.children.delete(child));
    return child;
  }

  private run(tool: string, args: string[], ep: ArchiveEndpoint): Promise<string> {
    return new Promise((resolve, reject) => {
      const child = this.spawnChild(tool, args, ep, true);
      let stdout = '';
      let stderr = '';
      child.stdout?.on('data', (d: Buffer) => (stdout = (stdout + d.toString()).slice(-2000)));
      child.stderr?.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
      child.on('error', reject);
      child.on('close', (code) => {
        this.forgetPid(child.pid);
        if (code === 0) resolve(stdout.trim());
        else reject(new Error(`${tool} exited with ${code}: ${errorLines(stderr)}`));
      });
    });
  }

  /**
   * Waits until the archive holds the server's WAL up to the moment of the call, and returns
   * that moment: every commit before it can then be restored. The file times the window
   * shows can run ahead of their content while pg_receivewal catches up (after a full disk, a
   * restart, a hibernation): the files are new, the WAL in them is older. Undefined when the
   * server does not answer (its sandbox is dead): the archive then holds all it will ever get.
   */
  async archivedUntilNow(timeoutMs = ARCHIVE_CATCH_UP_MS): Promise<number | undefined> {
    const ep = this.opts.endpoint();
    if (!ep) return undefined;
    const asked = Date.now();
    const sql = (text: string) =>
      this.run('psql', ['-h', '127.0.0.1', '-p', String(ep.port), '-U', 'postgres', '-w', '-d', 'postgres', '-X', '-q', '-t', '-A', '-c', text], ep);
    let current: string;
    try {
      current = await sql('SELECT pg_current_wal_lsn()');
    } catch (err) {
      this.opts.log.warn({ dir: this.opts.dir, err: (err as Error).message }, 'the server did not answer; the archive is restored as it is');
      return undefined;
    }
    if (!/^[0-9A-F]+\/[0-9A-F]+$/.test(current)) throw new WarrenError('internal', `unexpected WAL position from the server: ${current.slice(0, 80)}`);
    const deadline = asked + timeoutMs;
    for (;;) {
      const behind = await sql(
        `SELECT coalesce(min(pg_wal_lsn_diff('${current}', flush_lsn)), -1) FROM pg_stat_replication WHERE application_name = 'pg_receivewal'`,
      );
      const bytes = Number(behind);
      if (bytes !== -1 && bytes <= 0) return asked;
      if (Date.now() > deadline)
        throw new WarrenError(
          'unavailable',
          bytes === -1
            ? 'the WAL archive is not receiving right now (its receiver is restarting); try again shortly'
            : `the WAL archive is still catching up (${Math.ceil(bytes / 1e6)} MB behind the server); try again shortly`,
        );
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  private pidFile(): string {
    return path.join(this.opts.dir, 'pids');
  }

  private notePid(pid: number): void {
    const pids = new Set(readPids(this.pidFile()));
    pids.add(pid);
    writePids(this.pidFile(), pids);
  }

  private forgetPid(pid: number | undefined): void {
    if (!pid) return;
    const pids = new Set(readPids(this.pidFile()));
    pids.delete(pid);
    writePids(this.pidFile(), pids);
  }
}

function readPids(file: string): number[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .map(Number)
    .filter((n) => Number.isInteger(n) && n > 1);
}

function writePids(file: string, pids: Set<number>): void {
  // Synchronous, so no write is still in flight when stop() returns and the directory goes.
  const text = [...pids].join('\n');
  try {
    writeFileSync(file, text ? `${text}\n` : '');
  } catch (err) {
    // The archive directory was removed (the database is being deleted): nothing to track.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/** Children of a daemon that was killed: only processes that are still pg tools are killed. */
function killLeftovers(dir: string, log: Logger): void {
  for (const pid of readPids(path.join(dir, 'pids'))) {
    let cmd = '';
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      continue; // gone already
    }
    if (!cmd.startsWith(PG_BIN) || !cmd.includes(dir)) continue;
    killGroup(pid);
    log.warn({ pid, dir }, 'killed an archiving process a previous daemon left');
  }
}

/** SIGTERM to the child's group, SIGKILL after 5 s; resolves when it has exited. */
function endChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || !child.pid) return Promise.resolve();
  const pid = child.pid;
  return new Promise((resolve) => {
    const hard = setTimeout(() => killGroup(pid, 'SIGKILL'), 5000);
    child.once('close', () => {
      clearTimeout(hard);
      resolve();
    });
    killGroup(pid);
  });
}

function killGroup(pid: number, signal: NodeJS.Signals = 'SIGTERM'): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

/** True when the file holds only zero bytes. */
function onlyZeros(file: string): boolean {
  const fd = openSync(file, 'r');
  try {
    const buf = Buffer.alloc(1 << 20);
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) return true;
      for (let i = 0; i < n; i++) if (buf[i] !== 0) return false;
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * What a pg tool said went wrong: its `error:` lines (the cause, such as "No space left on
 * device", comes before the final "disconnected"), else its last line.
 */
function errorLines(text: string): string {
  const lines = text.trim().split('\n');
  const errors = lines.filter((l) => l.includes('error:'));
  return (errors.length ? errors.join(' | ') : (lines.at(-1) ?? '')).slice(0, 600);
}
