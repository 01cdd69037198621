/**
 * Credential rules: headers the daemon's egress proxy adds to requests a sandbox makes to one
 * host, so a secret (an API token, a git password) is used on the sandbox's behalf without
 * ever entering it. Pure functions, no I/O: validation (every error names the field and the
 * reason), lookup by host:port, and the redacted form the API returns.
 *
 * Decisions (docs/network.md explains them to users):
 * - A credential host is `NAME[:PORT]` or an IP literal with an optional port; wildcards are
 *   refused. A secret sent to every name under a suffix would also go to names nobody
 *   reviewed (a user-content subdomain, a forgotten CNAME); naming hosts one by one keeps
 *   the set of places a secret can go as small as the user wrote it.
 * - The host must also be allowed by an allow rule (checked with the credential's port, or
 *   443 when it names none). A credential does not widen what is reachable: the allow list
 *   stays the one statement of that.
 * - Header names are RFC 9110 tokens, and not ones that frame or route the message (Host,
 *   Content-Length, Transfer-Encoding, Connection and other hop-by-hop headers): a value
 *   there would change what the upstream reads as the request, not who makes it. Values are
 *   visible ASCII and spaces (no CR, LF or NUL: no header injection), at most 8 KiB.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { HOP_BY_HOP_HEADERS } from './headers.js';
import { REDACTED, WarrenError, type CredentialRule } from '@warren/protocol';
import { allowsName, type Credential, type EgressPolicy } from './policy.js';

export type { Credential } from './policy.js';

const MAX_CREDENTIALS = 64;
const MAX_HEADERS_PER_CREDENTIAL = 16;
const MAX_VALUE_BYTES = 8192;

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Headers that frame, route or manage the connection: never set by a credential. */
const FORBIDDEN = new Set([...HOP_BY_HOP_HEADERS, 'host', 'content-length', 'expect']);

/**
 * Validates the credential rules of a policy against its allow rules. Throws
 * invalid_argument naming `network.credentials[i]...` and the reason.
 */
export function parseCredentials(input: CredentialRule[] | undefined, policy: EgressPolicy): Credential[] {
  if (input === undefined) return [];
  if (!Array.isArray(input)) throw invalid('network.credentials', 'must be a list of {host, headers}');
  if (input.length > MAX_CREDENTIALS) throw invalid('network.credentials', `at most ${MAX_CREDENTIALS} credentials (got ${input.length})`);
  const out: Credential[] = [];
  const seen = new Set<string>();
  input.forEach((entry, i) => {
    const field = `network.credentials[${i}]`;
    if (typeof entry !== 'object' || entry === null) throw invalid(field, 'must be an object {host, headers}');
    const { host, port } = parseHost(entry.host, `${field}.host`);
    const key = port === undefined ? host : `${host}:${port}`;
    if (seen.has(key)) throw invalid(`${field}.host`, `'${entry.host}' has a credential already; put all its headers in one entry`);
    seen.add(key);
    const checkPort = port ?? 443;
    if (!allowsName(policy, host, checkPort).allowed) {
      throw invalid(`${field}.host`, `'${entry.host}' is not allowed by any allow rule (for port ${checkPort}); add an allow rule for it too`);
    }
    out.push({ host, ...(port === undefined ? {} : { port }), headers: parseHeaders(entry.headers, `${field}.headers`) });
  });
  return out;
}

/** The credential for host:port, if any: a rule with that port wins over one without a port. */
export function credentialFor(credentials: readonly Credential[] | undefined, host: string, port: number): Credential | undefined {
  if (!credentials?.length) return undefined;
  const name = host.toLowerCase().replace(/\.$/, '');
  return credentials.find((c) => c.host === name && c.port === port) ?? credentials.find((c) => c.host === name && c.port === undefined);
}

/** The API form of stored credentials, as given back by the daemon (no secret). */
export function redactedCredentials(credentials: readonly Credential[]): CredentialRule[] {
  return credentials.map((c) => ({
    host: hostText(c),
    headers: Object.fromEntries(c.headers.map(([name]) => [name, REDACTED])),
  }));
}

