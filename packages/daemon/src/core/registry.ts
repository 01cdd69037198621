/**
 * Durable sandbox and API-key records (SQLite). The registry is the daemon's memory across
 * restarts: on start it is reconciled against what the driver reports (core/recovery.ts).
 */
import Database from 'better-sqlite3';
import type { BootKind, CredentialRule, Metadata, ResolvedResources, SandboxState } from '@warren/protocol';

export interface SandboxRecord {
  id: string;
  template: string;
  state: SandboxState;
  createdAt: number;
  expiresAt: number;
  metadata: Metadata;
  env: Record<string, string>;
  resources: ResolvedResources;
  rootfs: string;
  error?: string;
  apiKeyId: string;
  /** How it came up: a cold boot, a restore of the template's baked image, or a pool claim. */
  boot: BootKind;
  /** Auto-hibernate after this many idle seconds. */
  idleSeconds?: number;
  /** The parent sandbox (boot 'fork') or snapshot (boot 'snapshot'). */
  source?: string;
  /** Egress allow rules as the proxy applies them (validated, presets expanded); empty: nothing outside is reachable. */
  network: string[];
  /**
   * The policy as it was given, when that is not just `network`: it named presets, or it is
   * a default (the template's or the daemon's). Absent: `network` is what the request gave.
   */
  networkGiven?: NetworkGiven;
  /**
   * Credential rules (validated, with their secret values): the daemon's registry is the only
   * place they are kept. Absent or empty: none.
   */
  credentials?: CredentialRule[];
}

/** How a policy was given (network/presets.ts expands it into SandboxRecord.network). */
export interface NetworkGiven {
  /** Rules normalised, presets by name. */
  allow: string[];
  /** The rules each preset expanded to when the policy was set; absent: none named. */
  presets?: Record<string, string[]>;
  /** A default policy: the template's or the daemon's (WARREN_DEFAULT_ALLOW). */
  default?: 'template' | 'daemon';
}

/** A saved sandbox (memory, processes, files) that new sandboxes can start from. */
export interface SnapshotRecord {
  id: string;
  sandboxId: string;
  template: string;
  rootfs: string;
  resources: ResolvedResources;
  env: Record<string, string>;
  metadata: Metadata;
  createdAt: number;
  sizeBytes: number;
  apiKeyId: string;
}

interface Row {
  id: string;
  template: string;
  state: SandboxState;
  created_at: number;
  expires_at: number;
  metadata: string;
  env: string;
  resources: string;
  rootfs: string;
  error: string | null;
  api_key_id: string;
  boot: string;
  idle_seconds: number | null;
  source: string | null;
  network: string;
  network_given: string | null;
  credentials: string;
}

/** What a listing shows of a record: no env, egress policy or credentials are read for it. */
export type SandboxSummary = Pick<
  SandboxRecord,
  'id' | 'template' | 'state' | 'createdAt' | 'expiresAt' | 'metadata' | 'resources' | 'rootfs' | 'error' | 'boot' | 'idleSeconds' | 'source'
>;

/** The columns of a SandboxSummary. */
const SUMMARY_COLUMNS = 'id, template, state, created_at, expires_at, metadata, resources, rootfs, error, boot, idle_seconds, source';

