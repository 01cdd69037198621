/**
 * API keys (admin keys only): keys for other callers with scopes and an expiry. A key that is
 * not an admin key sees only what it made. The secret is returned once, by create and rotate.
 */
import type { ApiAuditEntry, ApiAuditList, ApiKeyInfo, ApiKeyList, CreateKeyRequest, NewApiKey } from '@warren/protocol';
import { HttpClient, type ConnectionOptions } from './client.js';

const route = (id: string) => `/v1/keys/${encodeURIComponent(id)}`;

export const ApiKeys = {
  create(req: CreateKeyRequest, opts: ConnectionOptions = {}): Promise<NewApiKey> {
    return new HttpClient(opts).json<NewApiKey>('POST', '/v1/keys', { json: req });
  },

  async list(opts: ConnectionOptions = {}): Promise<ApiKeyInfo[]> {
    return (await new HttpClient(opts).json<ApiKeyList>('GET', '/v1/keys')).keys;
  },

  get(id: string, opts: ConnectionOptions = {}): Promise<ApiKeyInfo> {
    return new HttpClient(opts).json<ApiKeyInfo>('GET', route(id));
  },

  /** A new secret; the old one stops working at once. */
  rotate(id: string, opts: ConnectionOptions = {}): Promise<NewApiKey> {
    return new HttpClient(opts).json<NewApiKey>('POST', `${route(id)}/rotate`);
  },

  /** The key stops working; what it made keeps running (an admin key can end it). */
  revoke(id: string, opts: ConnectionOptions = {}): Promise<ApiKeyInfo> {
    return new HttpClient(opts).json<ApiKeyInfo>('DELETE', route(id));
  },
};

export interface AuditOptions {
  /** Only this key's calls. */
  key?: string;
  /** Only calls on this sandbox. */
  sandbox?: string;
  since?: Date | string;
  /** Entries after this id (to page, or to follow). */
  after?: number;
  limit?: number;
}

/** The API's audit trail (admin keys only): every call that changed something, oldest first. */
export async function getAuditTrail(opts: AuditOptions = {}, conn: ConnectionOptions = {}): Promise<ApiAuditEntry[]> {
  const since = opts.since instanceof Date ? opts.since.toISOString() : opts.since;
  const list = await new HttpClient(conn).json<ApiAuditList>('GET', '/v1/audit', {
    query: { key: opts.key, sandbox: opts.sandbox, since, after: opts.after, limit: opts.limit },
  });
  return list.entries;
}
