/**
 * Coalescing of file-watch changes between two sends. A burst (a build writing one file a
 * thousand times, an unpack creating a tree) becomes at most one change per path, and the
 * change kept is always the one that says how the path ends up: a later change replaces an
 * earlier one, except that a write after a create or a rename says nothing new (the reader
 * reads the file's current content either way). Order follows each path's last change.
 */
import type { WatchChange } from '@warren/protocol/wire';

export class Coalescer {
  private pending = new Map<string, WatchChange>();
  private overflowed = false;

  /** @param maxPaths paths kept before giving up and reporting an overflow instead. */
  constructor(private readonly maxPaths: number) {}

  get size(): number {
    return this.pending.size + (this.overflowed ? 1 : 0);
  }

  add(change: WatchChange): void {
    if (this.overflowed) return;
    const prev = this.pending.get(change.path);
    let next = change;
    if (prev && change.type === 'write' && (prev.type === 'create' || prev.type === 'rename')) next = prev;
    // A renamed path that changes again: the rename's old name must still be reported gone.
    if (prev?.type === 'rename' && next !== prev && prev.oldPath && !this.pending.has(prev.oldPath)) {
      this.put({ type: 'remove', path: prev.oldPath, ...(prev.isDir !== undefined ? { isDir: prev.isDir } : {}) });
    }
    this.pending.delete(change.path); // re-inserted last: its position is its latest change
    this.put(next);
  }

  private put(change: WatchChange): void {
    if (this.pending.size >= this.maxPaths) {
      // Past the cap the reader cannot be told everything: say so once, keep nothing.
      this.pending.clear();
      this.overflowed = true;
      return;
    }
    this.pending.set(change.path, change);
  }

  /** Everything kept since the last take, and whether changes were dropped. */
  take(): { changes: WatchChange[]; overflow: boolean } {
    const changes = [...this.pending.values()];
    const overflow = this.overflowed;
    this.pending.clear();
    this.overflowed = false;
    return { changes, overflow };
  }
}
