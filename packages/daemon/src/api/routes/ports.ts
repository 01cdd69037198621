/**
 * Port URLs (network/ports.ts): the forwarding itself, for requests whose Host names a
 * sandbox port, and POST /v1/sandboxes/:id/ports/:port/url, which signs a URL for a browser.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { MiddlewareHandler } from 'hono';
import { Hono } from 'hono';
import {
  CREDENTIAL_COOKIE,
  CREDENTIAL_HEADER,
  PORT_TOKEN_PARAM,
  PortUrlRequest,
  PortForwardRequest,
  WarrenError,
  type PortUrl,
  type PortForwardList,
} from '@warren/protocol';
import type { TcpForwards } from '../../network/tcp-forwards.js';
import type { SandboxService } from '../../core/sandboxes.js';
import { forwardHttp, forwardUpgrade, pathWithoutToken, type PortHosts, type PortTokens, type PortUrlMaker } from '../../network/ports.js';
import { authorizeSandboxCall, bearerKey, requestAddress, sourceAddress, type Access, type AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';

export interface PortDeps {
  sandboxes: SandboxService;
  forwards: TcpForwards;
  access: Access;
  tokens: PortTokens;
  /** The port the daemon listens on, for the URLs it signs. */
  daemonPort: () => number;
  /** The domain and scheme of port URLs. */
  hosts: PortHosts;
}

const headerText = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);
const PORT_TOKEN_COOKIE = CREDENTIAL_COOKIE.portToken;

/**
 * Who may use a port URL: an API key, a token for this sandbox and port (in the URL or its
 * cookie), or a sandbox token in E2B's traffic header. Returns the token when it came in the
 * URL, so the response can set the cookie.
 */
function authorize(
  deps: PortDeps,
  headers: { authorization?: string; cookie?: string; traffic?: string },
  address: string,
  url: URL,
  sandboxId: string,
  port: number,
): string | undefined {
  // E2B's SDKs send the sandbox's trafficAccessToken (a token for this sandbox, docs/e2b.md).
  if (headers.traffic) {
    authorizeSandboxCall(deps.access, headers.traffic, address, sandboxId, 'sandboxes:exec', 'a port URL');
    return undefined;
  }
  const auth = headers.authorization ?? '';
  if (auth.toLowerCase().startsWith('bearer ')) {
    authorizeSandboxCall(deps.access, bearerKey(headers), address, sandboxId, 'sandboxes:exec', 'a port URL');
    return undefined;
  }
  const fromUrl = url.searchParams.get(PORT_TOKEN_PARAM) ?? undefined;
  const fromCookie = (headers.cookie ?? '')
    .split(';')
    .map((c) => c.trim())
    .find((c) => c.startsWith(`${PORT_TOKEN_COOKIE}=`))
    ?.slice(PORT_TOKEN_COOKIE.length + 1);
  const token = fromUrl ?? fromCookie;
  if (!token) throw new WarrenError('unauthenticated', `this URL needs a token: get one with \`warren url ${sandboxId} ${port}\` or send the API key`);
  requireMakerStillAble(deps.access, deps.tokens.check(token, sandboxId, port), sandboxId);
  return fromUrl;
}

/**
 * 401 unless whoever made a port URL could still open it now: its key usable (not revoked,
 * not expired), holding the scope and reaching the sandbox; the token that made it, if one
 * did, live. Run on every request through the URL (and its cookie), so revoking either ends
 * the URL at once; both are lookups by id.
 */
function requireMakerStillAble(access: Access, maker: PortUrlMaker, sandboxId: string): void {
  const what = 'this port URL';
  if (maker.tokenId) access.tokens.requireLive(maker.tokenId, sandboxId, what);
  const key = access.keys.principalOf(maker.keyId, what);
  if (key.admin) return;
  if (!key.scopes.has('sandboxes:exec'))
    throw new WarrenError('unauthenticated', `${what} was made by API key ${key.keyId}, which no longer has the scope sandboxes:exec`);
  // An unknown sandbox passes here and is a 404 when the call reaches it, as with a key.
  const owner = access.owners.sandbox(sandboxId);
  if (owner !== undefined && owner !== key.keyId)
    throw new WarrenError('unauthenticated', `${what} was made by API key ${key.keyId}, which no longer reaches sandbox ${sandboxId}`);
}

