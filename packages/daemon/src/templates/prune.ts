/**
 * Pruning the build cache (<templatesDir>/.layers). Layers only make builds fast: a version's
 * rootfs is its own hard-link farm, so no sandbox or template needs a layer to run. A prune
 * keeps the layers some version on disk was built from (so rebuilding a template that exists
 * stays cached) unless asked for all, and never runs while a build does: builds mount layers
 * as overlay lowers. Layers leave by rename into .trash first, so a crash mid-prune leaves
 * nothing half-deleted in the cache.
 */
import { randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { WarrenError, type PruneLayersResult } from '@warren/protocol';
import type { TemplateCatalog } from './catalog.js';
import { liveBuilders } from './staging.js';

export interface PruneDirs {
  layersDir: string;
  buildRoot: string;
  trashDir: string;
}

export async function pruneLayers(catalog: TemplateCatalog, dirs: PruneDirs, opts: { all: boolean }): Promise<PruneLayersResult> {
  await refuseWhileBuilding(dirs.buildRoot, '');
  // Versions built before manifests listed their layers name none.
  const keep = new Set(opts.all ? [] : catalog.versionManifests().flatMap((m) => m.layers ?? []));
  const layers = await readdir(dirs.layersDir).catch(() => [] as string[]);
  const result: PruneLayersResult = { removed: 0, kept: 0, freedBytes: 0 };
  await mkdir(dirs.trashDir, { recursive: true, mode: 0o700 });
  for (const layer of layers) {
    if (keep.has(layer)) {
      result.kept++;
      continue;
    }
    // A build that started meanwhile may be about to use this layer.
    await refuseWhileBuilding(dirs.buildRoot, `; ${result.removed} layers were removed before it started`);
    const trash = path.join(dirs.trashDir, `layer-${layer}-${randomBytes(4).toString('hex')}`);
    await rename(path.join(dirs.layersDir, layer), trash);
    result.freedBytes += await unsharedBytes(trash);
    await rm(trash, { recursive: true, force: true });
    result.removed++;
  }
  return result;
}

async function refuseWhileBuilding(buildRoot: string, sofar: string): Promise<void> {
  const builders = await liveBuilders(buildRoot);
  if (!builders.length) return;
  const who = new Set(builders.map((pid) => (pid === process.pid ? 'this daemon' : pid === 0 ? 'a build that is starting' : `process ${pid}`)));
  throw new WarrenError('conflict', `a template build is running (${[...who].join(', ')}); prune the build cache when it has finished${sofar}`, {
    details: { builders },
  });
}

/** Allocated bytes under dir that go when it is deleted: files with no other hard link, and dirs. */
async function unsharedBytes(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    const st = await lstat(p);
    if (e.isDirectory()) total += st.blocks * 512 + (await unsharedBytes(p));
    else if (st.nlink === 1) total += st.blocks * 512;
  }
  return total;
}
