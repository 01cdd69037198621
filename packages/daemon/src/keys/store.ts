/**
 * API key records (SQLite, a table in the registry's database): the hash of each key's
 * secret, never the secret; its scopes; when it expires or was revoked. Revoked keys stay,
 * so their sandboxes and usage still name an owner.
 */
import type Database from 'better-sqlite3';
import { WarrenError, type KeyQuotas, type Scope } from '@warren/protocol';

export interface KeyRecord {
  id: string;
  hash: string;
  name: string;
  scopes: Scope[];
  quotas?: KeyQuotas;
  /** The egress rules it may grant; absent: any. */
  egress?: string[];
  createdAt: number;
  expiresAt?: number;
  revokedAt?: number;
  rotatedAt?: number;
}

interface Row {
  id: string;
  hash: string;
  name: string;
  scopes: string;
  quotas: string | null;
  egress: string | null;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  rotated_at: number | null;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY,
  hash TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
`;

export class KeyStore {
  /** Run on every request (keys/service.ts authenticate): prepared once. */
  private readonly selectByHash: Database.Statement;
  private readonly selectById: Database.Statement;

  constructor(private readonly db: Database.Database) {
    db.exec(SCHEMA);
    const columns = (db.prepare('PRAGMA table_info(api_keys)').all() as Array<{ name: string }>).map((c) => c.name);
    // Registries from before scopes held only the admin key.
    if (!columns.includes('scopes')) db.exec(`ALTER TABLE api_keys ADD COLUMN scopes TEXT NOT NULL DEFAULT '["admin"]'`);
    if (!columns.includes('expires_at')) db.exec('ALTER TABLE api_keys ADD COLUMN expires_at INTEGER');
    if (!columns.includes('revoked_at')) db.exec('ALTER TABLE api_keys ADD COLUMN revoked_at INTEGER');
    if (!columns.includes('rotated_at')) db.exec('ALTER TABLE api_keys ADD COLUMN rotated_at INTEGER');
    if (!columns.includes('quotas')) db.exec('ALTER TABLE api_keys ADD COLUMN quotas TEXT');
    if (!columns.includes('egress')) db.exec('ALTER TABLE api_keys ADD COLUMN egress TEXT');
    this.selectByHash = db.prepare('SELECT * FROM api_keys WHERE hash = ?');
    this.selectById = db.prepare('SELECT * FROM api_keys WHERE id = ?');
  }

  /** Adds a key; with `replace`, a key of that id gets this hash (the admin key file changed). */
  put(r: KeyRecord, opts: { replace?: boolean } = {}): void {
    const verb = opts.replace ? 'INSERT OR REPLACE' : 'INSERT';
    try {
      this.db
        .prepare(`${verb} INTO api_keys (id, hash, name, scopes, quotas, egress, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
        .run(
          r.id,
          r.hash,
          r.name,
          JSON.stringify(r.scopes),
          r.quotas ? JSON.stringify(r.quotas) : null,
          r.egress ? JSON.stringify(r.egress) : null,
          r.createdAt,
          r.expiresAt ?? null,
        );
    } catch (err) {
      if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_PRIMARYKEY') throw new WarrenError('conflict', `an API key with id ${r.id} already exists`);
      throw err;
    }
  }

  get(id: string): KeyRecord | undefined {
    const row = this.selectById.get(id) as Row | undefined;
    return row && fromRow(row);
  }

  byHash(hash: string): KeyRecord | undefined {
    const row = this.selectByHash.get(hash) as Row | undefined;
    return row && fromRow(row);
  }

  list(): KeyRecord[] {
    return (this.db.prepare('SELECT * FROM api_keys ORDER BY created_at, id').all() as Row[]).map(fromRow);
  }

  setHash(id: string, hash: string, at: number): void {
    this.db.prepare('UPDATE api_keys SET hash = ?, rotated_at = ? WHERE id = ?').run(hash, at, id);
  }

  revoke(id: string, at: number): void {
    this.db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL').run(at, id);
  }
}

function fromRow(row: Row): KeyRecord {
  return {
    id: row.id,
    hash: row.hash,
    name: row.name,
    scopes: JSON.parse(row.scopes) as Scope[],
    ...(row.quotas !== null ? { quotas: JSON.parse(row.quotas) as KeyQuotas } : {}),
    ...(row.egress !== null ? { egress: JSON.parse(row.egress) as string[] } : {}),
    createdAt: row.created_at,
    ...(row.expires_at !== null ? { expiresAt: row.expires_at } : {}),
    ...(row.revoked_at !== null ? { revokedAt: row.revoked_at } : {}),
    ...(row.rotated_at !== null ? { rotatedAt: row.rotated_at } : {}),
  };
}
