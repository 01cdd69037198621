/**
 * Databases: a database is one sandbox of the `postgres` template, with a record in SQLite
 * (store.ts) and a TCP forward on the host's loopback to its port 5432. Branches are forks of
 * that sandbox: memory, WAL and data files at one instant, immediately writable.
 *
 * Invariant: a record without a sandbox id is a create or branch in progress (or one a crash
 * interrupted: `reconcile` drops those). Every other record names its sandbox.
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { MAX_TTL_SECONDS, WarrenError, type DatabaseInfo, type PortForward, type SandboxInfo } from '@warren/protocol';
import type { SandboxService } from '../core/sandboxes.js';
import type { SnapshotService } from '../core/snapshots.js';
import type { TcpForwards } from '../network/tcp-forwards.js';
import { initialise, type SandboxExec } from './postgres.js';
import { newPassword } from './password.js';
import type { DatabaseRecord, DatabaseStore } from './store.js';
import type { DatabaseUses } from './uses.js';
import { WalArchive } from './wal-archive.js';
import { DATABASE_PORT, databaseHost } from '../network/database-rules.js';
import { checkTarget, restoreInto, type RestoreTarget } from './restore.js';

const DATABASE_TEMPLATE = 'postgres';
const POSTGRES_PORT = 5432;
/** Metadata key naming the database a sandbox holds (`warren ls` shows it). */
const DATABASE_METADATA_KEY = 'warren.database';
/** Databases do not expire: their sandboxes get an expiry no reaper tick reaches. */
const NEVER = Date.UTC(9999, 11, 31);
/** WAL and base backups are kept this long unless the create says otherwise. */
const DEFAULT_RETAIN_SECONDS = 7 * 24 * 3600;
const DEFAULT_BASE_BACKUP_EVERY_MS = 6 * 3600 * 1000;

export interface DatabaseServiceDeps {
  store: DatabaseStore;
  /** Which sandboxes use which databases (workspaces.ts): a removed database is forgotten there too. */
  uses: DatabaseUses;
  /** Where each database's WAL archive lives: <archiveRoot>/<name>/ (wal-archive.ts). */
  archiveRoot: string;
  /** How often a base backup is taken (default 6 hours; tests make it short). */
  baseBackupEveryMs?: number;
  /** Writes a file into a sandbox as a user (FileService.write), for restores. */
  writeFile: RestoreTarget['writeFile'];
  sandboxes: SandboxService;
  snapshots: SnapshotService;
  forwards: TcpForwards;
  exec: SandboxExec;
  log: Logger;
}

export class DatabaseService {
  private readonly log: Logger;
  private readonly archives = new Map<string, WalArchive>();

  constructor(private readonly deps: DatabaseServiceDeps) {
    this.log = deps.log.child({ component: 'databases' });
    // A database's sandbox back from disk (its workspace resumed, or any call woke it) archives again.
    deps.sandboxes.onResumed((id) => {
      const r = deps.store.bySandbox(id);
      if (r) this.startArchive(r.name);
    });
  }

  /** A new database: a sandbox of the postgres template (or of a snapshot of one), its password set, NAME created in it. */
  async create(name: string, opts: { fromSnapshot?: string; retainSeconds?: number }, apiKeyId: string): Promise<DatabaseInfo> {
    if (opts.fromSnapshot) {
      const snap = this.deps.snapshots.get(opts.fromSnapshot); // 404 for unknown snapshots
      if (snap.template !== DATABASE_TEMPLATE)
        throw new WarrenError(
          'invalid_argument',
          `snapshot ${snap.id} is of template ${snap.template}; a database starts from a snapshot of a database (template ${DATABASE_TEMPLATE})`,
        );
    }
    const password = newPassword();
    const started = Date.now();
    this.deps.store.reserve({ name, database: name, password, retainSeconds: opts.retainSeconds ?? DEFAULT_RETAIN_SECONDS, createdAt: started, apiKeyId });
    let sandbox: SandboxInfo | undefined;
    try {
      sandbox = await this.deps.sandboxes.create(
        {
          template: DATABASE_TEMPLATE,
          ttlSeconds: MAX_TTL_SECONDS,
          metadata: { [DATABASE_METADATA_KEY]: name },
          ...(opts.fromSnapshot ? { snapshot: opts.fromSnapshot } : {}),
        },
        apiKeyId,
      );
      neverExpire(this.deps.sandboxes, sandbox.id);
      await initialise(this.deps.exec, sandbox.id, name, password);
      this.deps.store.complete(name, sandbox.id);
      await this.openForward(name, sandbox.id);
    } catch (err) {
      await this.undo(name, sandbox?.id, 'database create failed');
      throw err;
    }
    this.startArchive(name);
    this.log.info({ database: name, sandbox: sandbox.id, fromSnapshot: opts.fromSnapshot, ms: Date.now() - started }, 'database created');
    return this.get(name);
  }

