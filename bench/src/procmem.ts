/** Host memory of processes: RSS and PSS from /proc/PID/smaps_rollup. */
import { readdirSync, readFileSync } from 'node:fs';

export interface Mem {
  rss: number;
  pss: number;
}

/** RSS and PSS of one process, in bytes (zero if it is gone). */
export function processMem(pid: number): Mem {
  try {
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * 1024;
    return { rss: kb('Rss'), pss: kb('Pss') };
  } catch {
    return { rss: 0, pss: 0 };
  }
}

/**
 * RSS and PSS of a set of processes, each address space counted once. gVisor's systrap stubs
 * are several processes sharing one address space (clone with CLONE_VM, checked with
 * kcmp(KCMP_VM) on 2026-12-02): summing them per process counted one sandbox's guest memory
 * three times (104 MB "PSS" for an idle sandbox whose address spaces hold 65 MB). Processes
 * with byte-identical maps and smaps_rollup are taken to share one address space: separate
 * ones differ at least in their stacks.
 */
export function sumMem(pids: number[]): Mem {
  const total = { rss: 0, pss: 0 };
  const seen = new Set<string>();
  for (const pid of pids) {
    const key = addressSpaceKey(pid);
    if (key === undefined || seen.has(key)) continue;
    seen.add(key);
    const m = processMem(pid);
    total.rss += m.rss;
    total.pss += m.pss;
  }
  return total;
}

function addressSpaceKey(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/maps`, 'utf8') + readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  } catch {
    return undefined; // exited
  }
}

interface Proc {
  pid: number;
  ppid: number;
  cmdline: string;
}

function allProcesses(): Proc[] {
  const out: Proc[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // The comm field may hold spaces and parentheses: the ppid follows the last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8').replace(/\0/g, ' ');
      out.push({ pid: Number(name), ppid, cmdline });
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/**
 * Host processes that belong to a sandbox: those whose arguments contain its id (the
 * runsc-sandbox, the gofer, any `runsc exec` relay), everything in its pids cgroup when the
 * daemon made one, and all their descendants (the systrap stub processes).
 */
export function sandboxPids(id: string, cgroupParent?: string): number[] {
  const procs = allProcesses();
  const set = new Set<number>();
  for (const p of procs) if (p.cmdline.includes(id) && p.pid !== process.pid) set.add(p.pid);
  if (cgroupParent) {
    try {
      for (const l of readFileSync(`/sys/fs/cgroup/pids/${cgroupParent}/${id}/cgroup.procs`, 'utf8').split('\n')) if (l) set.add(Number(l));
    } catch {
      // no cgroup (yet)
    }
  }
  let grew = true;
  while (grew) {
    grew = false;
    for (const p of procs) {
      if (!set.has(p.pid) && set.has(p.ppid)) {
        set.add(p.pid);
        grew = true;
      }
    }
  }
  // Never count ourselves or our own children (e.g. the `ps` or `runsc` we might be running).
  set.delete(process.pid);
  return [...set].sort((a, b) => a - b);
}

/** memory.usage_in_bytes of a cgroup v1 memory cgroup, if there is one. */
export function cgroupMemory(parent: string, id: string): number | undefined {
  try {
    return Number(readFileSync(`/sys/fs/cgroup/memory/${parent}/${id}/memory.usage_in_bytes`, 'utf8').trim());
  } catch {
    return undefined;
  }
}

export const MB = 1e6;
