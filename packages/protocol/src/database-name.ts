/**
 * Database names, shared by /v1/databases (databases.ts) and the `databases` of a sandbox
 * create (api.ts).
 */
import { z } from 'zod';

/**
 * A database name: also the name of the database created inside PostgreSQL, so it is kept to
 * what PostgreSQL takes as an identifier without quoting rules (63 bytes at most).
 */
export const DATABASE_NAME_PATTERN = /^[a-z][a-z0-9_]{0,62}$/;
export const DATABASE_NAME_RULE = 'a database name is a lower-case letter then up to 62 lower-case letters, digits or underscores (^[a-z][a-z0-9_]{0,62}$)';

export const DatabaseName = z.string().regex(DATABASE_NAME_PATTERN, DATABASE_NAME_RULE);

/** Databases one sandbox may use (CreateSandboxRequest.databases). */
export const MAX_DATABASES_PER_SANDBOX = 8;
