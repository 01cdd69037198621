/**
 * URLs for ports inside sandboxes: `http://<port>-<sandbox id>.localhost:<daemon port>/`
 * reaches 127.0.0.1:<port> inside the sandbox, for HTTP and WebSocket traffic (a dev server,
 * a notebook). Browsers resolve every `*.localhost` name to the loopback address, so the URL
 * works from a browser on this machine with no DNS set-up, and each port and sandbox gets
 * its own origin (cookies and storage do not mix between them). For a daemon reached from
 * other machines, WARREN_PORT_DOMAIN names a domain whose every name leads to the daemon
 * (a wildcard DNS record): URLs are then `https://<port>-<sandbox id>.<domain>:<port>/`.
 *
 * Access needs the API key (`Authorization: Bearer`) or a signed token for that sandbox and
 * port, made by POST /v1/sandboxes/:id/ports/:port/url and carried in the URL
 * (`?warren_token=`); a browser that opened such a URL keeps the token in a cookie for that
 * origin. Tokens are HMACs under a secret kept in the daemon's home: they expire, they name
 * the key (and sandbox token) that made them, and they stay valid across daemon restarts.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { Readable, type Duplex } from 'node:stream';
import { CREDENTIAL_COOKIES, CREDENTIAL_HEADERS, PORT_TOKEN_PARAM, TERMINAL_BEARER_SUBPROTOCOL_PREFIX, WarrenError } from '@warren/protocol';
import { HOP_BY_HOP_HEADERS, rawHeaderPairs } from './headers.js';

/** The default port domain: browsers resolve every name under it to loopback. */
export const LOCAL_PORT_DOMAIN = 'localhost';

/** Port URLs under one domain, with the daemon's scheme. */
export class PortHosts {
  private readonly pattern: RegExp;

  constructor(
    readonly domain: string = LOCAL_PORT_DOMAIN,
    private readonly scheme: 'http' | 'https' = 'http',
  ) {
    const escaped = domain.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    this.pattern = new RegExp(`^(\\d{1,5})-(sb-[a-z0-9]+)\\.${escaped}(?::\\d+)?$`, 'i');
  }

  /** The sandbox and port a request's Host header names, if it is a port URL. */
  parse(host: string | undefined): { sandboxId: string; port: number } | undefined {
    const [, portText, sandboxId] = (host ? this.pattern.exec(host) : null) ?? [];
    if (!portText || !sandboxId) return undefined;
    const port = Number(portText);
    if (port < 1 || port > 65535) return undefined;
    return { sandboxId: sandboxId.toLowerCase(), port };
  }

  url(sandboxId: string, port: number, daemonPort: number, token?: string): string {
    return `${this.scheme}://${port}-${sandboxId}.${this.domain}:${daemonPort}/${token ? `?${PORT_TOKEN_PARAM}=${token}` : ''}`;
  }
}

/** Who made a port URL: the key, and the sandbox token when a token made it. */
export interface PortUrlMaker {
  keyId: string;
  tokenId?: string;
}

/**
 * Signed, expiring tokens for one sandbox and port, naming who made them: a URL is worth no
 * more than the credential that made it, so the caller checks that one on every use.
 */
export class PortTokens {
  private secret: Buffer;

  /** The secret is made on first use and kept in `secretFile` (mode 0600). */
  constructor(secretFile: string) {
    if (existsSync(secretFile)) this.secret = Buffer.from(readFileSync(secretFile, 'utf8').trim(), 'base64url');
    else {
      this.secret = randomBytes(32);
      writeFileSync(secretFile, `${this.secret.toString('base64url')}\n`, { mode: 0o600 });
    }
  }

  sign(sandboxId: string, port: number, expiresAt: number, maker: PortUrlMaker): string {
    const claims = { s: sandboxId, p: port, e: Math.floor(expiresAt / 1000), k: maker.keyId, ...(maker.tokenId ? { t: maker.tokenId } : {}) };
    const payload = Buffer.from(JSON.stringify(claims)).toString('base64url');
    return `${payload}.${this.mac(payload)}`;
  }

  /** Who made the token, if it opens this sandbox's port; else 401 saying why not. */
  check(token: string, sandboxId: string, port: number): PortUrlMaker {
    const refuse = (why: string) => new WarrenError('unauthenticated', `port URL refused: ${why}`);
    const [payload, mac] = token.split('.');
    if (!payload || !mac) throw refuse('malformed token');
    const expected = Buffer.from(this.mac(payload));
    const given = Buffer.from(mac);
    if (expected.length !== given.length || !timingSafeEqual(expected, given)) throw refuse('invalid token');
    let claims: { s?: string; p?: number; e?: number; k?: unknown; t?: unknown };
    try {
      claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as typeof claims;
    } catch {
      throw refuse('malformed token'); // the signature matched, so this cannot happen unless the secret leaked
    }
    if (claims.s !== sandboxId || claims.p !== port) throw refuse('the token is for another sandbox or port');
    if (!claims.e || claims.e * 1000 < Date.now()) throw refuse('the token has expired');
    // Made before URLs named their maker: nothing ties it to a key that can still be checked
    // (it may have been a token since revoked), so it is refused, never guessed.
    if (typeof claims.k !== 'string')
      throw refuse(`it was made by an older warren and names no credential that made it; make a new one (warren url ${sandboxId} ${port})`);
    return { keyId: claims.k, ...(typeof claims.t === 'string' ? { tokenId: claims.t } : {}) };
  }

