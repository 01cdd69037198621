/**
 * Who may call what (docs/security.md, "API keys and scopes"). Requests carry a key as
 * `Authorization: Bearer KEY` (or `X-Api-Key`); the key's scopes are checked against the
 * route's, and a key that is not an admin key reaches only its own sandboxes, snapshots and
 * databases: another key's is answered exactly as one that does not exist (404).
 */
import type { Context, MiddlewareHandler } from 'hono';
import { CREDENTIAL_HEADER, WarrenError, type Scope } from '@warren/protocol';
import type { IncomingMessage } from 'node:http';
import type { AuthFailureLimiter } from '../keys/auth-failures.js';
import type { QuotaGate } from '../keys/quotas.js';
import type { KeyService, Principal } from '../keys/service.js';
import { TOKEN_PREFIX, type SandboxTokens } from '../keys/tokens.js';
import type { TemplateAccess } from '../templates/owners.js';
import { getCookie } from 'hono/cookie';
import { CSRF_HEADER, SESSION_COOKIE, csrfMatches, type UiSessions } from './ui-sessions.js';

export type AuthVars = {
  Variables: {
    apiKeyId: string;
    /** Set by the key check; every route behind it has one. */
    principal: Principal;
    requestId: string;
    /** The sandbox a create made, for the audit trail. */
    createdSandbox: string | undefined;
    /** The route's rule, found once by the key check (the audit trail names its sandbox). */
    rule: RouteRule | undefined;
  };
};

/** The owner (API key id) of each kind of resource a path can name; undefined: no such resource. */
export interface Owners {
  sandbox(id: string): string | undefined;
  snapshot(id: string): string | undefined;
  database(name: string): string | undefined;
}

type Kind = keyof Owners;

/** A route's rule: the scope it needs (null: any valid key) and the resource its path names. */
interface Rule {
  methods: string[] | '*';
  path: RegExp;
  scope: Scope | null;
  owns?: Kind;
  /** Other scopes that also allow the route (any one is enough). */
  orScopes?: Scope[];
}

const SEG = '([^/]+)';
const rule = (methods: string[] | '*', path: string, scope: Scope | null, owns?: Kind, orScopes?: Scope[]): Rule => ({
  methods,
  path: new RegExp(`^${path}$`),
  scope,
  ...(owns ? { owns } : {}),
  ...(orScopes ? { orScopes } : {}),
});

/** Whoever may act on a sandbox may see it: the SDKs and the CLI read it before they act. */
const ACTS_ON_A_SANDBOX: Scope[] = ['sandboxes:exec', 'sandboxes:files', 'sandboxes:manage', 'sandboxes:fork'];

/** First match wins. A route with no rule needs `admin` (new routes are closed until given one). */
const RULES: Rule[] = [
  rule(['GET'], '/v1/health', null),
  rule(['GET'], '/v1/tools', null),
  rule(['GET'], `/v1/templates(?:/${SEG}(?:/bake|/pool|/versions|/builds(?:/[^/]+)?)?)?`, null),
  rule(['POST', 'PUT', 'DELETE'], `/v1/templates(?:/.*)?`, 'templates:build'),
  rule(['POST'], '/v1/sandboxes', 'sandboxes:create'),
  rule(['GET'], '/v1/sandboxes', 'sandboxes:read'),
  rule(['GET'], `/v1/sandboxes/${SEG}`, 'sandboxes:read', 'sandbox', ACTS_ON_A_SANDBOX),
  rule(['GET'], `/v1/sandboxes/${SEG}/(?:network|egress|databases|forwards)`, 'sandboxes:read', 'sandbox'),
  rule(['PUT'], `/v1/sandboxes/${SEG}/network`, 'network:write', 'sandbox'),
  rule(['POST'], `/v1/sandboxes/${SEG}/(?:hibernate|resume|ttl)`, 'sandboxes:manage', 'sandbox'),
  rule(['DELETE'], `/v1/sandboxes/${SEG}`, 'sandboxes:manage', 'sandbox'),
  rule(['POST'], `/v1/sandboxes/${SEG}/(?:fork|snapshots)`, 'sandboxes:fork', 'sandbox'),
  rule(['POST'], `/v1/sandboxes/${SEG}/databases`, 'databases', 'sandbox'),
  // Any scope on the sandbox; making a token also needs each scope it grants (keys/tokens.ts).
  rule('*', `/v1/sandboxes/${SEG}/tokens(?:/[^/]+)?`, 'sandboxes:read', 'sandbox', ACTS_ON_A_SANDBOX),
  rule('*', `/v1/sandboxes/${SEG}/files(?:/.*)?`, 'sandboxes:files', 'sandbox'),
  rule('*', `/v1/sandboxes/${SEG}/(?:exec|processes|terminals|tools|ports)(?:/.*)?`, 'sandboxes:exec', 'sandbox'),
  rule(['GET'], '/v1/snapshots', 'sandboxes:read'),
  rule(['GET'], `/v1/snapshots/${SEG}`, 'sandboxes:read', 'snapshot'),
  rule(['DELETE'], `/v1/snapshots/${SEG}`, 'sandboxes:fork', 'snapshot'),
  rule(['GET', 'POST'], '/v1/databases', 'databases'),
  rule('*', `/v1/databases/${SEG}(?:/.*)?`, 'databases', 'database'),
  rule(['GET'], '/v1/usage', 'usage:read'),
  rule(['GET'], '/v1/events', 'sandboxes:read'),
  // Any key may log a browser in as itself (the session can do no more than the key).
  rule(['POST'], '/v1/ui/login-links', null),
  rule('*', '/mcp', null),
];

