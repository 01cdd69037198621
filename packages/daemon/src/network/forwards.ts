/**
 * TCP forwarders, the daemon's half (the agent's is packages/guest/src/forwards.ts): which
 * rules get one, and how a forwarded connection enters the egress proxy.
 *
 * A rule that names one host and one port (`db.example.com:5432`) gets a forwarder inside
 * the sandbox, so a client that knows nothing of proxies can connect to that name and port.
 * Wildcards get none (there is no name to map), nor do IP rules (a client connecting to an
 * outside address has no route, and loopback addresses inside are the sandbox's own).
 *
 * A forwarded connection reaches the proxy as a CONNECT to the forward's host:port, written
 * here in front of the client's bytes, with the proxy's answer taken off before the client
 * sees anything. So the proxy's checks (the name before any lookup, every resolved address,
 * the SNI of a TLS client) and its audit record are the same as for any CONNECT, and the
 * agent, which only says which forwarder a connection came to, decides nothing.
 */
import { Duplex } from 'node:stream';
import { WarrenError, type ConnectHint, type TcpForward } from '@warren/protocol';
import type { EgressPolicy } from './policy.js';
import { DATABASE_PORT, databaseHost } from './database-rules.js';

/** The forwards a policy gives, in rule order, one per host:port. */
export function tcpForwards(policy: EgressPolicy): TcpForward[] {
  const seen = new Set<string>();
  const out: TcpForward[] = [];
  for (const r of policy.rules) {
    if (r.kind === 'database' && r.host !== undefined) {
      out.push({ host: databaseHost(r.host), port: DATABASE_PORT });
      continue;
    }
    if (r.kind !== 'domain' || r.host === undefined || r.port === undefined) continue;
    const key = `${r.host}:${r.port}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ host: r.host, port: r.port });
  }
  return out;
}

/**
 * The CONNECT targets the agent may answer itself (ConnectHint): every name rule, and IPv4
 * rules of a single address (a wider range or IPv6 is left to the proxy's own answer).
 */
export function connectHints(policy: EgressPolicy): ConnectHint[] {
  const out: ConnectHint[] = [];
  for (const r of policy.rules) {
    const port = r.port === undefined ? {} : { port: r.port };
    if (r.kind === 'domain' && r.host) out.push({ host: r.host, ...port });
    else if (r.kind === 'suffix' && r.host) out.push({ host: r.host, suffix: true, ...port });
    else if (r.kind === 'cidr' && r.prefix === 32 && r.network && !r.network.includes(':')) out.push({ host: r.network, ...port });
  }
  return out;
}

/** What an agent may name as a forward's target: a DNS name and a port, nothing to inject. */
function validForward(f: unknown): f is TcpForward {
  const t = f as TcpForward | undefined;
  return (
    typeof t?.host === 'string' &&
    /^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9])?$/.test(t.host) &&
    Number.isInteger(t.port) &&
    t.port >= 1 &&
    t.port <= 65535
  );
}

/** Longest proxy answer head we wait for before giving up on the connection. */
const MAX_ANSWER_HEAD = 16 * 1024;

/**
 * `client` (a forwarded connection's bytes) as a connection that opened with `CONNECT
 * host:port`: what the proxy is handed instead of the client itself. A 200 answer is taken
 * off and everything after it passes through both ways; a refusal ends the client's
 * connection (a client without proxy support could not read it; the audit log has it).
 */
export function asConnect(client: Duplex, target: TcpForward): Duplex {
  if (!validForward(target)) {
    client.destroy();
    throw new WarrenError('invalid_argument', `the sandbox agent named an invalid forward target: ${JSON.stringify(target).slice(0, 300)}`);
  }
  const authority = `${target.host}:${target.port}`;
  let head: Buffer | undefined = Buffer.alloc(0); // undefined once the answer was a 200
  const proxySide = new Duplex({
    allowHalfOpen: true,
    read: () => {
      client.resume();
    },
    write: (chunk: Buffer, _encoding, done) => {
      if (!head) {
        client.write(chunk, (err) => done(err ?? undefined));
        return;
      }
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head.length > MAX_ANSWER_HEAD) return done(new Error('the egress proxy answer is too long'));
        return done();
      }
      const status = head.subarray(0, head.indexOf('\r\n')).toString('latin1');
      const rest = head.subarray(end + 4);
      head = undefined;
      // The refusal's body is for the audit log's reader, not for this client.
      if (!/^HTTP\/1\.[01] 200 /.test(status)) return done(new Error(`the egress proxy refused ${authority}: ${status}`));
      if (rest.length) client.write(rest, (err) => done(err ?? undefined));
      else done();
    },
    // Finished only once the client's side has sent everything: the proxy destroys this
    // side after it finishes, which must not cut bytes still on their way into the sandbox.
    final: (done) => {
      client.end(() => done());
    },
    destroy: (err, done) => {
      client.destroy();
      done(err);
    },
  });
  proxySide.push(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
  client.on('data', (chunk: Buffer) => {
    if (!proxySide.push(chunk)) client.pause();
  });
  client.on('end', () => proxySide.push(null));
  client.on('close', () => proxySide.destroy());
  // The client's errors end it, and with it (close, above) the proxy's side; they are the
  // client's own, as on any tunnel.
  client.on('error', () => client.destroy());
  return proxySide;
}
