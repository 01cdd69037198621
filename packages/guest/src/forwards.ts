/**
 * TCP forwarders: clients that know nothing of proxies (database clients, `nc`, a python
 * socket) reach an allowed host:port as if it were reachable. For each forward the daemon
 * sends, the name gets an address of its own on the sandbox's loopback (127.77.x.y) in
 * /etc/hosts, and a listener on that address and port hands each connection to the daemon
 * as a tunnel naming the forward's host:port (egress.ts), where the proxy treats it as a
 * CONNECT to it: the policy check, the refusal of local addresses and the audit log apply
 * unchanged.
 *
 * Nothing here decides anything. Root inside can edit /etc/hosts or open its own listeners,
 * but a forwarder's connections go only to its own host:port, which the daemon checks against
 * the policy each time; a name the client looked up is never sent anywhere.
 *
 * Listeners and the address map are plain agent state, so they travel inside checkpoints
 * (fork, snapshot, hibernate) with the /etc/hosts they match; the daemon sends the list again
 * after every restore anyway, for a policy that changed meanwhile.
 */
import net from 'node:net';
import { FORWARD_NETWORK_PREFIX, WarrenError, type GuestOps, type TcpForward } from '@warren/protocol/wire';
import { writeManagedBlock } from './hosts.js';

type Result = GuestOps['net.forwards']['result'];

const MAX_FORWARDS = 1024;
const HOST_NAME = /^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9])?$/;

/** Names whose addresses are remembered after their rules go (policies allow 256 rules). */
const MAX_REMEMBERED_NAMES = 1024;

/** Where a forward's connections go: handed to the daemon as a tunnel for that host:port. */
export type ForwardHandler = (socket: net.Socket, target: TcpForward) => void;

export class Forwards {
  /** Each name's address, kept after its rules go: a name that comes back gets the same one. */
  private addresses = new Map<string, string>();
  private listeners = new Map<string, net.Server>();
  /** Updates run one at a time, in the order they arrived: the last list sent wins. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private onConnection: ForwardHandler,
    private hostsFile?: string,
  ) {}

  apply(forwards: TcpForward[]): Promise<Result> {
    if (!Array.isArray(forwards) || forwards.length > MAX_FORWARDS) throw new WarrenError('invalid_argument', `forwards: a list of at most ${MAX_FORWARDS}`);
    for (const f of forwards) {
      // Names go into /etc/hosts: nothing but a plain DNS name may get there.
      if (typeof f?.host !== 'string' || !HOST_NAME.test(f.host) || !Number.isInteger(f.port) || f.port < 1 || f.port > 65535) {
        throw new WarrenError('invalid_argument', `forwards: ${JSON.stringify(f)} is not a host name and port`);
      }
    }
    const run = this.queue.then(() => this.reconcile(forwards));
    this.queue = run.catch(() => undefined); // the caller gets the failure; the next update still runs
    return run;
  }

  private async reconcile(forwards: TcpForward[]): Promise<Result> {
    const names = new Set(forwards.map((f) => f.host.toLowerCase()));
    const wanted = new Map<string, TcpForward & { address: string }>();
    for (const f of forwards) {
      const host = f.host.toLowerCase();
      const address = this.addressOf(host, names);
      wanted.set(`${address}:${f.port}`, { host, port: f.port, address });
    }
    for (const [key, server] of this.listeners) {
      if (wanted.has(key)) continue;
      // Stops accepting; connections already made end with the policy change (the daemon
      // closes every tunnel of the sandbox when its policy changes).
      server.close();
      this.listeners.delete(key);
    }
    const results: Result['forwards'] = [];
    for (const [key, f] of wanted) {
      if (!this.listeners.has(key)) {
        const error = await this.listen(key, f);
        if (error) {
          results.push({ ...f, error });
          continue;
        }
      }
      results.push(f);
    }
    // A name is mapped only if one of its listeners works: with none, the name could reach
    // whatever else listens inside on that port of every address.
    const mapped = new Map<string, string>();
    for (const r of results) if (!r.error) mapped.set(r.host, r.address);
    writeManagedBlock(
      [...mapped].map(([name, address]) => ({ name, address })),
      this.hostsFile,
    );
    return { forwards: results };
  }

  private listen(key: string, f: TcpForward & { address: string }): Promise<string | undefined> {
    const target = { host: f.host, port: f.port };
    // No Nagle and half-open, as for the egress listener (egress.ts).
    const server = net.createServer({ noDelay: true, allowHalfOpen: true }, (socket) => this.onConnection(socket, target));
    return new Promise((resolve) => {
      server.once('error', (err: NodeJS.ErrnoException) => {
        resolve(err.code === 'EADDRINUSE' ? `something inside the sandbox already listens on port ${f.port}` : `cannot listen on ${key}: ${err.message}`);
      });
      server.listen(f.port, f.address, () => {
        server.removeAllListeners('error');
        server.on('error', (err) => process.stderr.write(`warren-agent: forwarder ${key} for ${f.host}:${f.port} failed: ${err.message}\n`));
        this.listeners.set(key, server);
        resolve(undefined);
      });
    });
  }

  /** 127.77.0.1 to .0.253, then 127.77.1.1, ...: no .0 or .255 last byte, which tools treat specially. */
  private addressOf(host: string, wanted: Set<string>): string {
    const known = this.addresses.get(host);
    if (known) return known;
    // Bounded: names no longer wanted give their addresses back once many have come and gone.
    if (this.addresses.size >= MAX_REMEMBERED_NAMES) {
      for (const name of this.addresses.keys()) if (!wanted.has(name)) this.addresses.delete(name);
    }
    const used = new Set(this.addresses.values());
    for (let i = 0; ; i++) {
      const address = `${FORWARD_NETWORK_PREFIX}${Math.floor(i / 253)}.${(i % 253) + 1}`;
      if (!used.has(address)) {
        this.addresses.set(host, address);
        return address;
      }
    }
  }
}
