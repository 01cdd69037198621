/**
 * Database passwords. The plain password stays in the daemon: PostgreSQL gets only its
 * SCRAM-SHA-256 verifier (RFC 5802/7677, the format of pg_authid.rolpassword), so neither the
 * sandbox, its command lines, its stdin nor PostgreSQL's own log ever hold the password.
 */
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';

/** PostgreSQL's default scram_iterations. */
const SCRAM_ITERATIONS = 4096;

/** 32 random bytes, base64url: safe in a URL's userinfo without escaping. */
export function newPassword(): string {
  return randomBytes(32).toString('base64url');
}

/** `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, as `ALTER ROLE ... PASSWORD` accepts it. */
export function scramVerifier(password: string, salt = randomBytes(16), iterations = SCRAM_ITERATIONS): string {
  const salted = pbkdf2Sync(password, salt, iterations, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}
