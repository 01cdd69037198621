/** User lookups in a template's own /etc/passwd and /etc/group (not the host's). */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';

export interface TemplateUser {
  uid: number;
  gid: number;
  home: string;
  additionalGids: number[];
}

/** A table's rows as fields; the first, the name, is always there (split yields at least one). */
async function readTable(rootfs: string, file: string): Promise<Array<[name: string, ...rest: string[]]>> {
  try {
    const text = await readFile(path.join(rootfs, 'etc', file), 'utf8');
    return text
      .split('\n')
      .filter((l) => l && !l.startsWith('#'))
      .map((l) => l.split(':') as [string, ...string[]]);
  } catch {
    return [];
  }
}

/** `user` is a name or a numeric uid; rootfs is the merged view of the template so far. */
export async function lookupUser(rootfs: string, user: string): Promise<TemplateUser> {
  const passwd = await readTable(rootfs, 'passwd');
  const entry = /^[0-9]+$/.test(user) ? passwd.find((e) => e[2] === user) : passwd.find((e) => e[0] === user);
  if (!entry) {
    if (/^[0-9]+$/.test(user)) return { uid: Number(user), gid: Number(user), home: '/', additionalGids: [] };
    throw new WarrenError('invalid_argument', `user '${user}' does not exist in the template (create it in an earlier run step, e.g. useradd)`);
  }
  const groups = await readTable(rootfs, 'group');
  const additionalGids = groups.filter((g) => (g[3] ?? '').split(',').includes(entry[0])).map((g) => Number(g[2]));
  return { uid: Number(entry[2]), gid: Number(entry[3]), home: entry[5] || '/', additionalGids };
}

async function lookupGroup(rootfs: string, group: string): Promise<number> {
  if (/^[0-9]+$/.test(group)) return Number(group);
  const g = (await readTable(rootfs, 'group')).find((e) => e[0] === group);
  if (!g) throw new WarrenError('invalid_argument', `group '${group}' does not exist in the template`);
  return Number(g[2]);
}

/** USER or USER:GROUP; without a group, the user's primary group. */
export async function lookupOwner(rootfs: string, owner: string): Promise<{ uid: number; gid: number }> {
  const [user = '', group] = owner.split(':'); // split always yields a first field
  const u = await lookupUser(rootfs, user);
  return { uid: u.uid, gid: group === undefined ? u.gid : await lookupGroup(rootfs, group) };
}
