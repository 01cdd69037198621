import { randomBytes, createHash } from 'node:crypto';

const ALPHABET = 'abcdefghijkmnpqrstuvwxyz23456789';

/** Short, unambiguous, URL- and hostname-safe ids: sb-xxxxxxxxxxxx. */
export function newId(prefix: string, length = 12): string {
  const bytes = randomBytes(length);
  let out = '';
  for (const b of bytes) out += ALPHABET[b % ALPHABET.length];
  return `${prefix}-${out}`;
}

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
