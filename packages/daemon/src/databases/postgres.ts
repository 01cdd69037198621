/**
 * What the daemon does inside a database's sandbox, over exec as the `postgres` user on the
 * unix socket (peer authentication: no password is needed for it). SQL travels on stdin,
 * never on a command line, and carries only the password's SCRAM verifier (password.ts).
 */
import { WarrenError, type ExecRequest, type ExecResult } from '@warren/protocol';
import { scramVerifier } from './password.js';

const BIN = '/usr/lib/postgresql/15/bin';
/** How long a fresh or restored database's server may take to accept connections (tenths of a second). */
const READY_TENTHS = 600;
/** The exit status of the script below when the server never answered. */
const NOT_READY = 99;

/** Runs one command in a sandbox (ExecService.run). */
export type SandboxExec = (sandboxId: string, req: ExecRequest) => Promise<ExecResult>;

/**
 * Waits until PostgreSQL accepts connections on its socket, then sets the `postgres` role's
 * password and creates `database` unless it exists (a restored snapshot may hold it already).
 * One exec for both: each exec is a round trip through the guest channel and a process start
 * under gVisor. `database` matches DATABASE_NAME_PATTERN, so double quotes are enough; the
 * verifier is base64 and `$`/`:`, which a single-quoted SQL literal takes as is.
 */
export async function initialise(exec: SandboxExec, sandboxId: string, database: string, password: string): Promise<void> {
  const sql = [
    `ALTER ROLE postgres PASSWORD '${scramVerifier(password)}';`,
    `SELECT 'CREATE DATABASE "${database}"' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '${database}')\\gexec`,
    '',
  ].join('\n');
  const script = [
    `i=0; until ${BIN}/pg_isready -h /tmp -p 5432 -q; do`,
    `i=$((i+1)); [ "$i" -ge ${READY_TENTHS} ] && exit ${NOT_READY}; sleep 0.1; done;`,
    `exec ${BIN}/psql -X -q -v ON_ERROR_STOP=1 -h /tmp -p 5432 -U postgres -d postgres`,
  ].join(' ');
  const r = await exec(sandboxId, { argv: ['/bin/sh', '-c', script], user: 'postgres', stdin: sql, timeoutSeconds: READY_TENTHS / 10 + 60 });
  if (r.exitCode === NOT_READY)
    throw new WarrenError('unavailable', `PostgreSQL in sandbox ${sandboxId} did not accept connections within ${READY_TENTHS / 10} s`);
  if (r.exitCode !== 0)
    throw new WarrenError(
      'internal',
      `setting up database ${database} in sandbox ${sandboxId} failed (psql exit ${r.exitCode}): ${r.stderr.trim().slice(0, 500)}`,
    );
}
