/**
 * The packed form of a saved image's memory file, for images that sit on disk for long
 * (hibernated sandboxes). runsc writes pages.img uncompressed (`--compression=none`: its
 * flate mode puts everything into one stream that every restore must inflate, slower than
 * this) and already leaves out zero pages, so holes gain nothing; zstd -1 makes an idle
 * sandbox's 9.6 MB of pages about 2 MB, and unpacking takes ~20-30 ms (measured 2026-12-04,
 * docs/storage.md).
 *
 * Crash safety: an image directory is valid in every state a kill -9 can leave:
 *   pages.img only                        unpacked (packing never started or got cut short)
 *   pages.img + pages.img.zst.tmp         the same; the .tmp is ignored and goes with the image
 *   pages.img + pages.img.zst             packed (the .zst was synced before its rename)
 *   pages.img.zst only                    packed
 * Unpacking never writes into the image directory: it builds a scratch directory of hard
 * links and a fresh pages.img, so a half-unpacked file is never mistaken for an image and
 * one packed image (a snapshot's, a fork parent's) can be restored by several at once.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { link, mkdir, open, readdir, rename, rm, unlink } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { WarrenError } from '@warren/protocol';

const run = promisify(execFile);

const PAGES = 'pages.img';
const PACKED = `${PAGES}.zst`;
/** zstd -1: within 10% of -3's size for idle sandboxes, at two thirds of its CPU. */
const LEVEL = '-1';
/** zstd handles 10-120 MB in well under a second; a stuck one must not hold a resume forever. */
const ZSTD_TIMEOUT_MS = 60_000;

/** A packed image that cannot be unpacked: truncated, corrupt, or not zstd at all. */
export class DamagedImageError extends WarrenError {
  constructor(
    readonly imagePath: string,
    readonly why: string,
  ) {
    super('failed_precondition', `the saved image is damaged (${why})`, { cause: imagePath });
  }
}

/** Whether the image at imagePath holds its memory file packed. */
export function isPacked(imagePath: string): boolean {
  return existsSync(path.join(imagePath, PACKED));
}

/**
 * Packs the memory file of a complete image in place. Idempotent; throws if zstd fails, and
 * the image then stays as it was (unpacked, valid).
 */
export async function packPages(imagePath: string): Promise<void> {
  const pages = path.join(imagePath, PAGES);
  const packed = path.join(imagePath, PACKED);
  if (!existsSync(pages)) return; // packed already, or a crash after the .zst was in place
  if (!existsSync(packed)) {
    const tmp = `${packed}.tmp`;
    await zstd(['-q', '-f', LEVEL, '-o', tmp, pages]);
    await syncFile(tmp);
    await rename(tmp, packed);
    await syncFile(imagePath);
  }
  await unlink(pages);
}

/** An image runsc can restore from, and what to do once the restore has read it. */
export interface UnpackedImage {
  path: string;
  release(): Promise<void>;
}

/**
 * The image at imagePath in the form runsc restores from: itself when it is not packed, else
 * a scratch directory under scratchRoot with hard links to its other files and the memory
 * file unpacked. release() removes the scratch directory (runsc holds what it still reads
 * open). A packed file zstd cannot read throws DamagedImageError.
 */
export async function unpackImage(imagePath: string, scratchRoot: string): Promise<UnpackedImage> {
  if (!isPacked(imagePath)) return { path: imagePath, release: async () => undefined };
  const scratch = path.join(scratchRoot, randomBytes(6).toString('hex'));
  const release = () => rm(scratch, { recursive: true, force: true });
  const out = path.join(scratch, 'image');
  try {
    await mkdir(out, { recursive: true, mode: 0o700 });
    for (const name of await readdir(imagePath)) {
      // The packed file is unpacked below; a stale unpacked one or a .tmp of a packing cut
      // short by a crash is not part of the image.
      if (name === PACKED || name === PAGES || name.endsWith('.tmp')) continue;
      await link(path.join(imagePath, name), path.join(out, name));
    }
    try {
      await zstd(['-d', '-q', '-f', '-o', path.join(out, PAGES), path.join(imagePath, PACKED)]);
    } catch (err) {
      const why = zstdError(err);
      if (DAMAGE.test(why)) throw new DamagedImageError(imagePath, why);
      throw new WarrenError('internal', `could not unpack the saved image at ${imagePath}: ${why}`, { cause: err });
    }
  } catch (err) {
    await release();
    throw err;
  }
  return { path: out, release };
}

/** What zstd 1.5 says about input it cannot decode (truncated, corrupt, not zstd, empty). */
const DAMAGE = /premature end|unexpected end|truncated|corrupt|checksum|unsupported format|unknown frame|Decoding error/i;

async function zstd(args: string[]): Promise<void> {
  try {
    await run('zstd', args, { timeout: ZSTD_TIMEOUT_MS, maxBuffer: 1 << 20 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new WarrenError('internal', 'zstd is not installed: run `bash scripts/setup.sh` (Debian package zstd)', { cause: err });
    }
    throw err;
  }
}

function zstdError(err: unknown): string {
  const e = err as { stderr?: string; message: string };
  return (e.stderr?.trim() || e.message).replace(/\s+/g, ' ').slice(0, 300);
}

/** fsync of a file or a directory (for a rename in it to last). */
async function syncFile(p: string): Promise<void> {
  const fh = await open(p, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
