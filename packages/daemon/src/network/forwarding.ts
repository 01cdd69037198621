/**
 * What the egress proxy (proxy.ts) and the TLS terminator of credential hosts (terminate.ts)
 * both do to a sandbox's HTTP requests: parse and normalise targets, refuse with a status,
 * check that the Host header names the target, and drop hop-by-hop headers both ways.
 */
import type http from 'node:http';
import type { EgressRecord } from './audit.js';
import { HOP_BY_HOP_HEADERS, rawHeaderPairs } from './headers.js';

export const MAX_AUDITED_PATH = 2048;
export const MAX_AUDITED_HOST = 256;

export interface EgressAudit {
  start(r: EgressRecord): number;
  finish(id: number, bytesUp: number, bytesDown: number): void;
}

export interface Target {
  /** Normalised: lower case, punycode, IPv4 in dotted form, IPv6 without brackets. */
  host: string;
  port: number;
}

export class Refusal extends Error {
  constructor(
    readonly status: 400 | 403,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Hop-by-hop headers (RFC 9110 7.6.1) plus the proxy's own: never forwarded. Transfer-Encoding
 * is re-framed by node on each side; Expect was already answered by the proxy's server; Host
 * is set from the (checked) URL; Upgrade is dropped because the proxy does not relay
 * protocol upgrades on plain HTTP (websocket clients behind a proxy use CONNECT).
 */
const HOP_BY_HOP = new Set([...HOP_BY_HOP_HEADERS, 'expect', 'host']);

/**
 * 'host:port' or '[v6]:port' (port required unless defaultPort is given), normalised the way
 * a URL parser would (case, punycode, numeric IPv4 forms), so the policy sees one spelling.
 */
export function parseAuthority(text: string, defaultPort: number | undefined): Target {
  const [, name, portText] = /^(\[[0-9A-Fa-f:.]+\]|[^\s:/?#@[\]\\]+)(?::([0-9]{1,5}))?$/.exec(text) ?? [];
  if (name === undefined) throw new Refusal(400, `'${truncate(text, MAX_AUDITED_HOST)}' is not a valid host:port`);
  const port = portText === undefined ? defaultPort : Number(portText);
  if (port === undefined) throw new Refusal(400, `'${truncate(text, MAX_AUDITED_HOST)}' has no port`);
  if (!(port >= 1 && port <= 65535)) throw new Refusal(400, `port ${portText} is out of range`);
  let hostname: string;
  try {
    hostname = new URL(`http://${name}/`).hostname;
  } catch {
    // URL's own error message says nothing more useful than this one.
    throw new Refusal(400, `'${truncate(name, MAX_AUDITED_HOST)}' is not a valid host name`);
  }
  const host = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  return { host, port };
}

/** The Host header, if present, must name the URL's host and port: no forged virtual host. */
export function checkHostHeader(req: http.IncomingMessage, target: Target, defaultPort = 80): void {
  let count = 0;
  for (const [name] of rawHeaderPairs(req.rawHeaders)) if (name.toLowerCase() === 'host') count++;
  if (count > 1) throw new Refusal(400, 'more than one Host header');
  const header = req.headers.host;
  if (header === undefined) return; // HTTP/1.0: the URL decides, and the forwarded Host is set from it
  let named: Target;
  try {
    named = parseAuthority(header, defaultPort);
  } catch (err) {
    if (!(err instanceof Refusal)) throw err;
    throw new Refusal(400, `Host header: ${err.message}`);
  }
  if (comparableName(named.host) !== comparableName(target.host) || named.port !== target.port) {
    throw new Refusal(400, `Host header '${truncate(header, MAX_AUDITED_HOST)}' does not match the request URL (${hostPort(target)})`);
  }
}

export function forwardedRequestHeaders(req: http.IncomingMessage, target: Target, defaultPort = 80): http.OutgoingHttpHeaders {
  const drop = connectionTokens(req.headers.connection);
  const headers: Record<string, string | string[]> = {};
  for (const [rawName, value] of rawHeaderPairs(req.rawHeaders)) {
    const name = rawName.toLowerCase();
    if (HOP_BY_HOP.has(name) || drop.has(name)) continue;
    const previous = headers[name];
    headers[name] = previous === undefined ? value : Array.isArray(previous) ? [...previous, value] : [previous, value];
  }
  headers.host = hostPort(target, defaultPort);
  // A chunked request body must stay framed upstream: node only chunks some methods by default,
  // and unframed body bytes would be read upstream as a second request (with an unchecked Host).
  if (req.headers['transfer-encoding'] !== undefined) headers['transfer-encoding'] = 'chunked';
  return headers;
}

export function forwardedResponseHeaders(res: http.IncomingMessage): string[] {
  const drop = connectionTokens(res.headers.connection);
  const flat: string[] = [];
  for (const [name, value] of rawHeaderPairs(res.rawHeaders)) {
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || drop.has(lower)) continue;
    flat.push(name, value);
  }
  return flat;
}

/** Headers a Connection header names are hop-by-hop too. */
function connectionTokens(value: string | undefined): Set<string> {
  return new Set(
    (value ?? '')
      .split(',')
      .map((t) => t.trim().toLowerCase())
      .filter((t) => t !== ''),
  );
}

/** Names compare without case and without a trailing dot ('Example.com.' is 'example.com'). */
export function comparableName(name: string): string {
  return name.toLowerCase().replace(/\.$/, '');
}

export function hostPort(target: Target, defaultPort?: number): string {
  const host = target.host.includes(':') ? `[${target.host}]` : target.host;
  return target.port === defaultPort ? host : `${host}:${target.port}`;
}

export function truncate(text: string, max: number): string {
  return text.length > max ? text.slice(0, max) : text;
}

export function respondText(res: http.ServerResponse, status: number, message: string): void {
  const body = `warren egress proxy: ${message}\n`;
  res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}