  private mac(payload: string): string {
    return createHmac('sha256', this.secret).update(payload).digest('base64url');
  }
}

/**
 * Headers the app never gets: warren's credentials (protocol/credentials.ts), every one it
 * reads, whichever the request was authorized with, and the proxy's. The app is code the
 * sandbox runs: a key a client sent to warren must not reach it.
 */
const CREDENTIALS = new Set([...CREDENTIAL_HEADERS, 'proxy-authorization']);
/** Headers that describe one hop, not the request (RFC 9110 7.6.1). */
const HOP_BY_HOP = new Set(HOP_BY_HOP_HEADERS);
const CREDENTIAL_COOKIE_NAMES = new Set(CREDENTIAL_COOKIES);

/**
 * Sends one HTTP request over `conn` (a connection to the port inside the sandbox) and
 * returns its response, streamed. Warren's credentials stay out (see CREDENTIALS).
 */
export function forwardHttp(conn: Duplex, request: Request, path: string): Promise<Response> {
  const headers: Record<string, string> = {};
  request.headers.forEach((value, name) => {
    if (HOP_BY_HOP.has(name)) return;
    const kept = forAppOnly(name, value);
    if (kept !== undefined) headers[name] = kept;
  });
  return new Promise((resolve, reject) => {
    const upstream = http.request({ method: request.method, path, headers, createConnection: () => conn as never });
    upstream.on('error', (err) => reject(new WarrenError('unavailable', `the server in the sandbox failed: ${err.message}`)));
    upstream.on('response', (res) => {
      const out = new Headers();
      for (const [name, value] of Object.entries(res.headers)) {
        if (value === undefined || HOP_BY_HOP.has(name)) continue;
        for (const v of Array.isArray(value) ? value : [value]) out.append(name, v);
      }
      const noBody = request.method === 'HEAD' || res.statusCode === 204 || res.statusCode === 304;
      resolve(new Response(noBody ? null : (Readable.toWeb(res) as ReadableStream), { status: res.statusCode ?? 502, headers: out }));
    });
    if (request.body && request.method !== 'GET' && request.method !== 'HEAD') {
      const body = Readable.fromWeb(request.body as import('node:stream/web').ReadableStream);
      // pipe() does not pass errors on: a client that goes away mid-upload ends the request.
      body.on('error', (err) => upstream.destroy(err));
      body.pipe(upstream);
    } else upstream.end();
  });
}

/**
 * A WebSocket (or any Upgrade) request: its head goes to the port inside as it came (minus
 * warren's credentials), then bytes flow both ways until either side closes.
 */
export function forwardUpgrade(conn: Duplex, req: http.IncomingMessage, client: Duplex, head: Buffer, path: string): void {
  const lines = [`${req.method} ${path} HTTP/1.1`];
  for (const [name, value] of rawHeaderPairs(req.rawHeaders)) {
    const kept = forAppOnly(name.toLowerCase(), value);
    if (kept !== undefined) lines.push(`${name}: ${kept}`);
  }
  conn.write(`${lines.join('\r\n')}\r\n\r\n`);
  if (head.length) conn.write(head);
  conn.on('error', () => client.destroy());
  client.on('error', () => conn.destroy());
  conn.pipe(client);
  client.pipe(conn);
}

/**
 * What of a request header (its name in lower case) the app may see: nothing of a credential
 * header, a Cookie or Sec-WebSocket-Protocol without warren's entries (undefined when none is
 * left), any other header as it came.
 */
function forAppOnly(name: string, value: string): string | undefined {
  if (CREDENTIALS.has(name)) return undefined;
  const rest = name === 'cookie' ? withoutCredentialCookies(value) : name === 'sec-websocket-protocol' ? withoutBearerProtocols(value) : value;
  return rest === '' && value !== '' ? undefined : rest;
}

/**
 * A Cookie header without warren's cookies ('' when nothing else is left). Names are read as
 * the daemon reads them (trimmed, up to the first '='), so no spelling slips one through.
 */
function withoutCredentialCookies(value: string): string {
  return value
    .split(';')
    .map((c) => c.trim())
    .filter((c) => c && !CREDENTIAL_COOKIE_NAMES.has(c.split('=', 1)[0]!.trim()))
    .join('; ');
}

/** The offered subprotocols without a terminal's bearer token (a browser's way to send one). */
function withoutBearerProtocols(value: string): string {
  return value
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p && !p.startsWith(TERMINAL_BEARER_SUBPROTOCOL_PREFIX))
    .join(', ');
}

/** The request path with the token parameter taken out. */
export function pathWithoutToken(url: URL): string {
  url.searchParams.delete(PORT_TOKEN_PARAM);
  const query = url.searchParams.toString();
  return `${url.pathname}${query ? `?${query}` : ''}`;
}