export type RouteRule = { scope: Scope | null; owns?: Kind; id?: string; orScopes?: Scope[] };

/** The rule of a route, if it has one of its own (tests check that every route does). */
export function ruleFor(method: string, path: string): RouteRule | undefined {
  for (const r of RULES) {
    if (r.methods !== '*' && !r.methods.includes(method)) continue;
    const m = r.path.exec(path);
    if (m) return { scope: r.scope, ...(r.owns ? { owns: r.owns, id: decodeSegment(m[1]!) } : {}), ...(r.orScopes ? { orScopes: r.orScopes } : {}) };
  }
  return undefined;
}

/** A path segment as the routes see it; one that is not valid percent-encoding stays as sent (as Hono leaves it). */
function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch (err) {
    if (err instanceof URIError) return segment;
    throw err;
  }
}

/** The key a request carries: `Authorization: Bearer KEY`, else `X-Api-Key: KEY` (E2B's SDKs send that one). */
export function bearerKey(headers: { authorization?: string | undefined; 'x-api-key'?: string | string[] | undefined }): string {
  const header = headers.authorization ?? '';
  if (header.toLowerCase().startsWith('bearer ')) return header.slice(7).trim();
  const x = headers['x-api-key'];
  return (Array.isArray(x) ? x[0] : x) ?? '';
}

