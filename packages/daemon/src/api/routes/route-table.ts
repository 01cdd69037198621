/**
 * GET /v1/routes (admin): every route the daemon has, on every facade, as registered, with
 * the facade it belongs to and whether it is public (api/facades.ts). The security battery
 * walks it, so a route added later is tried without anyone listing it.
 */
import { Hono } from 'hono';
import type { RouteInfo, RouteTable } from '@warren/protocol';
import type { AuthVars } from '../auth.js';

export function routeTableRoutes(table: () => RouteInfo[]): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.get('/', (c) => c.json({ routes: table() } satisfies RouteTable));
  return app;
}
