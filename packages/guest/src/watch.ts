/**
 * File watches (fs.watch on the guest channel): a directory, optionally its whole tree, or a
 * single file, reported as create/write/remove/rename changes on an outgoing Data stream.
 *
 * One inotify watch per directory, added by the agent itself: node 20's recursive fs.watch
 * on Linux walks the tree with asynchronous calls (fs.promises), which must never run while
 * the agent holds a user's identity (as-user.ts), and it has lost events for directories
 * created during its walk. Every watch, directory scan and lstat here runs synchronously as
 * the watching user, so the Sentry checks the user's permissions: a user cannot watch (or
 * learn the entries of) a directory it could not list, and subdirectories it cannot read are
 * left out of a recursive watch.
 *
 * libuv reports inotify's events as 'rename' (created, deleted, moved) or 'change' (written,
 * attributes); what happened is read from the file system right after. A move is paired into
 * one `rename` when the old name's inode shows up under a new name in the same read of the
 * kernel's events (libuv delivers one read's events in sequence, before any setImmediate).
 */
import { lstatSync, readdirSync, statSync, watch as fsWatch, type FSWatcher, type Stats } from 'node:fs';
import path from 'node:path';
import { MAX_WATCHED_DIRS, MAX_WATCHES, WarrenError, type GuestOps } from '@warren/protocol/wire';
import { asUser } from './as-user.js';
import type { Channel, OutgoingStream } from './channel.js';
import { lookupUser, requireTraversable, resolvePath, type UserIdentity } from './users.js';
import { Coalescer } from './watch-coalesce.js';

/** A burst is sent at most this often; a change after a quiet spell goes at once. */
const THROTTLE_MS = 25;
/** Changed paths kept for a reader that does not keep up; past it the reader gets `overflow`. */
const MAX_PENDING_PATHS = 10_000;

/**
 * Kernel file systems a recursive watch does not descend into: their entries change without
 * inotify events, and /proc alone has thousands of directories that would use up the cap.
 */
const NOT_DESCENDED = new Set(['/proc', '/sys', '/dev']);

/** Directories watched by all watches of this sandbox (MAX_WATCHED_DIRS). */
let watchedDirs = 0;
const open = new Set<TreeWatch>();

export function startWatch(params: GuestOps['fs.watch']['params'], channel: Channel, stream: number): GuestOps['fs.watch']['result'] {
  if (open.size >= MAX_WATCHES) {
    throw new WarrenError('resource_exhausted', `this sandbox already has ${MAX_WATCHES} open watches; close one first`);
  }
  const user = lookupUser(params.user);
  const abs = resolvePath(params.path, user);
  requireTraversable(abs, user);
  // Followed: a symlink to a directory is watched as that directory, under the link's path.
  const st = asUser(user, () => statSync(abs));
  const w = new TreeWatch(user, abs, st.isDirectory(), params.recursive === true, channel.openOutgoing(stream));
  try {
    w.start();
  } catch (err) {
    w.close();
    throw err;
  }
  return { path: abs, isDir: st.isDirectory() };
}

class TreeWatch {
  private watchers = new Map<string, FSWatcher>();
  /** What each seen path was, for move pairing and to know a removed name was a directory. */
  private seen = new Map<string, { ino: number; dir: boolean }>();
  private changes = new Coalescer(MAX_PENDING_PATHS);
  /** Names found gone in the current read of events, not yet known to be moves. */
  private gone: Array<{ path: string; ino?: number; isDir: boolean }> = [];
  private timer?: NodeJS.Timeout | NodeJS.Immediate;
  private sending = false;
  private lastSent = 0;
  private closed = false;
  private rootGone = false;
  private capHit = false;
  /** Events of the current read, handled together (onEvents). */
  private raw: Array<{ dir: string; kind: string; name: string }> = [];
  private rawTimer?: NodeJS.Immediate;

