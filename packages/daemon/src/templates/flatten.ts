/**
 * Flattening: a template version's rootfs is built from its layers as a hard-link farm, so
 * no file data is copied. The kernel's read-only overlay of all layers gives the final tree
 * (whiteouts and opaque directories applied); every non-directory in it is linked from the
 * topmost layer that has that path, which is where overlayfs takes it from (a path the
 * merged view shows is never a whiteout in its topmost layer). Directories are
 * created fresh with the merged view's owner, mode and times.
 *
 * A directory that only one layer has is the same in the merged view, so it is linked as a
 * whole by `cp -al` (one process instead of a system call per file from node): most of a
 * template is its base's tree, which no later layer touches.
 *
 * Safe because template rootfs dirs are only ever read: sandboxes write to gVisor's overlay
 * (docs/storage.md) and build steps to a new upper dir, so a shared inode never changes.
 */
import { execFile } from 'node:child_process';
import { chmod, chown, link, lstat, mkdir, readdir, rm, utimes } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { WarrenError } from '@warren/protocol';
import { mountOverlay, unmount } from './mounts.js';

const execFileP = promisify(execFile);

export interface FlattenInput {
  /** Layer trees, bottom first (the bottom may be another template's rootfs). */
  layers: string[];
  /** Empty directory to merge through (mounted and unmounted here). */
  mergedDir: string;
  /** Where the flat tree goes; must not exist. */
  dest: string;
  /** Base for relative overlay option paths. */
  cwdDir: string;
}

export interface FlattenCounts {
  /** Files and directories linked or created one by one. */
  files: number;
  dirs: number;
  copied: number;
  /** Directories only one layer has, linked whole with `cp -al`. */
  trees: number;
}

export async function flatten(input: FlattenInput): Promise<FlattenCounts> {
  const [bottom] = input.layers;
  if (bottom === undefined) throw new WarrenError('internal', 'flatten: no layers to flatten');
  const topFirst = [...input.layers].reverse();
  let merged = bottom;
  if (input.layers.length > 1) {
    await mountOverlay({ lower: topFirst, target: input.mergedDir, cwdDir: input.cwdDir });
    merged = input.mergedDir;
  }
  const counts: FlattenCounts = { files: 0, dirs: 0, copied: 0, trees: 0 };
  try {
    const rootSt = await lstat(merged);
    await mkdir(input.dest);
    await walk(merged, topFirst, '', input.dest, counts);
    await applyDirMeta(input.dest, rootSt);
  } finally {
    if (merged === input.mergedDir) await unmount(input.mergedDir);
  }
  return counts;
}

export interface ApplyTopInput {
  /** Every layer, bottom first: the tree in dest was flattened from all but the last. */
  layers: string[];
  mergedDir: string;
  /** A flat tree of layers[0..n-2] (flatten's dest), brought up to date in place. */
  dest: string;
  cwdDir: string;
}

/**
 * Brings a flat tree of every layer but the top one up to date with the top one, so that a
 * build can flatten the layers below its last step while that step runs, and only the last
 * step's own changes are left for afterwards. Guided by the top layer's tree, read against the
 * merged view of all layers: a path the top layer has but the merged view does not is a
 * whiteout (removed from dest); a file is linked from the top layer (the topmost one, so its
 * version is the merged one); a directory loses the entries the merged view no longer shows
 * (an opaque directory hides those of the layers below without a whiteout each) and is
 * walked. A directory that replaces a non-directory is flattened whole from the merged view.
 */
export async function applyTop(input: ApplyTopInput): Promise<FlattenCounts> {
  const counts: FlattenCounts = { files: 0, dirs: 0, copied: 0, trees: 0 };
  const top = input.layers.at(-1);
  if (top === undefined) throw new WarrenError('internal', 'flatten: no top layer to apply');
  await mountOverlay({ lower: [...input.layers].reverse(), target: input.mergedDir, cwdDir: input.cwdDir });
  try {
    await applyDir(top, input.mergedDir, [...input.layers].reverse(), '', input.dest, counts);
    await applyDirMeta(input.dest, await lstat(input.mergedDir));
  } finally {
    await unmount(input.mergedDir);
  }
  return counts;
}

