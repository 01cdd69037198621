/**
 * The host side of directory transfers: packs a local directory into a tar stream
 * (tar-pack.ts), and extracts a downloaded one. A download comes from inside a sandbox and is
 * hostile: it is extracted by node-tar behind the same strict TarChecker the agent runs on
 * uploads, with node-tar's own entries held to the same rules (tar-unpack.ts), into a temporary
 * directory beside the destination; the tree written there is walked (tree-check.ts) and moved
 * into place only when all of it checked out, and removed on any failure. A merge into an
 * existing destination has its symlinks checked again against what the destination already
 * holds (merge-check.ts). Nothing is written outside the named destination.
 */
import { lstatSync, mkdirSync, mkdtempSync } from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { packTree } from './tar-pack.js';
import { unpackChecked } from './tar-unpack.js';
import { checkExtractedTree } from './tree-check.js';
import { checkMergedLinks } from './merge-check.js';
import { WarrenError, checkDestination, placeDirectory, removeTree, type DirExistsPolicy } from '@warren/protocol';

/** Progress of a transfer so far; `files` counts members of any kind. */
export interface DirProgress {
  bytes: number;
  files: number;
}

/** A tar stream of `localDir`'s contents (names relative to it, symlinks kept as links, times kept). */
export function packDir(localDir: string, onProgress?: (p: DirProgress) => void): Readable {
  const st = lstatSync(localDir);
  if (!st.isDirectory()) throw new WarrenError('invalid_argument', `${localDir} is not a directory`);
  const counts = { files: 0, bytes: 0 };
  const stream = packTree(localDir, counts);
  if (onProgress) {
    let sent = 0;
    stream.on('data', (chunk: Buffer) => {
      sent += chunk.length;
      onProgress({ bytes: sent, files: counts.files });
    });
  }
  return stream;
}

/**
 * Extracts the tar `source` to `localDir` by `exists` (the same semantics as uploads:
 * DirExistsPolicy). File modes are kept less this process's umask, as tar does for a
 * non-root user; owners are never taken from the archive.
 */
export async function extractDir(source: Readable, localDir: string, exists: DirExistsPolicy = 'merge', onProgress?: (p: DirProgress) => void): Promise<void> {
  const dest = path.resolve(localDir);
  const parent = path.dirname(dest);
  mkdirSync(parent, { recursive: true });
  checkDestination(dest, exists);
  const tmp = mkdtempSync(path.join(parent, '.warren-download-'));
  try {
    await unpackChecked(source, tmp, onProgress && ((bytes, files) => onProgress({ bytes, files })));
    const links = checkExtractedTree(tmp);
    // Replace and a fresh destination take the tree alone, which checkExtractedTree checked whole.
    if (exists === 'merge' && links.size && checkDestination(dest, exists)) checkMergedLinks(tmp, dest, links);
    const replaced = placeDirectory(tmp, dest, exists);
    if (replaced) removeTree(replaced);
  } catch (err) {
    removeTree(tmp);
    throw err;
  }
}
