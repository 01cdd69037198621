/**
 * Databases (docs/databases.md): a database is a sandbox of the `postgres` template, reached
 * from the host through a TCP forward on 127.0.0.1. Wire types of /v1/databases.
 */
import { z } from 'zod';
import type { SandboxState } from './api.js';
import { DatabaseName } from './database-name.js';

export { DATABASE_NAME_PATTERN, DATABASE_NAME_RULE, DatabaseName, MAX_DATABASES_PER_SANDBOX } from './database-name.js';

/** POST /v1/databases */
export const CreateDatabaseRequest = z
  .object({
    name: DatabaseName,
    /** Start from this snapshot of a database's sandbox (template `postgres`) instead of an empty cluster. */
    fromSnapshot: z
      .string()
      .regex(/^snap-[a-z0-9]+$/, 'a snapshot id looks like snap-…')
      .optional(),
    /** How long WAL and base backups are kept for point-in-time restore (default 7 days; 1 minute to 365 days). */
    retainSeconds: z
      .number()
      .int()
      .min(60)
      .max(365 * 24 * 3600)
      .optional(),
  })
  .strict();
export type CreateDatabaseRequest = z.input<typeof CreateDatabaseRequest>;

/** POST /v1/databases/:name/branches */
export const BranchDatabaseRequest = z.object({ name: DatabaseName }).strict();
export type BranchDatabaseRequest = z.input<typeof BranchDatabaseRequest>;

/** POST /v1/databases/:name/restore: a new database NAME holding the source's data as of `to`. */
export const RestoreDatabaseRequest = z
  .object({
    name: DatabaseName,
    /** An ISO 8601 time with a zone (2026-12-04T10:42:00Z) or epoch milliseconds. */
    to: z.union([
      z.number().int().positive(),
      z.string().refine((t) => /(Z|[+-]\d\d:?\d\d)$/.test(t) && !Number.isNaN(Date.parse(t)), 'an ISO 8601 time with a zone, such as 2026-12-04T10:42:00Z'),
    ]),
  })
  .strict();
export type RestoreDatabaseRequest = z.input<typeof RestoreDatabaseRequest>;

/** POST /v1/sandboxes/:id/databases: the sandbox uses database NAME, reached inside as `NAME.db.warren`. */
export const AttachDatabaseRequest = z.object({ name: DatabaseName }).strict();
export type AttachDatabaseRequest = z.input<typeof AttachDatabaseRequest>;

/**
 * A database a sandbox uses, under an alias: inside, `ALIAS.db.warren:5432` reaches it. A fork's
 * children reach their own branches under the same alias and URL.
 */
export interface SandboxDatabase {
  alias: string;
  /** The database record (`warren db info NAME`): the alias itself, or a branch made for a fork. */
  name: string;
  /** Made for this sandbox (created with it, or branched for its fork): removed with it, hibernated with it. */
  owned: boolean;
  /** The host and port inside the sandbox. */
  host: string;
  port: number;
  /** The environment variable holding its URL in the sandbox's commands (also DATABASE_URL for the first). */
  env: string;
}

export interface SandboxDatabaseList {
  databases: SandboxDatabase[];
}

/** POST /v1/sandboxes/:id/databases answers the use and its URL inside the sandbox (with the password). */
export interface AttachedDatabase extends SandboxDatabase {
  url: string;
}

/** What the API shows of a database. Never its password: only GET /:name/url gives that. */
export interface DatabaseInfo {
  name: string;
  /** The database inside PostgreSQL that the URL names: the root database's name (branches keep it). */
  database: string;
  /** The sandbox PostgreSQL runs in. Absent while it is being created. */
  sandboxId?: string;
  /** Its sandbox's state; `creating` until the sandbox and the database in it are ready; `missing` if the sandbox is gone. */
  state: SandboxState | 'missing';
  /** Where PostgreSQL is reached on the host (127.0.0.1); absent while creating or when the sandbox is gone. */
  hostPort?: number;
  /** For a branch: the database it was branched from, and when. */
  parent?: string;
  branchedAt?: string;
  /** For a point-in-time restore: the moment its data is from (`parent` names the source). */
  restoredTo?: string;
  /** How long its WAL archive keeps history. */
  retainSeconds: number;
  /** The times a restore can reach now; absent until the first base backup is in. */
  restorable?: { from: string; to: string };
  createdAt: string;
}

export interface DatabaseList {
  databases: DatabaseInfo[];
}

/** GET /v1/databases/:name/url: postgres://postgres:PASSWORD@127.0.0.1:PORT/DATABASE */
export interface DatabaseUrl {
  url: string;
}
