/**
 * Egress policy: the per-sandbox allowlist the daemon's proxy enforces. Pure functions, no
 * I/O: the proxy asks `allowsName` before it resolves anything (a name no rule allows is
 * never looked up, so DNS cannot carry data out) and `allowsAddress` for every address it is
 * about to connect to (after resolution, and for IP-literal hosts).
 *
 * Rule forms (what users write; `policyRules` gives back the normalised form):
 *   example.com[:PORT]         exactly that name
 *   *.example.com[:PORT]       any name below example.com, NOT example.com itself
 *   203.0.113.7[:PORT]         one IPv4 address (stored as a /32)
 *   10.0.0.0/8[:PORT]          an IPv4 network; host bits must be zero
 *   [2001:db8::1][:PORT]       one IPv6 address, in brackets (stored as a /128)
 *   [2001:db8::/32][:PORT]     an IPv6 network, in brackets
 *   db:NAME                    the database NAME (database-rules.ts), as NAME.db.warren:5432
 *   ech:NAME[:PORT]            a name rule (example.com or *.example.com) that also lets a TLS
 *                              client use Encrypted Client Hello to it (the proxy refuses ECH
 *                              otherwise: it hides the name a front end routes to; proxy.ts)
 * No port means any port. Names are lower-cased, a trailing dot is dropped, non-ASCII names
 * are converted to punycode. An empty list denies everything.
 *
 * Local addresses. Loopback (127/8, ::1), unspecified (0/8, ::), link-local (169.254/16,
 * fe80::/10), multicast (224/4, ff00::/8), limited broadcast and the host's own interface
 * addresses reach the daemon's host rather than the internet, so resolving an allowed name to
 * one of them (DNS rebinding) must not open the host. They are refused unless an IP rule that
 * contains the address and is no wider than /8 allows it with a matching port: `0.0.0.0/0`
 * or `[::/0]` open the public internet but not the host; `127.0.0.1:8080` opens one local
 * service on purpose (tests use this to reach servers they start on loopback).
 *
 * IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are matched as the IPv4 address they carry, so
 * they cannot slip past an IPv4 rule or the loopback check; rules must write them as IPv4.
 *
 * Name syntax is strict on purpose: the last label must start with a letter (no top-level
 * domain starts with a digit), which keeps forms that resolvers read as numeric addresses
 * ('127.1', '1.0x7f') out of both rules and matched host names.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { domainToASCII } from 'node:url';
import { WarrenError } from '@warren/protocol';
import { DATABASE_NAME_PATTERN, DATABASE_PORT, DATABASE_RULE_PREFIX } from './database-rules.js';

interface EgressRule {
  /** The rule in normalised form, as `policyRules` returns it. */
  raw: string;
  kind: 'domain' | 'suffix' | 'cidr' | 'database';
  /** Lower-cased domain ('domain'), the suffix without '*.' ('suffix'), or the database's name ('database'). */
  host?: string;
  /** Network address in canonical form ('cidr'); IPv6 if it contains ':'. */
  network?: string;
  /** Prefix length ('cidr'): 0-32 for IPv4, 0-128 for IPv6. */
  prefix?: number;
  /** Absent: any port. */
  port?: number;
  /** An `ech:` rule: TLS to what it allows may use Encrypted Client Hello. */
  ech?: true;
}

const ECH_RULE_PREFIX = 'ech:';

/** Headers the proxy adds for one host (network/credentials.ts parses and checks them). */
export interface Credential {
  /** Normalised host: lower case, IPv6 without brackets. */
  host: string;
  /** Absent: every port of the host. */
  port?: number;
  /** [name, value] pairs, names lower-cased, in the order given. */
  headers: [string, string][];
}

export interface EgressPolicy {
  rules: EgressRule[];
  /** Headers added to requests to these hosts (network/credentials.ts); absent: none. */
  credentials?: Credential[];
}

export const MAX_RULES = 256;
/** A rule must be at least this narrow to open a local address (see the module comment). */
const MIN_LOCAL_PREFIX = 8;

// ---------------------------------------------------------------------------------------
// Parsing rules

/** A rule that failed validation; parsePolicy turns it into the API error naming the rule. */
class RuleError extends Error {}

