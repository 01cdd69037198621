/**
 * Shells: runsc containers created ahead of time (`runsc create`: the gofer and the Sentry
 * are up, nothing runs yet) for a restore to fill. Restoring into one skips the process
 * start-up that is most of a small restore: on the 2-core test machine an idle sandbox
 * restores in 200-240 ms into a new container and in 90-100 ms into a created one
 * (docs/fast-creates.md). A shell is made for one shape (root filesystem and limits), since a
 * restore needs the rootfs its image was taken on and the Sentry sizes itself at creation.
 *
 * Shells are made only for shapes that were restored recently, one at a time, and only
 * while no restore is in flight, so that making them never slows the restores they are for;
 * a shape not restored for `idleMs` loses its shells, and so does the least recently used one
 * beyond `maxShapes` (sandboxes of many different sizes must not pile up shells). Each costs
 * about 17 MB (PSS).
 */
import type { Logger } from 'pino';
import { errorText } from '@warren/protocol';

export interface Shell {
  /** The runsc container id. */
  id: string;
  shape: string;
}

export interface ShellStockOptions<S extends Shell> {
  /** Shells kept ready per shape; 0 turns shells off. */
  perShape: number;
  /** A shape not restored for this long loses its shells. */
  idleMs: number;
  /** At most this many shapes keep shells; the least recently used one beyond loses them. */
  maxShapes?: number;
  make(shape: string): Promise<S>;
  discard(shell: S, why: string): Promise<void>;
  /** Whether a shape can still be made (its template's rootfs may have been removed). */
  usable(shape: string): boolean;
  log: Logger;
}

/** How long restores must have been quiet before a shell is made. */
const QUIET_MS = 150;
/** After a failed make, that shape is not tried again for this long. */
const FAILURE_BACKOFF_MS = 30_000;
const SWEEP_INTERVAL_MS = 30_000;
const DEFAULT_MAX_SHAPES = 4;

export class ShellStock<S extends Shell> {
  private ready = new Map<string, S[]>();
  /** When each wanted shape was last asked for. */
  private wanted = new Map<string, number>();
  private failedUntil = new Map<string, number>();
  private inFlight = 0;
  private lastRestoreEnd = 0;
  private filling = false;
  /** The fill loop running now: close() waits for it, so a shell being made at shutdown is discarded, not left behind. */
  private filled: Promise<void> = Promise.resolve();
  private closed = false;
  private sweeper: NodeJS.Timeout;

  constructor(private opts: ShellStockOptions<S>) {
    this.sweeper = setInterval(() => void this.sweep(), SWEEP_INTERVAL_MS);
    this.sweeper.unref();
  }

  get enabled(): boolean {
    return this.opts.perShape > 0 && !this.closed;
  }

  /** A ready shell of that shape, if there is one; asks for more either way. */
  take(shape: string): S | undefined {
    if (!this.enabled) return undefined;
    const shell = this.ready.get(shape)?.shift();
    this.want(shape);
    return shell;
  }

  /** Keeps shells of that shape ready (a restore of it is expected). */
  want(shape: string): void {
    if (!this.enabled) return;
    // Re-inserted, so the map's order is least recently wanted first.
    this.wanted.delete(shape);
    this.wanted.set(shape, Date.now());
    const max = this.opts.maxShapes ?? DEFAULT_MAX_SHAPES;
    for (const [old] of this.wanted) {
      if (this.wanted.size <= max) break;
      void this.drop(old, 'more recently restored templates need the room');
    }
    void this.fill();
  }

  /** Marks a restore in flight; shells are made only when none is. Call the result when it ends. */
  hold(): () => void {
    this.inFlight++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inFlight--;
      this.lastRestoreEnd = Date.now();
      void this.fill();
    };
  }

  count(): number {
    let n = 0;
    for (const list of this.ready.values()) n += list.length;
    return n;
  }

  /** Discards every ready shell; no more are made. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    await this.filled; // a shell made meanwhile is discarded by the loop itself (enabled is false)
    const all = [...this.ready.values()].flat();
    this.ready.clear();
    await Promise.all(all.map((s) => this.opts.discard(s, 'daemon stopping')));
  }

  private missing(): string | undefined {
    const now = Date.now();
    for (const [shape] of this.wanted) {
      if ((this.failedUntil.get(shape) ?? 0) > now) continue;
      if ((this.ready.get(shape)?.length ?? 0) < this.opts.perShape) return shape;
    }
    return undefined;
  }

  /** Makes missing shells one by one, each once restores have been quiet for a moment. */
  private fill(): Promise<void> {
    if (this.filling || !this.enabled) return Promise.resolve();
    this.filling = true;
    this.filled = this.fillLoop();
    return this.filled;
  }

  private async fillLoop(): Promise<void> {
    try {
      for (let shape = this.missing(); shape && this.enabled; shape = this.missing()) {
        const quietFor = Date.now() - this.lastRestoreEnd;
        if (this.inFlight > 0 || quietFor < QUIET_MS) {
          // Called again when the restore in flight ends; otherwise wait out the quiet time.
          if (this.inFlight > 0) return;
          await new Promise((r) => setTimeout(r, QUIET_MS - quietFor));
          continue;
        }
        let shell: S;
        try {
          shell = await this.opts.make(shape);
        } catch (err) {
          this.failedUntil.set(shape, Date.now() + FAILURE_BACKOFF_MS);
          this.opts.log.warn({ shape, err: errorText(err) }, 'could not make a runsc shell; restores of this shape start new containers');
          continue;
        }
        if (!this.enabled || !this.wanted.has(shape)) {
          await this.opts.discard(shell, 'no longer wanted');
          continue;
        }
        const list = this.ready.get(shape) ?? [];
        list.push(shell);
        this.ready.set(shape, list);
      }
    } finally {
      this.filling = false;
    }
  }

  /** Drops the shells of shapes nobody restored for a while, or whose rootfs is gone. */
  private async sweep(): Promise<void> {
    const cutoff = Date.now() - this.opts.idleMs;
    for (const [shape, last] of [...this.wanted]) {
      const gone = !this.opts.usable(shape);
      if (last > cutoff && !gone) continue;
      await this.drop(shape, gone ? 'its template is gone' : 'its template was not restored for a while');
    }
  }

  private async drop(shape: string, why: string): Promise<void> {
    this.wanted.delete(shape);
    const shells = this.ready.get(shape) ?? [];
    this.ready.delete(shape);
    for (const s of shells) await this.opts.discard(s, why);
  }
}