/** Serves requests whose Host is `<port>-<sandbox>.localhost`; everything else goes on. */
export function portForwarding(deps: PortDeps): MiddlewareHandler<AuthVars> {
  return async (c, next) => {
    const target = deps.hosts.parse(c.req.header('host'));
    if (!target) return next();
    const url = new URL(c.req.url);
    const token = authorize(
      deps,
      {
        authorization: c.req.header(CREDENTIAL_HEADER.authorization),
        cookie: c.req.header('cookie'),
        traffic: c.req.header(CREDENTIAL_HEADER.trafficAccessToken),
      },
      requestAddress(c),
      url,
      target.sandboxId,
      target.port,
    );
    // A call like any other: it resumes a hibernated sandbox and counts as activity.
    const client = await deps.sandboxes.guest(target.sandboxId, 'ports');
    const conn = await client.connectPort(target.port);
    const res = await forwardHttp(conn, c.req.raw, pathWithoutToken(url));
    if (token) res.headers.append('set-cookie', `${PORT_TOKEN_COOKIE}=${token}; Path=/; HttpOnly; SameSite=Lax`);
    return res;
  };
}

/** The node server's 'upgrade' event (WebSockets) for port URLs; other upgrades are refused. */
export function portUpgrade(deps: PortDeps, log: { warn(o: object, msg: string): void }) {
  return (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    const refuse = (status: string): void => {
      socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    };
    const target = deps.hosts.parse(req.headers.host);
    if (!target) {
      refuse('404 Not Found');
      return;
    }
    const url = new URL(req.url ?? '/', `http://${req.headers.host}`);
    void (async () => {
      try {
        authorize(
          deps,
          { authorization: req.headers.authorization, cookie: req.headers.cookie, traffic: headerText(req.headers[CREDENTIAL_HEADER.trafficAccessToken]) },
          sourceAddress(req.socket),
          url,
          target.sandboxId,
          target.port,
        );
        const client = await deps.sandboxes.guest(target.sandboxId, 'ports');
        forwardUpgrade(await client.connectPort(target.port), req, socket, head, pathWithoutToken(url));
      } catch (err) {
        const e = err as WarrenError;
        log.warn({ sandbox: target.sandboxId, port: target.port, err: e.message }, 'port upgrade refused');
        refuse(e.code === 'unauthenticated' ? '401 Unauthorized' : e.code === 'not_found' ? '404 Not Found' : '502 Bad Gateway');
      }
    })();
  };
}

function portParam(text: string): number {
  const port = Number(text);
  if (!/^\d+$/.test(text) || port < 1 || port > 65535) throw new WarrenError('invalid_argument', `port must be an integer from 1 to 65535 (got ${text})`);
  return port;
}

export function portRoutes(deps: PortDeps): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.post('/:id/ports/:port/url', async (c) => {
    const id = c.req.param('id');
    const port = portParam(c.req.param('port'));
    const { expiresInSeconds } = parse(PortUrlRequest, await jsonBody(c));
    deps.sandboxes.get(id); // 404 for unknown sandboxes
    const p = c.get('principal');
    // Never past the credential that makes it: a token's expiry, and its key's.
    const key = p.tokenId ? deps.access.keys.principalOf(p.keyId, `token ${p.tokenId}`) : p;
    const expiresAt = Math.min(Date.now() + expiresInSeconds * 1000, p.expiresAt ?? Infinity, key.expiresAt ?? Infinity);
    const maker: PortUrlMaker = { keyId: p.keyId, ...(p.tokenId ? { tokenId: p.tokenId } : {}) };
    const result: PortUrl = {
      url: deps.hosts.url(id, port, deps.daemonPort(), deps.tokens.sign(id, port, expiresAt, maker)),
      expiresAt: new Date(expiresAt).toISOString(),
    };
    return c.json(result, 201);
  });
  app.post('/:id/ports/:port/forward', async (c) => {
    const id = c.req.param('id');
    const port = portParam(c.req.param('port'));
    const { hostPort } = parse(PortForwardRequest, await jsonBody(c));
    deps.sandboxes.get(id); // 404 for unknown sandboxes
    return c.json(await deps.forwards.add(id, port, hostPort), 201);
  });
  app.get('/:id/forwards', (c) => {
    const id = c.req.param('id');
    deps.sandboxes.get(id);
    return c.json({ forwards: deps.forwards.list(id) } satisfies PortForwardList);
  });
  app.delete('/:id/ports/:port/forward', (c) => {
    const id = c.req.param('id');
    const port = portParam(c.req.param('port'));
    deps.sandboxes.get(id);
    if (!deps.forwards.remove(id, port)) throw new WarrenError('not_found', `port ${port} of sandbox ${id} is not forwarded`);
    return c.body(null, 204);
  });
  return app;
}