  /** A live copy of NAME at this instant, as database NEW: a fork of its sandbox. Same password (it is in the copied pg_authid). */
  async branch(name: string, newName: string): Promise<DatabaseInfo> {
    await this.branchMany(name, [newName]);
    return this.get(newName);
  }

  /**
   * Live copies of NAME, all from one instant (one image of its sandbox, restored once per
   * name), as databases `newNames`. All or nothing: if one cannot be made, none is kept.
   */
  async branchMany(name: string, newNames: string[]): Promise<void> {
    const parent = this.record(name);
    const parentState = parent.sandboxId ? this.sandboxState(parent.sandboxId) : 'creating';
    if (!parent.sandboxId || (parentState !== 'running' && parentState !== 'hibernated'))
      throw new WarrenError('failed_precondition', `database ${name} is ${parentState}; a database can be branched once it is running`);
    const reserved: string[] = [];
    const children: string[] = [];
    try {
      for (const newName of newNames) {
        this.deps.store.reserve({
          name: newName,
          database: parent.database,
          password: parent.password,
          parent: name,
          retainSeconds: parent.retainSeconds,
          createdAt: Date.now(),
          // A branch is its parent's sandbox forked, so it has the parent's owner.
          apiKeyId: parent.apiKeyId,
        });
        reserved.push(newName);
      }
      // The instant the fork began: everything committed before it is in the branches.
      const at = Date.now();
      const forked = await this.deps.sandboxes.fork(parent.sandboxId, {
        count: newNames.length,
        metadata: { [DATABASE_METADATA_KEY]: newNames[0]! },
        ttlSeconds: MAX_TTL_SECONDS,
      });
      children.push(...forked.sandboxes.map((c) => c.id));
      if (children.length !== newNames.length)
        throw new WarrenError('internal', `fork of ${parent.sandboxId} returned ${children.length} sandboxes for ${newNames.length}`);
      for (const [i, newName] of newNames.entries()) {
        const childId = children[i]!;
        this.deps.sandboxes.setMetadata(childId, { [DATABASE_METADATA_KEY]: newName });
        neverExpire(this.deps.sandboxes, childId);
        this.deps.store.complete(newName, childId, at);
        await this.openForward(newName, childId);
        this.log.info(
          { database: newName, parent: name, sandbox: childId, forkMs: forked.totalMs, parentPausedMs: forked.parentPausedMs },
          'database branched',
        );
      }
    } catch (err) {
      for (const [i, newName] of reserved.entries()) await this.undo(newName, children[i], 'database branch failed');
      throw err;
    }
    for (const newName of newNames) this.startArchive(newName);
  }

  /**
   * A new database NEW holding NAME's data as it was at `to` (ms): its archive's newest base
   * backup before then, replayed to that moment in a fresh sandbox. Same password as NAME.
   */
  async restore(name: string, newName: string, to: number, apiKeyId: string): Promise<DatabaseInfo> {
    const source = this.record(name);
    const archive = this.archives.get(name);
    if (!archive)
      throw new WarrenError(
        'failed_precondition',
        `database ${name} has no WAL archive running (its sandbox is ${source.sandboxId ? this.sandboxState(source.sandboxId) : 'being created'})`,
      );
    checkTarget(archive, to, name);
    // The window's end comes from file times, which run ahead of the WAL in them while the
    // archive catches up: wait until it has everything up to this call.
    await archive.archivedUntilNow();
    this.deps.store.reserve({
      name: newName,
      database: source.database,
      password: source.password,
      parent: name,
      restoredTo: to,
      retainSeconds: source.retainSeconds,
      createdAt: Date.now(),
      apiKeyId,
    });
    const started = Date.now();
    let sandbox: SandboxInfo | undefined;
    try {
      sandbox = await this.deps.sandboxes.create(
        { template: DATABASE_TEMPLATE, ttlSeconds: MAX_TTL_SECONDS, metadata: { [DATABASE_METADATA_KEY]: newName } },
        apiKeyId,
      );
      neverExpire(this.deps.sandboxes, sandbox.id);
      await restoreInto(archive, to, { sandboxId: sandbox.id, exec: this.deps.exec, writeFile: this.deps.writeFile });
      this.deps.store.complete(newName, sandbox.id);
      await this.openForward(newName, sandbox.id);
    } catch (err) {
      await this.undo(newName, sandbox?.id, 'database restore failed');
      throw err;
    }
    this.startArchive(newName);
    this.log.info({ database: newName, from: name, to: new Date(to).toISOString(), sandbox: sandbox.id, ms: Date.now() - started }, 'database restored');
    return this.get(newName);
  }

