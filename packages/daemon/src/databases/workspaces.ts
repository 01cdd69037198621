/**
 * Databases of a workspace (docs/databases.md): a sandbox uses databases under aliases, each
 * reached inside as `ALIAS.db.warren:5432` through a `db:ALIAS` rule the daemon adds to its
 * policy, with its URL in the sandbox's environment. A fork of the sandbox branches each of
 * them at the fork's instant, once per child, and each child reaches its own branch under the
 * same alias and URL. Databases made for a sandbox (owned) hibernate, resume and go with it.
 */
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import {
  MAX_DATABASES_PER_SANDBOX,
  WarrenError,
  type AttachedDatabase,
  type CreateSandboxRequest,
  type ForkRequest,
  type ForkResult,
  type SandboxDatabase,
  type SandboxInfo,
} from '@warren/protocol';
import type { SandboxService } from '../core/sandboxes.js';
import { DATABASE_PORT, DATABASE_RULE_PREFIX, databaseHost } from '../network/database-rules.js';
import type { DatabaseService } from './service.js';
import type { DatabaseUse, DatabaseUses } from './uses.js';

export interface WorkspaceDatabasesDeps {
  databases: DatabaseService;
  uses: DatabaseUses;
  sandboxes: SandboxService;
  log: Logger;
}

export class WorkspaceDatabases {
  private readonly log: Logger;
  /** Forks in progress, by parent: their children run before their branches are recorded. */
  private readonly forking = new Map<string, Promise<unknown>>();

  constructor(private readonly deps: WorkspaceDatabasesDeps) {
    this.log = deps.log.child({ component: 'databases' });
    deps.sandboxes.onTeardown((id) => this.sandboxGone(id));
    deps.sandboxes.onHibernated((id) => this.follow(id, 'hibernate'));
    deps.sandboxes.onResumed((id) => this.follow(id, 'resume'));
  }

  /** Of these names, those no database has yet: what a create or attach would make. */
  missing(names: readonly string[]): string[] {
    return names.filter((name) => this.deps.databases.apiKeyOf(name) === undefined);
  }

  /** A sandbox that uses `req.databases` from its start: each is created for it unless one of that name exists. */
  async create(req: CreateSandboxRequest & { template: string }, apiKeyId: string): Promise<SandboxInfo> {
    const { databases: names = [], ...rest } = req;
    if (!names.length) return this.deps.sandboxes.create(rest, apiKeyId);
    const aliases = [...new Set(names)];
    const made: string[] = [];
    try {
      const uses = [];
      for (const alias of aliases) {
        const owned = await this.ensure(alias, apiKeyId);
        if (owned) made.push(alias);
        uses.push({ alias, database: alias, owned });
      }
      const env = { ...this.environment(uses), ...(rest.env ?? {}) };
      // The rules are in force from boot, so a start command can reach its databases at once.
      const rules = aliases.map((a) => `${DATABASE_RULE_PREFIX}${a}`);
      const sandbox = await this.deps.sandboxes.create({ ...rest, env }, apiKeyId, rules);
      try {
        for (const use of uses) this.deps.uses.add({ sandboxId: sandbox.id, ...use });
      } catch (err) {
        await this.deps.sandboxes.kill(sandbox.id, 'its databases could not be attached');
        throw err;
      }
      this.log.info({ sandbox: sandbox.id, databases: aliases, created: made }, 'sandbox created with databases');
      return sandbox;
    } catch (err) {
      for (const name of made) await this.removeQuietly(name);
      throw err;
    }
  }

  /** The sandbox uses database NAME from now on (created for it if none has that name). */
  async attach(sandboxId: string, name: string, apiKeyId: string): Promise<AttachedDatabase> {
    const state = this.deps.sandboxes.get(sandboxId).state; // 404 for unknown sandboxes
    if (state !== 'running' && state !== 'hibernated')
      throw new WarrenError('failed_precondition', `sandbox ${sandboxId} is ${state}; databases are attached to running or hibernated sandboxes`);
    const uses = this.deps.uses.of(sandboxId);
    const existing = uses.find((u) => u.alias === name);
    if (existing) return { ...this.view(existing, uses), url: this.deps.databases.urlInside(existing.database, name) };
    if (uses.length >= MAX_DATABASES_PER_SANDBOX)
      throw new WarrenError('resource_exhausted', `sandbox ${sandboxId} already uses ${MAX_DATABASES_PER_SANDBOX} databases; detach one first`);
    const owned = await this.ensure(name, apiKeyId);
    const use = { sandboxId, alias: name, database: name, owned };
    try {
      await this.deps.sandboxes.addAllowRules(sandboxId, [`${DATABASE_RULE_PREFIX}${name}`]);
      this.deps.uses.add(use);
    } catch (err) {
      if (owned) await this.removeQuietly(name);
      throw err;
    }
    this.log.info({ sandbox: sandboxId, database: name, owned }, 'database attached');
    return { ...this.view(use, [...uses, use]), url: this.deps.databases.urlInside(name, name) };
  }

  list(sandboxId: string): SandboxDatabase[] {
    this.deps.sandboxes.get(sandboxId); // 404 for unknown sandboxes
    const uses = this.deps.uses.of(sandboxId);
    return uses.map((u) => this.view(u, uses));
  }

