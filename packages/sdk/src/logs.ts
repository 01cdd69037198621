/** The daemon's structured log: what an operator reads to follow up a request id from an error. */
import type { LogLevel, LogsResponse } from '@warren/protocol';
import { HttpClient, type ConnectionOptions } from './client.js';

export { LOG_LEVELS } from '@warren/protocol';

export interface LogsOptions {
  /** Only the lines of this request (the id a 5xx error names, or the X-Request-Id header). */
  requestId?: string;
  /** The lowest level to include. */
  level?: LogLevel;
  /** Only lines at or after this time. */
  since?: Date | string;
  /** The newest this many matching lines (default 200, at most 10000). */
  limit?: number;
}

/** Lines of the daemon's log, oldest first. Needs an admin key. */
export function getDaemonLogs(opts: LogsOptions = {}, conn: ConnectionOptions = {}): Promise<LogsResponse> {
  return new HttpClient(conn).json<LogsResponse>('GET', '/v1/logs', {
    query: {
      requestId: opts.requestId,
      level: opts.level,
      since: opts.since instanceof Date ? opts.since.toISOString() : opts.since,
      limit: opts.limit,
    },
  });
}
