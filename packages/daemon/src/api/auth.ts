/**
 * API keys. The daemon creates an admin key on first start and writes it to a root-only
 * file; the registry stores only its hash. Requests carry it as `Authorization: Bearer KEY`.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import { WarrenError } from '@warren/protocol';
import type { Registry } from '../core/registry.js';
import { sha256 } from '../core/ids.js';

export type AuthVars = { Variables: { apiKeyId: string; requestId: string } };

/** Returns the admin key, creating and storing it on first start. */
export function ensureAdminKey(registry: Registry, keyFile: string): { key: string; created: boolean } {
  if (existsSync(keyFile)) {
    const key = readFileSync(keyFile, 'utf8').trim();
    registry.addApiKey('admin', sha256(key), 'admin');
    return { key, created: false };
  }
  const key = `wk_${randomBytes(24).toString('base64url')}`;
  writeFileSync(keyFile, `${key}\n`, { mode: 0o600 });
  registry.addApiKey('admin', sha256(key), 'admin');
  return { key, created: true };
}

/** The key's id; unauthenticated if the key is not one of ours. */
export function apiKeyId(registry: Registry, key: string): string {
  // Looked up by hash: the key itself is never stored or compared byte by byte.
  const found = registry.apiKeyByHash(sha256(key));
  if (!found) throw new WarrenError('unauthenticated', 'invalid API key');
  return found.id;
}

/** The key a request carries: `Authorization: Bearer KEY`, else `X-Api-Key: KEY` (E2B's SDKs send that one). */
export function requestApiKey(c: Context): string {
  const header = c.req.header('authorization') ?? '';
  return header.toLowerCase().startsWith('bearer ') ? header.slice(7).trim() : (c.req.header('x-api-key') ?? '');
}

export function requireApiKey(registry: Registry): MiddlewareHandler<AuthVars> {
  return async (c, next) => {
    const key = requestApiKey(c);
    if (!key) throw new WarrenError('unauthenticated', 'missing API key: send "Authorization: Bearer <key>" (see WARREN_API_KEY)');
    c.set('apiKeyId', apiKeyId(registry, key));
    await next();
  };
}
