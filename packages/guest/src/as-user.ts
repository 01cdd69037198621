/**
 * File operations done for a user are done as that user. The agent runs as root inside the
 * sandbox; checking permissions itself and then acting by path as root is a race a process
 * of the same user can win (swap a name for a symlink to /etc/shadow between the check and
 * the chown). With the user's effective uid, gid and groups, the Sentry enforces permissions
 * and resolves every path component as that user, so a racing swap gains nothing the user
 * could not do anyway.
 *
 * setegid/seteuid/setgroups change the identity of every thread of the agent (glibc applies
 * them to all threads), so only synchronous calls run inside: no other JavaScript can run
 * while the identity is switched. The agent starts no asynchronous file system work of its
 * own (no fs.promises, no streams on paths), so no thread-pool call runs under the switched
 * identity either; writes to descriptors opened before are unaffected by it.
 */
import type { UserIdentity } from './users.js';

/** The credential calls (POSIX only in node's types; the agent runs on Linux only). */
function credentials() {
  const { getgroups, setgroups, setegid, seteuid } = process;
  if (!getgroups || !setgroups || !setegid || !seteuid) throw new Error('the agent needs POSIX credential calls');
  return { getgroups, setgroups, setegid, seteuid };
}
const id = credentials();
/** The agent's supplementary groups now, as set last (see asUser). */
let currentGroups = id.getgroups().join(',');

/**
 * Each credential call is broadcast by glibc to every thread of the agent, and a signal to
 * each thread costs a trip through the Sentry: a file call paid about 16 ms for six of them
 * (bench: files.exists 3.3 -> 19.5 ms p50). The supplementary groups are therefore left as
 * the last user's after the call (root's access does not depend on them: it holds
 * CAP_DAC_OVERRIDE, and commands get their own groups from warren-init) and set again only
 * for another user; the effective uid and gid always go back to root.
 */
export function asUser<T>(user: UserIdentity, fn: () => T): T {
  if (user.uid === 0) return fn();
  const groups = [user.gid, ...user.groups.filter((g) => g !== user.gid)];
  // While still root: setgroups needs the identity it is about to give up.
  if (groups.join(',') !== currentGroups) {
    id.setgroups(groups);
    currentGroups = groups.join(',');
  }
  id.setegid(user.gid);
  id.seteuid(user.uid);
  try {
    const result = fn();
    if (result instanceof Promise) throw new Error('asUser: the operation must be synchronous');
    return result;
  } finally {
    id.seteuid(0);
    id.setegid(0);
  }
}
