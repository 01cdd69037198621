/**
 * What the daemon does inside a database's sandbox, over exec as the `postgres` user on the
 * unix socket (peer authentication: no password is needed for it). SQL travels on stdin,
 * never on a command line, and carries only the password's SCRAM verifier (password.ts).
 */
import { WarrenError, type ExecRequest, type ExecResult } from '@warren/protocol';
import { scramVerifier } from './password.js';

const BIN = '/usr/lib/postgresql/15/bin';
/** How long a fresh or restored database's server may take to accept connections. */
const READY_TIMEOUT_MS = 60_000;

/** Runs one command in a sandbox (ExecService.run). */
export type SandboxExec = (sandboxId: string, req: ExecRequest) => Promise<ExecResult>;

/** Waits until PostgreSQL accepts connections on its socket. */
export async function waitReady(exec: SandboxExec, sandboxId: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    const r = await exec(sandboxId, { argv: [`${BIN}/pg_isready`, '-h', '/tmp', '-p', '5432', '-q'], user: 'postgres', timeoutSeconds: 10 });
    if (r.exitCode === 0) return;
    if (Date.now() > deadline)
      throw new WarrenError(
        'unavailable',
        `PostgreSQL in sandbox ${sandboxId} did not accept connections within ${READY_TIMEOUT_MS / 1000} s (pg_isready exit ${r.exitCode})`,
      );
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/**
 * Sets the `postgres` role's password and creates `database` unless it exists (a restored
 * snapshot may hold it already). `database` matches DATABASE_NAME_PATTERN, so quoting it is
 * enough; the verifier is base64 and `$`/`:`, which a single-quoted literal takes as is.
 */
export async function initialise(exec: SandboxExec, sandboxId: string, database: string, password: string): Promise<void> {
  const sql = [
    `ALTER ROLE postgres PASSWORD '${scramVerifier(password)}';`,
    `SELECT 'CREATE DATABASE "${database}"' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '${database}')\\gexec`,
    '',
  ].join('\n');
  const r = await exec(sandboxId, {
    argv: [`${BIN}/psql`, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', '/tmp', '-p', '5432', '-U', 'postgres', '-d', 'postgres'],
    user: 'postgres',
    stdin: sql,
    timeoutSeconds: 60,
  });
  if (r.exitCode !== 0)
    throw new WarrenError(
      'internal',
      `setting up database ${database} in sandbox ${sandboxId} failed (psql exit ${r.exitCode}): ${r.stderr.trim().slice(0, 500)}`,
    );
}
