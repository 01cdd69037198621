/**
 * Build staging directories: <templatesDir>/.build/<id>/. Everything a build creates before
 * it is committed lives in one of them (the step's upper dir, overlay work dir, merged
 * mount, bundle), and owner.json records who owns it and what it started (runsc containers,
 * host child processes). Commits are renames out of staging, so a build that dies leaves
 * only a staging dir; whoever starts next (daemon or local build) removes the staging dirs
 * whose owner is gone. Several processes may share one templates dir (a daemon, a local
 * build from setup.sh, test daemons): a live owner's staging is never touched.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { mountsUnder, unmount } from './mounts.js';

const execFileP = promisify(execFile);

interface OwnerRecord {
  pid: number;
  startTime: string;
  containers: Array<{ runscBinary: string; root: string; id: string }>;
  children: Array<{ pid: number; startTime: string }>;
}

/** Field 22 of /proc/PID/stat: start time in clock ticks since boot; pid reuse changes it. */
function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

function alive(p: { pid: number; startTime: string }): boolean {
  return processStartTime(p.pid) === p.startTime;
}

export class Staging {
  private owner: OwnerRecord;

  private constructor(readonly dir: string) {
    this.owner = { pid: process.pid, startTime: processStartTime(process.pid) ?? '', containers: [], children: [] };
  }

  static async create(buildRoot: string, label: string): Promise<Staging> {
    await mkdir(buildRoot, { recursive: true, mode: 0o700 });
    const s = new Staging(path.join(buildRoot, `${label}-${randomBytes(4).toString('hex')}`));
    await mkdir(s.dir, { mode: 0o700 });
    await s.save();
    return s;
  }

  path(...parts: string[]): string {
    return path.join(this.dir, ...parts);
  }

  async addContainer(c: OwnerRecord['containers'][number]): Promise<void> {
    this.owner.containers.push(c);
    await this.save();
  }

  async addChild(pid: number): Promise<void> {
    this.owner.children.push({ pid, startTime: processStartTime(pid) ?? '' });
    await this.save();
  }

  /** Unmounts whatever is still mounted inside and removes the directory. */
  async remove(): Promise<void> {
    for (const m of await mountsUnder(this.dir)) await unmount(m);
    await rm(this.dir, { recursive: true, force: true });
  }

  private async save(): Promise<void> {
    const tmp = path.join(this.dir, '.owner.json.tmp');
    await writeFile(tmp, JSON.stringify(this.owner));
    await rename(tmp, path.join(this.dir, 'owner.json'));
  }
}

/**
 * A staging dir's owner record; 'settling' while the dir has no record yet but may be
 * getting one (created by another process right now), undefined once that has gone on for a
 * minute (a crash right after mkdir).
 */
async function readOwner(dir: string): Promise<OwnerRecord | 'settling' | undefined> {
  try {
    return JSON.parse(await readFile(path.join(dir, 'owner.json'), 'utf8')) as OwnerRecord;
  } catch {
    const age = Date.now() - (await stat(dir).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
    return age < 60_000 ? 'settling' : undefined;
  }
}

/** Pids of the processes (daemons, local builds) whose builds are staging here right now. */
export async function liveBuilders(buildRoot: string): Promise<number[]> {
  const names = await readdir(buildRoot).catch(() => [] as string[]);
  const pids = new Set<number>();
  for (const name of names) {
    const owner = await readOwner(path.join(buildRoot, name));
    // A dir still settling counts as live: it is a build that is starting.
    if (owner === 'settling') pids.add(0);
    else if (owner && alive(owner)) pids.add(owner.pid);
  }
  return [...pids];
}

/**
 * Removes staging dirs whose owner process is gone: deletes their runsc containers, kills
 * their host children (debootstrap), unmounts and removes. Returns how many it cleared.
 */
export async function clearStaleStaging(buildRoot: string, log: Logger): Promise<number> {
  let names: string[];
  try {
    names = await readdir(buildRoot);
  } catch {
    return 0;
  }
  let cleared = 0;
  for (const name of names) {
    const dir = path.join(buildRoot, name);
    const owner = await readOwner(dir);
    if (owner === 'settling') continue;
    if (owner && alive(owner)) continue;
    log.warn({ staging: dir, owner: owner?.pid }, 'removing a template build left by a process that is gone');
    for (const c of owner?.containers ?? []) {
      await execFileP(c.runscBinary, ['--root', c.root, 'delete', '--force', c.id], { timeout: 30_000 }).catch((err: Error & { stderr?: string }) => {
        // Usually "container does not exist": it ended with its `runsc run`.
        log.debug({ container: c.id, err: (err.stderr || err.message).trim() }, 'runsc delete of a stale build container');
      });
    }
    for (const child of owner?.children ?? []) {
      if (!alive(child)) continue;
      try {
        process.kill(-child.pid, 'SIGKILL'); // its own process group (spawned detached)
      } catch (err) {
        log.warn({ pid: child.pid, err: (err as Error).message }, 'cannot kill a stale build process');
      }
    }
    for (const m of await mountsUnder(dir)) await unmount(m);
    await rm(dir, { recursive: true, force: true });
    cleared++;
  }
  return cleared;
}