export function parsePolicy(rules: string[]): EgressPolicy {
  if (!Array.isArray(rules)) throw new WarrenError('invalid_argument', 'network.allow: must be a list of rules');
  if (rules.length > MAX_RULES) {
    throw new WarrenError('invalid_argument', `network.allow: at most ${MAX_RULES} rules (got ${rules.length})`);
  }
  const parsed: EgressRule[] = [];
  const seen = new Set<string>();
  for (const raw of rules) {
    let rule: EgressRule;
    try {
      rule = parseRule(raw);
    } catch (err) {
      if (!(err instanceof RuleError)) throw err;
      throw new WarrenError('invalid_argument', `network.allow: '${String(raw)}' is not a valid rule: ${err.message}`, { details: { rule: String(raw) } });
    }
    // Duplicates (after normalisation) add nothing; keep the first.
    if (seen.has(rule.raw)) continue;
    seen.add(rule.raw);
    parsed.push(rule);
  }
  return { rules: parsed };
}

export function policyRules(policy: EgressPolicy): string[] {
  return policy.rules.map((r) => r.raw);
}

function parseRule(input: unknown): EgressRule {
  if (typeof input !== 'string') throw new RuleError('a rule must be a string');
  const text = input.trim();
  if (text === '') throw new RuleError('it is empty');
  if (/\s/.test(text)) throw new RuleError('it contains whitespace');

  if (text.startsWith(ECH_RULE_PREFIX)) {
    const inner = parseRule(text.slice(ECH_RULE_PREFIX.length));
    if ((inner.kind !== 'domain' && inner.kind !== 'suffix') || inner.ech) {
      throw new RuleError('ech: goes before a host name, as in ech:example.com:443 (ECH hides a name; an IP rule has none to check)');
    }
    return { ...inner, ech: true, raw: `${ECH_RULE_PREFIX}${inner.raw}` };
  }
  if (text.startsWith(DATABASE_RULE_PREFIX)) {
    const name = text.slice(DATABASE_RULE_PREFIX.length);
    if (!DATABASE_NAME_PATTERN.test(name)) throw new RuleError(`a database rule is db:NAME, NAME matching ${DATABASE_NAME_PATTERN.source}`);
    return { kind: 'database', host: name, raw: `${DATABASE_RULE_PREFIX}${name}`, port: DATABASE_PORT };
  }
  const { hostPart, portPart, bracketed } = splitPort(text);
  const port = portPart === undefined ? undefined : parsePort(portPart);
  const withPort = (base: string) => (port === undefined ? base : `${base}:${port}`);

  if (bracketed) {
    const cidr = parseCidr(hostPart, 6);
    return { ...cidr, raw: withPort(`[${cidrText(cidr)}]`), ...(port === undefined ? {} : { port }) };
  }
  if (hostPart.includes('/') && !/^[0-9.]*\//.test(hostPart)) {
    throw new RuleError("'/' is only for IP/CIDR rules such as 10.0.0.0/8 (a rule names a host, not a path)");
  }
  if (hostPart.includes('/') || isIPv4(hostPart)) {
    const cidr = parseCidr(hostPart, 4);
    return { ...cidr, raw: withPort(cidrText(cidr)), ...(port === undefined ? {} : { port }) };
  }
  const name = parseNamePattern(hostPart);
  const base = name.kind === 'suffix' ? `*.${name.host}` : name.host;
  return { kind: name.kind, host: name.host, raw: withPort(base), ...(port === undefined ? {} : { port }) };
}

/** Splits 'HOST:PORT' / '[V6]:PORT'; a bare IPv6 address is refused because its colons are ambiguous. */
function splitPort(text: string): { hostPart: string; portPart?: string; bracketed: boolean } {
  if (text.startsWith('[')) {
    const close = text.indexOf(']');
    if (close < 0) throw new RuleError("'[' without a matching ']'");
    const rest = text.slice(close + 1);
    if (rest !== '' && !rest.startsWith(':')) throw new RuleError(`unexpected '${rest}' after ']'`);
    return { hostPart: text.slice(1, close), portPart: rest === '' ? undefined : rest.slice(1), bracketed: true };
  }
  if (text.includes('://')) throw new RuleError('write the host name, not a URL');
  const colons = text.split(':').length - 1;
  if (colons > 1) throw new RuleError("more than one ':' (IPv6 addresses go in brackets, as in [2001:db8::1]:443 or [2001:db8::/32])");
  if (colons === 1) {
    const at = text.indexOf(':');
    return { hostPart: text.slice(0, at), portPart: text.slice(at + 1), bracketed: false };
  }
  return { hostPart: text, bracketed: false };
}

function parsePort(text: string): number {
  if (text === '') throw new RuleError("missing port after ':'");
  const port = /^[0-9]{1,5}$/.test(text) ? Number(text) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new RuleError(`port '${text}' is not an integer from 1 to 65535`);
  return port;
}

