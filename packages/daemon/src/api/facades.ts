/**
 * The daemon's facades (docs/security.md, "Authentication at each facade's entry"): where each
 * begins and the few routes a caller reaches without a credential. Each facade checks its
 * credential in one middleware at its entry, before any of its handlers runs, so a handler
 * that forgets to check is still closed and a route added later is closed until it is
 * listed here:
 *
 *   api   /v1/*, /metrics   API key, sandbox token or dashboard session (auth.ts)
 *   e2b   /e2b/*            API key in X-API-Key (e2b/entry.ts)
 *   envd  /e2b/envd/*       the sandbox's access token in X-Access-Token (e2b/envd/router.ts)
 *   mcp   /mcp/*            API key (auth.ts)
 *   ui    /ui/*             dashboard session (routes/ui.ts)
 */
import type { Context } from 'hono';
import { matchedRoutes } from 'hono/route';
import type { Facade, RouteInfo } from '@warren/protocol';

/** Where E2B's SDKs find envd (their E2B_SANDBOX_URL is the daemon's URL and this). */
export const E2B_ENVD_PREFIX = '/e2b/envd';

interface PublicRoute {
  method: string;
  /** The route's pattern exactly as registered (`/ui/:file` is that route, not every path it would match). */
  path: string;
  /** Why no credential is needed, or what stands in for one. */
  why: string;
}

/** Every route any caller reaches without a credential, and no other. */
const PUBLIC_ROUTES: readonly PublicRoute[] = [
  { method: 'GET', path: '/ui', why: 'a redirect to /ui/' },
  { method: 'GET', path: '/ui/', why: "the dashboard's page; it asks /ui/session who is logged in" },
  { method: 'GET', path: '/ui/:file', why: "the dashboard's scripts and styles" },
  { method: 'GET', path: '/ui/login', why: 'spends a one-time login link: its token is the credential' },
  { method: 'POST', path: '/ui/login', why: 'takes an API key in its body and checks it (a wrong one counts as a failed authentication)' },
  { method: 'POST', path: '/ui/logout', why: "ends the session its cookie names, from the dashboard's own origin only" },
  {
    method: 'GET',
    path: `${E2B_ENVD_PREFIX}/health`,
    why: "E2B's isRunning(): 204 only with the sandbox's token; any other call gets 502, as for a sandbox that is not running",
  },
];

/** True for a public route, by its pattern as registered. */
function isPublicRoute(method: string, pattern: string): boolean {
  return PUBLIC_ROUTES.some((r) => r.method === method && r.path === pattern);
}

/**
 * True when the route that will answer this call is public: the first matched route with a
 * method of its own (middleware is registered for ALL; HEAD is answered by GET's route).
 */
export function answersPublicly(c: Context): boolean {
  const route = matchedRoutes(c).find((r) => r.method !== 'ALL');
  return route !== undefined && isPublicRoute(route.method, route.path);
}

const under = (path: string, prefix: string) => path === prefix || path.startsWith(`${prefix}/`);

/** The facade a path belongs to; undefined outside all of them (no route there: 404). */
function facadeOf(path: string): Facade | undefined {
  if (under(path, E2B_ENVD_PREFIX)) return 'envd';
  if (under(path, '/e2b')) return 'e2b';
  if (under(path, '/v1') || path === '/metrics') return 'api';
  if (under(path, '/mcp')) return 'mcp';
  if (under(path, '/ui')) return 'ui';
  return undefined;
}

/**
 * The routes of these apps as they are registered, middleware included (method ALL), each
 * once: what GET /v1/routes answers, so that a test can walk every route the daemon has.
 */
export function routeTable(...apps: ReadonlyArray<{ routes: ReadonlyArray<{ method: string; path: string }> }>): RouteInfo[] {
  const seen = new Map<string, RouteInfo>();
  for (const app of apps) {
    for (const { method, path } of app.routes) {
      const key = `${method} ${path}`;
      if (!seen.has(key)) seen.set(key, { method, path, facade: facadeOf(path) ?? null, public: isPublicRoute(method, path) });
    }
  }
  return [...seen.values()];
}
