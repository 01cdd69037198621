/**
 * Per-sandbox tokens (docs/security.md): a secret for one sandbox, with a few scopes and an
 * expiry, made by a key that owns the sandbox, to hand to an agent or a browser. It acts as
 * its maker on that sandbox only; anything else is refused. Stored hashed, like keys.
 */
import { randomBytes } from 'node:crypto';
import type Database from 'better-sqlite3';
import type { Logger } from 'pino';
import {
  SANDBOX_TOKEN_SCOPE_OF,
  WarrenError,
  type CreateSandboxTokenRequest,
  type NewSandboxToken,
  type SandboxTokenInfo,
  type SandboxTokenScope,
} from '@warren/protocol';
import { newId, sha256 } from '../core/ids.js';
import type { Principal } from './service.js';

/** Token secrets start with this; key secrets with `wk_`. */
export const TOKEN_PREFIX = 'wt_';
const DEFAULT_TTL_SECONDS = 3600;

interface Row {
  id: string;
  sandbox_id: string;
  hash: string;
  scopes: string;
  api_key_id: string;
  created_at: number;
  expires_at: number;
  revoked_at: number | null;
}

export class SandboxTokens {
  private readonly log: Logger;
  /** Run on every call a token makes: prepared once. */
  private selectByHash?: Database.Statement;
  /** Run on every request through a port URL a token made: prepared once. */
  private selectById?: Database.Statement;

  constructor(
    private readonly db: Database.Database,
    log: Logger,
    private readonly now: () => number = Date.now,
  ) {
    this.log = log.child({ component: 'tokens' });
    db.exec(`
CREATE TABLE IF NOT EXISTS sandbox_tokens (
  id TEXT PRIMARY KEY,
  sandbox_id TEXT NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  scopes TEXT NOT NULL,
  api_key_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  revoked_at INTEGER
);
CREATE INDEX IF NOT EXISTS sandbox_tokens_sandbox ON sandbox_tokens (sandbox_id);
`);
  }

  /** A token for the sandbox, made by `maker`, who must hold every scope it grants. */
  create(maker: Principal, sandboxId: string, req: CreateSandboxTokenRequest): NewSandboxToken {
    if (maker.sandboxId !== undefined) throw new WarrenError('permission_denied', 'a sandbox token cannot make tokens; use an API key');
    const scopes = [...new Set(req.scopes)];
    for (const s of scopes) {
      const needed = SANDBOX_TOKEN_SCOPE_OF[s];
      if (!maker.admin && !maker.scopes.has(needed))
        throw new WarrenError('permission_denied', `API key ${maker.keyId} lacks the scope ${needed}, so it cannot grant '${s}'`, {
          details: { scope: needed },
        });
    }
    const token = `${TOKEN_PREFIX}${randomBytes(24).toString('base64url')}`;
    const now = this.now();
    const row: Row = {
      id: newId('tok'),
      sandbox_id: sandboxId,
      hash: sha256(token),
      scopes: JSON.stringify(scopes),
      api_key_id: maker.keyId,
      created_at: now,
      expires_at: now + (req.ttlSeconds ?? DEFAULT_TTL_SECONDS) * 1000,
      revoked_at: null,
    };
    this.db
      .prepare(
        'INSERT INTO sandbox_tokens (id, sandbox_id, hash, scopes, api_key_id, created_at, expires_at) VALUES (@id, @sandbox_id, @hash, @scopes, @api_key_id, @created_at, @expires_at)',
      )
      .run(row);
    this.log.info({ token: row.id, sandbox: sandboxId, scopes, key: maker.keyId, expiresAt: row.expires_at }, 'sandbox token created');
    return { ...this.view(row), token };
  }

  list(sandboxId: string): SandboxTokenInfo[] {
    return (this.db.prepare('SELECT * FROM sandbox_tokens WHERE sandbox_id = ? ORDER BY created_at, id').all(sandboxId) as Row[]).map((r) => this.view(r));
  }

  revoke(sandboxId: string, id: string): SandboxTokenInfo {
    const changed = this.db
      .prepare('UPDATE sandbox_tokens SET revoked_at = ? WHERE id = ? AND sandbox_id = ? AND revoked_at IS NULL')
      .run(this.now(), id, sandboxId);
    const row = this.db.prepare('SELECT * FROM sandbox_tokens WHERE id = ? AND sandbox_id = ?').get(id, sandboxId) as Row | undefined;
    if (!row) throw new WarrenError('not_found', `no token ${id} for sandbox ${sandboxId}`);
    if (changed.changes) this.log.info({ token: id, sandbox: sandboxId }, 'sandbox token revoked');
    return this.view(row);
  }

  /** A sandbox's tokens go with it. */
  removeSandbox(sandboxId: string): void {
    this.db.prepare('DELETE FROM sandbox_tokens WHERE sandbox_id = ?').run(sandboxId);
  }

  /** The principal of a token secret: its maker, on its one sandbox, with its scopes; or 401 saying why not. */
  authenticate(secret: string): Principal {
    this.selectByHash ??= this.db.prepare('SELECT * FROM sandbox_tokens WHERE hash = ?');
    const r = this.selectByHash.get(sha256(secret)) as Row | undefined;
    if (!r) throw new WarrenError('unauthenticated', 'invalid token');
    if (r.revoked_at !== null) throw new WarrenError('unauthenticated', `token ${r.id} was revoked at ${new Date(r.revoked_at).toISOString()}`);
    if (r.expires_at <= this.now()) throw new WarrenError('unauthenticated', `token ${r.id} expired at ${new Date(r.expires_at).toISOString()}`);
    const scopes = (JSON.parse(r.scopes) as SandboxTokenScope[]).map((s) => SANDBOX_TOKEN_SCOPE_OF[s]);
    return { keyId: r.api_key_id, scopes: new Set(scopes), admin: false, sandboxId: r.sandbox_id, tokenId: r.id, expiresAt: r.expires_at };
  }

  /** 401 unless token `id`, for `sandboxId`, works now; `what` names who relies on it (a port URL it made). */
  requireLive(id: string, sandboxId: string, what: string): void {
    this.selectById ??= this.db.prepare('SELECT * FROM sandbox_tokens WHERE id = ?');
    const r = this.selectById.get(id) as Row | undefined;
    // Gone with its sandbox, or never for this one: either way it opens nothing here.
    if (!r || r.sandbox_id !== sandboxId) throw new WarrenError('unauthenticated', `${what} was made by token ${id}, which no longer exists`);
    if (r.revoked_at !== null)
      throw new WarrenError('unauthenticated', `${what} was made by token ${id}, which was revoked at ${new Date(r.revoked_at).toISOString()}`);
    if (r.expires_at <= this.now())
      throw new WarrenError('unauthenticated', `${what} was made by token ${id}, which expired at ${new Date(r.expires_at).toISOString()}`);
  }

  private view(r: Row): SandboxTokenInfo {
    const state = r.revoked_at !== null ? 'revoked' : r.expires_at <= this.now() ? 'expired' : 'active';
    return {
      id: r.id,
      sandboxId: r.sandbox_id,
      scopes: JSON.parse(r.scopes) as SandboxTokenScope[],
      createdAt: new Date(r.created_at).toISOString(),
      expiresAt: new Date(r.expires_at).toISOString(),
      ...(r.revoked_at !== null ? { revokedAt: new Date(r.revoked_at).toISOString() } : {}),
      state,
    };
  }
}
