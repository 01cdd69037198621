/**
 * gVisor driver: one runsc container per sandbox, each with its own Sentry (kernel), no
 * network device (--network=none; egress goes through the daemon), and a private
 * copy-on-write root: the template's rootfs is the shared read-only lower layer, and the
 * sandbox's writes go to a filestore file in the sandbox's own host directory
 * (--overlay2=root:dir=...). See docs/storage.md for the measurements behind this.
 */
import { mkdir, readdir, readlink, rm, stat, writeFile } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { WarrenError, type ResolvedResources } from '@warren/protocol';
import type { DeathCause, DriverSandbox, GuestStreams, SandboxDriver, StartSpec } from '../driver.js';
import { buildSpec, AGENT_PATH, GUEST_NODE_PATH } from './bundle.js';
import { Runsc, lastLines } from './runsc.js';
import { killCgroup, readCgroupFile, removeCgroup, writeCgroupFile } from './cgroups.js';

export interface GvisorOptions {
  runscBinary: string;
  /** Where runsc keeps container state. */
  stateRoot: string;
  /** Per-sandbox host directories (bundle and overlay filestore). */
  sandboxesDir: string;
  hostNodeBinary: string;
  hostGuestLibDir: string;
  log: Logger;
}

const CGROUP_PARENT = 'warren';

/** The host task cap behind the in-sandbox pids limit (see BundleInputs.hostPidsLimit). */
function hostPidsLimit(pids: number): number {
  return pids * 4 + 512;
}
const CHECKPOINT_TIMEOUT_MS = 120_000;
/** How long a Sentry stopped by its checkpoint may take to exit before it is destroyed. */
const STOPPED_EXIT_GRACE_MS = 2_000;

export class GvisorDriver implements SandboxDriver {
  readonly name = 'gvisor';
  private runsc: Runsc;
  /** Host pid of each sandbox's Sentry, for disk accounting. */
  private sandboxPids = new Map<string, number>();

  constructor(private opts: GvisorOptions) {
    this.runsc = new Runsc({ binary: opts.runscBinary, root: opts.stateRoot, platform: 'systrap' });
  }

  sandboxDir(id: string): string {
    return path.join(this.opts.sandboxesDir, id);
  }

  start(spec: StartSpec): Promise<GuestStreams> {
    return this.launch(spec, (dir) => ['run', '--detach', '--bundle', dir, spec.id]);
  }

  /**
   * Brings up a sandbox from a checkpoint image instead of booting it: its processes continue
   * from the instant of the checkpoint, talking over the fresh stdio pipes of this restore.
   */
  restore(spec: StartSpec, imageDir: string): Promise<GuestStreams> {
    return this.launch(spec, (dir) => ['restore', '--detach', '--image-path', imageDir, '--bundle', dir, spec.id]);
  }

  /**
   * Saves the whole sandbox (memory, processes, files: the overlay's upper layer lives in its
   * memory) to imageDir; the sandbox stops unless leaveRunning.
   */
  async checkpoint(id: string, imageDir: string, opts: { leaveRunning?: boolean } = {}): Promise<void> {
    await mkdir(imageDir, { recursive: true, mode: 0o700 });
    try {
      // Uncompressed: restores are ~25% faster, for images ~4x larger (measured, 2026-12-02).
      const args = ['checkpoint', '--compression=none', ...(opts.leaveRunning ? ['--leave-running'] : []), '--image-path', imageDir, id];
      await this.runsc.run(args, CHECKPOINT_TIMEOUT_MS);
    } catch (err) {
      const why = (err as Error).message;
      if (/no space left on device/i.test(why)) {
        throw new WarrenError('resource_exhausted', `not enough disk for the image of sandbox ${id} (under ${imageDir}): ${lastLines(why)}`);
      }
      throw new WarrenError('internal', `checkpoint of sandbox ${id} failed: ${why}`);
    }
  }

