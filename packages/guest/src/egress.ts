/**
 * The sandbox's only way out. Sandboxes have no network device: HTTP_PROXY and HTTPS_PROXY
 * point at EGRESS_PROXY_PORT on loopback, where this listener takes each TCP connection and
 * tunnels its bytes, unchanged, to the daemon over the agent's channel (a stream the agent
 * opens with a 'net.open' event). The daemon speaks the proxy protocol and enforces the
 * sandbox's policy; nothing here decides anything, so root inside the sandbox gains nothing
 * by replacing this listener: it can only reach the same daemon-side proxy.
 */
import net from 'node:net';
import { EGRESS_PROXY_PORT, FIRST_AGENT_STREAM, STREAM_WINDOW_BYTES } from '@warren/protocol/wire';
import type { Channel } from './channel.js';

export class EgressTunnels {
  private nextStream = FIRST_AGENT_STREAM;

  /** `daemon()` is the channel of the daemon's current conversation, if any. */
  constructor(private daemon: () => Channel | undefined) {}

  listen(): void {
    // No Nagle: small writes (TLS handshakes, requests) would wait up to 40 ms for an ACK.
    const server = net.createServer({ noDelay: true }, (socket) => this.tunnel(socket));
    server.on('error', (err) => process.stderr.write(`warren-agent: egress listener on 127.0.0.1:${EGRESS_PROXY_PORT} failed: ${err.message}\n`));
    server.listen(EGRESS_PROXY_PORT, '127.0.0.1');
  }

  private tunnel(socket: net.Socket): void {
    socket.on('error', () => socket.destroy()); // the client went away; the stream is aborted below
    const channel = this.daemon();
    if (!channel || channel.closed) {
      socket.destroy();
      return;
    }
    const stream = this.nextStream++;
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
    socket.on('close', () => forget());

    let unacked = 0;
    channel.acceptStream(stream, {
      onData: (chunk) => {
        const copy = Buffer.from(chunk); // the decoder reuses its buffer after this call
        socket.write(copy, () => {
          unacked += copy.length;
          // Half-window steps, as elsewhere: the daemon stalls only with the window unacknowledged.
          if (unacked >= STREAM_WINDOW_BYTES / 2) {
            channel.sendMessage({ event: 'credit', stream, bytes: unacked });
            unacked = 0;
          }
        });
      },
      onEnd: () => socket.end(),
      onAbort: () => {
        finished = true;
        out.abort();
        socket.destroy();
      },
    });
    channel.sendMessage({ event: 'net.open', stream });

    socket.on('data', (chunk: Buffer) => {
      socket.pause();
      out.write(chunk).then(
        () => socket.resume(),
        (err: Error) => abort(err.message),
      );
    });
    socket.on('end', () => {
      if (!finished) out.end();
    });
    socket.on('close', (hadError) => {
      if (hadError) abort('the client connection failed');
    });
  }
}
