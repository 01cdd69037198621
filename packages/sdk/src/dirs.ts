/**
 * The host side of directory transfers: packs a local directory into a tar stream
 * (tar-pack.ts), and extracts a downloaded one with node-tar. A download comes from inside a sandbox and is hostile: every
 * byte passes the same TarChecker the agent runs on uploads before node-tar sees it (strict,
 * owners never kept), the tree is extracted into a temporary directory beside the
 * destination and moved into place only when the whole archive checked out, and that
 * directory is removed on any failure. Nothing is written outside the named destination.
 */
import { lstatSync, mkdirSync, mkdtempSync } from 'node:fs';
import path from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar';
import { packTree } from './tar-pack.js';
import { TarChecker, WarrenError, checkDestination, placeDirectory, removeTree, type DirExistsPolicy } from '@warren/protocol';

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

/** Passes bytes on only after TarChecker accepted them; ends with its final symlink check. */
function checked(onProgress?: (p: DirProgress) => void): Transform {
  const checker = new TarChecker();
  let bytes = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      try {
        checker.push(chunk);
      } catch (err) {
        done(err as Error);
        return;
      }
      bytes += chunk.length;
      onProgress?.({ bytes, files: 0 });
      done(null, chunk);
    },
    flush(done) {
      try {
        checker.end();
        done();
      } catch (err) {
        done(err as Error);
      }
    },
  });
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
    let files = 0;
    const progress = onProgress && ((p: DirProgress) => onProgress({ bytes: p.bytes, files }));
    const unpack = tar.x({
      cwd: tmp,
      strict: true,
      preservePaths: false,
      preserveOwner: false,
      onReadEntry: () => void files++,
    });
    await pipeline(source, checked(progress), unpack as unknown as NodeJS.WritableStream);
    const replaced = placeDirectory(tmp, dest, exists);
    if (replaced) removeTree(replaced);
  } catch (err) {
    removeTree(tmp);
    throw err;
  }
}
