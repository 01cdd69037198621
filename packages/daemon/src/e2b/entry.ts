/**
 * The E2B control plane's entry (docs/security.md, "Authentication at each facade's entry"):
 * the caller's key is checked here, as /v1 checks it (failures counted per address), before
 * any handler runs or any body is read. The handlers then act through /v1 with that same key,
 * where scopes, ownership and quotas apply; a handler that kept something of its own (the
 * template builds) or forgot to call /v1 is still closed to a caller without a key.
 */
import type { MiddlewareHandler } from 'hono';
import { authenticate, requestAddress, requireAccess, type Access, type AuthVars } from '../api/auth.js';
import { e2bApiKey } from './warren-calls.js';

/** A path that names a sandbox, its id in group 1. */
const SANDBOX_PATH = /^\/e2b\/(?:v2\/)?sandboxes\/([^/]+)/;

export function e2bEntry(access: Access): MiddlewareHandler<AuthVars> {
  return async (c, next) => {
    const p = authenticate(access, e2bApiKey(c), requestAddress(c));
    c.set('principal', p);
    c.set('apiKeyId', p.keyId);
    const sandboxId = SANDBOX_PATH.exec(c.req.path)?.[1];
    if (sandboxId !== undefined) {
      // Named for the audit trail; and another key's sandbox is a 404 before its body is
      // parsed, worded as a missing one, as on /v1.
      c.set('rule', { scope: null, owns: 'sandbox', id: sandboxId });
      requireAccess(p, access.owners, 'sandbox', sandboxId);
    }
    await next();
  };
}