export interface ListQuery {
  state?: SandboxState;
  metadata?: Record<string, string>;
  limit: number;
  /** Opaque: the id of the last item of the previous page. */
  after?: string;
  /** Only the sandboxes this API key made. */
  apiKeyId?: string;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS sandboxes (
  id TEXT PRIMARY KEY,
  template TEXT NOT NULL,
  state TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  metadata TEXT NOT NULL,
  env TEXT NOT NULL,
  resources TEXT NOT NULL,
  rootfs TEXT NOT NULL,
  error TEXT,
  api_key_id TEXT NOT NULL
);
-- (state, id): a list filtered by state walks its page in id order instead of sorting every
-- record in that state; the reaper's expiry scan reads only the records that are due.
CREATE INDEX IF NOT EXISTS sandboxes_state_id ON sandboxes(state, id);
DROP INDEX IF EXISTS sandboxes_state;
CREATE INDEX IF NOT EXISTS sandboxes_expires ON sandboxes(expires_at);
CREATE INDEX IF NOT EXISTS sandboxes_owner_id ON sandboxes(api_key_id, id);
-- Each record's metadata as (key, value) rows, kept by triggers, so a metadata filter is an
-- index lookup instead of json_each over every record (10,000 hibernated in bench density).
CREATE TABLE IF NOT EXISTS sandbox_metadata (
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  sandbox_id TEXT NOT NULL,
  PRIMARY KEY (key, value, sandbox_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sandbox_metadata_sandbox ON sandbox_metadata(sandbox_id);
CREATE TRIGGER IF NOT EXISTS sandbox_metadata_insert AFTER INSERT ON sandboxes BEGIN
  INSERT OR IGNORE INTO sandbox_metadata (key, value, sandbox_id) SELECT key, value, new.id FROM json_each(new.metadata);
END;
CREATE TRIGGER IF NOT EXISTS sandbox_metadata_update AFTER UPDATE OF metadata ON sandboxes BEGIN
  DELETE FROM sandbox_metadata WHERE sandbox_id = old.id;
  INSERT OR IGNORE INTO sandbox_metadata (key, value, sandbox_id) SELECT key, value, new.id FROM json_each(new.metadata);
END;
CREATE TRIGGER IF NOT EXISTS sandbox_metadata_delete AFTER DELETE ON sandboxes BEGIN
  DELETE FROM sandbox_metadata WHERE sandbox_id = old.id;
END;
CREATE TABLE IF NOT EXISTS snapshots (
  id TEXT PRIMARY KEY,
  sandbox_id TEXT NOT NULL,
  template TEXT NOT NULL,
  rootfs TEXT NOT NULL,
  resources TEXT NOT NULL,
  env TEXT NOT NULL,
  metadata TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  size_bytes INTEGER NOT NULL,
  api_key_id TEXT NOT NULL
);
`;

export class Registry {
  private db: Database.Database;
  private writes = 0;
  private selectOwner?: Database.Statement;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    const hadMetadataIndex = this.db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sandbox_metadata'").get() !== undefined;
    this.db.exec(SCHEMA);
    this.migrate();
    // A registry from before the metadata table: index the records it already holds.
    if (!hadMetadataIndex)
      this.db.exec('INSERT OR IGNORE INTO sandbox_metadata (key, value, sandbox_id) SELECT j.key, j.value, s.id FROM sandboxes s, json_each(s.metadata) j');
  }

  /** Columns added after the first release, for registries created before them. */
  private migrate(): void {
    const columns = (this.db.prepare('PRAGMA table_info(sandboxes)').all() as Array<{ name: string }>).map((c) => c.name);
    if (!columns.includes('boot')) this.db.exec("ALTER TABLE sandboxes ADD COLUMN boot TEXT NOT NULL DEFAULT 'cold'");
    if (!columns.includes('idle_seconds')) this.db.exec('ALTER TABLE sandboxes ADD COLUMN idle_seconds INTEGER');
    if (!columns.includes('source')) this.db.exec('ALTER TABLE sandboxes ADD COLUMN source TEXT');
    if (!columns.includes('network')) this.db.exec("ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '[]'");
    if (!columns.includes('credentials')) this.db.exec("ALTER TABLE sandboxes ADD COLUMN credentials TEXT NOT NULL DEFAULT '[]'");
    if (!columns.includes('network_given')) this.db.exec('ALTER TABLE sandboxes ADD COLUMN network_given TEXT');
    if (!columns.includes('image_bytes')) this.db.exec('ALTER TABLE sandboxes ADD COLUMN image_bytes INTEGER');
  }

  /** The same database, for stores that keep their own tables in it (core/usage.ts). */
  get database(): Database.Database {
    return this.db;
  }

  close(): void {
    this.db.close();
  }

  /**
   * Counts writes to sandbox records made through this class: a reader that saw the same
   * value saw the same records (the dashboard's live list reads them again only then).
   */
  get generation(): number {
    return this.writes;
  }

  insert(r: SandboxRecord): void {
    this.writes++;
    this.db
      .prepare(
        `INSERT INTO sandboxes (id, template, state, created_at, expires_at, metadata, env, resources, rootfs, error, api_key_id, boot, idle_seconds, source, network, network_given, credentials)
         VALUES (@id, @template, @state, @created_at, @expires_at, @metadata, @env, @resources, @rootfs, @error, @api_key_id, @boot, @idle_seconds, @source, @network, @network_given, @credentials)`,
      )
      .run(toRow(r));
  }

  /** The resources of the key's sandboxes being created or running (what its quotas count). */
  heldBy(apiKeyId: string): ResolvedResources[] {
    const rows = this.db.prepare("SELECT resources FROM sandboxes WHERE api_key_id = ? AND state IN ('creating', 'running')").all(apiKeyId) as Array<{
      resources: string;
    }>;
    return rows.map((r) => JSON.parse(r.resources) as ResolvedResources);
  }

  /** The size of a hibernated sandbox's image, for its key's disk quota. */
  setImageBytes(id: string, bytes: number): void {
    this.db.prepare('UPDATE sandboxes SET image_bytes = ? WHERE id = ?').run(bytes, id);
  }

  /** Bytes of the hibernation images of a key's hibernated sandboxes. */
  hibernatedBytesOf(apiKeyId: string): number {
    const row = this.db.prepare("SELECT COALESCE(SUM(image_bytes), 0) AS n FROM sandboxes WHERE api_key_id = ? AND state = 'hibernated'").get(apiKeyId) as {
      n: number;
    };
    return row.n;
  }

  /** The API key that made the sandbox (one indexed read: every request on a sandbox asks). */
  ownerOf(id: string): string | undefined {
    this.selectOwner ??= this.db.prepare('SELECT api_key_id FROM sandboxes WHERE id = ?');
    return (this.selectOwner.get(id) as { api_key_id: string } | undefined)?.api_key_id;
  }

  get(id: string): SandboxRecord | undefined {
    const row = this.db.prepare('SELECT * FROM sandboxes WHERE id = ?').get(id) as Row | undefined;
    return row && fromRow(row);
  }

  setState(id: string, state: SandboxState, error?: string): void {
    this.writes++;
    this.db.prepare('UPDATE sandboxes SET state = ?, error = ? WHERE id = ?').run(state, error ?? null, id);
  }

  setBoot(id: string, boot: BootKind): void {
    this.writes++;
    this.db.prepare('UPDATE sandboxes SET boot = ? WHERE id = ?').run(boot, id);
  }

  setNetwork(id: string, rules: string[], credentials: CredentialRule[] = [], given?: NetworkGiven): void {
    this.writes++;
    this.db
      .prepare('UPDATE sandboxes SET network = ?, network_given = ?, credentials = ? WHERE id = ?')
      .run(JSON.stringify(rules), given ? JSON.stringify(given) : null, JSON.stringify(credentials), id);
  }

  setExpiry(id: string, expiresAt: number): void {
    this.writes++;
    this.db.prepare('UPDATE sandboxes SET expires_at = ? WHERE id = ?').run(expiresAt, id);
  }

  /** Replaces the metadata (the index table follows by trigger). */
  setMetadata(id: string, metadata: Metadata): void {
    this.writes++;
    this.db.prepare('UPDATE sandboxes SET metadata = ? WHERE id = ?').run(JSON.stringify(metadata), id);
  }

  delete(id: string): void {
    this.writes++;
    this.db.prepare('DELETE FROM sandboxes WHERE id = ?').run(id);
  }

  /**
   * A page of records in id order. Reads only the summary columns: a page of 1000 parsed
   * every record's env, policy and credentials for nothing (and moved secrets around).
   */
  list(q: ListQuery): SandboxSummary[] {
    const where: string[] = [];
    const args: unknown[] = [];
    if (q.state) {
      where.push('state = ?');
      args.push(q.state);
    }
    for (const [k, v] of Object.entries(q.metadata ?? {})) {
      // Keys and values are bound parameters compared as plain strings: any text is safe.
      where.push('id IN (SELECT sandbox_id FROM sandbox_metadata WHERE key = ? AND value = ?)');
      args.push(k, v);
    }
    if (q.apiKeyId !== undefined) {
      where.push('api_key_id = ?');
      args.push(q.apiKeyId);
    }
    if (q.after) {
      where.push('id > ?');
      args.push(q.after);
    }
    const sql = `SELECT ${SUMMARY_COLUMNS} FROM sandboxes ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY id LIMIT ?`;
    return (this.db.prepare(sql).all(...args, q.limit) as SummaryRow[]).map(summaryFromRow);
  }

  /**
   * Ids and states of the records in these states, without parsing the rest: start-up
   * recovery walks every hibernated record, and there may be tens of thousands.
   */
  statesOf(states: SandboxState[]): Array<{ id: string; state: SandboxState }> {
    return this.db.prepare(`SELECT id, state FROM sandboxes WHERE state IN (${states.map(() => '?').join(',')})`).all(...states) as Array<{
      id: string;
      state: SandboxState;
    }>;
  }

  inStates(states: SandboxState[]): SandboxRecord[] {
    const rows = this.db.prepare(`SELECT * FROM sandboxes WHERE state IN (${states.map(() => '?').join(',')})`).all(...states) as Row[];
    return rows.map(fromRow);
  }

  expired(now: number): SandboxRecord[] {
    return (this.db.prepare("SELECT * FROM sandboxes WHERE state != 'dead' AND expires_at <= ?").all(now) as Row[]).map(fromRow);
  }

  /** Ids of sandboxes that are not dead and were created from this template. */
  liveUsingTemplate(template: string): string[] {
    return (this.db.prepare("SELECT id FROM sandboxes WHERE state != 'dead' AND template = ? ORDER BY id").all(template) as Array<{ id: string }>).map(
      (r) => r.id,
    );
  }

  insertSnapshot(r: SnapshotRecord): void {
    this.db
      .prepare(
        `INSERT INTO snapshots (id, sandbox_id, template, rootfs, resources, env, metadata, created_at, size_bytes, api_key_id)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        r.id,
        r.sandboxId,
        r.template,
        r.rootfs,
        JSON.stringify(r.resources),
        JSON.stringify(r.env),
        JSON.stringify(r.metadata),
        r.createdAt,
        r.sizeBytes,
        r.apiKeyId,
      );
  }

