/**
 * The dashboard (docs/dashboard.md): its static files under /ui, and how a browser logs in.
 *
 *   POST /v1/ui/login-links   (any key) a one-time link, valid a minute, that logs a browser in as that key
 *   GET  /ui/login?token=T    spends the link's token, sets the session cookie, goes on to /ui/
 *   POST /ui/login            {"key": "..."} from the login form: the same, for a key typed in
 *   GET  /ui/session          who the session is, and its CSRF token; 401 without one
 *   POST /ui/logout           ends the session
 *
 * The pages are served with a policy that lets them run only their own script and talk only
 * to this origin, and that keeps other sites from framing them.
 */
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { WarrenError, type UiLoginLink, type UiSessionInfo } from '@warren/protocol';
import type { Principal } from '../../keys/service.js';
import { z } from 'zod';
import { authenticate, requestAddress, requestSecret, sameOrigin, type Access, type AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';
import { answersPublicly } from '../facades.js';
import { SESSION_COOKIE, SESSION_IDLE_MS } from '../ui-sessions.js';

const LoginRequest = z.object({ key: z.string().min(1).max(1000) }).strict();

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.map': 'application/json',
};

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

interface Asset {
  body: Uint8Array<ArrayBuffer>;
  type: string;
  etag: string;
}

/** The built dashboard (packages/ui/dist), read once; empty when it was not built. */
function loadAssets(): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  const dist = path.join(path.dirname(createRequire(import.meta.url).resolve('@warren/ui/package.json')), 'dist');
  if (!existsSync(dist)) return assets;
  for (const name of readdirSync(dist)) {
    const type = CONTENT_TYPES[path.extname(name)];
    if (!type) continue;
    const body = new Uint8Array(readFileSync(path.join(dist, name)));
    assets.set(name, { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 16)}"` });
  }
  return assets;
}

export function uiLoginLinkRoutes(access: Access): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.post('/login-links', (c) => {
    const { token, expiresAt } = access.sessions.issueLogin(requestSecret(c, access.sessions));
    const url = new URL('/ui/login', c.req.url);
    url.searchParams.set('token', token);
    return c.json({ url: url.toString(), expiresAt: new Date(expiresAt).toISOString() } satisfies UiLoginLink, 201);
  });
  return app;
}

export function uiRoutes(access: Access): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  const assets = loadAssets();
  // Full paths, mounted at the root: a sub-app under /ui could not tell /ui/ from /ui.
  app.use('/ui/*', async (c, next) => {
    await next();
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) c.header(k, v);
    c.header('cache-control', 'no-cache');
  });
  // The entry: a logged-in session on every route but the public ones (api/facades.ts).
  app.use('/ui/*', async (c, next) => {
    if (!answersPublicly(c)) sessionPrincipal(c, access);
    await next();
  });
  app.use(
    '/ui/*',
    bodyLimit({
      maxSize: 64 * 1024,
      onError: () => {
        throw new WarrenError('too_large', 'a dashboard login body is a few bytes of JSON');
      },
    }),
  );

  app.get('/ui/login', (c) => {
    const id = access.sessions.redeem(c.req.query('token') ?? '');
    if (!id) return c.redirect('/ui/?login=expired', 303);
    startSession(c, id);
    return c.redirect('/ui/', 303);
  });

  app.post('/ui/login', async (c) => {
    requireSameOrigin(c);
    const { key } = parse(LoginRequest, await jsonBody(c));
    authenticate(access, key, requestAddress(c)); // 401 (and a counted failure) for a wrong key
    startSession(c, access.sessions.open(key));
    return c.json({ ok: true });
  });

  app.post('/ui/logout', (c) => {
    requireSameOrigin(c);
    access.sessions.close(getCookie(c, SESSION_COOKIE));
    deleteCookie(c, SESSION_COOKIE, { path: '/' });
    return c.body(null, 204);
  });

  app.get('/ui/session', (c) => {
    const { p, csrf } = sessionPrincipal(c, access);
    return c.json({ keyId: p.keyId, admin: p.admin, scopes: [...p.scopes], csrf } satisfies UiSessionInfo);
  });

  app.get('/ui', (c) => c.redirect('/ui/', 301));
  app.get('/ui/', (c) => serveAsset(c, assets, 'index.html'));
  app.get('/ui/:file', (c) => serveAsset(c, assets, c.req.param('file')));
  return app;
}

function serveAsset(c: Context, assets: Map<string, Asset>, name: string): Response {
  const asset = assets.get(name);
  if (!asset) {
    if (!assets.size) throw new WarrenError('unavailable', 'the dashboard was not built: run `npm run build` (it writes packages/ui/dist)');
    throw new WarrenError('not_found', `no dashboard file ${name}`);
  }
  if (c.req.header('if-none-match') === asset.etag) return c.body(null, 304, { etag: asset.etag });
  return c.body(asset.body, 200, { 'content-type': asset.type, etag: asset.etag });
}

/** The key the request's session acts as, and the session's CSRF token; 401 without a live one. */
function sessionPrincipal(c: Context, access: Access): { p: Principal; csrf: string } {
  const session = access.sessions.get(getCookie(c, SESSION_COOKIE));
  if (!session) throw new WarrenError('unauthenticated', 'not logged in: open a link from `warren ui`, or log in with an API key');
  return { p: authenticate(access, session.secret, requestAddress(c)), csrf: session.csrf };
}

function startSession(c: Context, id: string): void {
  setCookie(c, SESSION_COOKIE, id, {
    path: '/',
    httpOnly: true,
    sameSite: 'Strict',
    secure: new URL(c.req.url).protocol === 'https:',
    maxAge: SESSION_IDLE_MS / 1000,
  });
}

/** Login and logout are only for the dashboard's own page. */
function requireSameOrigin(c: Context): void {
  const origin = c.req.header('origin');
  if (origin === undefined || !sameOrigin(origin, c.req.header('host')))
    throw new WarrenError('permission_denied', `this call is for the dashboard's own page (Origin ${origin ?? 'missing'})`);
}
