/**
 * Where saved machines live on the host, under <home>/images:
 *
 *   hibernated/<sandbox id>/   the image of a hibernated sandbox (gone when it resumes)
 *   snapshots/<snapshot id>/   a snapshot's image (until the snapshot is deleted)
 *   forks/<random>/            the parent's image during a fork (removed when it ends)
 *   restores/<random>/         a packed image unpacked for one restore (image-pages.ts)
 *
 * An image directory counts only once it holds COMPLETE, written after runsc finished:
 * a daemon killed mid-checkpoint leaves a directory without it, which recovery discards.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { link, lstat, mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { packPages, unpackImage, type UnpackedImage } from './image-pages.js';

const COMPLETE = 'COMPLETE';
const RELAYED = 'RELAYED';

export class ImageStore {
  constructor(private root: string) {}

  hibernated(id: string): string {
    return path.join(this.root, 'hibernated', id);
  }

  snapshot(id: string): string {
    return path.join(this.root, 'snapshots', id);
  }

  /** A fresh directory for one fork's parent image. */
  async forkDir(): Promise<string> {
    const dir = path.join(this.root, 'forks', randomBytes(6).toString('hex'));
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return dir;
  }

  /** The directory runsc writes into (dir itself holds the marker). */
  static imagePath(dir: string): string {
    return path.join(dir, 'image');
  }

  /** Empties dir for a new image. */
  async prepare(dir: string): Promise<void> {
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true, mode: 0o700 });
  }

  async markComplete(dir: string): Promise<void> {
    await writeFile(path.join(dir, COMPLETE), `${new Date().toISOString()}\n`);
  }

  isComplete(dir: string): boolean {
    return existsSync(path.join(dir, COMPLETE));
  }

  /**
   * Marks an image taken while the agent was reached through an attach relay (after a daemon
   * restart): its stdio channel had ended, so a restore of it is reached through a relay too.
   */
  async markRelayed(dir: string): Promise<void> {
    await writeFile(path.join(dir, RELAYED), '');
  }

  /** Whether the image at imagePath (see imagePath) needs a relay to reach its agent. */
  static isRelayed(imagePath: string): boolean {
    return existsSync(path.join(path.dirname(imagePath), RELAYED));
  }

  /**
   * Packs the memory file of the complete image in dir (image-pages.ts): for images kept on
   * disk for long. The image is valid at every step; a failure leaves it unpacked.
   */
  async pack(dir: string): Promise<void> {
    await packPages(ImageStore.imagePath(dir));
  }

  /** The image at imagePath as runsc restores it; release() once the restore has returned. */
  async unpack(imagePath: string): Promise<UnpackedImage> {
    const unpacked = await unpackImage(imagePath, path.join(this.root, 'restores'));
    // The scratch copy must say what the image says: a restore of it needs a relay too.
    if (unpacked.path !== imagePath && ImageStore.isRelayed(imagePath)) await this.markRelayed(path.dirname(unpacked.path));
    return unpacked;
  }

  async remove(dir: string): Promise<void> {
    await rm(dir, { recursive: true, force: true });
  }

  /**
   * A second, independent name for a complete image: hard links, since runsc never changes
   * an image file after writing it. Costs no disk until one of the two is removed.
   */
  async linkCopy(from: string, to: string): Promise<void> {
    const tmp = `${to}.tmp`;
    await rm(tmp, { recursive: true, force: true });
    await linkTree(from, tmp);
    await rename(tmp, to);
  }

  /** Allocated bytes of everything under dir. */
  async size(dir: string): Promise<number> {
    let total = 0;
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) total += await this.size(p);
      else total += (await lstat(p)).blocks * 512;
    }
    return total;
  }

  /** Directory names (sandbox or snapshot ids) under hibernated/ or snapshots/. */
  async list(kind: 'hibernated' | 'snapshots'): Promise<string[]> {
    return (await readdir(path.join(this.root, kind)).catch(() => [] as string[])).filter((n) => !n.endsWith('.tmp'));
  }

  /** Fork images, unpacked images and half-copied directories of a daemon that died mid-operation. */
  async clearStale(): Promise<void> {
    await rm(path.join(this.root, 'forks'), { recursive: true, force: true });
    await rm(path.join(this.root, 'restores'), { recursive: true, force: true });
    for (const kind of ['hibernated', 'snapshots']) {
      for (const name of await readdir(path.join(this.root, kind)).catch(() => [] as string[])) {
        if (name.endsWith('.tmp')) await rm(path.join(this.root, kind, name), { recursive: true, force: true });
      }
    }
  }
}

async function linkTree(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true, mode: 0o700 });
  for (const entry of await readdir(from, { withFileTypes: true })) {
    // A .tmp is a packing cut short by a crash (image-pages.ts), not part of the image.
    if (entry.name.endsWith('.tmp')) continue;
    const src = path.join(from, entry.name);
    const dst = path.join(to, entry.name);
    if (entry.isDirectory()) await linkTree(src, dst);
    else await link(src, dst);
  }
}
