/**
 * Which databases each workspace sandbox uses, under which alias (SQLite, beside the database
 * records): the alias is the name inside the sandbox (`ALIAS.db.warren`), the database is
 * the record it reaches. A fork's children use their own branches under the same aliases.
 * `owned`: the database was made for the sandbox (created with it, or a branch for a fork)
 * and goes with it; an attached database that existed before outlives it.
 */
import type Database from 'better-sqlite3';

export interface DatabaseUse {
  sandboxId: string;
  alias: string;
  database: string;
  owned: boolean;
}

interface Row {
  sandbox_id: string;
  alias: string;
  database: string;
  owned: number;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS database_uses (
  sandbox_id TEXT NOT NULL,
  alias TEXT NOT NULL,
  database TEXT NOT NULL,
  owned INTEGER NOT NULL,
  PRIMARY KEY (sandbox_id, alias)
);
CREATE INDEX IF NOT EXISTS database_uses_by_database ON database_uses (database);
`;

export class DatabaseUses {
  constructor(private readonly db: Database.Database) {
    db.exec(SCHEMA);
  }

  add(use: DatabaseUse): void {
    this.db
      .prepare('INSERT OR REPLACE INTO database_uses (sandbox_id, alias, database, owned) VALUES (?, ?, ?, ?)')
      .run(use.sandboxId, use.alias, use.database, use.owned ? 1 : 0);
  }

  of(sandboxId: string): DatabaseUse[] {
    return (this.db.prepare('SELECT * FROM database_uses WHERE sandbox_id = ? ORDER BY rowid').all(sandboxId) as Row[]).map(fromRow);
  }

  get(sandboxId: string, alias: string): DatabaseUse | undefined {
    const row = this.db.prepare('SELECT * FROM database_uses WHERE sandbox_id = ? AND alias = ?').get(sandboxId, alias) as Row | undefined;
    return row && fromRow(row);
  }

  /** The sandbox that owns the database, if one does. */
  ownerOf(database: string): string | undefined {
    const row = this.db.prepare('SELECT sandbox_id FROM database_uses WHERE database = ? AND owned = 1').get(database) as { sandbox_id: string } | undefined;
    return row?.sandbox_id;
  }

  forgetSandbox(sandboxId: string): void {
    this.db.prepare('DELETE FROM database_uses WHERE sandbox_id = ?').run(sandboxId);
  }

  forgetDatabase(database: string): void {
    this.db.prepare('DELETE FROM database_uses WHERE database = ?').run(database);
  }
}

function fromRow(row: Row): DatabaseUse {
  return { sandboxId: row.sandbox_id, alias: row.alias, database: row.database, owned: row.owned === 1 };
}
