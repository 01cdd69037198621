/**
 * File operations, streamed both ways with credit-based flow control so that a file of any
 * size passes through with bounded memory. Paths resolve against the user's home. Every
 * operation for a user runs as that user (as-user.ts): the Sentry checks permissions and
 * resolves paths with the user's identity, so new files and directories belong to the user
 * and a process racing the operation cannot turn it against files the user may not touch.
 * The permission checks here only give clearer messages; they are not what protects.
 */
import { copyFileSync, lstatSync, mkdirSync, readdirSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync, type Stats } from 'node:fs';
import {
  closeSync,
  constants as fsConstants,
  fchmodSync,
  fchownSync,
  fstatSync,
  fsyncSync,
  lchownSync,
  chmodSync,
  openSync,
  readSync,
  utimesSync,
  writeSync,
} from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { ReceiveCredit, WarrenError, type FileStat, type FileType, type GuestOps } from '@warren/protocol/wire';
import { lookupUser, requireAccess, requireTraversable, resolvePath, type UserIdentity } from './users.js';
import { asUser } from './as-user.js';
import type { Channel, OutgoingStream } from './channel.js';

const READ = 4;
const WRITE = 2;
const SEARCH = 1;

function target(p: string, userName?: string): { user: UserIdentity; abs: string } {
  const user = lookupUser(userName);
  const abs = resolvePath(p, user);
  requireTraversable(abs, user);
  return { user, abs };
}

function describe(abs: string, st: Stats): FileStat {
  const type: FileType = st.isFile() ? 'file' : st.isDirectory() ? 'directory' : st.isSymbolicLink() ? 'symlink' : 'other';
  return {
    path: abs,
    name: path.basename(abs) || '/',
    type,
    size: st.size,
    mode: st.mode & 0o7777,
    uid: st.uid,
    gid: st.gid,
    mtime: st.mtime.toISOString(),
  };
}

export function stat(params: GuestOps['fs.stat']['params']): FileStat {
  const { user, abs } = target(params.path, params.user);
  return describe(
    abs,
    asUser(user, () => lstatSync(abs)),
  );
}

export function list(params: GuestOps['fs.list']['params']): FileStat[] {
  const { user, abs } = target(params.path, params.user);
  const depth = Math.max(1, Math.min(params.depth ?? 1, 32));
  const out: FileStat[] = [];
  const walk = (dir: string, level: number): void => {
    requireAccess(dir, user, READ);
    const names = readdirSync(dir).sort();
    for (const name of names) {
      const child = path.join(dir, name);
      let cst: Stats;
      try {
        cst = lstatSync(child);
      } catch {
        continue; // removed while listing
      }
      out.push(describe(child, cst));
      if (cst.isDirectory() && level < depth) {
        try {
          walk(child, level + 1);
        } catch (err) {
          // An unreadable subdirectory: list what we can.
          const code = (err as NodeJS.ErrnoException).code;
          if (!(err instanceof WarrenError) && code !== 'EACCES' && code !== 'ENOENT') throw err;
        }
      }
    }
  };
  asUser(user, () => {
    if (!statSync(abs).isDirectory()) throw new WarrenError('invalid_argument', `not a directory: ${abs}`);
    walk(abs, 1);
  });
  return out;
}

/** mkdir -p; directories created belong to the user (they are made as the user). */
export function mkdir(params: GuestOps['fs.mkdir']['params']): FileStat {
  const { user, abs } = target(params.path, params.user);
  return asUser(user, () => {
    let dir = abs;
    let missing = false;
    while (true) {
      try {
        const st = statSync(dir);
        if (!st.isDirectory()) throw new WarrenError('invalid_argument', `not a directory: ${dir}`);
        if (missing) requireAccess(dir, user, WRITE | SEARCH, st);
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        missing = true;
        dir = path.dirname(dir);
      }
    }
    mkdirSync(abs, { recursive: true, mode: 0o755 });
    return describe(abs, statSync(abs));
  });
}

export function move(params: GuestOps['fs.move']['params']): FileStat {
  const from = target(params.from, params.user);
  const to = target(params.to, params.user);
  return asUser(from.user, () => {
    lstatSync(from.abs); // not_found before permission noise
    requireAccess(path.dirname(from.abs), from.user, WRITE | SEARCH);
    requireAccess(path.dirname(to.abs), to.user, WRITE | SEARCH);
    try {
      renameSync(from.abs, to.abs);
    } catch (err) {
      // /tmp and /dev/shm are separate filesystems; move across them as mv does.
      if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
      moveAcross(from.abs, to.abs, from.user.uid === 0);
    }
    return describe(to.abs, lstatSync(to.abs));
  });
}

