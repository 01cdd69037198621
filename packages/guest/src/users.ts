/**
 * Who a call runs as. The agent itself is root inside the sandbox; exec and file calls name
 * a user (default `user`) and act with that user's identity and permissions.
 */
import { readFileSync, statSync, type Stats } from 'node:fs';
import path from 'node:path';
import { WarrenError } from '@warren/protocol/wire';

const DEFAULT_USER = 'user';

export interface UserIdentity {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
  groups: number[];
}

const cache = new Map<string, UserIdentity>();

export function lookupUser(name: string = DEFAULT_USER): UserIdentity {
  const hit = cache.get(name);
  if (hit) return hit;
  const passwd = readFileSync('/etc/passwd', 'utf8').split('\n');
  const line = passwd.find((l) => l.split(':')[0] === name);
  if (!line) throw new WarrenError('invalid_argument', `unknown user '${name}' in this sandbox (see /etc/passwd)`);
  const [, , uid, gid, , home, shell] = line.split(':');
  const groups = readFileSync('/etc/group', 'utf8')
    .split('\n')
    .filter((l) => (l.split(':')[3] ?? '').split(',').includes(name))
    .map((l) => Number(l.split(':')[2]));
  const identity = { name, uid: Number(uid), gid: Number(gid), home: home || '/', shell: shell || '/bin/sh', groups };
  cache.set(name, identity);
  return identity;
}

/** Relative paths are relative to the user's home, as in a login shell. */
export function resolvePath(p: string, user: UserIdentity): string {
  if (!p) throw new WarrenError('invalid_argument', 'path must not be empty');
  if (p.includes('\0')) throw new WarrenError('invalid_argument', 'path must not contain NUL bytes');
  if (p === '~') return user.home;
  if (p.startsWith('~/')) return path.join(user.home, p.slice(2));
  return path.resolve(user.home, p);
}

/** Bits as in a mode triplet: 4 read, 2 write, 1 execute/search. */
type Access = number;

/** Unix permission check for a non-root user, since the agent's own syscalls run as root. */
function mayAccess(stats: Stats, user: UserIdentity, want: Access): boolean {
  if (user.uid === 0) return true;
  let bits: number;
  if (stats.uid === user.uid) bits = (stats.mode >> 6) & 7;
  else if (stats.gid === user.gid || user.groups.includes(stats.gid)) bits = (stats.mode >> 3) & 7;
  else bits = stats.mode & 7;
  return (bits & want) === want;
}

export function requireAccess(target: string, user: UserIdentity, want: Access, stats: Stats = statSync(target)): Stats {
  if (!mayAccess(stats, user, want)) {
    // Creating in a directory asks for write and search; name the part that matters.
    const what = want & 2 ? 'write' : want & 4 ? 'read' : 'search';
    throw new WarrenError('permission_denied', `user '${user.name}' may not ${what} ${target}`);
  }
  return stats;
}

/** Every ancestor directory must be searchable by the user. */
export function requireTraversable(target: string, user: UserIdentity): void {
  if (user.uid === 0) return;
  let dir = path.dirname(target);
  const chain: string[] = [];
  while (true) {
    chain.unshift(dir);
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  for (const d of chain) {
    let st: Stats;
    try {
      st = statSync(d);
    } catch {
      return; // a missing ancestor surfaces as not_found from the real operation
    }
    // As the kernel does (ENOTDIR): a file in the middle of a path is a bad path, whatever
    // its permission bits, not a permission problem.
    if (!st.isDirectory()) throw new WarrenError('invalid_argument', `not a directory: ${d}`);
    requireAccess(d, user, 1, st);
  }
}
