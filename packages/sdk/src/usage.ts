/**
 * Metered usage: what sandboxes cost in a window, billed for their allocated vCPUs and memory
 * for every second they run (hibernated time is free).
 */
import type { UsageReport } from '@warren/protocol';
import { HttpClient, type ConnectionOptions } from './client.js';

export interface UsageOptions {
  /** Start of the window (default: 24 hours before `until`). */
  since?: Date | string;
  /** End of the window (default: now). */
  until?: Date | string;
  /** Only sandboxes created with this API key id. */
  apiKey?: string;
}

function instant(value: Date | string | undefined): string | undefined {
  return value instanceof Date ? value.toISOString() : value;
}

/** Per sandbox, per API key and total usage and cost in the window, at the daemon's prices. */
export function getUsage(opts: UsageOptions = {}, conn: ConnectionOptions = {}): Promise<UsageReport> {
  return new HttpClient(conn).json<UsageReport>('GET', '/v1/usage', {
    query: { since: instant(opts.since), until: instant(opts.until), apiKey: opts.apiKey },
  });
}
