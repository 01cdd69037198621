/**
 * TCP forwards: a listener on the host's loopback whose connections reach a port on a
 * sandbox's loopback, like `kubectl port-forward` (for clients that speak TCP rather than HTTP:
 * psql, redis-cli, a debugger). Each accepted connection is a `net.connect` call through the
 * agent (GuestClient.connectPort), so it resumes a hibernated sandbox like any call. Loopback
 * only: anyone on the host who can reach 127.0.0.1 can use a forward (api.md, "TCP forwards").
 */
import net from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { WarrenError, type PortForward } from '@warren/protocol';

/** Opens one connection to `port` inside the sandbox. */
export type SandboxConnector = (sandboxId: string, port: number) => Promise<Duplex>;

/** At most this many forwards per sandbox: each is a listening socket on the host. */
const MAX_FORWARDS_PER_SANDBOX = 16;

interface Entry {
  info: PortForward;
  server: net.Server;
  sockets: Set<net.Socket>;
}

export class TcpForwards {
  private readonly bySandbox = new Map<string, Map<number, Entry>>();

  constructor(
    private readonly connect: SandboxConnector,
    private readonly log: Logger,
  ) {}

  /** Opens a forward to `port` (or answers the one already open); `hostPort` 0 picks a free one. */
  async add(sandboxId: string, port: number, hostPort = 0): Promise<PortForward> {
    const own = this.bySandbox.get(sandboxId) ?? new Map<number, Entry>();
    const existing = own.get(port);
    if (existing) {
      if (hostPort && existing.info.hostPort !== hostPort)
        throw new WarrenError(
          'conflict',
          `port ${port} of sandbox ${sandboxId} is already forwarded from 127.0.0.1:${existing.info.hostPort}; remove that forward first`,
        );
      return existing.info;
    }
    if (own.size >= MAX_FORWARDS_PER_SANDBOX)
      throw new WarrenError('resource_exhausted', `sandbox ${sandboxId} already has ${MAX_FORWARDS_PER_SANDBOX} TCP forwards; remove one first`);
    const sockets = new Set<net.Socket>();
    const server = net.createServer({ noDelay: true }, (socket) => this.relay(sandboxId, port, socket, sockets));
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err: NodeJS.ErrnoException) =>
        reject(
          err.code === 'EADDRINUSE'
            ? new WarrenError('conflict', `127.0.0.1:${hostPort} is already in use on the host; pick another hostPort or 0 for any`)
            : new WarrenError('internal', `cannot listen on 127.0.0.1:${hostPort}: ${err.message}`),
        ),
      );
      server.listen({ host: '127.0.0.1', port: hostPort }, resolve);
    });
    const info: PortForward = { port, host: '127.0.0.1', hostPort: (server.address() as net.AddressInfo).port, createdAt: new Date().toISOString() };
    own.set(port, { info, server, sockets });
    this.bySandbox.set(sandboxId, own);
    this.log.info({ sandbox: sandboxId, port, hostPort: info.hostPort }, 'tcp forward opened');
    return info;
  }

  list(sandboxId: string): PortForward[] {
    return [...(this.bySandbox.get(sandboxId)?.values() ?? [])].map((e) => e.info);
  }

  /** Closes the forward and its connections; false when there was none. */
  remove(sandboxId: string, port: number): boolean {
    const own = this.bySandbox.get(sandboxId);
    const entry = own?.get(port);
    if (!own || !entry) return false;
    own.delete(port);
    if (!own.size) this.bySandbox.delete(sandboxId);
    entry.server.close();
    for (const s of entry.sockets) s.destroy();
    this.log.info({ sandbox: sandboxId, port, hostPort: entry.info.hostPort }, 'tcp forward closed');
    return true;
  }

  /** The sandbox is gone: all its forwards close. */
  removeSandbox(sandboxId: string): void {
    for (const port of [...(this.bySandbox.get(sandboxId)?.keys() ?? [])]) this.remove(sandboxId, port);
  }

  closeAll(): void {
    for (const id of [...this.bySandbox.keys()]) this.removeSandbox(id);
  }

  private relay(sandboxId: string, port: number, socket: net.Socket, sockets: Set<net.Socket>): void {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    // Until the relay is set up: a client that resets meanwhile must not be an unhandled error.
    const early = () => socket.destroy();
    socket.on('error', early);
    socket.pause();
    this.connect(sandboxId, port).then(
      (inner) => {
        if (socket.destroyed) {
          inner.destroy();
          return;
        }
        const done = () => {
          socket.destroy();
          inner.destroy();
        };
        socket.off('error', early);
        inner.once('error', done).once('close', done);
        socket.on('error', done).once('close', done);
        socket.pipe(inner).pipe(socket);
        socket.resume();
      },
      (err: Error) => {
        // Nothing listens inside, or the sandbox is gone: the client sees the connection close.
        this.log.info({ sandbox: sandboxId, port, err: err.message }, 'tcp forward connection refused');
        // A close with the client's bytes unread would be a reset: read and drop them, then end.
        socket.on('error', () => socket.destroy());
        socket.on('data', () => undefined).resume();
        socket.end();
        setTimeout(() => socket.destroy(), 5000).unref();
      },
    );
  }
}