  getSnapshot(id: string): SnapshotRecord | undefined {
    const row = this.db.prepare('SELECT * FROM snapshots WHERE id = ?').get(id) as SnapshotRow | undefined;
    return row && snapshotFromRow(row);
  }

  listSnapshots(): SnapshotRecord[] {
    return (this.db.prepare('SELECT * FROM snapshots ORDER BY created_at, id').all() as SnapshotRow[]).map(snapshotFromRow);
  }

  deleteSnapshot(id: string): void {
    this.db.prepare('DELETE FROM snapshots WHERE id = ?').run(id);
  }

  /** Ids of snapshots taken of sandboxes of this template (they need its rootfs). */
  snapshotsUsingTemplate(template: string): string[] {
    return (this.db.prepare('SELECT id FROM snapshots WHERE template = ? ORDER BY id').all(template) as Array<{ id: string }>).map((r) => r.id);
  }

  countLive(): number {
    return (this.db.prepare("SELECT count(*) AS n FROM sandboxes WHERE state != 'dead'").get() as { n: number }).n;
  }
}

function toRow(r: SandboxRecord): Row {
  return {
    id: r.id,
    template: r.template,
    state: r.state,
    created_at: r.createdAt,
    expires_at: r.expiresAt,
    metadata: JSON.stringify(r.metadata),
    env: JSON.stringify(r.env),
    resources: JSON.stringify(r.resources),
    rootfs: r.rootfs,
    error: r.error ?? null,
    api_key_id: r.apiKeyId,
    boot: r.boot,
    idle_seconds: r.idleSeconds ?? null,
    source: r.source ?? null,
    network: JSON.stringify(r.network),
    network_given: r.networkGiven ? JSON.stringify(r.networkGiven) : null,
    credentials: JSON.stringify(r.credentials ?? []),
  };
}