async function applyDir(top: string, merged: string, topFirst: string[], rel: string, dest: string, counts: FlattenCounts): Promise<void> {
  const [mine, shown, present] = await Promise.all([
    readdir(path.join(top, rel), { withFileTypes: true }),
    readdir(path.join(merged, rel)).then((names) => new Set(names)),
    readdir(path.join(dest, rel)),
  ]);
  // Entries hidden by an opaque directory or a whiteout.
  await Promise.all(present.filter((name) => !shown.has(name)).map((name) => rm(path.join(dest, rel, name), { recursive: true, force: true })));
  await Promise.all(
    mine.map(async (e) => {
      const childRel = path.join(rel, e.name);
      const target = path.join(dest, childRel);
      if (!shown.has(e.name)) return; // a whiteout: removed above
      const existing = await lstat(target).catch(() => undefined);
      if (e.isDirectory()) {
        const st = await lstat(path.join(merged, childRel));
        if (existing?.isDirectory()) {
          await applyDir(top, merged, topFirst, childRel, dest, counts);
        } else {
          if (existing) await rm(target, { force: true });
          await mkdir(target);
          const below = await Promise.all(topFirst.map(async (l) => ((await lstat(path.join(l, childRel)).catch(() => undefined))?.isDirectory() ? [l] : [])));
          await walk(merged, below.flat(), childRel, dest, counts);
        }
        await applyDirMeta(target, st);
        counts.dirs++;
        return;
      }
      if (existing) await rm(target, { recursive: true, force: true });
      await linkOrCopy(path.join(top, childRel), target, counts);
    }),
  );
}

async function walk(merged: string, candidates: string[], rel: string, dest: string, counts: FlattenCounts): Promise<void> {
  // One readdir per layer per directory (instead of an lstat per file per layer).
  const [entries, layerEntries] = await Promise.all([
    readdir(path.join(merged, rel), { withFileTypes: true }),
    Promise.all(
      candidates.map(async (layer) => ({
        layer,
        names: new Map((await readdir(path.join(layer, rel), { withFileTypes: true })).map((d) => [d.name, d] as const)),
      })),
    ),
  ]);
  // Directories only one layer has, by layer: linked whole, one cp per layer.
  const whole = new Map<string, string[]>();
  const walkDir = async (name: string, below: string[]) => {
    const childRel = path.join(rel, name);
    const st = await lstat(path.join(merged, childRel));
    await mkdir(path.join(dest, childRel));
    await walk(merged, below, childRel, dest, counts);
    await applyDirMeta(path.join(dest, childRel), st);
    counts.dirs++;
  };
  await Promise.all(
    entries.map(async (e) => {
      const childRel = path.join(rel, e.name);
      if (e.isDirectory()) {
        // Only layers that have this directory can hold anything below it.
        const below = layerEntries.filter(({ names }) => names.get(e.name)?.isDirectory()).map(({ layer }) => layer);
        const [only, ...more] = below;
        if (only !== undefined && more.length === 0) whole.set(only, [...(whole.get(only) ?? []), e.name]);
        else await walkDir(e.name, below);
        return;
      }
      const owner = layerEntries.find(({ names }) => names.has(e.name));
      if (!owner) throw new WarrenError('internal', `flatten: ${childRel} is in the merged view but in no layer`);
      await linkOrCopy(path.join(owner.layer, childRel), path.join(dest, childRel), counts);
    }),
  );
  for (const [layer, names] of whole) {
    if (await linkTrees(path.join(layer, rel), names, path.join(dest, rel))) {
      counts.trees += names.length;
      continue;
    }
    for (const name of names) await walkDir(name, [layer]);
  }
}

/**
 * Hard-links whole directory trees (src/<name> to targetDir/<name>) in one cp. False, with
 * nothing left behind, when cp cannot (for example at ext4's per-inode link limit): the
 * caller then goes file by file.
 */
async function linkTrees(src: string, names: string[], targetDir: string): Promise<boolean> {
  try {
    await execFileP('cp', ['-a', '-l', '--', ...names.map((n) => path.join(src, n)), `${targetDir}/`]);
    return true;
  } catch {
    await Promise.all(names.map((n) => rm(path.join(targetDir, n), { recursive: true, force: true })));
    return false;
  }
}

async function linkOrCopy(src: string, target: string, counts: { files: number; copied: number }): Promise<void> {
  try {
    await link(src, target);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // EMLINK: an inode at ext4's link limit; EXDEV: a base template on another filesystem.
    if (code !== 'EMLINK' && code !== 'EXDEV') throw err;
    await execFileP('cp', ['-a', '--reflink=auto', src, target]);
    counts.copied++;
  }
  counts.files++;
}

async function applyDirMeta(dir: string, st: Stats): Promise<void> {
  await chown(dir, st.uid, st.gid);
  await chmod(dir, st.mode & 0o7777);
  await utimes(dir, st.atime, st.mtime);
}
