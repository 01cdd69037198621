/**
 * Directories as tar streams, both ways, through the template's GNU tar run as the caller's
 * user (started by warren-init like any command): the agent never extracts or reads on the
 * user's behalf as root, so tar can reach only what the user can. Uploads pass a TarChecker
 * before any byte reaches tar and are extracted into a temporary directory beside the
 * destination, which is moved into place only once the whole archive checked out and tar
 * succeeded, and removed on any failure (docs/files.md, "Directories").
 */
import { chmodSync, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import {
  ReceiveCredit,
  TarChecker,
  WarrenError,
  checkDestination,
  placeDirectory,
  removeTree,
  type DirUploadResult,
  type GuestOps,
} from '@warren/protocol/wire';
import { lookupUser, requireAccess, requireTraversable, resolvePath, type UserIdentity } from './users.js';
import { asUser } from './as-user.js';
import { DEFAULT_COMMAND_ENV } from './default-env.js';
import type { Channel } from './channel.js';
import type { SpawnedProcess, Spawner } from './spawner.js';

const READ = 4;
const WRITE = 2;
const SEARCH = 1;
/**
 * Only what tar needs: no variables of the sandbox's environment change how it runs. The
 * commands' glibc tunables (default-env.ts) spare tar an mmap and munmap per file.
 */
const TAR_ENV = { ...DEFAULT_COMMAND_ENV, PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', LC_ALL: 'C.UTF-8' };
/**
 * 128 KiB records instead of tar's 10 KiB: a twelfth of the reads and writes on the pipe, each
 * a trip through the Sentry. -B lets extraction take short reads from the pipe.
 */
const RECORD = ['-b', '256'];
/** Bytes of tar's stderr kept for the error message. */
const MAX_STDERR = 4096;

function target(p: string, userName?: string): { user: UserIdentity; abs: string } {
  const user = lookupUser(userName);
  const abs = resolvePath(p, user);
  if (abs === '/') throw new WarrenError('invalid_argument', 'the root directory cannot be a directory transfer target');
  requireTraversable(abs, user);
  return { user, abs };
}

/** tar's stderr, cut to its start, for errors. */
function collectStderr(child: SpawnedProcess): () => string {
  let text = '';
  child.stderr.on('data', (b: Buffer) => {
    if (text.length < MAX_STDERR) text += b.toString('utf8');
  });
  return () => text.trim().slice(0, MAX_STDERR);
}

/**
 * Removes a replaced tree after the upload's answer, by a process of the user's (the agent's
 * event loop must not spend a second unlinking thousands of files). Directories the archive
 * made read-only are made writable first, without following symlinks (find -P).
 */
function removeAside(spawner: Spawner, user: UserIdentity, dir: string): void {
  const script = 'find "$1" -type d ! -perm -u+w -exec chmod u+w {} + ; exec rm -rf -- "$1"';
  spawner
    .spawn({ argv: ['sh', '-c', script, 'sh', dir], env: TAR_ENV, cwd: path.dirname(dir), uid: user.uid, gid: user.gid, nproc: 0 })
    .then(async (child) => {
      const stderr = collectStderr(child);
      child.stdout.resume();
      const status = await child.exited;
      if (status.code !== 0) process.stderr.write(`warren-agent: cannot remove the replaced ${dir}: ${stderr()}\n`);
    })
    .catch((err: unknown) => process.stderr.write(`warren-agent: cannot remove the replaced ${dir}: ${(err as Error).message}\n`));
}

async function spawnTar(spawner: Spawner, user: UserIdentity, cwd: string, args: string[]): Promise<SpawnedProcess> {
  try {
    return await spawner.spawn({ argv: ['tar', ...args], env: TAR_ENV, cwd, uid: user.uid, gid: user.gid, nproc: 0 });
  } catch (err) {
    throw new WarrenError(
      'failed_precondition',
      `cannot run tar in this sandbox (directory transfers need GNU tar in the template): ${(err as Error).message}`,
    );
  }
}

/**
 * `tar -c` of the directory as the user, sent in credit-limited Data frames after the
 * response. Exit 1 ("file changed as we read it": a growing log) still ends the stream
 * normally; anything worse is a stream-error, which cuts the client's download short.
 */
export async function read(params: GuestOps['dir.read']['params'], spawner: Spawner, channel: Channel, stream: number): Promise<{ start: () => void }> {
  const { user, abs } = target(params.path, params.user);
  asUser(user, () => {
    const st = statSync(abs);
    if (!st.isDirectory()) throw new WarrenError('invalid_argument', `not a directory: ${abs}`);
    requireAccess(abs, user, READ | SEARCH, st);
  });
  const child = await spawnTar(spawner, user, abs, ['-c', '-f', '-', ...RECORD, '--sort=name', '--format=gnu', '.']);
  const stderr = collectStderr(child);
  child.stdin.end();
  const out = channel.openOutgoing(stream);
  const start = () => {
    child.stdout.on('data', (chunk: Buffer) => {
      if (out.aborted) return; // dropped while tar is being stopped
      child.stdout.pause();
      out.write(chunk).then(
        () => child.stdout.resume(),
        () => {
          // The reader went away: stop tar, and let its output drain so the stream can end.
          void spawner.killTree(child.pid, 'SIGKILL').catch(() => undefined);
          child.stdout.resume();
        },
      );
    });
    const ended = new Promise<void>((resolve) => child.stdout.once('end', resolve));
    Promise.all([child.exited, ended]).then(
      ([status]) => {
        if (out.aborted) return;
        if (status.code === 0 || status.code === 1) out.end();
        else
          channel.sendMessage({
            event: 'stream-error',
            stream,
            code: 'internal',
            message: `tar -c ${abs} failed (${status.code ?? status.signal}): ${stderr()}`,
          });
      },
      (err: Error) => channel.sendMessage({ event: 'stream-error', stream, code: 'internal', message: err.message }),
    );
  };
  return { start };
}

/**
 * Receives a tar stream into `path`. Every chunk is checked whole before any of it goes to
 * tar, so a refused member never reaches the disk; what tar wrote of earlier members lives
 * in the temporary directory, which goes with the failure. The stream is accepted before
 * tar has started (its Data frames may follow the request in the same read); chunks wait
 * for tar, unpaid, so the sender's credit window bounds them.
 */
export function write(params: GuestOps['dir.write']['params'], spawner: Spawner, channel: Channel, stream: number): Promise<DirUploadResult> {
  const { user, abs } = target(params.path, params.user);
  const parent = path.dirname(abs);
  const tmp = path.join(parent, `.warren-dir-${randomBytes(6).toString('hex')}`);
  const policy = params.exists ?? 'merge';
  asUser(user, () => {
    checkDestination(abs, policy);
    requireAccess(parent, user, WRITE | SEARCH);
    mkdirSync(tmp, { mode: 0o700 });
  });
  const cleanup = () => {
    try {
      asUser(user, () => removeTree(tmp));
    } catch (err) {
      process.stderr.write(`warren-agent: cannot remove ${tmp}: ${(err as Error).message}\n`);
    }
  };
  const checker = new TarChecker();
  const credit = new ReceiveCredit((bytes) => channel.sendMessage({ event: 'credit', stream, bytes }));
  let child: SpawnedProcess | undefined;
  let stderr = () => '';
  const waiting: Buffer[] = [];
  let ended = false;
  let failed = false;

  return new Promise<DirUploadResult>((resolve, reject) => {
    const fail = (err: unknown) => {
      if (failed) return;
      failed = true;
      channel.finishIncoming(stream);
      const stopped = child ? spawner.killTree(child.pid, 'SIGKILL').then(() => child?.exited) : Promise.resolve();
      void stopped
        .catch(() => undefined)
        .then(() => {
          cleanup();
          reject(err);
        });
    };
    const feed = (bytes: Buffer) => {
      if (!child) {
        waiting.push(bytes);
        return;
      }
      const flowing = child.stdin.write(bytes);
      credit.owe(bytes.length);
      // While tar's pipe is full, credit waits for 'drain': the sender stalls at its window.
      if (flowing) credit.pay();
    };
    const finish = (tar: SpawnedProcess) => {
      let summary: ReturnType<TarChecker['end']>;
      try {
        summary = checker.end();
      } catch (err) {
        fail(err);
        return;
      }
      tar.stdin.end();
      tar.exited.then((status) => {
        if (failed) return;
        if (status.code !== 0) {
          fail(new WarrenError('invalid_argument', `tar could not extract the upload into ${abs} (${status.code ?? status.signal}): ${stderr()}`));
          return;
        }
        let replaced: string | undefined;
        try {
          replaced = asUser(user, () => {
            // Without an entry for its root the archive gave the directory no mode: as mkdir.
            if (!summary.hasRoot) chmodSync(tmp, 0o755);
            return placeDirectory(tmp, abs, policy);
          });
        } catch (err) {
          failed = true;
          cleanup();
          reject(err);
          return;
        }
        const { files, directories, symlinks, hardlinks, bytes } = summary;
        resolve({ path: abs, files, directories, symlinks, hardlinks, bytes });
        if (replaced) removeAside(spawner, user, replaced);
      }, fail);
    };
    channel.acceptStream(stream, {
      onData(chunk) {
        if (failed) return;
        try {
          checker.push(chunk);
        } catch (err) {
          fail(err);
          return;
        }
        feed(Buffer.from(chunk)); // the channel reuses `chunk` after this call
      },
      onEnd() {
        ended = true;
        if (!failed && child) finish(child);
      },
      onAbort() {
        fail(new WarrenError('unavailable', 'upload aborted'));
      },
    });
    // -p keeps the archive's modes (no umask); --no-same-owner: files belong to the user even
    // when the user is root, whatever owners the archive names.
    spawnTar(spawner, user, tmp, ['-x', '-f', '-', ...RECORD, '-B', '-p', '--no-same-owner', '--delay-directory-restore']).then((tar) => {
      child = tar;
      if (failed) {
        void spawner.killTree(tar.pid, 'SIGKILL').catch(() => undefined);
        return;
      }
      stderr = collectStderr(tar);
      tar.stdout.resume();
      // A failed write to tar's stdin (tar died) shows in its exit status, not here.
      tar.stdin.on('error', () => undefined);
      tar.stdin.on('drain', () => credit.pay(1));
      for (const bytes of waiting.splice(0)) feed(bytes);
      if (ended) finish(tar);
    }, fail);
  });
}