  constructor(
    private user: UserIdentity,
    private root: string,
    private rootIsDir: boolean,
    private recursive: boolean,
    private out: OutgoingStream,
  ) {
    open.add(this);
    out.onAbort(() => this.close());
  }

  /** Throws (permission, cap) before any event is sent; the caller closes. */
  start(): void {
    asUser(this.user, () => {
      if (!this.rootIsDir) {
        // A file is watched through its directory, filtered to its name: editors save by
        // writing a new file and renaming it over the old, which an inotify watch on the
        // file's inode would stop seeing.
        this.addDir(path.dirname(this.root), false);
        this.remember(this.root);
        return;
      }
      this.addDir(this.root, false);
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    open.delete(this);
    for (const w of this.watchers.values()) w.close();
    watchedDirs -= this.watchers.size;
    this.watchers.clear();
    if (this.timer) clearTimeout(this.timer as NodeJS.Timeout);
    if (this.rawTimer) clearImmediate(this.rawTimer);
    if (!this.out.aborted) this.out.abort();
  }

  /**
   * Watches `dir` and, for a recursive watch, the directories under it. Like every method
   * below that touches the file system, it runs inside asUser (start, onEvents): one
   * identity switch per batch, not per file, since each switch is a signal to every thread
   * of the agent through the Sentry (opening a recursive watch on 2,000 files took 14.5 s as
   * user and 0.27 s as root when each lstat switched on its own).
   */
  private addDir(dir: string, announce: boolean): void {
    if (this.closed || this.watchers.has(dir)) return;
    if (watchedDirs >= MAX_WATCHED_DIRS) {
      if (!this.watchers.size) throw new WarrenError('resource_exhausted', `this sandbox already watches ${MAX_WATCHED_DIRS} directories; close a watch first`);
      this.capHit = true;
      return;
    }
    const onEvent = (kind: string, name: string | Buffer | null) => this.onEvent(dir, kind, name);
    // Listed first, as the user: the Sentry does not check read permission when adding an
    // inotify watch, and the events would tell the user the names inside a directory it may
    // not list. A file's directory is only watched for the file's own name.
    const names = this.rootIsDir ? readdirSync(dir) : [];
    const watcher = fsWatch(dir, { persistent: false, encoding: 'utf8' }, onEvent);
    watcher.on('error', () => this.dropDir(dir));
    this.watchers.set(dir, watcher);
    watchedDirs++;
    for (const name of names) {
      const child = path.join(dir, name);
      const st = this.remember(child);
      if (!st) continue;
      // Entries made before the watch on a new directory was in place: reported, since no
      // event will come for them (a duplicate create is harmless).
      if (announce) this.changes.add({ type: 'create', path: child, isDir: st.isDirectory() });
      if (this.recursive && st.isDirectory() && !NOT_DESCENDED.has(child)) this.tryAddDir(child, announce);
    }
  }

  /** A subdirectory the user may not read is left out, not an error. */
  private tryAddDir(dir: string, announce: boolean): void {
    try {
      this.addDir(dir, announce);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'EACCES' && code !== 'EPERM' && code !== 'ENOENT' && code !== 'ENOTDIR' && !(err instanceof WarrenError)) {
        process.stderr.write(`warren-agent: watch of ${dir} failed: ${(err as Error).message}\n`);
      }
    }
  }

  private dropDir(dir: string): void {
    for (const [d, w] of this.watchers) {
      if (d === dir || d.startsWith(`${dir}/`)) {
        w.close();
        this.watchers.delete(d);
        watchedDirs--;
      }
    }
  }

  /** lstat (as the user), keeping the inode for move pairing; undefined when gone or hidden. */
  private remember(p: string): Stats | undefined {
    try {
      const st = lstatSync(p);
      this.seen.set(p, { ino: st.ino, dir: st.isDirectory() });
      return st;
    } catch {
      return undefined;
    }
  }

  /**
   * Kept until the end of this read of the kernel's events (setImmediate runs after libuv has
   * delivered all of them), then handled together as the user: the read may hold both names
   * of a move.
   */
  private onEvent(dir: string, kind: string, name: string | Buffer | null): void {
    if (this.closed || name === null) return;
    this.raw.push({ dir, kind, name: String(name) });
    this.rawTimer ??= setImmediate(() => this.onEvents());
  }

  private onEvents(): void {
    this.rawTimer = undefined;
    const batch = this.raw;
    this.raw = [];
    if (this.closed) return;
    asUser(this.user, () => {
      for (const e of batch) this.handle(e.dir, e.kind, e.name);
    });
    this.settleGone(); // names gone with no new name in this read
    this.schedule();
  }

  private handle(dir: string, kind: string, name: string): void {
    if (this.closed) return;
    const full = path.join(dir, name);
    if (!this.rootIsDir && full !== this.root) return; // a file watch sees its own name only
    const st = this.remember(full);
    if (!st && this.watchers.has(dir) && !this.remember(dir)) {
      // The watched directory itself went (libuv names it by its own basename).
      this.lost(dir);
      return;
    }
    if (kind === 'change') {
      if (st) this.changes.add({ type: 'write', path: full, isDir: st.isDirectory() });
    } else if (!st) {
      const was = this.seen.get(full);
      const isDir = was?.dir ?? this.watchers.has(full);
      this.gone.push({ path: full, ino: was?.ino, isDir });
      this.seen.delete(full);
      if (isDir) this.dropDir(full);
    } else {
      const moved = this.gone.findIndex((g) => g.ino !== undefined && g.ino === st.ino && g.path !== full);
      const isDir = st.isDirectory();
      if (moved >= 0) {
        const [from] = this.gone.splice(moved, 1);
        this.changes.add({ type: 'rename', path: full, oldPath: from?.path, isDir });
      } else {
        this.changes.add({ type: 'create', path: full, isDir });
      }
      if (isDir && this.recursive && this.rootIsDir) this.tryAddDir(full, true);
    }
  }

  /** A watched directory was removed or moved away: its subtree is no longer watched. */
  private lost(dir: string): void {
    this.dropDir(dir);
    if (dir === this.root || (!this.rootIsDir && dir === path.dirname(this.root))) {
      this.changes.add({ type: 'remove', path: this.root, isDir: this.rootIsDir });
      this.rootGone = true;
    }
  }

  private settleGone(): void {
    for (const g of this.gone) this.changes.add({ type: 'remove', path: g.path, isDir: g.isDir });
    this.gone = [];
  }

  private schedule(): void {
    if (this.timer || this.sending || this.closed) return;
    const wait = this.lastSent + THROTTLE_MS - Date.now();
    this.timer = wait > 0 ? setTimeout(() => this.flush(), wait) : setImmediate(() => this.flush());
  }

  private flush(): void {
    this.timer = undefined;
    if (this.closed) return;
    this.settleGone();
    const { changes, overflow } = this.changes.take();
    const lines: string[] = changes.map((c) => JSON.stringify(c));
    if (overflow || this.capHit) {
      const message = overflow
        ? 'changes were dropped: the reader did not keep up; look at the tree again'
        : `this sandbox watches ${MAX_WATCHED_DIRS} directories: new directories are not watched`;
      lines.push(JSON.stringify({ type: 'overflow', message }));
      this.capHit = false;
    }
    if (!lines.length && !this.rootGone) return;
    this.sending = true;
    const bytes = lines.length ? Buffer.from(`${lines.join('\n')}\n`, 'utf8') : Buffer.alloc(0);
    // Waits for the reader's credit: while it waits, new changes coalesce in `changes`.
    const sent = bytes.length ? this.out.write(bytes) : Promise.resolve();
    sent.then(
      () => {
        this.sending = false;
        this.lastSent = Date.now();
        if (this.rootGone) {
          this.out.end();
          this.close();
        } else if (this.changes.size || this.gone.length) this.schedule();
      },
      () => this.close(), // the reader went away
    );
  }
}
