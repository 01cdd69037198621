/**
 * gVisor driver: one runsc container per sandbox, each with its own Sentry (kernel), no
 * network device (--network=none; egress goes through the daemon), and a private
 * copy-on-write root: the template's rootfs is the shared read-only lower layer, and the
 * sandbox's writes go to a filestore file in the sandbox's own host directory
 * (--overlay2=root:dir=...). See docs/storage.md for the measurements behind this.
 */
import { mkdir, readdir, readFile, readlink, rm, stat, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { WarrenError, errorText, type ResolvedResources } from '@warren/protocol';
import type { DeathCause, DriverSandbox, GuestStreams, SandboxDriver, StartSpec } from '../driver.js';
import { buildSpec, AGENT_PATH, BACKGROUND_CPU_SHARES, GUEST_NODE_PATH, NORMAL_CPU_SHARES } from './bundle.js';
import { Runsc, lastLines } from './runsc.js';
import { cgroupEmptied, killCgroup, readCgroupFile, removeCgroup, signalCgroup, writeCgroupFile } from './cgroups.js';
import { ShellStock, type Shell } from './shells.js';
import type { SandboxHostFiles } from '../../storage/sandbox-host-files.js';

export interface GvisorOptions {
  runscBinary: string;
  /** Where runsc keeps container state. */
  stateRoot: string;
  /** Per-sandbox host directories (bundle and overlay filestore). */
  sandboxesDir: string;
  /** Host directories of shells: containers created ahead for restores (shells.ts). */
  shellsDir: string;
  /** Shells kept ready per template shape; 0 turns them off. */
  shellsPerShape: number;
  /** The host paths sandboxes mount, all inside read-only views. */
  hostFiles: SandboxHostFiles;
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
/** How long a SIGKILLed sandbox's processes may take to exit before runsc delete takes over. */
const KILL_GRACE_MS = 3_000;
/** Container ids of shells; a sandbox restored into one keeps that container id. */
const SHELL_PREFIX = 'shell-';
/** In a shell's directory: the id of the sandbox restored into it. */
const OWNER_FILE = 'sandbox';
const SHELL_IDLE_MS = 15 * 60_000;
const RESTORE_TIMEOUT_MS = 120_000;
const RELAY_EXIT_TIMEOUT_MS = 5_000;

interface ReadyShell extends Shell {
  streams: GuestStreams;
}

/** What a shell must match to take a restore: the rootfs and the limits the Sentry was created with. */
function shapeOf(spec: { rootfs: string; resources: ResolvedResources }): string {
  const { cpus, memoryMB, pids } = spec.resources;
  return JSON.stringify([spec.rootfs, cpus, memoryMB, pids]);
}
function specOfShape(shape: string, id: string): StartSpec {
  const [rootfs, cpus, memoryMB, pids] = JSON.parse(shape) as [string, number, number, number];
  return { id, hostname: id, rootfs, resources: { cpus, memoryMB, pids, diskMB: 0 } };
}

export class GvisorDriver implements SandboxDriver {
  readonly name = 'gvisor';
  private runsc: Runsc;
  /**
   * Host pid of each sandbox's Sentry and, once found, which of its fds hold the overlay
   * filestore, for disk accounting: a Sentry has hundreds of fds, and scanning them all on
   * every heartbeat kept the event loop busy for 150 ms per sandbox every 5 s.
   */
  private sentries = new Map<string, { pid: number; filestoreFds?: string[] }>();
  /** Sandboxes whose runsc container has another id: those restored into a shell. */
  private containers = new Map<string, string>();
  /** The shape each sandbox was started with, to keep shells for its resume. */
  private shapes = new Map<string, string>();
  private shells: ShellStock<ReadyShell>;

  constructor(private opts: GvisorOptions) {
    this.runsc = new Runsc({ binary: opts.runscBinary, root: opts.stateRoot, platform: 'systrap' });
    this.shells = new ShellStock<ReadyShell>({
      perShape: opts.shellsPerShape,
      idleMs: SHELL_IDLE_MS,
      make: (shape) => this.makeShell(shape),
      discard: (shell, why) => this.discardShell(shell, why),
      usable: (shape) => existsSync(specOfShape(shape, '').rootfs),
      log: opts.log.child({ component: 'shells' }),
    });
  }

  /**
   * Picks up after a previous daemon: shells it restored sandboxes into are those sandboxes'
   * containers again; shells still empty are removed.
   */
  async init(): Promise<void> {
    await mkdir(this.opts.shellsDir, { recursive: true, mode: 0o700 });
    const onHost = new Set((await this.runsc.list()).map((c) => c.id));
    for (const id of await readdir(this.opts.shellsDir)) {
      const owner = await readFile(path.join(this.opts.shellsDir, id, OWNER_FILE), 'utf8').catch(() => undefined);
      if (owner && onHost.has(id)) this.containers.set(owner.trim(), id);
      else await this.destroyContainer(id);
    }
  }

  /** Removes the shells nobody took. Sandboxes keep running. */
  async close(): Promise<void> {
    await this.shells.close();
  }

  /** The runsc container of a sandbox. */
  private cid(id: string): string {
    return this.containers.get(id) ?? id;
  }

  private containerDir(cid: string): string {
    return path.join(cid.startsWith(SHELL_PREFIX) ? this.opts.shellsDir : this.opts.sandboxesDir, cid);
  }

  /** The sandbox a container belongs to (undefined for a shell nobody took yet). */
  private ownerOf(cid: string): string | undefined {
    if (!cid.startsWith(SHELL_PREFIX)) return cid;
    for (const [id, c] of this.containers) if (c === cid) return id;
    return undefined;
  }

  start(spec: StartSpec): Promise<GuestStreams> {
    this.shapes.set(spec.id, shapeOf(spec));
    return this.launch(spec, (dir) => ['run', '--detach', '--bundle', dir, spec.id]);
  }

  /**
   * Brings up a sandbox from a checkpoint image instead of booting it: its processes continue
   * from the instant of the checkpoint. Into a shell when one of its shape is ready (the
   * agent then talks over the shell's stdio), else into a new container.
   */
  async restore(spec: StartSpec, imageDir: string): Promise<GuestStreams> {
    const shape = shapeOf(spec);
    this.shapes.set(spec.id, shape);
    const done = this.shells.hold();
    try {
      const shell = this.shells.take(shape);
      if (shell) {
        try {
          return await this.restoreInto(shell, spec.id, imageDir, spec.background === true);
        } catch (err) {
          this.opts.log.warn({ sandbox: spec.id, shell: shell.id, err: (err as Error).message }, 'restore into a shell failed; restoring into a new container');
        }
      }
      return await this.launch(spec, (dir) => ['restore', '--detach', '--image-path', imageDir, '--bundle', dir, spec.id]);
    } finally {
      done();
    }
  }

  private async restoreInto(shell: ReadyShell, id: string, imageDir: string, background: boolean): Promise<GuestStreams> {
    const dir = this.containerDir(shell.id);
    // Written first: a daemon that dies during the restore must find the sandbox's container.
    await writeFile(path.join(dir, OWNER_FILE), id);
    this.containers.set(id, shell.id);
    try {
      // Shells wait at the background weight; the Sentry and gofer already sit in the shell's
      // cgroup, so the weight set here applies to the whole restore.
      await this.setCpuShares(id, background ? BACKGROUND_CPU_SHARES : NORMAL_CPU_SHARES);
      await this.runsc.run(['restore', '--detach', '--image-path', imageDir, '--bundle', dir, shell.id], RESTORE_TIMEOUT_MS, this.containerFlags(shell.id));
    } catch (err) {
      shell.streams.release();
      await this.destroy(id);
      throw err;
    }
    return shell.streams;
  }

  private async makeShell(shape: string): Promise<ReadyShell> {
    const id = `${SHELL_PREFIX}${randomBytes(6).toString('hex')}`;
    try {
      // In the background: nobody waits for a shell, and it is made right after restores,
      // while the sandboxes just restored serve their first requests.
      const streams = await this.launch({ ...specOfShape(shape, id), background: true }, (dir) => ['create', '--bundle', dir, id]);
      return { id, shape, streams };
    } catch (err) {
      await this.destroyContainer(id);
      throw err;
    }
  }

  private async discardShell(shell: ReadyShell, why: string): Promise<void> {
    this.opts.log.debug({ shell: shell.id, why }, 'discarding runsc shell');
    shell.streams.release();
    await this.destroyContainer(shell.id);
  }

  /** Global runsc flags of a container: no network device, its own overlay filestore. */
  private containerFlags(cid: string): string[] {
    return ['--network', 'none', '--overlay2', `root:dir=${path.join(this.containerDir(cid), 'fs')}`];
  }

  /**
   * Saves the whole sandbox (memory, processes, files: the overlay's upper layer lives in its
   * memory) to imageDir; the sandbox stops unless leaveRunning.
   */
  async checkpoint(id: string, imageDir: string, opts: { leaveRunning?: boolean } = {}): Promise<void> {
    await mkdir(imageDir, { recursive: true, mode: 0o700 });
    // A restore of this image is likely (a resume, fork children): have a shell ready for it.
    const shape = this.shapes.get(id);
    if (shape) this.shells.want(shape);
    try {
      // Uncompressed: restores are ~25% faster, for images ~4x larger (measured, 2026-12-02).
      const args = ['checkpoint', '--compression=none', ...(opts.leaveRunning ? ['--leave-running'] : []), '--image-path', imageDir, this.cid(id)];
      await this.runsc.run(args, CHECKPOINT_TIMEOUT_MS);
    } catch (err) {
      const why = errorText(err);
      if (/no space left on device/i.test(why)) {
        throw new WarrenError('resource_exhausted', `not enough disk for the image of sandbox ${id}; free space on the daemon's disk`, { cause: why });
      }
      throw new WarrenError('internal', `checkpoint of sandbox ${id} failed`, { cause: err });
    }
  }

  /**
   * Writes the bundle and runs `runsc <command>` with the container's stdio piped to us.
   * spec.id is the container's id.
   */
  private async launch(spec: StartSpec, command: (bundleDir: string) => string[]): Promise<GuestStreams> {
    const dir = this.containerDir(spec.id);
    await mkdir(path.join(dir, 'fs'), { recursive: true, mode: 0o700 });
    const { hostFiles } = this.opts;
    const oci = buildSpec({
      ...spec,
      rootfs: hostFiles.rootfs(spec.rootfs),
      hostNodeBinary: hostFiles.node,
      hostGuestLibDir: hostFiles.guestLib,
      cgroupsPath: `/${CGROUP_PARENT}/${spec.id}`,
      hostPidsLimit: hostPidsLimit(spec.resources.pids),
    });
    await writeFile(path.join(dir, 'config.json'), JSON.stringify(oci, null, 1));
    const child = this.runsc.spawn(command(dir), this.containerFlags(spec.id), { stdio: ['pipe', 'pipe', 'pipe'] });
    // Node destroys a child's stdin when the child exits, but `runsc run --detach` (or
    // create) exits as soon as the sandbox is up while the sandbox keeps the other end of the
    // pipe: keep our own reference and hide it from ChildProcess so it survives.
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
      throw new WarrenError('internal', `runsc could not start sandbox ${spec.id}`, { cause: lastLines(runscStderr) });
    }
    child.stderr!.on('data', (chunk: Buffer) =>
      this.opts.log.warn({ sandbox: this.ownerOf(spec.id) ?? spec.id, agentStderr: chunk.toString('utf8').trimEnd() }, 'agent stderr'),
    );
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

  async promote(id: string): Promise<void> {
    await this.setCpuShares(id, NORMAL_CPU_SHARES);
  }

  private async setCpuShares(id: string, shares: number): Promise<void> {
    try {
      await writeCgroupFile('cpu', CGROUP_PARENT, this.cid(id), 'cpu.shares', String(shares));
    } catch (err) {
      throw new WarrenError('internal', `cannot set the CPU weight of sandbox ${id}`, { cause: err });
    }
  }

  /**
   * New limits for a running sandbox, through its host cgroups (what enforces them). The
   * memory size the Sentry reports inside (MemTotal) stays the one it booted with.
   */
  async resize(id: string, resources: ResolvedResources): Promise<void> {
    const cid = this.cid(id);
    const memory = resources.memoryMB * 1024 * 1024;
    const current = Number((await readCgroupFile('memory', CGROUP_PARENT, cid, 'memory.limit_in_bytes')) ?? NaN);
    // memory.memsw stays unlimited (runsc sets no swap limit), so this one file is the limit.
    try {
      if (current !== memory) await writeCgroupFile('memory', CGROUP_PARENT, cid, 'memory.limit_in_bytes', String(memory));
      await writeCgroupFile('cpu', CGROUP_PARENT, cid, 'cpu.cfs_period_us', '100000');
      await writeCgroupFile('cpu', CGROUP_PARENT, cid, 'cpu.cfs_quota_us', String(Math.round(resources.cpus * 100_000)));
      await writeCgroupFile('pids', CGROUP_PARENT, cid, 'pids.max', String(hostPidsLimit(resources.pids)));
    } catch (err) {
      throw new WarrenError('internal', `cannot set the limits of sandbox ${id}`, { cause: err });
    }
  }

  async attach(id: string): Promise<GuestStreams> {
    const child = this.runsc.spawn(['exec', this.cid(id), GUEST_NODE_PATH, AGENT_PATH, 'attach'], [], { stdio: ['pipe', 'pipe', 'pipe'] });
    child.stderr!.on('data', (chunk: Buffer) => this.opts.log.warn({ sandbox: id, attachStderr: chunk.toString('utf8').trimEnd() }, 'attach relay stderr'));
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', () => resolve());
      child.once('error', (err) => reject(new WarrenError('internal', `cannot attach to sandbox ${id}`, { cause: err })));
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return {
      fromGuest: child.stdout!,
      toGuest: child.stdin!,
      release: () => {
        child.kill('SIGKILL');
      },
      // The relay exits at the end of its stdin, and `runsc exec` once the relay has.
      detach: async () => {
        child.stdin!.end();
        const timer = setTimeout(() => child.kill('SIGKILL'), RELAY_EXIT_TIMEOUT_MS);
        await exited;
        clearTimeout(timer);
      },
    };
  }

  async destroy(id: string): Promise<void> {
    const cid = this.cid(id);
    this.sentries.delete(id);
    this.shapes.delete(id);
    await this.destroyContainer(cid);
    this.containers.delete(id);
  }

  /**
   * Kills a container's processes through its cgroup and removes what runsc keeps of it.
   * `runsc delete --force` kills the same processes but then polls, every 100 ms, until the
   * Sentry is reaped, and the Sentry's parent is the host's init, which reaps it 1.3-1.5 s
   * later on the test machine: that wait was most of every kill (and of killing a sandbox
   * that had died already). Members leave the cgroup as soon as they exit, reaped or not, so
   * an emptied cgroup is the kernel's word that the Sentry and the gofer are dead, and
   * runsc's state files are dropped directly. A container whose processes do not die (a
   * Sentry hung under an OOM: PLATFORM.md) still goes through runsc delete.
   */
  private async destroyContainer(id: string): Promise<void> {
    // A container started behind warren's back (a stray found at recovery) is not in warren's
    // cgroup: only runsc knows its processes.
    if ((await signalCgroup(CGROUP_PARENT, id)) === undefined) await this.deleteWithRunsc(id, 'the container has no cgroup under warren');
    else if (await cgroupEmptied(CGROUP_PARENT, id, KILL_GRACE_MS)) await this.forgetState(id);
    else await this.deleteWithRunsc(id, `sandbox processes outlived SIGKILL for ${KILL_GRACE_MS} ms`);
    await killCgroup(CGROUP_PARENT, id);
    await removeCgroup(CGROUP_PARENT, id);
    await rm(this.containerDir(id), { recursive: true, force: true });
  }

  private async deleteWithRunsc(id: string, why: string): Promise<void> {
    this.opts.log.warn({ sandbox: id, why }, 'removing the container with runsc delete');
    if (!(await this.runsc.list()).some((c) => c.id === id)) return;
    try {
      await this.runsc.run(['delete', '--force', id], 15_000);
    } catch (err) {
      // An out-of-memory Sentry can hang and make runsc delete time out (PLATFORM.md):
      // kill everything in the sandbox's cgroups by hand, then try once more.
      this.opts.log.warn({ sandbox: id, err: errorText(err) }, 'runsc delete failed; killing cgroup members');
      await killCgroup(CGROUP_PARENT, id);
      await this.runsc.run(['delete', '--force', id], 15_000).catch(async (again: Error) => {
        this.opts.log.error({ sandbox: id, err: again.message }, 'runsc delete failed twice; removing its state by hand');
        await this.forgetState(id);
      });
    }
  }

  /**
   * After a checkpoint that stopped the sandbox its processes are gone, but runsc still
   * lists it as running, and `runsc delete` spends a second finding out that it is not (on
   * the 2-core test machine: 1.1 to 1.5 s of a 2 s hibernate). When its Sentry is really
   * gone, the state files, cgroups and directory are removed here directly.
   */
  async removeStopped(id: string): Promise<void> {
    const cid = this.cid(id);
    // runsc checkpoint returns while the Sentry is still exiting; its cgroup empties when it
    // has (asking `runsc list` for its pid took 0.1-0.3 s on the loaded test machine).
    if (!(await cgroupEmptied(CGROUP_PARENT, cid, STOPPED_EXIT_GRACE_MS))) return this.destroy(id);
    this.sentries.delete(id);
    this.shapes.delete(id);
    await this.forgetState(cid);
    await killCgroup(CGROUP_PARENT, cid);
    await removeCgroup(CGROUP_PARENT, cid);
    await rm(this.containerDir(cid), { recursive: true, force: true });
    this.containers.delete(id);
  }

  /** Sandboxes on the host, by sandbox id; shells nobody took are the driver's own. */
  async list(): Promise<DriverSandbox[]> {
    const out: DriverSandbox[] = [];
    for (const c of await this.runsc.list()) {
      const id = this.ownerOf(c.id);
      if (id) out.push({ id, running: c.status === 'running' });
    }
    return out;
  }

  async diagnose(id: string): Promise<DeathCause> {
    id = this.cid(id);
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
    const cid = this.cid(id);
    let sentry = this.sentries.get(id);
    if (!sentry) {
      const pid = (await this.runsc.list()).find((c) => c.id === cid)?.pid;
      if (!pid) return 0;
      sentry = { pid };
      this.sentries.set(id, sentry);
    }
    const prefix = path.join(this.containerDir(cid), 'fs', 'runsc-filestore');
    if (sentry.filestoreFds) {
      const total = await filestoreBlocks(sentry.pid, sentry.filestoreFds, prefix);
      if (total !== undefined) return total;
    }
    // First call, or an fd no longer is what it was: find the filestore among all of them.
    const fds = await readdir(`/proc/${sentry.pid}/fd`).catch(() => [] as string[]);
    const found: string[] = [];
    for (const fd of fds) {
      if ((await readlink(`/proc/${sentry.pid}/fd/${fd}`).catch(() => '')).startsWith(prefix)) found.push(fd);
    }
    if (!found.length) {
      // A Sentry still starting, or not this sandbox's any more: ask runsc again next time.
      this.sentries.delete(id);
      return 0;
    }
    sentry.filestoreFds = found;
    return (await filestoreBlocks(sentry.pid, found, prefix)) ?? 0;
  }

  /**
   * The sandbox's memory cgroup usage (the Sentry's memory file, where guest memory and the
   * overlay's upper layer live, plus its own heap) and the filestore: more than the image
   * takes, never less.
   */
  async imageSizeEstimate(id: string): Promise<number> {
    const memory = Number((await readCgroupFile('memory', CGROUP_PARENT, this.cid(id), 'memory.usage_in_bytes')) ?? 0);
    return memory + (await this.diskUsage(id));
  }

  async usageNow(id: string): Promise<{ cpuNanos: number; memoryBytes: number } | undefined> {
    const cid = this.cid(id);
    const [cpu, memory] = await Promise.all([
      readCgroupFile('cpuacct', CGROUP_PARENT, cid, 'cpuacct.usage'),
      readCgroupFile('memory', CGROUP_PARENT, cid, 'memory.usage_in_bytes'),
    ]);
    if (cpu === undefined || memory === undefined) return undefined;
    return { cpuNanos: Number(cpu), memoryBytes: Number(memory) };
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

/** Allocated bytes of these fds of `pid`, or undefined if one of them is no longer a file under `prefix`. */
async function filestoreBlocks(pid: number, fds: string[], prefix: string): Promise<number | undefined> {
  let total = 0;
  for (const fd of fds) {
    const file = `/proc/${pid}/fd/${fd}`;
    if (!(await readlink(file).catch(() => '')).startsWith(prefix)) return undefined;
    const st = await stat(file).catch(() => undefined);
    if (!st) return undefined;
    total += st.blocks * 512;
  }
  return total;
}
