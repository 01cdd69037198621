/** The dashboard (docs/dashboard.md): a one-time link that logs a browser in as this key. */
import type { UiLoginLink } from '@warren/protocol';
import { HttpClient, type ConnectionOptions } from './client.js';

/** A login link for the dashboard, valid for one use within a minute. */
export function dashboardLoginLink(conn: ConnectionOptions = {}): Promise<UiLoginLink> {
  return new HttpClient(conn).json<UiLoginLink>('POST', '/v1/ui/login-links');
}
