/**
 * Tunnels between TCP connections inside the sandbox and the daemon, as streams on the
 * agent's channel. Sandboxes have no network device, so these are their only connections
 * to anything outside:
 *
 * - Egress: HTTP_PROXY and HTTPS_PROXY point at EGRESS_PROXY_PORT on loopback, where this
 *   listener takes each connection and tunnels its bytes, unchanged, to the daemon (a stream
 *   the agent opens with a 'net.open' event). The daemon speaks the proxy protocol and
 *   enforces the sandbox's policy; nothing here decides anything, so root inside the sandbox
 *   gains nothing by replacing this listener: it can only reach the same daemon-side proxy.
 * - Forwards: connections to a TCP forwarder (forwards.ts) go the same way, the stream naming
 *   the forward's host:port; the daemon handles them as CONNECTs to it. So do proxy
 *   connections whose CONNECT the agent answered itself (connect-hints.ts).
 * - Ports: the daemon asks for a connection to a port inside ('net.connect'), to forward a
 *   user's HTTP or WebSocket traffic to a server in the sandbox.
 */
import net from 'node:net';
import { EGRESS_PROXY_PORT, FIRST_AGENT_STREAM, ReceiveCredit, WarrenError, type ConnectHint, type TcpForward } from '@warren/protocol/wire';
import type { Channel } from './channel.js';
import { CONNECT_ANSWER, hintedConnect } from './connect-hints.js';

/** A proxy client that sends nothing for this long is dropped (the daemon's tunnels idle out alike). */
const FIRST_BYTES_TIMEOUT_MS = 120_000;

export class Tunnels {
  private nextStream = FIRST_AGENT_STREAM;
  private hints: ConnectHint[] = [];

  /** `daemon()` is the channel of the daemon's current conversation, if any. */
  constructor(private daemon: () => Channel | undefined) {}

  listenForEgress(): void {
    // No Nagle: small writes (TLS handshakes, requests) would wait up to 40 ms for an ACK.
    // Half-open: a client that shuts its sending side (a request piped in, then EOF) still
    // reads the answer; node would otherwise end our side too and drop the answer's bytes.
    const server = net.createServer({ noDelay: true, allowHalfOpen: true }, (socket) => this.proxyClient(socket));
    server.on('error', (err) => process.stderr.write(`warren-agent: egress listener on 127.0.0.1:${EGRESS_PROXY_PORT} failed: ${err.message}\n`));
    server.listen(EGRESS_PROXY_PORT, '127.0.0.1');
  }

  /** 'net.connect': a connection to a port on the sandbox's loopback, relayed on `stream`. */
  connect(port: number, channel: Channel, stream: number): Promise<Record<string, never>> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new WarrenError('invalid_argument', `port must be 1 to 65535 (got ${port})`);
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: '127.0.0.1', port, noDelay: true });
      socket.once('error', (err: NodeJS.ErrnoException) => {
        reject(err.code === 'ECONNREFUSED' ? new WarrenError('unavailable', `nothing listens on port ${port} in the sandbox`) : err);
      });
      socket.once('connect', () => {
        relay(channel, stream, socket);
        resolve({});
      });
    });
  }

  /** A connection to a TCP forwarder, for the daemon to connect to `target` as a CONNECT would. */
  forward(socket: net.Socket, target: TcpForward): void {
    this.egress(socket, target);
  }

  /** The CONNECT targets answered here from now on (connect-hints.ts). */
  setConnectHints(hints: ConnectHint[]): void {
    this.hints = hints;
  }

  /**
   * A client of the proxy port. Without hints its bytes go to the daemon's proxy as they are.
   * With hints, the first chunk decides: a CONNECT a hint covers is answered here and goes
   * on as a connection to its target; anything else goes to the proxy, first chunk included.
   */
  private proxyClient(socket: net.Socket): void {
    if (this.hints.length === 0) {
      this.egress(socket);
      return;
    }
    const timer = setTimeout(() => socket.destroy(), FIRST_BYTES_TIMEOUT_MS);
    const drop = () => {
      clearTimeout(timer);
      socket.off('data', onFirst);
      socket.destroy();
    };
    const onFirst = (chunk: Buffer) => {
      clearTimeout(timer);
      socket.off('end', drop);
      socket.off('error', drop);
      socket.pause();
      const hinted = hintedConnect(chunk, this.hints);
      if (!hinted) return this.egress(socket, undefined, chunk);
      socket.write(CONNECT_ANSWER);
      this.egress(socket, hinted.target, chunk.subarray(hinted.headLength));
    };
    socket.once('data', onFirst);
    // Nothing was asked yet: a client that leaves now needs no answer.
    socket.once('end', drop);
    socket.once('error', drop);
  }

  /** Hands a connection to the daemon on a new stream; `first`: bytes already read from it. */
  private egress(socket: net.Socket, forward?: TcpForward, first?: Buffer): void {
    const channel = this.daemon();
    if (!channel || channel.closed) {
      socket.destroy();
      return;
    }
    const stream = this.nextStream++;
    // The stream is opened before any of its Data frames can go out.
    channel.sendMessage(forward ? { event: 'net.open', stream, forward } : { event: 'net.open', stream });
    relay(channel, stream, socket, first);
  }
}

/** Relays a socket's bytes on a channel stream, both ways, with credit in both directions. */
function relay(channel: Channel, stream: number, socket: net.Socket, first?: Buffer): void {
  socket.on('error', () => socket.destroy()); // the peer went away; the stream is aborted below
  let finished = false;
  const out = channel.openOutgoing(stream);
  const abort = (why: string) => {
    if (finished) return;
    finished = true;
    out.abort();
    channel.finishIncoming(stream);
    channel.sendMessage({ event: 'stream-error', stream, code: 'unavailable', message: why });
    socket.destroy();
  };
  // A new conversation (a restored or forked sandbox, a daemon restart) has no use for
  // connections of the old one: their clients see a reset and reconnect.
  const forget = channel.onConversationEnd(() => {
    finished = true;
    socket.destroy();
  });

  const credit = new ReceiveCredit((bytes) => channel.sendMessage({ event: 'credit', stream, bytes }));
  channel.acceptStream(stream, {
    onData: (chunk) => {
      const copy = Buffer.from(chunk); // the decoder reuses its buffer after this call
      socket.write(copy, () => credit.consumed(copy.length));
    },
    onEnd: () => socket.end(),
    onAbort: () => {
      finished = true;
      out.abort();
      socket.destroy();
    },
  });

  const send = (chunk: Buffer) => {
    socket.pause();
    out.write(chunk).then(
      () => socket.resume(),
      (err: Error) => abort(err.message),
    );
  };
  socket.on('data', send);
  if (first?.length) send(first);
  else socket.resume(); // paused if its first chunk was only a CONNECT head
  socket.on('end', () => {
    if (!finished) out.end();
  });
  socket.on('close', (hadError) => {
    forget();
    if (hadError) abort('the connection failed');
  });
}
