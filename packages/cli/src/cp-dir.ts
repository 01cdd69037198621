/**
 * `warren cp -r`: a directory between the host and a sandbox, with the semantics of `cp -r`
 * (and `docker cp`): copying DIR to a destination that exists as a directory puts it inside,
 * as DEST/basename(DIR); to one that does not, creates DEST with DIR's contents. A source
 * ending in `/.` copies its contents into DEST. On the host, only DEST is written (the SDK's
 * downloadDir checks the archive and extracts beside DEST first).
 */
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { Sandbox, WarrenError, type DirProgress } from '@warren/sdk';
import { parseSides } from './cp.js';
import { safe } from './output.js';

/** `…/.` or `…/./`: the contents of the directory rather than the directory. */
function contentsOnly(p: string): boolean {
  return /\/\.\/?$/.test(p) || p === '.';
}

/** A progress line on a terminal, redrawn at most 10 times a second; nothing when piped. */
function progressLine(verb: string): { update: (p: DirProgress) => void; done: () => void } {
  if (!process.stderr.isTTY) return { update: () => undefined, done: () => undefined };
  let last = 0;
  let shown = false;
  const draw = (p: DirProgress) => {
    const files = p.files ? `, ${p.files} files` : '';
    process.stderr.write(`\r\x1b[K${verb} ${(p.bytes / 1048576).toFixed(1)} MiB${files}`);
    shown = true;
  };
  return {
    update(p) {
      const now = Date.now();
      if (now - last < 100) return;
      last = now;
      draw(p);
    },
    done() {
      if (shown) process.stderr.write('\r\x1b[K');
    },
  };
}

async function remoteIsDir(sbx: Sandbox, p: string, user?: string): Promise<boolean> {
  try {
    return (await sbx.files.stat(p, { user })).type === 'directory';
  } catch (err) {
    if (err instanceof WarrenError && err.code === 'not_found') return false;
    throw err;
  }
}

async function localIsDir(p: string): Promise<boolean> {
  try {
    return (await stat(p)).isDirectory();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

/** Copies a directory tree; returns a line saying what went where (escaped for the terminal). */
export async function copyDir(src: string, dst: string, user?: string): Promise<string> {
  const { from, to } = parseSides(src, dst);
  if (to.sandbox) {
    if (!(await localIsDir(from.path))) throw new Error(`${safe(from.path)} is not a directory (cp without -r copies a file)`);
    const sbx = await Sandbox.connect(to.sandbox);
    const into = !contentsOnly(from.path) && (await remoteIsDir(sbx, to.path, user));
    const target = into ? path.posix.join(to.path, path.basename(path.resolve(from.path))) : to.path;
    const progress = progressLine('sent');
    try {
      const r = await sbx.files.uploadDir(from.path, target, { user, onProgress: progress.update });
      return `copied ${r.files + r.hardlinks} files, ${r.directories} directories, ${r.symlinks} symlinks (${r.bytes} bytes) to ${safe(to.sandbox)}:${safe(r.path)}`;
    } finally {
      progress.done();
    }
  }
  const sbx = await Sandbox.connect(from.sandbox as string);
  const into = !contentsOnly(from.path) && (await localIsDir(to.path));
  const target = into ? path.join(to.path, path.posix.basename(from.path)) : to.path;
  const progress = progressLine('received');
  try {
    await sbx.files.downloadDir(from.path, target, { user, onProgress: progress.update });
  } finally {
    progress.done();
  }
  return `copied ${safe(from.sandbox as string)}:${safe(from.path)} to ${safe(target)}`;
}
