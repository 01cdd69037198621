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
    return c.json(meter.report({ since, until, apiKeyId: q.apiKey }, now));
  });
  return app;
}
