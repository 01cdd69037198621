/**
 * GET /v1/logs: the daemon's structured log, searched by request id, level and time. A 5xx
 * body carries a request id and nothing internal; this is where the operator reads the rest.
 * Only admin keys may read it.
 */
import { Hono } from 'hono';
import { DEFAULT_LOGS_LIMIT, LogsQuery, WarrenError, type LogsResponse } from '@warren/protocol';
import type { LogFile } from '../../storage/log-file.js';
import type { AuthVars } from '../auth.js';
import { parse } from '../errors.js';

export function logRoutes(logFile: LogFile): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.get('/', async (c) => {
    const query = c.req.query();
    const unknown = Object.keys(query).filter((k) => !(k in LogsQuery.shape));
    if (unknown.length)
      throw new WarrenError('invalid_argument', `unknown query parameter ${unknown.join(', ')}: GET /v1/logs takes requestId, level, since and limit`);
    const q = parse(LogsQuery, query);
    const found = await logFile.search({
      limit: q.limit ?? DEFAULT_LOGS_LIMIT,
      ...(q.requestId ? { requestId: q.requestId } : {}),
      ...(q.level ? { level: q.level } : {}),
      ...(q.since ? { since: Date.parse(q.since) } : {}),
    });
    return c.json(found satisfies LogsResponse);
  });
  return app;
}
