/**
 * Databases (docs/databases.md): a database is a sandbox of the `postgres` template, reached
 * from the host through a TCP forward on 127.0.0.1. Wire types of /v1/databases.
 */
import { z } from 'zod';
import type { SandboxState } from './api.js';

/**
 * A database name: also the name of the database created inside PostgreSQL, so it is kept to
 * what PostgreSQL takes as an identifier without quoting rules (63 bytes at most).
 */
export const DATABASE_NAME_PATTERN = /^[a-z][a-z0-9_]{0,62}$/;
export const DATABASE_NAME_RULE = 'a database name is a lower-case letter then up to 62 lower-case letters, digits or underscores (^[a-z][a-z0-9_]{0,62}$)';

export const DatabaseName = z.string().regex(DATABASE_NAME_PATTERN, DATABASE_NAME_RULE);

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