type SummaryRow = Pick<
  Row,
  'id' | 'template' | 'state' | 'created_at' | 'expires_at' | 'metadata' | 'resources' | 'rootfs' | 'error' | 'boot' | 'idle_seconds' | 'source'
>;

function summaryFromRow(row: SummaryRow): SandboxSummary {
  return {
    id: row.id,
    template: row.template,
    state: row.state,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    metadata: JSON.parse(row.metadata) as Metadata,
    resources: JSON.parse(row.resources) as ResolvedResources,
    rootfs: row.rootfs,
    error: row.error ?? undefined,
    boot: row.boot as BootKind,
    ...(row.idle_seconds !== null ? { idleSeconds: row.idle_seconds } : {}),
    ...(row.source !== null ? { source: row.source } : {}),
  };
}

function fromRow(row: Row): SandboxRecord {
  return {
    ...summaryFromRow(row),
    env: JSON.parse(row.env) as Record<string, string>,
    apiKeyId: row.api_key_id,
    network: JSON.parse(row.network) as string[],
    ...(row.network_given ? { networkGiven: JSON.parse(row.network_given) as NetworkGiven } : {}),
    ...(row.credentials && row.credentials !== '[]' ? { credentials: JSON.parse(row.credentials) as CredentialRule[] } : {}),
  };
}

interface SnapshotRow {
  id: string;
  sandbox_id: string;
  template: string;
  rootfs: string;
  resources: string;
  env: string;
  metadata: string;
  created_at: number;
  size_bytes: number;
  api_key_id: string;
}

function snapshotFromRow(row: SnapshotRow): SnapshotRecord {
  return {
    id: row.id,
    sandboxId: row.sandbox_id,
    template: row.template,
    rootfs: row.rootfs,
    resources: JSON.parse(row.resources) as ResolvedResources,
    env: JSON.parse(row.env) as Record<string, string>,
    metadata: JSON.parse(row.metadata) as Metadata,
    createdAt: row.created_at,
    sizeBytes: row.size_bytes,
    apiKeyId: row.api_key_id,
  };
}
