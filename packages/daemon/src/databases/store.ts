/**
 * Database records (SQLite, a table of its own in the registry's database, like usage.ts):
 * what the daemon must remember of a database across restarts. The password is kept here
 * and nowhere else on the host; it is read only to build the URL.
 */
import type Database from 'better-sqlite3';
import { ADMIN_KEY_ID, WarrenError } from '@warren/protocol';

export interface DatabaseRecord {
  name: string;
  /** The database inside PostgreSQL that URLs name (a branch keeps its root's). */
  database: string;
  /** Absent while the sandbox is being created. */
  sandboxId?: string;
  password: string;
  /** The host port of its forward; absent while creating. */
  hostPort?: number;
  parent?: string;
  branchedAt?: number;
  /** For a point-in-time restore: the moment it was restored to. */
  restoredTo?: number;
  /** How long its WAL archive keeps history (wal-archive.ts). */
  retainSeconds: number;
  createdAt: number;
  /** The API key that owns it (and its sandbox): no other key but an admin key sees it. */
  apiKeyId: string;
}

interface Row {
  name: string;
  database: string;
  sandbox_id: string | null;
  password: string;
  host_port: number | null;
  parent: string | null;
  branched_at: number | null;
  restored_to: number | null;
  retain_seconds: number;
  created_at: number;
  api_key_id: string;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS databases (
  name TEXT PRIMARY KEY,
  database TEXT NOT NULL,
  sandbox_id TEXT,
  password TEXT NOT NULL,
  host_port INTEGER,
  parent TEXT,
  branched_at INTEGER,
  restored_to INTEGER,
  retain_seconds INTEGER NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS databases_by_sandbox ON databases (sandbox_id);
`;

export class DatabaseStore {
  constructor(private readonly db: Database.Database) {
    db.exec(SCHEMA);
    const columns = (db.prepare('PRAGMA table_info(databases)').all() as Array<{ name: string }>).map((c) => c.name);
    // Databases from before keys had owners were the admin key's, the only key there was.
    if (!columns.includes('api_key_id')) db.exec(`ALTER TABLE databases ADD COLUMN api_key_id TEXT NOT NULL DEFAULT '${ADMIN_KEY_ID}'`);
  }

  /**
   * Reserves the name before any sandbox exists, so two creates of one name cannot both
   * start one: the primary key decides, and the loser gets a 409.
   */
  reserve(r: Pick<DatabaseRecord, 'name' | 'database' | 'password' | 'parent' | 'restoredTo' | 'retainSeconds' | 'createdAt' | 'apiKeyId'>): void {
    try {
      this.db
        .prepare(
          'INSERT INTO databases (name, database, password, parent, restored_to, retain_seconds, created_at, api_key_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
        )
        .run(r.name, r.database, r.password, r.parent ?? null, r.restoredTo ?? null, r.retainSeconds, r.createdAt, r.apiKeyId);
    } catch (err) {
      if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_PRIMARYKEY')
        throw new WarrenError('conflict', `a database named ${r.name} already exists; pick another name or remove it first`);
      throw err;
    }
  }

  /** The sandbox is up and the database in it ready. */
  complete(name: string, sandboxId: string, branchedAt?: number): void {
    this.db.prepare('UPDATE databases SET sandbox_id = ?, branched_at = ? WHERE name = ?').run(sandboxId, branchedAt ?? null, name);
  }

  setHostPort(name: string, hostPort: number): void {
    this.db.prepare('UPDATE databases SET host_port = ? WHERE name = ?').run(hostPort, name);
  }

  get(name: string): DatabaseRecord | undefined {
    const row = this.db.prepare('SELECT * FROM databases WHERE name = ?').get(name) as Row | undefined;
    return row && fromRow(row);
  }

  /** The database whose PostgreSQL runs in that sandbox, if any. */
  bySandbox(sandboxId: string): DatabaseRecord | undefined {
    const row = this.db.prepare('SELECT * FROM databases WHERE sandbox_id = ?').get(sandboxId) as Row | undefined;
    return row && fromRow(row);
  }

  list(): DatabaseRecord[] {
    return (this.db.prepare('SELECT * FROM databases ORDER BY name').all() as Row[]).map(fromRow);
  }

  delete(name: string): void {
    this.db.prepare('DELETE FROM databases WHERE name = ?').run(name);
  }
}

function fromRow(row: Row): DatabaseRecord {
  return {
    name: row.name,
    database: row.database,
    password: row.password,
    createdAt: row.created_at,
    retainSeconds: row.retain_seconds,
    apiKeyId: row.api_key_id,
    ...(row.restored_to !== null ? { restoredTo: row.restored_to } : {}),
    ...(row.sandbox_id !== null ? { sandboxId: row.sandbox_id } : {}),
    ...(row.host_port !== null ? { hostPort: row.host_port } : {}),
    ...(row.parent !== null ? { parent: row.parent } : {}),
    ...(row.branched_at !== null ? { branchedAt: row.branched_at } : {}),
  };
}