/** The API form with values, for storage in the daemon's registry only. */
export function credentialRules(credentials: readonly Credential[]): CredentialRule[] {
  return credentials.map((c) => ({ host: hostText(c), headers: Object.fromEntries(c.headers) }));
}

function hostText(c: Credential): string {
  const host = c.host.includes(':') ? `[${c.host}]` : c.host;
  return c.port === undefined ? host : `${host}:${c.port}`;
}

function parseHost(text: unknown, field: string): { host: string; port?: number } {
  if (typeof text !== 'string' || text.trim() === '') throw invalid(field, 'must be a host name or IP address, with an optional :PORT');
  const t = text.trim();
  if (t.includes('*')) throw invalid(field, `'${t}': wildcards are not allowed in credential hosts (name each host; see docs/network.md)`);
  if (t.includes('/')) throw invalid(field, `'${t}' must be a host, not a URL or a network`);
  let host: string;
  let portText: string | undefined;
  if (t.startsWith('[')) {
    const [, address, port] = /^\[([^\]]+)\](?::(.*))?$/.exec(t) ?? [];
    if (!address || !isIPv6(address)) throw invalid(field, `'${t}' is not a valid [IPv6]:PORT`);
    host = address.toLowerCase();
    portText = port;
  } else {
    const [name = '', port, ...more] = t.split(':'); // split always yields a first field
    if (more.length) throw invalid(field, `'${t}': IPv6 addresses go in brackets`);
    host = name.toLowerCase().replace(/\.$/, '');
    portText = port;
    if (!isIPv4(host) && !/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9_-]*[a-z0-9])?)+$/.test(host)) {
      throw invalid(field, `'${t}' is not a valid host name`);
    }
  }
  if (portText === undefined) return { host };
  const port = /^[0-9]{1,5}$/.test(portText) ? Number(portText) : NaN;
  if (!(port >= 1 && port <= 65535)) throw invalid(field, `port '${portText}' is not an integer from 1 to 65535`);
  return { host, port };
}

function parseHeaders(input: unknown, field: string): [string, string][] {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw invalid(field, 'must be an object of header names to values');
  const entries = Object.entries(input as Record<string, unknown>);
  if (entries.length === 0) throw invalid(field, 'give at least one header');
  if (entries.length > MAX_HEADERS_PER_CREDENTIAL) throw invalid(field, `at most ${MAX_HEADERS_PER_CREDENTIAL} headers`);
  const names = new Set<string>();
  return entries.map(([name, value]) => {
    if (!TOKEN.test(name)) throw invalid(`${field}`, `'${name.slice(0, 64)}' is not a valid header name (letters, digits and !#$%&'*+-.^_\`|~)`);
    const lower = name.toLowerCase();
    if (FORBIDDEN.has(lower)) throw invalid(`${field}.${name}`, 'this header frames or routes the request and cannot be set by a credential');
    if (names.has(lower)) throw invalid(`${field}.${name}`, 'given twice (header names are case-insensitive)');
    names.add(lower);
    if (typeof value !== 'string') throw invalid(`${field}.${name}`, 'the value must be a string');
    // Name only the position: the value is a secret and must not appear in an error or a log.
    const bad = /[^\t\x20-\x7e\x80-\xff]/.exec(value);
    if (bad) {
      const what = bad[0] === '\r' ? 'CR' : bad[0] === '\n' ? 'LF' : `character U+${bad[0].charCodeAt(0).toString(16).padStart(4, '0')}`;
      throw invalid(`${field}.${name}`, `the value contains ${what} at position ${bad.index} (header values are one line of text)`);
    }
    if (Buffer.byteLength(value, 'latin1') > MAX_VALUE_BYTES) throw invalid(`${field}.${name}`, `the value is longer than ${MAX_VALUE_BYTES} bytes`);
    if (value.trim() === '') throw invalid(`${field}.${name}`, 'the value is empty');
    return [lower, value];
  });
}

function invalid(field: string, reason: string): WarrenError {
  return new WarrenError('invalid_argument', `${field}: ${reason}`, { details: { field } });
}