  /** Writes the bundle and runs `runsc <command>` with the sandbox's stdio piped to us. */
  private async launch(spec: StartSpec, command: (bundleDir: string) => string[]): Promise<GuestStreams> {
    const dir = this.sandboxDir(spec.id);
    const filestore = path.join(dir, 'fs');
    await mkdir(filestore, { recursive: true, mode: 0o700 });
    const oci = buildSpec({
      ...spec,
      hostNodeBinary: this.opts.hostNodeBinary,
      hostGuestLibDir: this.opts.hostGuestLibDir,
      cgroupsPath: `/${CGROUP_PARENT}/${spec.id}`,
      hostPidsLimit: hostPidsLimit(spec.resources.pids),
    });
    await writeFile(path.join(dir, 'config.json'), JSON.stringify(oci, null, 1));
    const child = this.runsc.spawn(command(dir), ['--network', 'none', '--overlay2', `root:dir=${filestore}`], { stdio: ['pipe', 'pipe', 'pipe'] });
    // Node destroys a child's stdin when the child exits, but `runsc run --detach` exits as
    // soon as the sandbox is up while the sandbox keeps the other end of the pipe: keep our
    // own reference and hide it from ChildProcess so it survives.
    const toGuest = child.stdin!;
    child.stdin = null;
    // Until runsc exits, stderr is runsc's own; afterwards it is the agent's.
    let runscStderr = '';
    const onStderr = (chunk: Buffer) => {
      runscStderr += chunk.toString('utf8');
    };
    child.stderr!.on('data', onStderr);
    const code = await new Promise<number | null>((resolve) => {
      child.on('exit', (c) => resolve(c));
      child.on('error', (err) => {
        runscStderr += err.message;
        resolve(-1);
      });
    });
    child.stderr!.off('data', onStderr);
    if (code !== 0) {
      toGuest.destroy();
      child.stdout?.destroy();
      child.stderr?.destroy();
      throw new WarrenError('internal', `runsc could not start sandbox ${spec.id}: ${lastLines(runscStderr)}`);
    }
    child.stderr!.on('data', (chunk: Buffer) => this.opts.log.warn({ sandbox: spec.id, agentStderr: chunk.toString('utf8').trimEnd() }, 'agent stderr'));
    return {
      fromGuest: child.stdout!,
      toGuest,
      release: () => {
        toGuest.destroy();
        child.stdout?.destroy();
        child.stderr?.destroy();
      },
    };
  }

  /**
   * New limits for a running sandbox, through its host cgroups (what enforces them). The
   * memory size the Sentry reports inside (MemTotal) stays the one it booted with.
   */
  async resize(id: string, resources: ResolvedResources): Promise<void> {
    const memory = resources.memoryMB * 1024 * 1024;
    const current = Number((await readCgroupFile('memory', CGROUP_PARENT, id, 'memory.limit_in_bytes')) ?? NaN);
    // memory.memsw stays unlimited (runsc sets no swap limit), so this one file is the limit.
    try {
      if (current !== memory) await writeCgroupFile('memory', CGROUP_PARENT, id, 'memory.limit_in_bytes', String(memory));
      await writeCgroupFile('cpu', CGROUP_PARENT, id, 'cpu.cfs_period_us', '100000');
      await writeCgroupFile('cpu', CGROUP_PARENT, id, 'cpu.cfs_quota_us', String(Math.round(resources.cpus * 100_000)));
      await writeCgroupFile('pids', CGROUP_PARENT, id, 'pids.max', String(hostPidsLimit(resources.pids)));
    } catch (err) {
      throw new WarrenError('internal', `cannot set the limits of sandbox ${id}: ${(err as Error).message}`);
    }
  }

