/**
 * cgroup v1 helpers. runsc puts each sandbox under /<parent>/<id> in every controller
 * hierarchy; when a Sentry hangs (out of memory) these are how we kill and clean it.
 */
import { readFile, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

const CGROUP_ROOT = '/sys/fs/cgroup';
const CONTROLLERS = [
  'memory',
  'pids',
  'cpu,cpuacct',
  'cpu',
  'cpuacct',
  'cpuset',
  'blkio',
  'devices',
  'freezer',
  'net_cls,net_prio',
  'perf_event',
  'hugetlb',
  'systemd',
  'unified',
];

function dir(controller: string, parent: string, id: string): string {
  return path.join(CGROUP_ROOT, controller, parent, id);
}

export async function readCgroupFile(controller: string, parent: string, id: string, file: string): Promise<string | undefined> {
  try {
    return await readFile(path.join(dir(controller, parent, id), file), 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * The host processes in a sandbox's cgroup: its Sentry (with its systrap stubs) and its
 * gofer. A process leaves the cgroup when it exits, before its parent reaps it, so an empty
 * list means everything of the sandbox is dead even while zombies wait for the host's init.
 */
async function cgroupMembers(parent: string, id: string): Promise<number[]> {
  return (await cgroupMembersIfAny(parent, id)) ?? [];
}

/** The members, or undefined when the sandbox has no cgroup under parent at all. */
async function cgroupMembersIfAny(parent: string, id: string): Promise<number[] | undefined> {
  const procs = (await readCgroupFile('pids', parent, id, 'cgroup.procs')) ?? (await readCgroupFile('memory', parent, id, 'cgroup.procs'));
  return procs?.split('\n').filter(Boolean).map(Number);
}

/**
 * SIGKILLs every member of the sandbox's cgroup; returns how many there were, or undefined
 * when it has no cgroup under parent (a container warren did not start).
 */
export async function signalCgroup(parent: string, id: string): Promise<number | undefined> {
  const pids = await cgroupMembersIfAny(parent, id);
  if (pids === undefined) return undefined;
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  return pids.length;
}

/**
 * Polls until the sandbox's cgroup has no members (or it is gone); false if some are still
 * there after withinMs (a Sentry stuck in the kernel, e.g. under an OOM: PLATFORM.md).
 */
export async function cgroupEmptied(parent: string, id: string, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while ((await cgroupMembers(parent, id)).length) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 5));
  }
  return true;
}

export async function killCgroup(parent: string, id: string): Promise<void> {
  // Give the kernel a moment to tear the processes down before cgroups are removed.
  if (await signalCgroup(parent, id)) await cgroupEmptied(parent, id, 200);
}

export async function removeCgroup(parent: string, id: string): Promise<void> {
  for (const controller of CONTROLLERS) {
    try {
      await rmdir(dir(controller, parent, id));
    } catch {
      // not present in this hierarchy, or already removed by runsc
    }
  }
}

/** Writes one control file of a sandbox's cgroup; errors say which file and why. */
export async function writeCgroupFile(controller: string, parent: string, id: string, file: string, value: string): Promise<void> {
  await writeFile(path.join(dir(controller, parent, id), file), value);
}