  /**
   * A fork of a sandbox that uses databases: while the parent's channel is held (it can reach
   * none of them), each database is branched once per child from one instant; each child
   * then uses its own branches under the parent's aliases. All or nothing.
   */
  async fork(id: string, req: ForkRequest & { count: number }): Promise<ForkResult> {
    const uses = this.deps.uses.of(id);
    if (!uses.length) return this.deps.sandboxes.fork(id, req);
    const branches = new Map<string, string[]>();
    const branchAll = async () => {
      const results = await Promise.allSettled(
        uses.map(async (u) => {
          const names = Array.from({ length: req.count }, () => branchName(u.alias));
          await this.deps.databases.branchMany(u.database, names);
          branches.set(u.alias, names);
        }),
      );
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    };
    const forked = this.deps.sandboxes.fork(id, req, branchAll).then((result) => {
      for (const [i, child] of result.sandboxes.entries()) {
        for (const u of uses) this.deps.uses.add({ sandboxId: child.id, alias: u.alias, database: branches.get(u.alias)![i]!, owned: true });
      }
      return result;
    });
    this.forking.set(id, forked);
    let result: ForkResult;
    try {
      result = await forked;
    } catch (err) {
      for (const names of branches.values()) for (const name of names) await this.removeQuietly(name);
      throw err;
    } finally {
      if (this.forking.get(id) === forked) this.forking.delete(id);
    }
    this.log.info({ sandbox: id, children: result.sandboxes.map((c) => c.id), branches: Object.fromEntries(branches) }, 'databases branched for a fork');
    return result;
  }

  /**
   * A connection for a `db:ALIAS` rule: the database the sandbox uses under ALIAS, else the
   * database named ALIAS. A fork's children run before their branches are recorded: one
   * whose parent is still forking waits for that, so it never reaches the parent's database.
   */
  async connect(sandboxId: string, alias: string): Promise<Duplex> {
    let use = this.deps.uses.get(sandboxId, alias);
    const source = use ? undefined : this.deps.sandboxes.get(sandboxId).source;
    const parentFork = source ? this.forking.get(source) : undefined;
    if (parentFork) {
      await parentFork.catch(() => undefined);
      use = this.deps.uses.get(sandboxId, alias);
    }
    const name = use?.database ?? alias;
    // A db: rule reaches only a database of the sandbox's own key, as if no other existed.
    if (this.deps.databases.apiKeyOf(name) !== this.deps.sandboxes.apiKeyOf(sandboxId))
      throw new WarrenError('not_found', `no database named ${name} for this sandbox's API key`);
    return this.deps.databases.connect(name);
  }

  /** True when NAME was created here (owned by the caller); false when it existed and is attached. */
  private async ensure(name: string, apiKeyId: string): Promise<boolean> {
    const key = this.deps.databases.apiKeyOf(name);
    if (key !== undefined) {
      // Names are one namespace for every key; what another key made stays out of reach.
      if (key !== apiKeyId) throw new WarrenError('conflict', `the database name ${name} is taken by another API key; pick another name`);
      const owner = this.deps.uses.ownerOf(name);
      if (owner)
        throw new WarrenError(
          'conflict',
          `database ${name} belongs to sandbox ${owner} (it was made for it and goes with it); attach another database or a branch of it`,
        );
      return false;
    }
    await this.deps.databases.create(name, {}, apiKeyId);
    return true;
  }

  private environment(uses: Array<Pick<DatabaseUse, 'alias' | 'database'>>): Record<string, string> {
    const env: Record<string, string> = {};
    for (const [i, u] of uses.entries()) {
      const url = this.deps.databases.urlInside(u.database, u.alias);
      env[envName(u.alias)] = url;
      if (i === 0) env.DATABASE_URL = url;
    }
    return env;
  }

  private view(u: DatabaseUse, all: DatabaseUse[]): SandboxDatabase {
    return {
      alias: u.alias,
      name: u.database,
      owned: u.owned,
      host: databaseHost(u.alias),
      port: DATABASE_PORT,
      env: all[0] === u ? 'DATABASE_URL' : envName(u.alias),
    };
  }

  /** The sandbox is gone: the databases made for it go too. */
  private sandboxGone(id: string): void {
    const uses = this.deps.uses.of(id);
    this.deps.uses.forgetSandbox(id);
    for (const u of uses) if (u.owned) void this.removeQuietly(u.database);
  }

  /** Owned databases hibernate and resume with their sandbox. */
  private follow(id: string, what: 'hibernate' | 'resume'): void {
    for (const u of this.deps.uses.of(id)) {
      if (!u.owned) continue;
      const done = what === 'hibernate' ? this.deps.databases.hibernate(u.database) : this.deps.databases.resume(u.database);
      done.catch((err: Error) => this.log.warn({ sandbox: id, database: u.database, err: err.message }, `database did not ${what} with its sandbox`));
    }
  }

  private async removeQuietly(name: string): Promise<void> {
    await this.deps.databases.remove(name).catch((err: Error) => {
      if (!(err instanceof WarrenError && err.code === 'not_found')) this.log.error({ database: name, err: err.message }, 'database could not be removed');
    });
  }
}

/** A fresh database name for one child's branch of ALIAS: `ALIAS_` and 8 random characters. */
function branchName(alias: string): string {
  return `${alias.slice(0, 54)}_${randomBytes(6)
    .toString('base64url')
    .toLowerCase()
    .replace(/[^a-z0-9]/g, 'x')}`;
}

/** DATABASE_URL_APP for alias `app`. */
function envName(alias: string): string {
  return `DATABASE_URL_${alias.toUpperCase()}`;
}