  async attach(id: string): Promise<GuestStreams> {
    const child = this.runsc.spawn(['exec', id, GUEST_NODE_PATH, AGENT_PATH, 'attach'], [], { stdio: ['pipe', 'pipe', 'pipe'] });
    child.stderr!.on('data', (chunk: Buffer) => this.opts.log.warn({ sandbox: id, attachStderr: chunk.toString('utf8').trimEnd() }, 'attach relay stderr'));
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', () => resolve());
      child.once('error', (err) => reject(new WarrenError('internal', `cannot attach to sandbox ${id}: ${err.message}`)));
    });
    return {
      fromGuest: child.stdout!,
      toGuest: child.stdin!,
      release: () => {
        child.kill('SIGKILL');
      },
    };
  }

  async destroy(id: string): Promise<void> {
    this.sandboxPids.delete(id);
    const known = (await this.runsc.list()).some((c) => c.id === id);
    if (known) {
      try {
        await this.runsc.run(['delete', '--force', id], 15_000);
      } catch (err) {
        // An out-of-memory Sentry can hang and make runsc delete time out (PLATFORM.md):
        // kill everything in the sandbox's cgroups by hand, then try once more.
        this.opts.log.warn({ sandbox: id, err: (err as Error).message }, 'runsc delete failed; killing cgroup members');
        await killCgroup(CGROUP_PARENT, id);
        await this.runsc.run(['delete', '--force', id], 15_000).catch(async (again: Error) => {
          this.opts.log.error({ sandbox: id, err: again.message }, 'runsc delete failed twice; removing its state by hand');
          await this.forgetState(id);
        });
      }
    }
    await killCgroup(CGROUP_PARENT, id);
    await removeCgroup(CGROUP_PARENT, id);
    await rm(this.sandboxDir(id), { recursive: true, force: true });
  }

  /**
   * After a checkpoint that stopped the sandbox its processes are gone, but runsc still
   * lists it as running, and `runsc delete` spends a second finding out that it is not (on
   * the 2-core test machine: 1.1 to 1.5 s of a 2 s hibernate). When its Sentry is really
   * gone, the state files, cgroups and directory are removed here directly.
   */
  async removeStopped(id: string): Promise<void> {
    const pid = this.sandboxPids.get(id) ?? (await this.runsc.list()).find((c) => c.id === id)?.pid;
    // runsc checkpoint returns while the Sentry is still exiting.
    if (pid && !(await exited(pid, STOPPED_EXIT_GRACE_MS))) return this.destroy(id);
    this.sandboxPids.delete(id);
    await this.forgetState(id);
    await killCgroup(CGROUP_PARENT, id);
    await removeCgroup(CGROUP_PARENT, id);
    await rm(this.sandboxDir(id), { recursive: true, force: true });
  }

  async list(): Promise<DriverSandbox[]> {
    return (await this.runsc.list()).map((c) => ({ id: c.id, running: c.status === 'running' }));
  }

  async diagnose(id: string): Promise<DeathCause> {
    const oomControl = await readCgroupFile('memory', CGROUP_PARENT, id, 'memory.oom_control');
    const oomKills = Number(/oom_kill (\d+)/.exec(oomControl ?? '')?.[1] ?? 0);
    const underOom = /under_oom 1/.test(oomControl ?? '');
    const failcnt = Number((await readCgroupFile('memory', CGROUP_PARENT, id, 'memory.failcnt')) ?? 0);
    const pidsEvents = await readCgroupFile('pids', CGROUP_PARENT, id, 'pids.events');
    const pidsMax = Number(/max (\d+)/.exec(pidsEvents ?? '')?.[1] ?? 0);
    return { oomKilled: oomKills > 0 || underOom || failcnt > 0, pidsExhausted: pidsMax > 0 };
  }

  /**
   * Allocated size of the overlay filestore. runsc unlinks the filestore right after
   * creating it, so it is found through the sandbox process's open files. The Sentry punches
   * holes when files are deleted, so allocated blocks (not the apparent size) follow what the
   * sandbox holds.
   */
  async diskUsage(id: string): Promise<number> {
    let pid = this.sandboxPids.get(id);
    if (!pid) {
      pid = (await this.runsc.list()).find((c) => c.id === id)?.pid;
      if (!pid) return 0;
      this.sandboxPids.set(id, pid);
    }
    const prefix = path.join(this.sandboxDir(id), 'fs', 'runsc-filestore');
    let total = 0;
    for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [] as string[])) {
      const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
      if (!target.startsWith(prefix)) continue;
      const st = await stat(`/proc/${pid}/fd/${fd}`).catch(() => undefined);
      if (st) total += st.blocks * 512;
    }
    return total;
  }

  /**
   * The sandbox's memory cgroup usage (the Sentry's memory file, where guest memory and the
   * overlay's upper layer live, plus its own heap) and the filestore: more than the image
   * takes, never less.
   */
  async imageSizeEstimate(id: string): Promise<number> {
    const memory = Number((await readCgroupFile('memory', CGROUP_PARENT, id, 'memory.usage_in_bytes')) ?? 0);
    return memory + (await this.diskUsage(id));
  }

  /** Drops runsc's state files of a container (a last resort, or after removeStopped). */
  private async forgetState(id: string): Promise<void> {
    const root = this.opts.stateRoot;
    if (!existsSync(root)) return;
    for (const name of await readdir(root)) {
      if (name.includes(id)) await rm(path.join(root, name), { recursive: true, force: true });
    }
  }
}

async function exited(pid: number, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (isAlive(pid)) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 5));
  }
  return true;
}

/**
 * Whether the process still runs. A zombie does not: the Sentry's parent is the host's init,
 * which may take seconds to reap it (about 1.6 s on the test machine).
 */
function isAlive(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return false;
  }
  // The state follows the parenthesised command name, which may itself contain ') '.
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
}
