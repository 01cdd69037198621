/**
 * TLS termination for credential hosts: the part of the egress proxy that reads and changes
 * HTTPS requests, used only for a CONNECT whose host:port has a credential rule, and only
 * after the policy, address and SNI checks passed (proxy.ts decides; this module serves).
 *
 * One tunnel is one pair of connections, as without termination:
 *   client (inside the sandbox) --TLS, leaf from the sandbox's CA--> daemon
 *   daemon --TLS, upstream certificate verified--> the upstream, on the socket proxy.ts opened
 * HTTP/1.1 is parsed on the client side (ALPN offers only http/1.1), every request on the
 * connection gets the credential's headers (replacing any of the same name), and is sent on
 * the one upstream connection, in order. When the upstream closes, the client connection is
 * ended after the response in progress, so clients see the upstream's keep-alive behaviour.
 *
 * The Host header must name the CONNECT host (a forged Host inside the TLS would let a shared
 * front end route the secret to a different site) and is rewritten from the target anyway.
 * Each request gets its own audit record with its method and path; body bytes each way are
 * counted there, and the CONNECT record keeps the bytes on the wire.
 */
import http from 'node:http';
import { isIP, type Socket } from 'node:net';
import tls from 'node:tls';
import { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { EgressRecord } from './audit.js';
import type { Credential } from './credentials.js';
import {
  MAX_AUDITED_PATH,
  checkHostHeader,
  forwardedRequestHeaders,
  forwardedResponseHeaders,
  Refusal,
  respondText,
  truncate,
  type EgressAudit,
  type Target,
} from './forwarding.js';

export interface TerminatorOptions {
  log: Logger;
  audit: EgressAudit;
  /** A TLS context with a certificate for host, issued by the sandbox's CA (network/ca.ts). */
  contextFor(sandboxId: string, host: string): Promise<tls.SecureContext>;
  /** PEM certificates upstreams are verified against. */
  upstreamCa: string[];
}

export interface Takeover {
  sandboxId: string;
  target: Target;
  credential: Credential;
  /** The client side of the tunnel, paused, with its first bytes (the ClientHello) not yet served. */
  conn: Duplex;
  firstBytes: Buffer;
  /** Connected to an allowed address of the target; nothing written yet. */
  upstream: Duplex;
}

interface Session {
  sandboxId: string;
  target: Target;
  credential: Credential;
  agent: http.Agent;
  client: tls.TLSSocket;
  /** Requests in progress (0 or 1: the agent queues the others). */
  busy: number;
  upstreamClosed: boolean;
}

export class TlsTerminator {
  private readonly server: http.Server;
  private readonly sessions = new WeakMap<Duplex, Session>();

  constructor(private readonly opts: TerminatorOptions) {
    // Never listens: decrypted client connections arrive through take(). The tunnel's idle
    // timeout (guest-client.ts) bounds idle connections, so no keep-alive timeout here.
    this.server = http.createServer({ requestTimeout: 0, keepAliveTimeout: 0 });
    this.server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
      try {
        this.forward(req, res);
      } catch (err) {
        this.opts.log.error({ err: (err as Error).message, stack: (err as Error).stack }, 'egress tls: internal error');
        if (!res.headersSent) respondText(res, 500, 'internal proxy error');
        else res.destroy();
      }
    });
    this.server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
      this.opts.log.debug({ sandbox: this.sessions.get(socket)?.sandboxId, err: err.code ?? err.message }, 'egress tls: unparseable request');
      if (socket.writable && err.code !== 'ECONNRESET') socket.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
      else socket.destroy();
    });
  }

  /** Serves the tunnel from here on. Failures end the tunnel; they never throw. */
  async take(t: Takeover): Promise<void> {
    const { conn, upstream, target } = t;
    let context: tls.SecureContext;
    try {
      context = await this.opts.contextFor(t.sandboxId, target.host);
    } catch (err) {
      this.opts.log.error({ sandbox: t.sandboxId, host: target.host, err: (err as Error).message }, 'egress tls: no certificate for the credential host');
      conn.destroy();
      upstream.destroy();
      return;
    }
    if (conn.destroyed || upstream.destroyed) return;

    const upstreamTls = tls.connect({
      socket: upstream,
      // SNI carries names only; node checks an IP literal against the certificate's IP SANs.
      ...(isIP(target.host) ? { host: target.host } : { servername: target.host, host: target.host }),
      ca: this.opts.upstreamCa,
      ALPNProtocols: ['http/1.1'],
    });
    const ready = new Promise<tls.TLSSocket>((resolve, reject) => {
      upstreamTls.once('secureConnect', () => resolve(upstreamTls));
      upstreamTls.once('error', reject);
    });
    ready.catch(() => undefined); // observed by the first request, which answers 502
    upstreamTls.on('error', (err: NodeJS.ErrnoException) => {
      this.opts.log.debug({ sandbox: t.sandboxId, host: target.host, err: err.code ?? err.message }, 'egress tls: upstream error');
    });

    // Not conn.unshift(): TLS over a net.Socket reads its handle directly and would miss the
    // ClientHello already taken from it.
    const client = new tls.TLSSocket(new Prefixed(conn, t.firstBytes) as unknown as Socket, {
      isServer: true,
      secureContext: context,
      ALPNProtocols: ['http/1.1'],
    });
    client.on('error', (err: NodeJS.ErrnoException) => {
      // Most often the client does not trust the sandbox's CA (a client with its own store).
      this.opts.log.info({ sandbox: t.sandboxId, host: target.host, err: err.code ?? err.message }, 'egress tls: client side failed');
      client.destroy();
      conn.destroy();
    });

    const agent = new http.Agent({ keepAlive: true, maxSockets: 1, maxFreeSockets: 1 });
    let handedOut = false;
    // The agent asks for a connection when it has none free: the first time it gets the one
    // upstream connection; after that connection closed, the tunnel is over.
    (agent as unknown as { createConnection: unknown }).createConnection = (_o: unknown, cb: (err: Error | null, s?: Duplex) => void) => {
      if (handedOut) {
        cb(new Error('the upstream connection is closed'));
        return undefined;
      }
      handedOut = true;
      ready.then(
        (s) => cb(null, s),
        (err: Error) => cb(err),
      );
      return undefined;
    };
    const session: Session = { sandboxId: t.sandboxId, target, credential: t.credential, agent, client, busy: 0, upstreamClosed: false };
    this.sessions.set(client, session);
    upstream.once('close', () => {
      session.upstreamClosed = true;
      if (session.busy === 0) client.end();
    });
    client.once('close', () => {
      agent.destroy();
      upstream.destroy();
    });
    this.server.emit('connection', client);
  }

  private forward(req: http.IncomingMessage, res: http.ServerResponse): void {
    const session = this.sessions.get(req.socket as Duplex);
    if (!session) {
      respondText(res, 500, 'internal proxy error');
      return;
    }
    const { target, credential } = session;
    const method = req.method ?? 'GET';
    const path = req.url ?? '';
    try {
      if (!path.startsWith('/')) throw new Refusal(400, 'requests inside a terminated TLS connection must use a path (origin form)');
      checkHostHeader(req, target, 443);
    } catch (err) {
      if (!(err instanceof Refusal)) throw err;
      this.opts.audit.finish(this.opts.audit.start(this.record(session, method, path, 'denied', err.message)), 0, 0);
      this.opts.log.info({ sandbox: session.sandboxId, host: target.host, port: target.port, reason: err.message }, 'egress denied');
      res.setHeader('Connection', 'close');
      respondText(res, err.status, err.message);
      return;
    }

    const headers = forwardedRequestHeaders(req, target, 443);
    for (const [name, value] of credential.headers) headers[name] = value;
    const names = credential.headers.map(([n]) => n).join(', ');
    const auditId = this.opts.audit.start(this.record(session, method, path, 'allowed', `TLS terminated; credential headers added (${names})`));
    let up = 0;
    let down = 0;
    session.busy++;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      session.busy--;
      this.opts.audit.finish(auditId, up, down);
      if (session.upstreamClosed) session.client.end();
    };
    res.once('close', finish);
    req.on('data', (chunk: Buffer) => (up += chunk.length));

    const outgoing = http.request({ agent: session.agent, host: target.host, port: target.port, method, path, headers, setHost: false });
    outgoing.on('error', (err: NodeJS.ErrnoException) => {
      const reason = `upstream ${target.host}:${target.port} failed: ${err.code ?? err.message}`;
      this.opts.log.info(
        { sandbox: session.sandboxId, host: target.host, port: target.port, err: err.code ?? err.message },
        'egress tls: upstream request failed',
      );
      if (res.headersSent) res.destroy();
      else {
        res.setHeader('Connection', 'close');
        respondText(res, 502, reason);
      }
    });
    outgoing.on('response', (incoming: http.IncomingMessage) => {
      incoming.on('error', () => res.destroy());
      incoming.on('data', (chunk: Buffer) => (down += chunk.length));
      // The upstream will close after this response: so does the client connection.
      const closing = incoming.httpVersion === '1.0' || /(^|,)\s*close\s*(,|$)/i.test(incoming.headers.connection ?? '');
      const flat = forwardedResponseHeaders(incoming);
      if (closing) flat.push('Connection', 'close');
      res.writeHead(incoming.statusCode ?? 502, incoming.statusMessage, flat);
      incoming.pipe(res);
    });
    res.on('close', () => {
      if (!res.writableFinished) outgoing.destroy();
    });
    req.pipe(outgoing);
  }

  private record(s: Session, method: string, path: string, decision: EgressRecord['decision'], reason: string): EgressRecord {
    return {
      time: Date.now(),
      sandboxId: s.sandboxId,
      host: s.target.host,
      port: s.target.port,
      method: truncate(method, 32),
      path: truncate(path, MAX_AUDITED_PATH),
      bytesUp: 0,
      bytesDown: 0,
      decision,
      reason,
    };
  }
}

/** A stream that reads `first`, then whatever `inner` reads; writes go to `inner`. */
class Prefixed extends Duplex {
  constructor(
    private readonly inner: Duplex,
    first: Buffer,
  ) {
    super();
    if (first.length > 0) this.push(first);
    inner.on('data', (chunk: Buffer) => {
      if (!this.push(chunk)) inner.pause();
    });
    inner.once('end', () => this.push(null));
    inner.once('close', () => this.destroy());
    inner.resume();
  }

  override _read(): void {
    this.inner.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.inner.write(chunk, callback);
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.inner.end();
    callback();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    this.inner.destroy();
    callback(err);
  }
}
