/**
 * The API's audit trail (docs/security.md): who (key id, and the sandbox token if one was used), what (method, path, the sandbox it
 * names), when and with what result, for every call that changes something. Kept in the
 * daemon's SQLite for a retention period; read by admin keys with GET /v1/audit.
 */
import type Database from 'better-sqlite3';
import type { ApiAuditEntry } from '@warren/protocol';

/** Paths are cut to this: a path is caller-controlled text. */
const MAX_PATH = 512;

interface Row {
  id: number;
  time: number;
  key_id: string | null;
  token_id: string | null;
  method: string;
  path: string;
  sandbox_id: string | null;
  status: number;
  request_id: string;
}

export interface AuditFilter {
  keyId?: string;
  sandboxId?: string;
  since?: number;
  afterId?: number;
  limit: number;
}

export class ApiAudit {
  private readonly insert: Database.Statement;

  constructor(private readonly db: Database.Database) {
    db.exec(`
CREATE TABLE IF NOT EXISTS api_audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time INTEGER NOT NULL,
  key_id TEXT,
  method TEXT NOT NULL,
  path TEXT NOT NULL,
  sandbox_id TEXT,
  status INTEGER NOT NULL,
  request_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS api_audit_time ON api_audit (time);
CREATE INDEX IF NOT EXISTS api_audit_key ON api_audit (key_id, id);
CREATE INDEX IF NOT EXISTS api_audit_sandbox ON api_audit (sandbox_id, id);
`);
    // Trails from before tokens were named apart: their token calls name the token as key_id.
    const columns = (db.prepare('PRAGMA table_info(api_audit)').all() as Array<{ name: string }>).map((c) => c.name);
    if (!columns.includes('token_id')) db.exec('ALTER TABLE api_audit ADD COLUMN token_id TEXT');
    this.insert = db.prepare(
      'INSERT INTO api_audit (time, key_id, token_id, method, path, sandbox_id, status, request_id) VALUES (@time, @key_id, @token_id, @method, @path, @sandbox_id, @status, @request_id)',
    );
  }

  record(e: Omit<ApiAuditEntry, 'id' | 'time'> & { time: number }): void {
    this.insert.run({
      time: e.time,
      key_id: e.keyId ?? null,
      token_id: e.tokenId ?? null,
      method: e.method,
      path: e.path.slice(0, MAX_PATH),
      sandbox_id: e.sandboxId ?? null,
      status: e.status,
      request_id: e.requestId,
    });
  }

  list(f: AuditFilter): ApiAuditEntry[] {
    const where: string[] = [];
    const args: unknown[] = [];
    if (f.keyId !== undefined) {
      where.push('key_id = ?');
      args.push(f.keyId);
    }
    if (f.sandboxId !== undefined) {
      where.push('sandbox_id = ?');
      args.push(f.sandboxId);
    }
    if (f.since !== undefined) {
      where.push('time >= ?');
      args.push(f.since);
    }
    if (f.afterId !== undefined) {
      where.push('id > ?');
      args.push(f.afterId);
    }
    const sql = `SELECT * FROM api_audit ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY id LIMIT ?`;
    return (this.db.prepare(sql).all(...args, f.limit) as Row[]).map((r) => ({
      id: r.id,
      time: new Date(r.time).toISOString(),
      ...(r.key_id !== null ? { keyId: r.key_id } : {}),
      ...(r.token_id !== null ? { tokenId: r.token_id } : {}),
      method: r.method,
      path: r.path,
      ...(r.sandbox_id !== null ? { sandboxId: r.sandbox_id } : {}),
      status: r.status,
      requestId: r.request_id,
    }));
  }

  /** Drops entries older than `before` (ms); returns how many. */
  prune(before: number): number {
    return this.db.prepare('DELETE FROM api_audit WHERE time < ?').run(before).changes;
  }
}
