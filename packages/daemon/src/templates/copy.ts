/**
 * Copy steps: files from the build context on the host into the step's merged overlay
 * mount (so they land in the step's upper layer). Paths inside the template are resolved
 * like a chroot would: a symlink in the template (say /app -> /etc) is followed inside the
 * template's root, never out to the host's.
 */
import { copyFile, chmod, chown, lchown, lstat, mkdir, readdir, readlink, rm, symlink, utimes } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';

const MAX_SYMLINK_HOPS = 40;

/**
 * Host path of `inner` (absolute, inside the template) under `root`, following symlinks
 * within root. With `create`, missing directories are made (root:root, 0755, like mkdir -p);
 * the last component may stay missing either way.
 */
export async function resolveInRoot(root: string, inner: string, create: boolean): Promise<string> {
  const parts = inner.split('/').filter((p) => p && p !== '.');
  const at: string[] = [];
  let hops = 0;
  while (parts.length) {
    const name = parts.shift()!;
    if (name === '..') {
      at.pop();
      continue;
    }
    const host = path.join(root, ...at, name);
    let st: Stats | undefined;
    try {
      st = await lstat(host);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (!st) {
      if (parts.length && create) await mkdir(host, { mode: 0o755 });
      else if (parts.length) throw new WarrenError('invalid_argument', `/${[...at, name].join('/')} does not exist in the template`);
      at.push(name);
      continue;
    }
    if (st.isSymbolicLink()) {
      if (++hops > MAX_SYMLINK_HOPS) throw new WarrenError('invalid_argument', `too many symlinks resolving ${inner} in the template`);
      const target = await readlink(host);
      if (target.startsWith('/')) at.length = 0;
      parts.unshift(...target.split('/').filter((p) => p && p !== '.'));
      continue;
    }
    if (parts.length && !st.isDirectory()) throw new WarrenError('invalid_argument', `/${[...at, name].join('/')} is not a directory in the template`);
    at.push(name);
  }
  return path.join(root, ...at);
}

export interface CopyOwner {
  uid: number;
  gid: number;
}

/**
 * Copies `src` (host) to `dest` (absolute path in the template at `root`): a directory's
 * contents go into dest; a file goes to dest, or into it if dest ends with '/' or is a
 * directory already. Modes and times are kept; owner is set on everything copied.
 */
export async function copyInto(src: string, root: string, dest: string, owner: CopyOwner): Promise<number> {
  const st = await lstat(src);
  if (st.isDirectory()) {
    const target = await resolveInRoot(root, dest, true);
    await ensureDir(target, st, owner);
    return 1 + (await copyChildren(src, target, root, owner));
  }
  let target = await resolveInRoot(root, dest, true);
  const existing = await lstat(target).catch(() => undefined);
  if (dest.endsWith('/') || existing?.isDirectory()) {
    if (!existing) await mkdir(target, { mode: 0o755 });
    target = await resolveInRoot(root, path.posix.join(dest, path.basename(src)), false);
  }
  await copyLeaf(src, st, target, owner);
  return 1;
}

async function copyChildren(srcDir: string, targetDir: string, root: string, owner: CopyOwner): Promise<number> {
  let n = 0;
  for (const name of await readdir(srcDir)) {
    const src = path.join(srcDir, name);
    const st = await lstat(src);
    let target = path.join(targetDir, name);
    if (st.isDirectory()) {
      const existing = await lstat(target).catch(() => undefined);
      // A symlinked directory in the template is followed, within the template's root.
      if (existing?.isSymbolicLink()) target = await resolveInRoot(root, `/${path.relative(root, target)}`, true);
      await ensureDir(target, st, owner);
      n += 1 + (await copyChildren(src, target, root, owner));
    } else {
      await copyLeaf(src, st, target, owner);
      n++;
    }
  }
  return n;
}

async function ensureDir(target: string, st: Stats, owner: CopyOwner): Promise<void> {
  const existing = await lstat(target).catch(() => undefined);
  if (existing && !existing.isDirectory()) await rm(target, { force: true });
  if (!existing?.isDirectory()) await mkdir(target);
  await chmod(target, st.mode & 0o7777);
  await chown(target, owner.uid, owner.gid);
}

async function copyLeaf(src: string, st: Stats, target: string, owner: CopyOwner): Promise<void> {
  const existing = await lstat(target).catch(() => undefined);
  if (existing?.isDirectory()) throw new WarrenError('invalid_argument', `cannot copy file ${path.basename(src)} over a directory in the template`);
  // Replace, never write through: the old entry may be a symlink pointing anywhere.
  if (existing) await rm(target, { force: true });
  if (st.isSymbolicLink()) {
    await symlink(await readlink(src), target);
    await lchown(target, owner.uid, owner.gid);
    return;
  }
  if (!st.isFile()) throw new WarrenError('invalid_argument', `${src} is not a regular file, directory or symlink`);
  await copyFile(src, target);
  await chown(target, owner.uid, owner.gid);
  await chmod(target, st.mode & 0o7777);
  await utimes(target, st.atime, st.mtime);
}
