/**
 * Name resolution for the egress proxy when WARREN_EGRESS_DNS_SERVER is set: the proxy asks
 * those DNS servers directly (A and AAAA queries) instead of the host's resolver (dns.lookup,
 * which reads /etc/hosts and the host's resolv.conf).
 *
 * For an operator, this points sandbox egress at a resolver of their choice. For the tests,
 * it is how they see every name the daemon resolves on a sandbox's behalf: a recording DNS
 * server on 127.0.0.1 proves that a name the policy refuses is never looked up.
 */
import { promises as dnsPromises, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import { WarrenError } from '@warren/protocol';

/** The only way the proxy calls its lookup (proxy.ts): every address, in the resolver's order. */
type ProxyLookup = (host: string, options: { all: true; verbatim: boolean }) => Promise<LookupAddress[]>;

/** Answers that carry no address of one family: not an error while the other family has some. */
const NO_ADDRESSES = new Set(['ENODATA', 'ENOTFOUND']);

/** Parses the servers setting: comma-separated `IP` or `IP:PORT` (`[IPv6]:PORT`). */
export function parseDnsServers(text: string): string[] {
  const servers = text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (!servers.length) throw new WarrenError('invalid_argument', 'WARREN_EGRESS_DNS_SERVER names no server (expected IP[:PORT], comma-separated)');
  for (const s of servers) {
    const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+))(?::(\d{1,5}))?$/.exec(s);
    const ip = m?.[1] ?? m?.[2];
    if (!m || !ip || !isIP(ip) || (m[3] !== undefined && !(Number(m[3]) >= 1 && Number(m[3]) <= 65535))) {
      throw new WarrenError(
        'invalid_argument',
        `WARREN_EGRESS_DNS_SERVER: '${s}' is not IP[:PORT] (names are not accepted: they would need a resolver themselves)`,
      );
    }
  }
  return servers;
}

/** A lookup for the proxy that asks `servers` for A and AAAA records, IPv4 first. */
export function serverLookup(servers: string[], timeoutMs = 5000): typeof dnsPromises.lookup {
  const resolver = new dnsPromises.Resolver({ timeout: timeoutMs, tries: 2 });
  resolver.setServers(servers);
  const lookup: ProxyLookup = async (host) => {
    const [v4, v6] = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
    const addresses: LookupAddress[] = [];
    if (v4.status === 'fulfilled') addresses.push(...v4.value.map((address) => ({ address, family: 4 })));
    if (v6.status === 'fulfilled') addresses.push(...v6.value.map((address) => ({ address, family: 6 })));
    if (addresses.length) return addresses;
    // Neither family answered: the more telling failure (a timeout or refusal over "no data").
    const failures = [v4, v6].filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason as NodeJS.ErrnoException);
    throw failures.find((e) => !NO_ADDRESSES.has(e.code ?? '')) ?? failures[0] ?? Object.assign(new Error(`no addresses for ${host}`), { code: 'ENODATA' });
  };
  // The proxy's option type is dns.lookup's, overloads and all; it only ever makes the call above.
  return lookup as unknown as typeof dnsPromises.lookup;
}