/**
 * Copies into a temporary name beside the target, renames that into place (so replacing an
 * existing target behaves as rename does), then removes the source. Runs as the caller.
 */
function moveAcross(from: string, to: string, keepOwners: boolean): void {
  const tmp = path.join(path.dirname(to), `.warren-move-${randomBytes(6).toString('hex')}`);
  try {
    copyTree(from, tmp, keepOwners);
    renameSync(tmp, to);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
  rmSync(from, { recursive: true, force: true });
}

/**
 * Copies a tree keeping modes and times, and owners when root copies (a user's copy belongs
 * to the user, as with mv across filesystems). Never follows a symlink: it copies the link.
 */
function copyTree(from: string, to: string, keepOwners: boolean): void {
  const st = lstatSync(from);
  if (st.isDirectory()) {
    mkdirSync(to, { mode: 0o700 });
    for (const name of readdirSync(from)) copyTree(path.join(from, name), path.join(to, name), keepOwners);
  } else if (st.isSymbolicLink()) {
    symlinkSync(readlinkSync(from), to);
  } else if (st.isFile()) {
    copyFileSync(from, to, fsConstants.COPYFILE_EXCL);
  } else {
    throw new WarrenError('invalid_argument', `cannot move ${from} to another filesystem: not a file, directory or symlink`);
  }
  if (keepOwners) lchownSync(to, st.uid, st.gid);
  if (!st.isSymbolicLink()) {
    // After chown, which clears set-id bits. `to` was just made by this copy, in a
    // directory the caller made: nobody else can have swapped it.
    chmodSync(to, st.mode & 0o7777);
    utimesSync(to, st.atime, st.mtime);
  }
}

export function remove(params: GuestOps['fs.remove']['params']): boolean {
  const { user, abs } = target(params.path, params.user);
  if (abs === '/') throw new WarrenError('invalid_argument', 'refusing to remove /');
  return asUser(user, () => {
    try {
      lstatSync(abs);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw err;
    }
    requireAccess(path.dirname(abs), user, WRITE | SEARCH);
    rmSync(abs, { recursive: true, force: true });
    return true;
  });
}

/** Largest size-0 file (procfs, sysfs) that read() sizes by reading it whole first. */
const MAX_UNSIZED_READ = 8 * 1024 * 1024;

/** Reads a file whose stat size is 0 but may have content, as /proc files do. */
function readUnsized(fd: number, abs: string): Buffer {
  const chunks: Buffer[] = [];
  let total = 0;
  while (true) {
    const buf = Buffer.allocUnsafe(64 * 1024);
    const n = readSync(fd, buf, 0, buf.length, null);
    if (n === 0) return Buffer.concat(chunks, total);
    chunks.push(buf.subarray(0, n));
    total += n;
    if (total > MAX_UNSIZED_READ) throw new WarrenError('too_large', `${abs} does not report its size and has more than ${MAX_UNSIZED_READ} bytes`);
  }
}

/** Bytes per read: large reads cost gVisor far less per byte than 64 or 256 KiB ones. */
const READ_CHUNK = 1024 * 1024;

/**
 * Reads with readSync on the agent's own thread rather than a ReadStream: in gVisor, handing
 * each read to libuv's thread pool and back cost more than the read itself (a ReadStream
 * managed about 105 MiB/s where readSync of 1 MiB manages 900). A read blocks the event loop
 * for about a millisecond, and the credit window lets at most a few run before it yields.
 * A file that grows while it is read (a log) is cut at the announced size; one that shrinks
 * ends early, which the daemon reports as a short body.
 */
async function sendFile(fd: number, size: number, out: OutgoingStream): Promise<void> {
  // Buffers come back once written out, so a transfer uses a window's worth of them over
  // and over: in gVisor, a fresh 1 MiB buffer per read cost up to 9 ms of page faults.
  const free: Buffer[] = [];
  for (let at = 0; at < size && !out.aborted; ) {
    const want = Math.min(READ_CHUNK, size - at);
    const buf = free.pop() ?? Buffer.allocUnsafe(Math.min(READ_CHUNK, size));
    const n = readSync(fd, buf, 0, want, at);
    if (n === 0) return;
    await out.write(buf.subarray(0, n), () => free.push(buf));
    at += n;
  }
}

/**
 * Sends the file in credit-limited Data frames after the response: exactly the `size` bytes
 * announced, since the daemon passes that on as the HTTP Content-Length.
 */
export function read(params: GuestOps['file.read']['params'], channel: Channel, stream: number): { size: number; start: () => void } {
  const { user, abs } = target(params.path, params.user);
  // Non-blocking: opening a FIFO that has no writer would otherwise hang an agent thread.
  const fd = asUser(user, () => {
    const st = statSync(abs);
    if (st.isDirectory()) throw new WarrenError('invalid_argument', `is a directory, not a file: ${abs}`);
    requireAccess(abs, user, READ, st);
    return openSync(abs, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  });
  let size: number;
  let whole: Buffer | undefined;
  try {
    const fst = fstatSync(fd);
    // Devices and FIFOs have no size and may never end (/dev/zero).
    if (!fst.isFile()) throw new WarrenError('invalid_argument', `not a regular file: ${abs}`);
    size = fst.size;
    if (size === 0) {
      whole = readUnsized(fd, abs);
      size = whole.length;
    }
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  const out = channel.openOutgoing(stream);
  const start = () => {
    (async () => {
      if (whole) {
        closeSync(fd);
        for (let at = 0; at < whole.length && !out.aborted; at += READ_CHUNK) await out.write(whole.subarray(at, at + READ_CHUNK));
      } else {
        try {
          await sendFile(fd, size, out);
        } finally {
          closeSync(fd);
        }
      }
      out.end();
    })().catch((err: Error) => {
      if (!out.aborted) channel.sendMessage({ event: 'stream-error', stream, code: 'internal', message: err.message });
    });
  };
  return { size, start };
}

/**
 * Receives the file into a temporary file beside the target and renames it into place on
 * End, so a reader never sees a half-written file and a failed upload leaves nothing.
 */
export function write(params: GuestOps['file.write']['params'], channel: Channel, stream: number): Promise<{ size: number; path: string }> {
  const { user, abs } = target(params.path, params.user);
  const dir = path.dirname(abs);
  const tmp = path.join(dir, `.warren-upload-${randomBytes(6).toString('hex')}`);
  // Made as the user, exclusively and never through a symlink: whatever the name becomes
  // later, the data, mode and owner go to this descriptor's file only.
  const { existing, fd } = asUser(user, () => {
    let existing: Stats | undefined;
    try {
      existing = statSync(abs);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (existing?.isDirectory()) throw new WarrenError('invalid_argument', `is a directory, not a file: ${abs}`);
    if (existing) requireAccess(abs, user, WRITE, existing);
    requireAccess(dir, user, WRITE | SEARCH);
    const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW;
    return { existing, fd: openSync(tmp, flags, 0o600) };
  });
  let size = 0;
  const credit = new ReceiveCredit((bytes) => channel.sendMessage({ event: 'credit', stream, bytes }));
  return new Promise((resolve, reject) => {
    const cleanup = () => {
      try {
        closeSync(fd);
      } catch {
        /* already closed */
      }
      try {
        asUser(user, () => rmSync(tmp, { force: true }));
      } catch (err) {
        process.stderr.write(`warren-agent: cannot remove ${tmp}: ${(err as Error).message}\n`);
      }
    };
    channel.acceptStream(stream, {
      onData(chunk) {
        try {
          writeSync(fd, chunk);
        } catch (err) {
          channel.finishIncoming(stream);
          cleanup();
          reject(err);
          return;
        }
        size += chunk.length;
        credit.consumed(chunk.length);
      },
      onEnd() {
        try {
          const mode = params.mode ?? (existing ? existing.mode & 0o7777 : 0o644);
          // Root keeps a replaced file's owner; a user's upload belongs to the user, as a
          // file an editor saves by rename does.
          if (user.uid === 0 && existing) fchownSync(fd, existing.uid, existing.gid);
          // On the descriptor, after chown (which clears set-id bits), never by path.
          fchmodSync(fd, mode);
          fsyncSync(fd);
          closeSync(fd);
          asUser(user, () => renameSync(tmp, abs));
          resolve({ size, path: abs });
        } catch (err) {
          cleanup();
          reject(err);
        }
      },
      onAbort() {
        cleanup();
        reject(new WarrenError('unavailable', 'upload aborted'));
      },
    });
  });
}
