/** GET /v1/usage: what sandboxes cost in a window, per sandbox, per API key and in total. */
import { Hono } from 'hono';
import { DEFAULT_USAGE_WINDOW_MS, UsageQuery, WarrenError } from '@warren/protocol';
import type { UsageMeter } from '../../core/usage.js';
import type { AuthVars } from '../auth.js';
import { parse } from '../errors.js';

export function usageRoutes(meter: UsageMeter): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.get('/', (c) => {
    const query = c.req.query();
    // Checked here rather than left to the schema, whose message would call the query a body.
    const unknown = Object.keys(query).filter((k) => !(k in UsageQuery.shape));
    if (unknown.length) throw new WarrenError('invalid_argument', `unknown query parameter ${unknown.join(', ')}: GET /v1/usage takes since, until and apiKey`);
    const q = parse(UsageQuery, query);
    const now = Date.now();
    const until = q.until ? Date.parse(q.until) : now;
    const since = q.since ? Date.parse(q.since) : until - DEFAULT_USAGE_WINDOW_MS;
    if (since > until) {
      throw new WarrenError('invalid_argument', `since (${new Date(since).toISOString()}) is after until (${new Date(until).toISOString()})`, {
        details: { since: q.since, until: q.until },
      });
    }
    // A key that is not an admin key sees its own usage only.
    const p = c.get('principal');
    if (!p.admin && q.apiKey !== undefined && q.apiKey !== p.keyId)
      throw new WarrenError(
        'permission_denied',
        `API key ${p.keyId} may read its own usage only (apiKey=${p.keyId}); other keys' usage needs the scope admin`,
        {
          details: { scope: 'admin' },
        },
      );
    return c.json(meter.report({ since, until, apiKeyId: p.admin ? q.apiKey : p.keyId }, now));
  });
  return app;
}
