/**
 * Egress audit log: one row per attempt to leave a sandbox through the daemon's proxy,
 * allowed or denied, in the daemon's SQLite database (so the record survives the sandbox and
 * daemon restarts). The proxy records an attempt when it decides, then fills in the byte
 * counts with `finish` when the connection ends. Readers page by id (`afterId`), which is
 * also how a follower tails the log.
 */
import type Database from 'better-sqlite3';

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
export const MAX_TEXT = 2048;
export const DEFAULT_LIST_LIMIT = 100;
export const MAX_LIST_LIMIT = 1000;

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

export class EgressLog {
  private readonly insertStmt: Database.Statement;
  private readonly finishStmt: Database.Statement;
  private readonly finishWithReasonStmt: Database.Statement;
  private readonly listStmt: Database.Statement;
  private readonly pruneStmt: Database.Statement;

  constructor(db: Database.Database) {
    db.exec(SCHEMA);
    this.insertStmt = db.prepare(
      `INSERT INTO egress_log (time, sandbox_id, host, port, method, path, bytes_up, bytes_down, decision, reason)
       VALUES (@time, @sandboxId, @host, @port, @method, @path, @bytesUp, @bytesDown, @decision, @reason)`,
    );
    this.finishStmt = db.prepare('UPDATE egress_log SET bytes_up = ?, bytes_down = ? WHERE id = ?');
    this.finishWithReasonStmt = db.prepare('UPDATE egress_log SET bytes_up = ?, bytes_down = ?, reason = ? WHERE id = ?');
    this.listStmt = db.prepare('SELECT * FROM egress_log WHERE sandbox_id = ? AND id > ? ORDER BY id LIMIT ?');
    this.pruneStmt = db.prepare('DELETE FROM egress_log WHERE time < ?');
  }

  /** Stores one attempt and returns its id (for `finish`). */
  record(r: EgressRecord): number {
    const result = this.insertStmt.run({
      time: requireCount('time', r.time),
      sandboxId: r.sandboxId,
      host: capText(r.host),
      port: r.port,
      method: r.method === undefined ? null : capText(r.method),
      path: r.path === undefined ? null : capText(r.path),
      bytesUp: requireCount('bytesUp', r.bytesUp),
      bytesDown: requireCount('bytesDown', r.bytesDown),
      decision: r.decision,
      reason: r.reason === undefined ? null : capText(r.reason),
    });
    return Number(result.lastInsertRowid);
  }

  /** Updates bytes (and optionally the reason, e.g. why the connection ended) when its connection ends. */
  finish(id: number, bytesUp: number, bytesDown: number, reason?: string): void {
    const up = requireCount('bytesUp', bytesUp);
    const down = requireCount('bytesDown', bytesDown);
    if (reason === undefined) this.finishStmt.run(up, down, id);
    else this.finishWithReasonStmt.run(up, down, capText(reason), id);
  }

  /** A sandbox's records after `afterId`, oldest first. */
  list(sandboxId: string, opts: { afterId?: number; limit?: number } = {}): EgressEntry[] {
    const afterId = opts.afterId ?? 0;
    const limit = Math.min(MAX_LIST_LIMIT, Math.max(1, Math.trunc(opts.limit ?? DEFAULT_LIST_LIMIT)));
    const rows = this.listStmt.all(sandboxId, afterId, limit) as EgressRow[];
    return rows.map(toEntry);
  }

  /** Removes records older than `before` (ms epoch); returns how many. */
  prune(before: number): number {
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
