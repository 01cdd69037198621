/**
 * Egress audit log: one row per attempt to leave a sandbox through the daemon's proxy,
 * allowed or denied, in the daemon's SQLite database (so the record survives the sandbox and
 * daemon restarts). The proxy records an attempt when it decides, then fills in the byte
 * counts with `finish` when the connection ends. Readers page by id (`afterId`), which is
 * also how a follower tails the log.
 *
 * Writes are batched: `record` and `finish` queue their row and one transaction writes the
 * queue within FLUSH_DELAY_MS, so a request through the proxy neither waits for SQLite nor
 * pays a transaction of its own (0.25-0.5 ms of each proxied HTTPS request on the test
 * machine). Ids are handed out here, so `record` still returns one at once; reads and the
 * daemon's shutdown write the queue first. A daemon killed meanwhile loses that queue.
 */
import type Database from 'better-sqlite3';
import type { EgressEntry as PublicEgressEntry } from '@warren/protocol';

export interface EgressRecord {
  /** ms epoch. */
  time: number;
  sandboxId: string;
  host: string;
  port: number;
  /** 'CONNECT' or the HTTP method. */
  method?: string;
  path?: string;
  bytesUp: number;
  bytesDown: number;
  decision: 'allowed' | 'denied';
  reason?: string;
}

export interface EgressEntry extends EgressRecord {
  id: number;
}

/** Strings that come from the sandbox are capped so that a hostile client cannot bloat the log. */
const MAX_TEXT = 2048;
const DEFAULT_LIST_LIMIT = 100;
const MAX_LIST_LIMIT = 1000;
/** How long records wait to be written together (reads write them at once). */
const FLUSH_DELAY_MS = 50;

// AUTOINCREMENT so that ids are never reused, even after prune empties the table: a follower
// holding afterId must not miss newer records that would otherwise restart at a lower id.
const SCHEMA = `
CREATE TABLE IF NOT EXISTS egress_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time INTEGER NOT NULL,
  sandbox_id TEXT NOT NULL,
  host TEXT NOT NULL,
  port INTEGER NOT NULL,
  method TEXT,
  path TEXT,
  bytes_up INTEGER NOT NULL DEFAULT 0,
  bytes_down INTEGER NOT NULL DEFAULT 0,
  decision TEXT NOT NULL CHECK (decision IN ('allowed', 'denied')),
  reason TEXT
);
CREATE INDEX IF NOT EXISTS egress_log_sandbox ON egress_log(sandbox_id, id);
CREATE INDEX IF NOT EXISTS egress_log_time ON egress_log(time);
`;

interface EgressRow {
  id: number;
  time: number;
  sandbox_id: string;
  host: string;
  port: number;
  method: string | null;
  path: string | null;
  bytes_up: number;
  bytes_down: number;
  decision: 'allowed' | 'denied';
  reason: string | null;
}

/** An entry as the API shows it (GET /v1/sandboxes/:id/egress and the dashboard's stream). */
export function publicEgressEntry(e: EgressEntry): PublicEgressEntry {
  return {
    id: e.id,
    time: new Date(e.time).toISOString(),
    host: e.host,
    port: e.port,
    ...(e.method ? { method: e.method } : {}),
    ...(e.path ? { path: e.path } : {}),
    bytesUp: e.bytesUp,
    bytesDown: e.bytesDown,
    decision: e.decision,
    ...(e.reason ? { reason: e.reason } : {}),
  };
}

export class EgressLog {
  private readonly db: Database.Database;
  private readonly insertStmt: Database.Statement;
  private readonly finishStmt: Database.Statement;
  private readonly finishWithReasonStmt: Database.Statement;
  private readonly listStmt: Database.Statement;
  private readonly pruneStmt: Database.Statement;
  private readonly writeQueue: Database.Transaction<() => void>;
  private lastId: number;
  /** Rows not written yet, by id: a finish before the write just changes the row. */
  private pendingRows = new Map<number, EgressRow>();
  private pendingFinishes: Array<{ id: number; up: number; down: number; reason?: string }> = [];
  private flushScheduled = false;

  /** onError: a batch that could not be written (the records in it are lost). */
  constructor(
    db: Database.Database,
    private readonly onError: (err: Error) => void = (err) => process.emitWarning(`egress log: ${err.message}`),
  ) {
    db.exec(SCHEMA);
    this.db = db;
    // AUTOINCREMENT's high-water mark: ids stay unique even when the newest rows were pruned.
    const seq = db.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'egress_log'").get() as { seq: number } | undefined;
    this.lastId = seq?.seq ?? 0;
    this.insertStmt = db.prepare(
      `INSERT INTO egress_log (id, time, sandbox_id, host, port, method, path, bytes_up, bytes_down, decision, reason)
       VALUES (@id, @time, @sandbox_id, @host, @port, @method, @path, @bytes_up, @bytes_down, @decision, @reason)`,
    );
    this.finishStmt = db.prepare('UPDATE egress_log SET bytes_up = ?, bytes_down = ? WHERE id = ?');
    this.finishWithReasonStmt = db.prepare('UPDATE egress_log SET bytes_up = ?, bytes_down = ?, reason = ? WHERE id = ?');
    this.listStmt = db.prepare('SELECT * FROM egress_log WHERE sandbox_id = ? AND id > ? ORDER BY id LIMIT ?');
    this.pruneStmt = db.prepare('DELETE FROM egress_log WHERE time < ?');
    this.writeQueue = db.transaction(() => {
      for (const row of this.pendingRows.values()) this.insertStmt.run(row);
      for (const f of this.pendingFinishes) {
        if (f.reason === undefined) this.finishStmt.run(f.up, f.down, f.id);
        else this.finishWithReasonStmt.run(f.up, f.down, f.reason, f.id);
      }
    });
  }

