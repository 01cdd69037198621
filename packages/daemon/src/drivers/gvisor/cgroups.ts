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

export async function killCgroup(parent: string, id: string): Promise<void> {
  const procs = (await readCgroupFile('pids', parent, id, 'cgroup.procs')) ?? (await readCgroupFile('memory', parent, id, 'cgroup.procs')) ?? '';
  for (const pid of procs.split('\n').filter(Boolean)) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // already gone
    }
  }
  // Give the kernel a moment to tear the processes down before cgroups are removed.
  if (procs.trim()) await new Promise((r) => setTimeout(r, 200));
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
