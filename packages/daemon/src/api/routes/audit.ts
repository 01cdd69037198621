/** GET /v1/audit: the API's audit trail, for admin keys (docs/security.md). */
import { Hono } from 'hono';
import { ApiAuditQuery, WarrenError, type ApiAuditList } from '@warren/protocol';
import type { ApiAudit } from '../../keys/audit.js';
import type { AuthVars } from '../auth.js';
import { parse } from '../errors.js';

const DEFAULT_LIMIT = 1000;

export function auditRoutes(audit: ApiAudit): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.get('/', (c) => {
    const query = c.req.query();
    const unknown = Object.keys(query).filter((k) => !(k in ApiAuditQuery.shape));
    if (unknown.length)
      throw new WarrenError('invalid_argument', `unknown query parameter ${unknown.join(', ')}: GET /v1/audit takes key, sandbox, since, after and limit`);
    const q = parse(ApiAuditQuery, query);
    const since = q.since === undefined ? undefined : /^\d+$/.test(q.since) ? Number(q.since) : Date.parse(q.since);
    const entries = audit.list({
      limit: q.limit ?? DEFAULT_LIMIT,
      ...(q.key ? { keyId: q.key } : {}),
      ...(q.sandbox ? { sandboxId: q.sandbox } : {}),
      ...(since !== undefined ? { since } : {}),
      ...(q.after !== undefined ? { afterId: q.after } : {}),
    });
    return c.json({ entries } satisfies ApiAuditList);
  });
  return app;
}