  /** Queues one attempt and returns its id (for `finish`). */
  record(r: EgressRecord): number {
    const row: EgressRow = {
      id: ++this.lastId,
      time: requireCount('time', r.time),
      sandbox_id: r.sandboxId,
      host: capText(r.host),
      port: r.port,
      method: r.method === undefined ? null : capText(r.method),
      path: r.path === undefined ? null : capText(r.path),
      bytes_up: requireCount('bytesUp', r.bytesUp),
      bytes_down: requireCount('bytesDown', r.bytesDown),
      decision: r.decision,
      reason: r.reason === undefined ? null : capText(r.reason),
    };
    this.pendingRows.set(row.id, row);
    this.scheduleFlush();
    return row.id;
  }

  /** Updates bytes (and optionally the reason, e.g. why the connection ended) when its connection ends. */
  finish(id: number, bytesUp: number, bytesDown: number, reason?: string): void {
    const up = requireCount('bytesUp', bytesUp);
    const down = requireCount('bytesDown', bytesDown);
    const capped = reason === undefined ? undefined : capText(reason);
    const row = this.pendingRows.get(id);
    if (row) {
      row.bytes_up = up;
      row.bytes_down = down;
      if (capped !== undefined) row.reason = capped;
    } else {
      this.pendingFinishes.push({ id, up, down, ...(capped === undefined ? {} : { reason: capped }) });
    }
    this.scheduleFlush();
  }

  /** Writes what is queued now (reads and shutdown call it). */
  flush(): void {
    if (this.pendingRows.size === 0 && this.pendingFinishes.length === 0) return;
    try {
      if (this.db.open) this.writeQueue();
    } finally {
      this.pendingRows.clear();
      this.pendingFinishes = [];
    }
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    const timer = setTimeout(() => {
      this.flushScheduled = false;
      try {
        this.flush();
      } catch (err) {
        this.onError(err as Error);
      }
    }, FLUSH_DELAY_MS);
    timer.unref();
  }

  /** A sandbox's records after `afterId`, oldest first. */
  list(sandboxId: string, opts: { afterId?: number; limit?: number } = {}): EgressEntry[] {
    this.flush();
    const afterId = opts.afterId ?? 0;
    const limit = Math.min(MAX_LIST_LIMIT, Math.max(1, Math.trunc(opts.limit ?? DEFAULT_LIST_LIMIT)));
    const rows = this.listStmt.all(sandboxId, afterId, limit) as EgressRow[];
    return rows.map(toEntry);
  }

  /** The id before a sandbox's newest `count` records: where a follower starts to see only those. */
  idBeforeLast(sandboxId: string, count: number): number {
    this.flush();
    const row = this.db.prepare('SELECT id FROM egress_log WHERE sandbox_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?').get(sandboxId, count) as
      | { id: number }
      | undefined;
    return row?.id ?? 0;
  }

  /** Removes records older than `before` (ms epoch); returns how many. */
  prune(before: number): number {
    this.flush();
    return this.pruneStmt.run(before).changes;
  }
}

function toEntry(row: EgressRow): EgressEntry {
  return {
    id: row.id,
    time: row.time,
    sandboxId: row.sandbox_id,
    host: row.host,
    port: row.port,
    ...(row.method === null ? {} : { method: row.method }),
    ...(row.path === null ? {} : { path: row.path }),
    bytesUp: row.bytes_up,
    bytesDown: row.bytes_down,
    decision: row.decision,
    ...(row.reason === null ? {} : { reason: row.reason }),
  };
}

/** Caps at MAX_TEXT characters without leaving half of a surrogate pair at the end. */
function capText(text: string): string {
  if (text.length <= MAX_TEXT) return text;
  const cut = text.slice(0, MAX_TEXT);
  const last = cut.charCodeAt(cut.length - 1);
  return last >= 0xd800 && last <= 0xdbff ? cut.slice(0, -1) : cut;
}

/** Byte counts and times are non-negative integers; anything else is a bug in the caller. */
function requireCount(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`egress log: ${name} must be a non-negative integer, got ${value}`);
  return value;
}