export function requestApiKey(c: Context): string {
  return bearerKey({ authorization: c.req.header(CREDENTIAL_HEADER.authorization), 'x-api-key': c.req.header(CREDENTIAL_HEADER.apiKey) });
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * The key a request acts as: the one it carries, else its dashboard session's (cookie). A
 * session's call from another origin, or one that changes something without the session's
 * CSRF token, is refused: a sandbox's own web page (a port URL is same-site with the daemon)
 * must not be able to act with a logged-in operator's cookie.
 */
export function requestSecret(c: Context, sessions: UiSessions): string {
  const key = requestApiKey(c);
  if (key) return key;
  const session = sessions.get(getCookie(c, SESSION_COOKIE));
  if (!session) return '';
  if (!sameOrigin(c.req.header('origin'), c.req.header('host')))
    throw new WarrenError('permission_denied', `a dashboard session cannot be used from another origin (${c.req.header('origin')})`);
  if (!SAFE_METHODS.has(c.req.method) && !csrfMatches(session, c.req.header(CSRF_HEADER)))
    throw new WarrenError('permission_denied', `the dashboard's CSRF token is missing or stale (header ${CSRF_HEADER}); reload the page`);
  return session.secret;
}

/** True when there is no Origin (same-origin GETs send none) or it names the host the request came to. */
export function sameOrigin(origin: string | undefined, host: string | undefined): boolean {
  if (origin === undefined) return true;
  try {
    return new URL(origin).host === host;
  } catch (err) {
    // Not a URL (Origin: null, from a sandboxed frame or a file): not this origin.
    if (err instanceof TypeError) return false;
    throw err;
  }
}

/**
 * The principal of a request's key or sandbox token, or 401; an address with too many
 * failures gets 429 before its key is looked at.
 */
export function authenticate(access: Access, secret: string, address: string): Principal {
  access.failures.check(address);
  try {
    if (!secret) throw new WarrenError('unauthenticated', 'missing API key: send "Authorization: Bearer <key>" (see WARREN_API_KEY)');
    if (!secret.startsWith(TOKEN_PREFIX)) return access.keys.authenticate(secret);
    const p = access.tokens.authenticate(secret);
    // A token is worth no more than the key that made it: revoked or expired, it ends its tokens too.
    access.keys.requireUsable(p.keyId, `token ${p.tokenId}`);
    return p;
  } catch (err) {
    if (err instanceof WarrenError && err.code === 'unauthenticated') access.failures.fail(address);
    throw err;
  }
}

/** The address a request came from (the socket's; no header is trusted for it). */
export function sourceAddress(socket: { remoteAddress?: string | undefined } | undefined): string {
  return socket?.remoteAddress ?? 'unknown';
}

export function requestAddress(c: Context): string {
  return sourceAddress((c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket);
}

/**
 * A sandbox token reaches its own sandbox and nothing else: another sandbox is a 404 (as for
 * a key), a route that names no sandbox a 403.
 */
function confine(p: Principal, kind: Kind | undefined, id: string | undefined, what: string): void {
  if (p.sandboxId === undefined || (kind === 'sandbox' && id === p.sandboxId)) return;
  if (kind === 'sandbox' && id !== undefined) throw new WarrenError('not_found', NOT_FOUND.sandbox(id));
  throw new WarrenError('permission_denied', `token ${p.tokenId} is for sandbox ${p.sandboxId} only; ${what} needs an API key`);
}

/** 403 naming the scope unless the principal has it (admin has every scope). */
export function requireScope(p: Principal, scope: Scope | null, what: string, orScopes: readonly Scope[] = []): void {
  if (scope === null || p.admin || p.scopes.has(scope) || orScopes.some((s) => p.scopes.has(s))) return;
  const who = p.tokenId ? `token ${p.tokenId}` : `API key ${p.keyId}`;
  throw new WarrenError('permission_denied', `${who} lacks the scope ${scope}, which ${what} needs`, { details: { scope } });
}

/** 403 naming the first rule outside the key's egress grant, if it has one. */
export function requireEgressGrant(p: Principal, allow: readonly string[]): void {
  if (p.admin || !p.egress) return;
  const granted = new Set(p.egress);
  const outside = allow.find((rule) => !granted.has(rule));
  if (outside !== undefined)
    throw new WarrenError(
      'permission_denied',
      `API key ${p.keyId} may grant only these egress rules: ${p.egress.join(', ') || '(none)'}; ${JSON.stringify(outside)} is not one of them`,
      { details: { rule: outside } },
    );
}

/** True when the principal may see the resource (its own, or any for an admin key). */
function mayAccess(p: Principal, owner: string | undefined): boolean {
  return p.admin || owner === undefined || owner === p.keyId;
}

const NOT_FOUND: Record<Kind, (id: string) => string> = {
  sandbox: (id) => `no sandbox with id ${id}`,
  snapshot: (id) => `no snapshot with id ${id}`,
  database: (name) => `no database named ${name}; see GET /v1/databases (warren db ls)`,
};

/** 404, worded as for a resource that does not exist, unless the principal may act on it. */
export function requireAccess(p: Principal, owners: Owners, kind: Kind, id: string): void {
  // A token was made for its sandbox by a key that could reach it (an admin key, for another key's sandbox).
  if (kind === 'sandbox' && p.sandboxId !== undefined && id === p.sandboxId) return;
  if (!mayAccess(p, owners[kind](id))) throw new WarrenError('not_found', NOT_FOUND[kind](id));
}

/** Authentication, then the route's scope and the ownership of what its path names. */
export function authorizeRequests(access: Access): MiddlewareHandler<AuthVars> {
  return async (c, next) => {
    // Before the key check, so that a refused call's trail entry still names its sandbox.
    const found = ruleFor(c.req.method, c.req.path);
    c.set('rule', found);
    const p = authenticate(access, requestSecret(c, access.sessions), requestAddress(c));
    c.set('principal', p);
    c.set('apiKeyId', p.keyId);
    const what = `${c.req.method} ${c.req.path}`;
    if (c.req.path !== '/v1/health') confine(p, found?.owns, found?.id, what);
    requireScope(p, found ? found.scope : 'admin', what, found?.orScopes);
    // Ownership before anything else answers, so nothing tells another key's resource from a missing one.
    if (found?.owns && found.id) requireAccess(p, access.owners, found.owns, found.id);
    await next();
  };
}

/** What authorizing a call needs: the keys and who owns what. */
export interface Access {
  keys: KeyService;
  tokens: SandboxTokens;
  owners: Owners;
  quotas: QuotaGate;
  failures: AuthFailureLimiter;
  /** Which templates a key sees and may change. */
  templates: TemplateAccess;
  /** The dashboard's browser sessions, each acting as the key that opened it. */
  sessions: UiSessions;
}

/**
 * For calls that do not pass through the API's middleware (WebSocket upgrades, port URLs
 * with a key): the key's principal, if it has `scope` and may reach the sandbox.
 */
export function authorizeSandboxCall(access: Access, key: string, address: string, sandboxId: string, scope: Scope, what: string): Principal {
  const p = authenticate(access, key, address);
  confine(p, 'sandbox', sandboxId, what);
  requireScope(p, scope, what);
  requireAccess(p, access.owners, 'sandbox', sandboxId);
  return p;
}