  /** A connection to NAME's PostgreSQL, for a sandbox whose policy has `db:NAME` (network/database-rules.ts). */
  async connect(name: string): Promise<Duplex> {
    const r = this.record(name);
    if (!r.sandboxId) throw new WarrenError('failed_precondition', `database ${name} is still being created`);
    return (await this.deps.sandboxes.guest(r.sandboxId, 'ports')).connectPort(POSTGRES_PORT);
  }

  /** The API key that owns NAME; undefined when there is no such database. */
  apiKeyOf(name: string): string | undefined {
    return this.deps.store.get(name)?.apiKeyId;
  }

  /**
   * NAME's URL as a sandbox whose policy allows `db:ALIAS` reaches it (database-rules.ts):
   * the host is the alias, the password and database are NAME's. Branches keep both, so a
   * fork's children reach their own branches with the same URL.
   */
  urlInside(name: string, alias: string): string {
    const r = this.record(name);
    return `postgres://postgres:${r.password}@${databaseHost(alias)}:${DATABASE_PORT}/${r.database}`;
  }

  /** Puts NAME's sandbox to disk with its archiver stopped (its workspace hibernated). */
  async hibernate(name: string): Promise<void> {
    const r = this.record(name);
    if (!r.sandboxId) return;
    const archive = this.archives.get(name);
    this.archives.delete(name);
    await archive?.stop();
    try {
      await this.deps.sandboxes.hibernate(r.sandboxId, 'its workspace hibernated');
    } catch (err) {
      this.startArchive(name); // it keeps running, so it keeps archiving
      throw err;
    }
  }

  /** Brings NAME's sandbox back (its workspace resumed); the resume hook starts its archiver. */
  async resume(name: string): Promise<void> {
    const r = this.record(name);
    if (r.sandboxId) await this.deps.sandboxes.resume(r.sandboxId);
  }

  /** Stops every archiver (daemon shutdown); the archives stay for the next start. */
  async stopArchives(): Promise<void> {
    await Promise.all([...this.archives.values()].map((a) => a.stop()));
    this.archives.clear();
  }

  private startArchive(name: string): void {
    const r = this.deps.store.get(name);
    if (!r || this.archives.has(name)) return;
    const archive = new WalArchive({
      dir: path.join(this.deps.archiveRoot, name),
      endpoint: () => {
        const current = this.deps.store.get(name);
        return current?.hostPort !== undefined ? { port: current.hostPort, password: current.password } : undefined;
      },
      retainMs: r.retainSeconds * 1000,
      baseBackupEveryMs: this.deps.baseBackupEveryMs ?? DEFAULT_BASE_BACKUP_EVERY_MS,
      log: this.log.child({ database: name }),
    });
    this.archives.set(name, archive);
    archive.start().catch((err: Error) => this.log.error({ database: name, err: err.message }, 'WAL archiving could not start'));
  }

  get(name: string): DatabaseInfo {
    return this.info(this.record(name));
  }

  /** `apiKeyId`: only that key's databases. */
  list(apiKeyId?: string): DatabaseInfo[] {
    return this.deps.store
      .list()
      .filter((r) => apiKeyId === undefined || r.apiKeyId === apiKeyId)
      .map((r) => this.info(r));
  }

  /** The connection URL, with the password: the one place it leaves the daemon. */
  url(name: string): string {
    const r = this.record(name);
    if (!r.sandboxId || r.hostPort === undefined)
      throw new WarrenError('failed_precondition', `database ${name} is still being created; ask for its URL once it is running`);
    const state = this.sandboxState(r.sandboxId);
    if (state === 'dead' || state === 'missing')
      throw new WarrenError(
        'failed_precondition',
        `database ${name}'s sandbox ${r.sandboxId} is ${state}; nothing answers at its URL (remove it with DELETE /v1/databases/${name})`,
      );
    return `postgres://postgres:${r.password}@127.0.0.1:${r.hostPort}/${r.database}`;
  }

  /** Kills the sandbox and forgets the database; branches of it stay (they are copies). */
  async remove(name: string): Promise<void> {
    const r = this.record(name);
    if (!r.sandboxId) throw new WarrenError('failed_precondition', `database ${name} is still being created; remove it once it is running`);
    await this.undo(name, r.sandboxId, 'database removed');
    this.log.info({ database: name, sandbox: r.sandboxId }, 'database removed');
  }

