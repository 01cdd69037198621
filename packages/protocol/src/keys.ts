/**
 * API keys (docs/security.md, "API keys and scopes"): who may call the daemon, on what, and
 * how much. Wire types of /v1/keys. A key that is not an admin key sees and acts only on what
 * it made; every other sandbox, snapshot and database is a 404 to it.
 */
import { z } from 'zod';

/**
 * What a key may do, one scope per kind of call (the table in docs/security.md maps every
 * route). `admin` implies every other scope and sees every key's sandboxes.
 */
export const SCOPES = [
  'sandboxes:create',
  'sandboxes:read',
  'sandboxes:manage',
  'sandboxes:exec',
  'sandboxes:files',
  'sandboxes:fork',
  'network:write',
  'templates:build',
  'databases',
  'usage:read',
  'admin',
] as const;
export type Scope = (typeof SCOPES)[number];

/** The scopes of a key created without any named: everything but `admin`. */
export const DEFAULT_SCOPES: readonly Scope[] = SCOPES.filter((s) => s !== 'admin');

/** The key the daemon makes on first start (its secret is in the admin key file). */
export const ADMIN_KEY_ID = 'admin';

const KEY_NAME_RULE = '1 to 64 characters: letters, digits, spaces and . _ - @';
export const KeyName = z
  .string()
  .min(1, `a key name is ${KEY_NAME_RULE}`)
  .max(64, `a key name is ${KEY_NAME_RULE}`)
  .regex(/^[A-Za-z0-9][A-Za-z0-9 ._@-]*$/, `a key name is ${KEY_NAME_RULE}`);

const Scope = z.enum(SCOPES, { message: `a scope is one of ${SCOPES.join(', ')}` });

/**
 * What one key may hold and start (absent: no limit of that kind). Past a limit, a create or
 * fork is a 429 naming it, with Retry-After for the per-minute ones.
 */
export const KeyQuotas = z
  .object({
    /** Sandboxes being created or running at once (hibernated ones do not count). */
    sandboxes: z.number().int().min(1).max(100_000).optional(),
    /** vCPUs of those sandboxes together. */
    vcpus: z.number().min(0.1).max(100_000).optional(),
    /** Memory of those sandboxes together, MB. */
    memoryMB: z.number().int().min(64).max(100_000_000).optional(),
    /** Creates in any 60 s. */
    createsPerMinute: z.number().int().min(1).max(100_000).optional(),
    /** Fork children in any 60 s. */
    forksPerMinute: z.number().int().min(1).max(100_000).optional(),
    /** Disk of the key's hibernated sandboxes' images together, MB (checked before each hibernate). */
    hibernatedDiskMB: z.number().int().min(1).max(100_000_000).optional(),
  })
  .strict();
export type KeyQuotas = z.infer<typeof KeyQuotas>;

/** POST /v1/keys */
export const CreateKeyRequest = z
  .object({
    name: KeyName,
    quotas: KeyQuotas.optional(),
    /**
     * The egress allow rules (hosts, `host:port`, `@preset`, as a policy writes them) the key
     * may put in a sandbox's policy with network:write; absent: any.
     */
    egress: z.array(z.string().min(1).max(300)).max(256).optional(),
    /** Absent: DEFAULT_SCOPES. */
    scopes: z.array(Scope).min(1).max(SCOPES.length).optional(),
    /** The key stops working this many seconds from now (absent: never). 1 minute to 10 years. */
    expiresInSeconds: z
      .number()
      .int()
      .min(60)
      .max(10 * 365 * 24 * 3600)
      .optional(),
  })
  .strict();
export type CreateKeyRequest = z.input<typeof CreateKeyRequest>;

/** A key as listed: never its secret, never its hash. */
export interface ApiKeyInfo {
  id: string;
  name: string;
  scopes: Scope[];
  quotas?: KeyQuotas;
  egress?: string[];
  createdAt: string;
  expiresAt?: string;
  revokedAt?: string;
  /** When its secret was last replaced (rotate). */
  rotatedAt?: string;
  /** 'active', or why it no longer works. */
  state: 'active' | 'expired' | 'revoked';
}

/** POST /v1/keys and POST /v1/keys/:id/rotate: the secret, shown this once. */
export interface NewApiKey extends ApiKeyInfo {
  key: string;
}

/** GET /v1/keys */
export interface ApiKeyList {
  keys: ApiKeyInfo[];
}

/** One mutating API call in the audit trail (GET /v1/audit). */
export interface ApiAuditEntry {
  id: number;
  time: string;
  /** The key that made it (for a sandbox token, the key that made the token); absent when it carried no valid key (a 401). */
  keyId?: string;
  /** The sandbox token it carried, if it came with one instead of a key. */
  tokenId?: string;
  method: string;
  path: string;
  /** The sandbox the path names, if it names one. */
  sandboxId?: string;
  status: number;
  requestId: string;
}

export interface ApiAuditList {
  entries: ApiAuditEntry[];
}

/** Query of GET /v1/audit: oldest first, after an id to page or follow. */
export const ApiAuditQuery = z
  .object({
    key: z.string().min(1).max(64).optional(),
    sandbox: z.string().min(1).max(64).optional(),
    /** An ISO 8601 time, or epoch milliseconds. */
    since: z
      .string()
      .refine((s) => !Number.isNaN(/^\d+$/.test(s) ? Number(s) : Date.parse(s)), 'since is an ISO 8601 time or epoch milliseconds')
      .optional(),
    after: z.coerce.number().int().min(0).optional(),
    limit: z.coerce.number().int().min(1).max(10_000).optional(),
  })
  .strict();
export type ApiAuditQuery = z.input<typeof ApiAuditQuery>;

/**
 * What a per-sandbox token may do on its one sandbox: `read` (get it, its network policy,
 * egress log), `exec` (commands, processes, terminals, tools, port URLs), `files`, `manage`
 * (hibernate, resume, TTL, kill). Never fork, egress changes, databases or other sandboxes.
 */
export const SANDBOX_TOKEN_SCOPES = ['read', 'exec', 'files', 'manage'] as const;
export type SandboxTokenScope = (typeof SANDBOX_TOKEN_SCOPES)[number];

/** The key scope each token scope stands for. */
export const SANDBOX_TOKEN_SCOPE_OF: Record<SandboxTokenScope, Scope> = {
  read: 'sandboxes:read',
  exec: 'sandboxes:exec',
  files: 'sandboxes:files',
  manage: 'sandboxes:manage',
};

/** POST /v1/sandboxes/:id/tokens */
export const CreateSandboxTokenRequest = z
  .object({
    scopes: z
      .array(z.enum(SANDBOX_TOKEN_SCOPES, { message: `a token scope is one of ${SANDBOX_TOKEN_SCOPES.join(', ')}` }))
      .min(1)
      .max(SANDBOX_TOKEN_SCOPES.length),
    /** 60 s to 30 days; default 1 hour. */
    ttlSeconds: z
      .number()
      .int()
      .min(60)
      .max(30 * 24 * 3600)
      .optional(),
  })
  .strict();
export type CreateSandboxTokenRequest = z.input<typeof CreateSandboxTokenRequest>;

export interface SandboxTokenInfo {
  id: string;
  sandboxId: string;
  scopes: SandboxTokenScope[];
  createdAt: string;
  expiresAt: string;
  revokedAt?: string;
  state: 'active' | 'expired' | 'revoked';
}

/** The token's secret, shown this once: send it as `Authorization: Bearer TOKEN`. */
export interface NewSandboxToken extends SandboxTokenInfo {
  token: string;
}

export interface SandboxTokenList {
  tokens: SandboxTokenInfo[];
}
