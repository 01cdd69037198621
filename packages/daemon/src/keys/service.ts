/**
 * API keys: made, listed, rotated and revoked by an admin; turned into a Principal on every
 * request. The secret is shown once and stored as its SHA-256 (keys are 192 random bits, so
 * a slow hash buys nothing); a lookup is by that hash.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import {
  ADMIN_KEY_ID,
  DEFAULT_SCOPES,
  WarrenError,
  type ApiKeyInfo,
  type CreateKeyRequest,
  type KeyQuotas,
  type NewApiKey,
  type Scope,
} from '@warren/protocol';
import { newId, sha256 } from '../core/ids.js';
import type { KeyRecord, KeyStore } from './store.js';

/** Who a request is: its key's id and what that key may do. */
export interface Principal {
  keyId: string;
  scopes: ReadonlySet<Scope>;
  /** An admin key sees and acts on every key's sandboxes. */
  admin: boolean;
  quotas?: KeyQuotas;
  /** The egress rules it may grant; absent: any. */
  egress?: readonly string[];
  /** A per-sandbox token: it acts as its maker (keyId) on this one sandbox only. */
  sandboxId?: string;
  tokenId?: string;
  /** When the credential stops working, if it expires (a token's own expiry; its key's is checked on each call). */
  expiresAt?: number;
}

export class KeyService {
  private readonly log: Logger;

  constructor(
    private readonly store: KeyStore,
    log: Logger,
    private readonly now: () => number = Date.now,
  ) {
    this.log = log.child({ component: 'keys' });
  }

  /** The admin key, made and written to a root-only file on first start; the file is the truth after that. */
  ensureAdminKey(keyFile: string): { key: string; created: boolean } {
    const created = !existsSync(keyFile);
    const key = created ? newSecret() : readFileSync(keyFile, 'utf8').trim();
    if (created) writeFileSync(keyFile, `${key}\n`, { mode: 0o600 });
    const existing = this.store.get(ADMIN_KEY_ID);
    const hash = sha256(key);
    if (!existing || existing.hash !== hash)
      this.store.put({ id: ADMIN_KEY_ID, hash, name: 'admin', scopes: ['admin'], createdAt: existing?.createdAt ?? this.now() }, { replace: true });
    return { key, created };
  }

  create(req: CreateKeyRequest): NewApiKey {
    const key = newSecret();
    const now = this.now();
    const record: KeyRecord = {
      id: newId('key'),
      hash: sha256(key),
      name: req.name,
      scopes: [...new Set(req.scopes ?? DEFAULT_SCOPES)],
      ...(req.quotas && Object.keys(req.quotas).length ? { quotas: req.quotas } : {}),
      ...(req.egress ? { egress: [...new Set(req.egress)] } : {}),
      createdAt: now,
      ...(req.expiresInSeconds ? { expiresAt: now + req.expiresInSeconds * 1000 } : {}),
    };
    this.store.put(record);
    this.log.info({ key: record.id, name: record.name, scopes: record.scopes, quotas: record.quotas, expiresAt: record.expiresAt }, 'API key created');
    return { ...this.view(record), key };
  }

  list(): ApiKeyInfo[] {
    return this.store.list().map((r) => this.view(r));
  }

  get(id: string): ApiKeyInfo {
    return this.view(this.record(id));
  }

  /** The key's quotas (none for a key without, or no such key). */
  quotasOf(id: string): KeyQuotas | undefined {
    return this.store.get(id)?.quotas;
  }

  /** A new secret for the key; the old one stops working at once. */
  rotate(id: string): NewApiKey {
    const r = this.record(id);
    if (id === ADMIN_KEY_ID)
      throw new WarrenError('failed_precondition', 'the admin key is the admin key file: replace the file and restart the daemon to change it');
    if (r.revokedAt !== undefined) throw new WarrenError('failed_precondition', `API key ${id} is revoked; create a new one`);
    const key = newSecret();
    const at = this.now();
    this.store.setHash(id, sha256(key), at);
    this.log.info({ key: id }, 'API key rotated');
    return { ...this.view({ ...r, rotatedAt: at }), key };
  }

  /** The key stops working; what it made stays (an admin can still see and end it). */
  revoke(id: string): ApiKeyInfo {
    this.record(id);
    if (id === ADMIN_KEY_ID) throw new WarrenError('failed_precondition', 'the admin key cannot be revoked');
    this.store.revoke(id, this.now());
    this.log.info({ key: id }, 'API key revoked');
    return this.get(id);
  }

  /** 401 unless key `id` works (not revoked, not expired); `what` names who relies on it. */
  requireUsable(id: string, what: string): void {
    this.principalOf(id, what);
  }

  /** The principal of key `id` if it works now, else 401 as requireUsable's (a port URL checks its maker's reach with it). */
  principalOf(id: string, what: string): Principal {
    const r = this.store.get(id);
    if (!r) throw new WarrenError('unauthenticated', `${what} was made by a key that no longer exists`);
    this.check(r, `${what} was made by API key ${id}, which`);
    return principal(r);
  }

  /** The principal of a secret, or 401 saying why not (never which secrets exist). */
  authenticate(secret: string): Principal {
    const r = this.store.byHash(sha256(secret));
    if (!r) throw new WarrenError('unauthenticated', 'invalid API key');
    this.check(r, `API key ${r.id}`);
    return principal(r);
  }

  private check(r: KeyRecord, who: string): void {
    if (r.revokedAt !== undefined) throw new WarrenError('unauthenticated', `${who} was revoked at ${new Date(r.revokedAt).toISOString()}`);
    if (r.expiresAt !== undefined && r.expiresAt <= this.now())
      throw new WarrenError('unauthenticated', `${who} expired at ${new Date(r.expiresAt).toISOString()}`);
  }

  private record(id: string): KeyRecord {
    const r = this.store.get(id);
    if (!r) throw new WarrenError('not_found', `no API key with id ${id}`);
    return r;
  }

  private view(r: KeyRecord): ApiKeyInfo {
    const state = r.revokedAt !== undefined ? 'revoked' : r.expiresAt !== undefined && r.expiresAt <= this.now() ? 'expired' : 'active';
    return {
      id: r.id,
      name: r.name,
      scopes: r.scopes,
      ...(r.quotas ? { quotas: r.quotas } : {}),
      ...(r.egress ? { egress: r.egress } : {}),
      createdAt: iso(r.createdAt),
      ...(r.expiresAt !== undefined ? { expiresAt: iso(r.expiresAt) } : {}),
      ...(r.revokedAt !== undefined ? { revokedAt: iso(r.revokedAt) } : {}),
      ...(r.rotatedAt !== undefined ? { rotatedAt: iso(r.rotatedAt) } : {}),
      state,
    };
  }
}

function principal(r: KeyRecord): Principal {
  return {
    keyId: r.id,
    scopes: new Set(r.scopes),
    admin: r.scopes.includes('admin'),
    ...(r.quotas ? { quotas: r.quotas } : {}),
    ...(r.egress ? { egress: r.egress } : {}),
    ...(r.expiresAt !== undefined ? { expiresAt: r.expiresAt } : {}),
  };
}

function newSecret(): string {
  return `wk_${randomBytes(24).toString('base64url')}`;
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}
