/**
 * `db:NAME` egress rules: a workspace sandbox reaches the database NAME (docs/databases.md)
 * and nothing else of it. The rule gives a TCP forwarder inside the sandbox for the name
 * `NAME.db.warren`, port 5432; its connections reach the proxy as a CONNECT to that name,
 * which the proxy never resolves: it hands the connection to the database's sandbox through
 * the daemon (its agent's `net.connect` to 5432), audited like any CONNECT.
 */
import { Duplex } from 'node:stream';
import { DATABASE_NAME_PATTERN } from '@warren/protocol';

export const DATABASE_RULE_PREFIX = 'db:';
/** Names inside sandboxes: `NAME.db.warren` (not a public top-level domain). */
const DATABASE_HOST_SUFFIX = '.db.warren';
export const DATABASE_PORT = 5432;
/** Database names, as DatabaseService accepts them (one definition, in the protocol). */
export { DATABASE_NAME_PATTERN };

/** Opens a connection to a database's postgres for a sandbox whose policy names it. */
export interface DatabaseConnector {
  connect(sandboxId: string, name: string): Promise<Duplex>;
}

export function databaseHost(name: string): string {
  return `${name}${DATABASE_HOST_SUFFIX}`;
}

/** The database a CONNECT host names (`NAME.db.warren`), if it names one. */
export function databaseOfHost(host: string): string | undefined {
  const h = host.toLowerCase().replace(/\.$/, '');
  if (!h.endsWith(DATABASE_HOST_SUFFIX)) return undefined;
  const name = h.slice(0, -DATABASE_HOST_SUFFIX.length);
  return DATABASE_NAME_PATTERN.test(name) ? name : undefined;
}

/**
 * `inner` with the byte counts the proxy's audit reads off a socket (bytesWritten: towards
 * the database, bytesRead: back), for streams that are not sockets.
 */
export function countedStream(inner: Duplex): Duplex & { readonly bytesRead: number; readonly bytesWritten: number } {
  let bytesRead = 0;
  let bytesWritten = 0;
  const outer = new Duplex({
    read: () => inner.resume(),
    write: (chunk: Buffer, _enc, cb) => {
      bytesWritten += chunk.length;
      inner.write(chunk, cb);
    },
    final: (cb) => {
      inner.end();
      cb();
    },
    destroy: (err, cb) => {
      inner.destroy();
      cb(err);
    },
  });
  inner.on('data', (chunk: Buffer) => {
    bytesRead += chunk.length;
    if (!outer.push(chunk)) inner.pause();
  });
  inner.once('end', () => outer.push(null));
  inner.once('error', (err) => outer.destroy(err));
  inner.once('close', () => outer.destroy());
  return Object.defineProperties(outer, {
    bytesRead: { get: () => bytesRead },
    bytesWritten: { get: () => bytesWritten },
  }) as Duplex & { readonly bytesRead: number; readonly bytesWritten: number };
}
