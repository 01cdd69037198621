/**
 * Admission: what one sandbox may ask of this host. The protocol's schemas hold the static
 * bounds (measured minimums, sane maximums); this holds a sandbox's resources to what the
 * host has, before anything is registered or started. A limit the host cannot reach is no
 * limit: 64 cpus on a 2-core host, or a memory cgroup larger than the machine, promise
 * something that is not there and protect nothing.
 */
import { readFileSync, statfsSync } from 'node:fs';
import os from 'node:os';
import { DEFAULT_RESOURCES, WarrenError, type ResolvedResources, type Resources } from '@warren/protocol';

/** What this host can give one sandbox at most. */
export interface HostCapacity {
  cpus: number;
  memoryMB: number;
  pids: number;
  diskMB: number;
  /** kernel.pid_max (or threads-max, if lower), for the message of a pids refusal. */
  pidMax: number;
}

/**
 * Host tasks a sandbox may use per process it is allowed, and the headroom on top: the gVisor
 * driver's host task cap is 4 x pids + 512 (drivers/gvisor/driver.ts, hostPidsLimit; measured
 * there). Keep the two in step.
 */
const HOST_TASKS_PER_PID = 4;
const HOST_TASKS_HEADROOM = 512;

/**
 * Measures the host: its CPUs (those this process may run on), its memory, the pids its
 * kernel can hand out, and the size of the filesystem that holds `home` (WARREN_HOME), where
 * sandboxes' writes go. Disk is its size usable without the root reserve (df's used +
 * available): a limit beyond it is reached by a full disk first, for everyone.
 */
export function measureHost(home: string): HostCapacity {
  const pidMax = Math.min(readNumber('/proc/sys/kernel/pid_max') ?? 32768, readNumber('/proc/sys/kernel/threads-max') ?? Number.MAX_SAFE_INTEGER);
  const fs = statfsSync(home);
  return {
    cpus: os.availableParallelism(),
    memoryMB: Math.floor(os.totalmem() / 1024 / 1024),
    pids: Math.floor((pidMax - HOST_TASKS_HEADROOM) / HOST_TASKS_PER_PID),
    diskMB: Math.floor(((fs.blocks - fs.bfree + fs.bavail) * fs.bsize) / 1024 / 1024),
    pidMax,
  };
}

/**
 * The resources a sandbox gets for what a request leaves out: the protocol's defaults, cut
 * down to the host (a 1-core host gives 1 cpu), so a request without resources is always
 * admitted.
 */
export function defaultResources(host: HostCapacity | undefined): ResolvedResources {
  if (!host) return DEFAULT_RESOURCES;
  return {
    cpus: Math.min(DEFAULT_RESOURCES.cpus, host.cpus),
    memoryMB: Math.min(DEFAULT_RESOURCES.memoryMB, host.memoryMB),
    pids: Math.min(DEFAULT_RESOURCES.pids, host.pids),
    diskMB: Math.min(DEFAULT_RESOURCES.diskMB, host.diskMB),
  };
}

/**
 * Refuses resources beyond the host with a 400 naming the first field over and the limit.
 * `origin` says where values the request did not give came from (a snapshot, a fork's
 * parent), so the caller knows what to change; `given` is what the request did give.
 */
export function admitResources(r: ResolvedResources, host: HostCapacity | undefined, origin?: string, given: Resources = {}): void {
  if (!host) return;
  const over = (field: keyof ResolvedResources, limit: number, what: string) => {
    if (r[field] <= limit) return;
    const from = origin && given[field] === undefined ? `, from ${origin}` : '';
    throw new WarrenError('invalid_argument', `resources.${field} must be at most ${limit}, ${what} (got ${r[field]}${from})`, {
      details: { field: `resources.${field}`, limit },
    });
  };
  over('cpus', host.cpus, "this host's CPUs");
  over('memoryMB', host.memoryMB, "this host's memory");
  over('pids', host.pids, `what this host's kernel.pid_max of ${host.pidMax} holds at ${HOST_TASKS_PER_PID} host tasks per sandbox process`);
  over('diskMB', host.diskMB, "the size of the filesystem that holds the daemon's sandboxes");
}

function readNumber(file: string): number | undefined {
  try {
    const n = Number(readFileSync(file, 'utf8').trim());
    return Number.isFinite(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}
