/**
 * Records every call that changes something (POST, PUT, PATCH, DELETE) in the API's audit
 * trail once it has been answered: refused ones too, with the status they got.
 */
import type { MiddlewareHandler } from 'hono';
import type { Logger } from 'pino';
import type { ApiAudit } from '../keys/audit.js';
import type { Principal } from '../keys/service.js';
import type { AuthVars } from './auth.js';

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export function auditTrail(audit: ApiAudit, log: Logger): MiddlewareHandler<AuthVars> {
  return async (c, next) => {
    await next();
    if (!MUTATING.has(c.req.method)) return;
    const rule = c.get('rule');
    // A create names its sandbox only in its answer; the route leaves the id here.
    const sandboxId = rule?.owns === 'sandbox' ? rule.id : c.get('createdSandbox');
    try {
      audit.record({
        time: Date.now(),
        // Unset when the key check refused the call; a token's calls name its maker too, so
        // that a key's trail has them.
        ...whoCalled(c.get('principal') as Principal | undefined),
        method: c.req.method,
        path: c.req.path,
        ...(sandboxId ? { sandboxId } : {}),
        status: c.res.status,
        requestId: c.get('requestId'),
      });
    } catch (err) {
      // The call itself is done; losing its trail entry is the operator's to know.
      log.error({ err: (err as Error).message, method: c.req.method, path: c.req.path }, 'API audit entry could not be written');
    }
  };
}

/** Who made a call: the key, and the sandbox token if it carried one. */
function whoCalled(p: Principal | undefined): { keyId?: string; tokenId?: string } {
  if (!p) return {};
  return { keyId: p.keyId, ...(p.tokenId ? { tokenId: p.tokenId } : {}) };
}
