/**
 * Databases (docs/databases.md): PostgreSQL in a sandbox, reached from this host through a
 * forward on 127.0.0.1. The Python SDK's `warren.Database` behaves the same.
 */
import type { DatabaseInfo, DatabaseList, DatabaseUrl } from '@warren/protocol';
import { HttpClient, type ConnectionOptions } from './client.js';

export interface DatabaseCreateOptions extends ConnectionOptions {
  /** Start from this snapshot of a database's sandbox instead of an empty cluster. */
  fromSnapshot?: string;
  /** How long WAL and base backups are kept for point-in-time restore (default 7 days). */
  retainSeconds?: number;
}

export class Database {
  private constructor(
    private info_: DatabaseInfo,
    private readonly http: HttpClient,
    private readonly opts: ConnectionOptions,
  ) {}

  /**
   * Creates a database: a sandbox running PostgreSQL with a database of this name in it.
   *
   * @example
   * const db = await Database.create('app');
   * const url = await db.url(); // postgres://postgres:…@127.0.0.1:PORT/app
   */
  static async create(name: string, opts: DatabaseCreateOptions = {}): Promise<Database> {
    const http = new HttpClient(opts);
    const body = {
      name,
      ...(opts.fromSnapshot ? { fromSnapshot: opts.fromSnapshot } : {}),
      ...(opts.retainSeconds ? { retainSeconds: opts.retainSeconds } : {}),
    };
    return new Database(await http.json<DatabaseInfo>('POST', '/v1/databases', { json: body }), http, opts);
  }

  /** The database of this name (NotFoundError if there is none). */
  static async get(name: string, opts: ConnectionOptions = {}): Promise<Database> {
    const http = new HttpClient(opts);
    return new Database(await http.json<DatabaseInfo>('GET', `/v1/databases/${encodeURIComponent(name)}`), http, opts);
  }

  static async list(opts: ConnectionOptions = {}): Promise<DatabaseInfo[]> {
    return (await new HttpClient(opts).json<DatabaseList>('GET', '/v1/databases')).databases;
  }

  get name(): string {
    return this.info_.name;
  }

  /** What the daemon said last (refresh with `refresh()`). Never holds the password. */
  get info(): DatabaseInfo {
    return this.info_;
  }

  async refresh(): Promise<DatabaseInfo> {
    this.info_ = await this.http.json<DatabaseInfo>('GET', this.route());
    return this.info_;
  }

  /**
   * A live, writable copy of this database at this instant, named `newName`.
   *
   * @example
   * const attempt = await db.branch('app_try1');
   */
  async branch(newName: string): Promise<Database> {
    return new Database(await this.http.json<DatabaseInfo>('POST', `${this.route()}/branches`, { json: { name: newName } }), this.http, this.opts);
  }

  /**
   * A new database `newName` holding this one's data as it was at `to`, replayed from its
   * WAL archive (`info.restorable` is the window; times outside it are refused).
   *
   * @example
   * const before = await db.restore('app_1042', new Date('2026-12-04T10:42:00Z'));
   */
  async restore(newName: string, to: Date | string | number): Promise<Database> {
    const when = to instanceof Date ? to.toISOString() : to;
    return new Database(await this.http.json<DatabaseInfo>('POST', `${this.route()}/restore`, { json: { name: newName, to: when } }), this.http, this.opts);
  }

  /** `postgres://postgres:PASSWORD@127.0.0.1:PORT/DATABASE`: holds the password, keep it out of logs. */
  async url(): Promise<string> {
    return (await this.http.json<DatabaseUrl>('GET', `${this.route()}/url`)).url;
  }

  /** Kills its sandbox and forgets it; its branches stay. */
  async delete(): Promise<void> {
    await this.http.json('DELETE', this.route());
  }

  private route(): string {
    return `/v1/databases/${encodeURIComponent(this.info_.name)}`;
  }
}