  /**
   * After a daemon start: forwards live in memory only, so each database's forward is
   * opened again, on its old host port when that is free. Records of creates a crash
   * interrupted are dropped (their sandbox, if any, carries metadata naming them).
   */
  async reconcile(): Promise<void> {
    for (const r of this.deps.store.list()) {
      if (!r.sandboxId) {
        this.log.warn({ database: r.name }, 'database create was interrupted by a daemon stop; record dropped');
        this.deps.store.delete(r.name);
        continue;
      }
      const state = this.sandboxState(r.sandboxId);
      if (state !== 'running' && state !== 'hibernated') {
        this.log.warn({ database: r.name, sandbox: r.sandboxId, state }, 'database sandbox is not live; no forward opened');
        continue;
      }
      await this.openForward(r.name, r.sandboxId, r.hostPort).catch((err: Error) =>
        this.log.error({ database: r.name, sandbox: r.sandboxId, err: err.message }, 'database forward could not be opened'),
      );
      // A hibernated one (its workspace is) archives again when it is resumed: an archiver
      // connecting now would wake it.
      if (state === 'running') this.startArchive(r.name);
    }
  }

  /** Opens the forward to 5432, on `wanted` when free, else on any port (logged), and records its port. */
  private async openForward(name: string, sandboxId: string, wanted?: number): Promise<void> {
    let f: PortForward;
    try {
      f = await this.deps.forwards.add(sandboxId, POSTGRES_PORT, wanted ?? 0);
    } catch (err) {
      if (!wanted || !(err instanceof WarrenError) || err.code !== 'conflict') throw err;
      f = await this.deps.forwards.add(sandboxId, POSTGRES_PORT, 0);
      this.log.warn({ database: name, wanted, hostPort: f.hostPort }, 'database host port was taken; its forward moved to a new port');
    }
    this.deps.store.setHostPort(name, f.hostPort);
  }

  /** Kills the sandbox (if any; already gone is fine) and drops the record; the teardown hook closes the forward. */
  private async undo(name: string, sandboxId: string | undefined, reason: string): Promise<void> {
    const archive = this.archives.get(name);
    this.archives.delete(name);
    await archive?.stop();
    // Retries: a base backup killed by stop() may still be removing its own partial directory.
    await rm(path.join(this.deps.archiveRoot, name), { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    if (sandboxId) {
      this.deps.forwards.removeSandbox(sandboxId);
      await this.deps.sandboxes.kill(sandboxId, reason).catch((err: unknown) => {
        if (!(err instanceof WarrenError && err.code === 'not_found')) throw err;
      });
    }
    this.deps.store.delete(name);
    this.deps.uses.forgetDatabase(name);
  }

  private record(name: string): DatabaseRecord {
    const r = this.deps.store.get(name);
    if (!r) throw new WarrenError('not_found', `no database named ${name}; see GET /v1/databases (warren db ls)`);
    return r;
  }

  private sandboxState(id: string): DatabaseInfo['state'] {
    try {
      return this.deps.sandboxes.get(id).state;
    } catch (err) {
      if (err instanceof WarrenError && err.code === 'not_found') return 'missing';
      throw err;
    }
  }

  private info(r: DatabaseRecord): DatabaseInfo {
    const state = r.sandboxId ? this.sandboxState(r.sandboxId) : 'creating';
    return {
      name: r.name,
      database: r.database,
      state,
      ...(r.sandboxId ? { sandboxId: r.sandboxId } : {}),
      ...(r.hostPort !== undefined && state !== 'missing' && state !== 'dead' ? { hostPort: r.hostPort } : {}),
      ...(r.parent ? { parent: r.parent } : {}),
      ...(r.branchedAt !== undefined ? { branchedAt: new Date(r.branchedAt).toISOString() } : {}),
      ...(r.restoredTo !== undefined ? { restoredTo: new Date(r.restoredTo).toISOString() } : {}),
      retainSeconds: r.retainSeconds,
      ...restorable(this.archives.get(r.name)),
      createdAt: new Date(r.createdAt).toISOString(),
    };
  }
}

/** A database lives until removed: its sandbox's expiry is set out of the reaper's reach. */
function neverExpire(sandboxes: SandboxService, id: string): void {
  sandboxes.setTtl(id, Math.floor((NEVER - Date.now()) / 1000));
}

/** The archive's window as the API shows it. */
function restorable(archive: WalArchive | undefined): Pick<DatabaseInfo, 'restorable'> {
  const w = archive?.window();
  return w?.from !== undefined && w.to !== undefined ? { restorable: { from: new Date(w.from).toISOString(), to: new Date(w.to).toISOString() } } : {};
}
