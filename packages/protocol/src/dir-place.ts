/**
 * Puts an extracted directory into place, and removes one: the same semantics for uploads
 * (the guest agent, inside the sandbox) and downloads (the SDK and CLI, on the host), so
 * `exists` means the same in both directions. Synchronous on purpose: the agent runs these
 * inside asUser (guest as-user.ts), so every rename and unlink is done with the user's
 * identity and a process of the same user racing it gains nothing it could not do itself.
 * Never follows a symlink: entries are looked at with lstat and moved by name.
 */
import { chmodSync, lstatSync, readdirSync, renameSync, rmdirSync, unlinkSync, type Stats } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { WarrenError } from './errors.js';
import type { DirExistsPolicy } from './api.js';

function lstatOrNull(p: string): Stats | null {
  try {
    return lstatSync(p);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/**
 * Removes a tree this call's user owns. Directories are made writable first: tar restores a
 * directory's mode at its end, and an archive's 0555 directory would otherwise stop the
 * removal of a failed upload half-way.
 */
export function removeTree(p: string): void {
  const st = lstatOrNull(p);
  if (!st) return;
  if (!st.isDirectory()) {
    unlinkSync(p);
    return;
  }
  if ((st.mode & 0o700) !== 0o700) chmodSync(p, 0o700);
  for (const name of readdirSync(p)) removeTree(path.join(p, name));
  rmdirSync(p);
}

/** The first place where merging `src` into `dst` would put a directory against a non-directory. */
function mergeConflict(src: string, dst: string, shown: string): string | undefined {
  for (const name of readdirSync(src)) {
    const d = lstatOrNull(path.join(dst, name));
    if (!d) continue;
    const s = lstatSync(path.join(src, name));
    const where = path.join(shown, name);
    if (s.isDirectory() && d.isDirectory()) {
      const deeper = mergeConflict(path.join(src, name), path.join(dst, name), where);
      if (deeper) return deeper;
    } else if (s.isDirectory() || d.isDirectory()) {
      return `${where} is a ${d.isDirectory() ? 'directory' : 'non-directory'} in the sandbox and a ${s.isDirectory() ? 'directory' : 'non-directory'} in the upload`;
    }
  }
  return undefined;
}

/** Moves every entry of `src` into `dst`; precondition: mergeConflict found nothing. */
function mergeInto(src: string, dst: string): void {
  for (const name of readdirSync(src)) {
    const s = path.join(src, name);
    const d = path.join(dst, name);
    const existing = lstatOrNull(d);
    if (existing?.isDirectory()) mergeInto(s, d);
    else renameSync(s, d); // replaces a file or symlink of the same name in one step
  }
}

/**
 * Whether `dest` exists (a directory, never followed if a symlink), refusing what the policy
 * or its type rules out: checked before a transfer starts and again when it lands.
 */
export function checkDestination(dest: string, policy: DirExistsPolicy): boolean {
  const existing = lstatOrNull(dest);
  if (!existing) return false;
  if (!existing.isDirectory()) throw new WarrenError('conflict', `${dest} exists and is not a directory`);
  if (policy === 'error') throw new WarrenError('conflict', `${dest} already exists (exists=merge or exists=replace to write into it)`);
  return true;
}

/**
 * Moves the checked, fully extracted `tmp` to `dest` by the policy. A fresh destination is
 * one rename: it appears whole. A merge is checked for conflicts before the first move.
 * Returns the replaced tree (`replace`), already renamed aside next to `dest`: the caller
 * removes it, and may answer first (removing thousands of files inside gVisor takes a second
 * or more that the new tree does not need to wait for).
 */
export function placeDirectory(tmp: string, dest: string, policy: DirExistsPolicy): string | undefined {
  if (!checkDestination(dest, policy)) {
    renameSync(tmp, dest);
    return undefined;
  }
  if (policy === 'replace') {
    const old = path.join(path.dirname(dest), `.warren-old-${randomBytes(6).toString('hex')}`);
    renameSync(dest, old);
    renameSync(tmp, dest);
    return old;
  }
  const conflict = mergeConflict(tmp, dest, dest);
  if (conflict) throw new WarrenError('conflict', `cannot merge the upload into ${dest}: ${conflict}`);
  mergeInto(tmp, dest);
  removeTree(tmp);
  return undefined;
}