interface CidrParts {
  kind: 'cidr';
  network: string;
  prefix: number;
}

function parseCidr(text: string, family: 4 | 6): CidrParts {
  const slash = text.indexOf('/');
  const addressText = slash < 0 ? text : text.slice(0, slash);
  const bits = family === 4 ? 32 : 128;
  const prefixText = slash < 0 ? String(bits) : text.slice(slash + 1);
  const address = parseIp(addressText);
  if (!address) {
    throw new RuleError(
      family === 4 ? `'${addressText}' is not an IPv4 address (four decimal numbers 0-255 without leading zeros)` : `'${addressText}' is not an IPv6 address`,
    );
  }
  if (address.family !== family) {
    throw new RuleError(family === 6 ? 'brackets are only for IPv6 addresses' : 'IPv6 addresses go in brackets');
  }
  if (family === 6 && isMappedV4(address.bytes)) {
    throw new RuleError('IPv4-mapped IPv6 addresses are matched as IPv4: write the rule with the IPv4 address');
  }
  const prefix = /^[0-9]{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
  if (!(prefix >= 0 && prefix <= bits)) throw new RuleError(`prefix '/${prefixText}' is not an integer from 0 to ${bits}`);
  const network = maskTo(address, prefix);
  if (!sameBytes(network.bytes, address.bytes)) {
    const suggestion = `${formatIp(network)}/${prefix}`;
    throw new RuleError(`'${addressText}' has bits set beyond /${prefix}; did you mean ${family === 6 ? `[${suggestion}]` : suggestion}?`);
  }
  return { kind: 'cidr', network: formatIp(network), prefix };
}

function cidrText(cidr: CidrParts): string {
  const full = cidr.network.includes(':') ? 128 : 32;
  return cidr.prefix === full ? cidr.network : `${cidr.network}/${cidr.prefix}`;
}

function parseNamePattern(text: string): { kind: 'domain' | 'suffix'; host: string } {
  let name = text.toLowerCase();
  let kind: 'domain' | 'suffix' = 'domain';
  if (name.startsWith('*.')) {
    kind = 'suffix';
    name = name.slice(2);
  }
  if (name === '*') throw new RuleError("'*' alone would allow every name; list the domains the sandbox needs");
  if (name.includes('*')) throw new RuleError("'*' is only allowed as a whole leading label, as in '*.example.com'");
  const problem = nameProblem(name, false);
  if (problem) throw new RuleError(problem);
  const host = normaliseName(name);
  if (host === 'localhost' || host.endsWith('.localhost')) {
    throw new RuleError("'localhost' names resolve to the loopback address: use an IP rule such as 127.0.0.1:PORT");
  }
  if (kind === 'domain' && !host.includes('.')) {
    throw new RuleError('a name without a dot is not a public domain (write *.NAME for every name below it)');
  }
  return { kind, host };
}

// ---------------------------------------------------------------------------------------
// Names

/** Lower case, no trailing dot, punycode for non-ASCII. Call only on names nameProblem accepts. */
function normaliseName(name: string): string {
  const lower = name.toLowerCase().replace(/\.$/, '');
  return isAscii(lower) ? lower : domainToASCII(lower);
}

/** Why `name` is not an acceptable DNS name, or undefined. Hosts may use '_', rules may not. */
function nameProblem(name: string, allowUnderscore: boolean): string | undefined {
  let ascii = name.toLowerCase().replace(/\.$/, '');
  if (!isAscii(ascii)) {
    ascii = domainToASCII(ascii);
    if (ascii === '') return 'it is not a valid internationalised domain name';
  }
  if (ascii === '') return 'the name is empty';
  if (ascii.length > 253) return 'the name is longer than 253 characters';
  const label = allowUnderscore ? /^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?$/ : /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;
  const labels = ascii.split('.');
  for (const l of labels) {
    if (l === '') return 'it has an empty label (two dots in a row, or a leading dot)';
    if (l.length > 63) return `label '${l.slice(0, 20)}...' is longer than 63 characters`;
    if (!label.test(l)) {
      return `label '${l}' must be letters, digits and '-'${allowUnderscore ? " or '_'" : ''}, not starting or ending with '-'`;
    }
  }
  if (!/^[a-z]/.test(labels.at(-1) ?? '')) {
    return 'the last label must start with a letter (a numeric form is read as an IP address; write IP addresses as a.b.c.d)';
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------
// Decisions

export function allowsName(policy: EgressPolicy, host: string, port: number): { allowed: boolean; rule?: string; reason: string } {
  if (!validPort(port)) return { allowed: false, reason: `port ${port} is not a valid port` };
  const literal = hostAsIp(host);
  if (literal) {
    const shown = formatIp(literal);
    const rule = policy.rules.find((r) => r.kind === 'cidr' && cidrContains(r, literal) && portMatches(r, port));
    if (rule) return { allowed: true, rule: rule.raw, reason: `rule '${rule.raw}' allows ${shown} port ${port}` };
    return {
      allowed: false,
      reason: denial(
        policy,
        `${shown} port ${port}`,
        policy.rules.some((r) => r.kind === 'cidr' && cidrContains(r, literal)),
      ),
    };
  }
  const problem = nameProblem(host, true);
  if (problem) return { allowed: false, reason: `'${truncate(host, 256)}' is not a valid host name: ${problem}` };
  const name = normaliseName(host);
  const rule = policy.rules.find((r) => nameMatches(r, name) && portMatches(r, port));
  if (rule) return { allowed: true, rule: rule.raw, reason: `rule '${rule.raw}' allows ${name}:${port}` };
  return {
    allowed: false,
    reason: denial(
      policy,
      `${name}:${port}`,
      policy.rules.some((r) => nameMatches(r, name)),
    ),
  };
}

/**
 * Whether TLS to host:port may carry Encrypted Client Hello: an `ech:` rule allows that name
 * and port. Call only for a name allowsName allowed.
 */
export function allowsEch(policy: EgressPolicy, host: string, port: number): boolean {
  const name = normaliseName(host);
  return policy.rules.some((r) => r.ech === true && nameMatches(r, name) && portMatches(r, port));
}

/** Whether a name rule covers `name` (normalised). */
function nameMatches(rule: EgressRule, name: string): boolean {
  return (rule.kind === 'domain' && rule.host === name) || (rule.kind === 'suffix' && name.endsWith(`.${rule.host}`));
}

export function allowsAddress(policy: EgressPolicy, address: string, port: number, localAddresses: string[]): { allowed: boolean; reason: string } {
  if (!validPort(port)) return { allowed: false, reason: `port ${port} is not a valid port` };
  const parsed = parseIp(stripZone(address));
  if (!parsed) return { allowed: false, reason: `'${truncate(address, 256)}' is not an IP address` };
  const ip = unmapped(parsed);
  const shown = formatIp(ip);
  const kind = localKind(ip, localAddresses);
  if (!kind) return { allowed: true, reason: `${shown} is not a local address` };
  const rule = policy.rules.find((r) => r.kind === 'cidr' && (r.prefix ?? 0) >= MIN_LOCAL_PREFIX && cidrContains(r, ip) && portMatches(r, port));
  if (rule) return { allowed: true, reason: `rule '${rule.raw}' explicitly allows ${kind} address ${shown} port ${port}` };
  return {
    allowed: false,
    reason: `${shown} is a ${kind} address: only an IP rule no wider than /${MIN_LOCAL_PREFIX} that contains it can allow it (for port ${port})`,
  };
}

function denial(policy: EgressPolicy, target: string, otherPortsAllowed: boolean): string {
  if (policy.rules.length === 0) return `the policy allows no egress (${target})`;
  if (otherPortsAllowed) return `no rule allows ${target} (rules for this host allow other ports)`;
  return `no rule allows ${target}`;
}

function validPort(port: number): boolean {
  return Number.isInteger(port) && port >= 1 && port <= 65535;
}

function portMatches(rule: EgressRule, port: number): boolean {
  return rule.port === undefined || rule.port === port;
}

/** An IP literal as a client may write it in a URL or CONNECT line ('[::1]' or '::1'), unmapped. */
function hostAsIp(host: string): IpAddress | undefined {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  const parsed = parseIp(stripZone(bare));
  return parsed && unmapped(parsed);
}

type LocalKind = 'loopback' | 'unspecified' | 'link-local' | 'multicast' | 'broadcast' | 'host-local';

const range = (kind: LocalKind, network: string, prefix: number) => ({ kind, network: parseIp(network)!, prefix });
const SPECIAL_RANGES = [
  range('loopback', '127.0.0.0', 8),
  range('unspecified', '0.0.0.0', 8), // Linux connects 0.0.0.0 to the host itself
  range('link-local', '169.254.0.0', 16), // includes cloud metadata endpoints (169.254.169.254)
  range('multicast', '224.0.0.0', 4),
  range('broadcast', '255.255.255.255', 32),
  range('loopback', '::1', 128),
  range('unspecified', '::', 128),
  range('link-local', 'fe80::', 10),
  range('multicast', 'ff00::', 8),
];

function localKind(ip: IpAddress, localAddresses: string[]): LocalKind | undefined {
  const special = SPECIAL_RANGES.find((r) => prefixMatches(r.network, r.prefix, ip));
  if (special) return special.kind;
  const isHostAddress = localAddresses.some((text) => {
    const local = parseIp(stripZone(text));
    if (!local) throw new TypeError(`allowsAddress: local address '${text}' is not an IP address`);
    const u = unmapped(local);
    return u.family === ip.family && sameBytes(u.bytes, ip.bytes);
  });
  return isHostAddress ? 'host-local' : undefined;
}

// Parsed rule networks, so a decision does not re-parse every rule.
const ruleNetworks = new WeakMap<EgressRule, IpAddress>();

function cidrContains(rule: EgressRule, ip: IpAddress): boolean {
  if (rule.network === undefined || rule.prefix === undefined) return false;
  let network = ruleNetworks.get(rule);
  if (!network) {
    network = parseIp(rule.network);
    if (!network) throw new TypeError(`egress rule '${rule.raw}' has an invalid network '${rule.network}'`);
    ruleNetworks.set(rule, network);
  }
  return prefixMatches(network, rule.prefix, ip);
}

// ---------------------------------------------------------------------------------------
// IP addresses as bytes (4 or 16), so IPv4 and IPv6 share one prefix comparison.

interface IpAddress {
  family: 4 | 6;
  bytes: Uint8Array;
}

function parseIp(text: string): IpAddress | undefined {
  if (isIPv4(text)) return { family: 4, bytes: Uint8Array.from(text.split('.').map(Number)) };
  if (!isIPv6(text) || text.includes('%')) return undefined;
  // Expand '::' and an embedded IPv4 tail into eight 16-bit groups.
  const [headText, tailText] = text.includes('::') ? text.split('::') : [text, undefined];
  const groups = (part: string | undefined): number[] => {
    if (!part) return [];
    return part.split(':').flatMap((g) => {
      if (!g.includes('.')) return [parseInt(g, 16)];
      const [a = 0, b = 0, c = 0, d = 0] = g.split('.').map(Number); // isIPv6 passed: all four are there
      return [(a << 8) | b, (c << 8) | d];
    });
  };
  const head = groups(headText);
  const tail = groups(tailText);
  const all = tailText === undefined ? head : [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  const bytes = new Uint8Array(16);
  all.forEach((g, i) => {
    bytes[2 * i] = g >> 8;
    bytes[2 * i + 1] = g & 0xff;
  });
  return { family: 6, bytes };
}

/** RFC 5952 text for IPv6 (lower case, longest zero run as '::'), dotted quad for IPv4. */
function formatIp(ip: IpAddress): string {
  if (ip.family === 4) return Array.from(ip.bytes).join('.');
  const view = new DataView(ip.bytes.buffer, ip.bytes.byteOffset, ip.bytes.byteLength);
  const groups = Array.from({ length: 8 }, (_, i) => view.getUint16(2 * i));
  let bestStart = -1;
  let bestLength = 1; // a single zero group is not shortened
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}

function stripZone(text: string): string {
  const at = text.indexOf('%');
  return at < 0 ? text : text.slice(0, at);
}

function isMappedV4(bytes: Uint8Array): boolean {
  return bytes.length === 16 && bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff;
}

/** ::ffff:a.b.c.d is a.b.c.d on the wire; match it as such. */
function unmapped(ip: IpAddress): IpAddress {
  return ip.family === 6 && isMappedV4(ip.bytes) ? { family: 4, bytes: ip.bytes.slice(12) } : ip;
}

function maskTo(ip: IpAddress, prefix: number): IpAddress {
  const bytes = ip.bytes.map((b, i) => {
    const keep = Math.max(0, Math.min(8, prefix - 8 * i));
    return b & ((0xff << (8 - keep)) & 0xff);
  });
  return { family: ip.family, bytes };
}

function prefixMatches(network: IpAddress, prefix: number, ip: IpAddress): boolean {
  return network.family === ip.family && sameBytes(maskTo(ip, prefix).bytes, network.bytes);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

function isAscii(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) > 0x7f) return false;
  return true;
}

/** Whether the policy has the rule `db:NAME`. */
export function allowsDatabase(policy: EgressPolicy, name: string): boolean {
  return policy.rules.some((r) => r.kind === 'database' && r.host === name);
}
