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
  })
  .strict();
export type CreateDatabaseRequest = z.input<typeof CreateDatabaseRequest>;

/** POST /v1/databases/:name/branches */
export const BranchDatabaseRequest = z.object({ name: DatabaseName }).strict();
export type BranchDatabaseRequest = z.input<typeof BranchDatabaseRequest>;

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
  createdAt: string;
}

export interface DatabaseList {
  databases: DatabaseInfo[];
}

/** GET /v1/databases/:name/url: postgres://postgres:PASSWORD@127.0.0.1:PORT/DATABASE */
export interface DatabaseUrl {
  url: string;
}
