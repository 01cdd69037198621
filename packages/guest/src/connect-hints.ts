/**
 * CONNECT requests the agent answers itself. A client of the egress proxy sends `CONNECT
 * host:port`, waits for `200`, then starts TLS. Waiting for the daemon's answer costs a trip
 * through the channel (the agent, the Sentry's stdio, the daemon) on every new connection.
 * For a target an allow rule names (ConnectHint, sent by the daemon with the forwarders), the
 * agent answers at once and hands the connection to the daemon naming its target, as a
 * forwarder does; the daemon's proxy still checks and audits it, and closes it if refused.
 *
 * A hint is only ever a shortcut: it changes when the client hears `200`, never what is
 * allowed. A request that matches no hint, or that is not a whole CONNECT head in the first
 * chunk, goes to the daemon's proxy unchanged and gets its answer (403 with the reason).
 */
import { WarrenError, type ConnectHint, type TcpForward } from '@warren/protocol/wire';

export const CONNECT_ANSWER = 'HTTP/1.1 200 Connection Established\r\n\r\n';

const MAX_HINTS = 1024;
const NAME = /^[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9])?$/;
const REQUEST_LINE = /^CONNECT ([A-Za-z0-9_.-]{1,253}):(\d{1,5}) HTTP\/1\.[01]$/;

/** Checks a list from the daemon; names are compared lower-cased. */
export function parseHints(hints: unknown): ConnectHint[] {
  if (hints === undefined) return [];
  if (!Array.isArray(hints) || hints.length > MAX_HINTS) throw new WarrenError('invalid_argument', `connectHints: a list of at most ${MAX_HINTS}`);
  return hints.map((h: ConnectHint) => {
    const port = h?.port;
    if (typeof h?.host !== 'string' || !NAME.test(h.host.toLowerCase()) || (port !== undefined && !(Number.isInteger(port) && port >= 1 && port <= 65535))) {
      throw new WarrenError('invalid_argument', `connectHints: ${JSON.stringify(h).slice(0, 200)} is not a host and port`);
    }
    return { host: h.host.toLowerCase(), ...(port === undefined ? {} : { port }), ...(h.suffix ? { suffix: true } : {}) };
  });
}

/**
 * The target of a CONNECT whose whole head is in `chunk` and that a hint covers, and the
 * head's length (bytes after it are the client's first data).
 */
export function hintedConnect(chunk: Buffer, hints: ConnectHint[]): { target: TcpForward; headLength: number } | undefined {
  const end = chunk.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [, name, portText] = REQUEST_LINE.exec(chunk.subarray(0, chunk.indexOf('\r\n')).toString('latin1')) ?? [];
  if (!name || !portText) return undefined;
  const host = name.toLowerCase();
  const port = Number(portText);
  if (port < 1 || port > 65535 || !NAME.test(host)) return undefined;
  const covered = hints.some((h) => (h.port === undefined || h.port === port) && (h.suffix ? host.endsWith(`.${h.host}`) : host === h.host));
  return covered ? { target: { host, port }, headLength: end + 4 } : undefined;
}
