/**
 * The daemon side of sandbox egress: an HTTP proxy that speaks on connections tunnelled out of
 * a sandbox (the guest agent accepts on 127.0.0.1:3128 inside and forwards each connection
 * byte for byte; the daemon hands it here as a Duplex). Nothing here listens on a port.
 *
 * Order of checks for every request, so that a name the policy does not allow is never
 * resolved on the sandbox's behalf (no DNS exfiltration):
 *   1. the name and port against the policy (allowsName), before any lookup;
 *   2. resolution, then every resolved address (allowsAddress): if any is refused, the whole
 *      request is refused (DNS rebinding to loopback or to the host's own addresses);
 *   3. connect to the allowed addresses in order, with a timeout.
 * Plain HTTP (absolute-form `GET http://host/...`) is forwarded per request with hop-by-hop
 * headers removed, and the Host header must agree with the URL. CONNECT is a byte tunnel to
 * host:port; if the client speaks TLS, the SNI in its ClientHello must name the CONNECT host.
 *
 * Decisions on CONNECT (see tunnel()):
 * - A ClientHello without SNI is allowed. The tunnel already goes only to addresses the
 *   CONNECT name resolved to and passed the policy; without SNI the server falls back to its
 *   default certificate, which gives no way to reach a different virtual host than an SNI
 *   would. Clients connecting to IP literals omit SNI by design (RFC 6066).
 * - First bytes that are not TLS are allowed: the policy is per host:port, and non-HTTP TCP
 *   (ssh, databases, git://) to an allowed host:port is in scope. The upstream side is
 *   connected before the 200 and piped to the client at once, so server-speaks-first
 *   protocols (SMTP, MySQL) work while the client's first bytes are being awaited.
 * - Bytes that start like TLS but do not parse as a ClientHello are refused: a server and
 *   this parser must not disagree about which name was asked for.
 * - A ClientHello with Encrypted Client Hello (ECH, or its drafts and ESNI) is refused unless
 *   an `ech:` rule allows its host: the SNI it shows is only the front end's name, and the
 *   name the front end routes to is encrypted, so an allowed front could carry any site
 *   behind it. Chromium sends a dummy ECH extension (GREASE) in every hello, which cannot be
 *   told from a real one: docs/network.md says how to run it.
 * - Only the first ClientHello is inspected: a protocol that starts in clear text and
 *   upgrades later (STARTTLS) is tunnelled untouched after its first bytes.
 *
 * Audit: every attempt gets one record. `decision` is the policy's decision; a request the
 * policy allowed but that could not be completed (lookup or connect failed) is recorded as
 * 'allowed' with the failure as its reason and no bytes. Bytes are counted on the upstream
 * socket (what went to and came from the outside). Bodies are never logged or audited.
 */
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import { promises as dnsPromises } from 'node:dns';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { EgressRecord } from './audit.js';
import { allowsAddress, allowsDatabase, allowsEch, allowsName, type EgressPolicy } from './policy.js';
import { countedStream, databaseOfHost, DATABASE_PORT, type DatabaseConnector } from './database-rules.js';
import { MAX_CLIENT_HELLO_BUFFER, scanClientHello } from './sni.js';
import { credentialFor } from './credentials.js';
import { TlsTerminator, type TerminatorOptions } from './terminate.js';
import {
  MAX_AUDITED_HOST,
  MAX_AUDITED_PATH,
  Refusal,
  checkHostHeader,
  comparableName,
  forwardedRequestHeaders,
  forwardedResponseHeaders,
  hostPort,
  parseAuthority,
  respondText,
  truncate,
  type EgressAudit,
  type Target,
} from './forwarding.js';

/** Client and upstream streams one sandbox may hold open at once (each connection is two). */
const MAX_STREAMS_PER_SANDBOX = 2048;

export interface ProxyOptions {
  log: Logger;
  audit: EgressAudit;
  /** The host's own addresses, refused as destinations unless a rule names them. Default: every address of os.networkInterfaces(). */
  localAddresses?: () => string[];
  /** Injectable for tests (so no real DNS happens). */
  lookup?: typeof dnsPromises.lookup;
  /** Per resolution and per connect attempt. */
  connectTimeoutMs?: number;
  /** Default MAX_STREAMS_PER_SANDBOX. */
  maxStreamsPerSandbox?: number;
  /** Where `db:NAME` rules lead (database-rules.ts); without it they reach nothing. */
  databases?: DatabaseConnector;
  /**
   * Certificates for TLS termination of credential hosts (network/terminate.ts). Without it,
   * HTTPS to a credential host is tunnelled untouched (no headers added).
   */
  credentialTls?: Pick<TerminatorOptions, 'contextFor' | 'upstreamCa'>;
}

const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** How long a refused client gets to read the refusal before its connection is destroyed. */
const REFUSAL_LINGER_MS = 2000;

/** One client connection being served. */
interface ClientContext {
  sandboxId: string;
  policy: () => EgressPolicy;
}

/** What the proxy relays to: a socket, or a database's connection with the same byte counts. */
type Upstream = Duplex & { readonly bytesRead: number; readonly bytesWritten: number };
type Opened = { ok: true; upstream: Upstream; reason: string } | { ok: false; status: 403 | 502; decision: EgressRecord['decision']; reason: string };

export class EgressProxy {
  private readonly server: http.Server;
  private readonly clients = new WeakMap<Duplex, ClientContext>();
  private readonly databases?: DatabaseConnector;
  /** Every client and upstream stream still open, per sandbox, so closeAll can end them. */
  private readonly open = new Map<string, Set<Duplex>>();
  private readonly log: Logger;
  private readonly audit: EgressAudit;
  private readonly localAddresses: () => string[];
  private readonly lookup: typeof dnsPromises.lookup;
  private readonly connectTimeoutMs: number;
  private readonly maxStreams: number;
  private readonly terminator?: TlsTerminator;

  constructor(opts: ProxyOptions) {
    this.log = opts.log;
    this.audit = opts.audit;
    this.localAddresses = opts.localAddresses ?? hostAddresses;
    this.lookup = opts.lookup ?? dnsPromises.lookup;
    this.connectTimeoutMs = opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.maxStreams = opts.maxStreamsPerSandbox ?? MAX_STREAMS_PER_SANDBOX;
    this.databases = opts.databases;
    if (opts.credentialTls) this.terminator = new TlsTerminator({ log: this.log, audit: this.audit, ...opts.credentialTls });
    // Never listens: connections arrive through serve(). A long upload is not a stuck
    // request, so no request timeout; idle keep-alive connections close as usual.
    this.server = http.createServer({ requestTimeout: 0 });
    this.server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
      this.forward(req, res).catch((err: Error) => this.internalError(err, req.socket, res));
    });
    this.server.on('connect', (req: http.IncomingMessage, conn: Duplex, head: Buffer) => {
      this.tunnel(req, conn, head).catch((err: Error) => this.internalError(err, conn));
    });
    this.server.on('clientError', (err: NodeJS.ErrnoException, conn: Duplex) => {
      this.log.debug({ sandbox: this.clients.get(conn)?.sandboxId, err: err.code ?? err.message }, 'egress proxy: unparseable request');
      if (conn.writable && err.code !== 'ECONNRESET') {
        conn.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
        lingerThenDestroy(conn);
      } else {
        conn.destroy();
      }
    });
  }

  serve(conn: Duplex, sandboxId: string, policy: () => EgressPolicy): void {
    // Node's HTTP server drops its own error listener when it hands a CONNECT socket over;
    // this one stays for the connection's whole life.
    conn.on('error', (err: NodeJS.ErrnoException) => {
      this.log.debug({ sandbox: sandboxId, err: err.code ?? err.message }, 'egress proxy: client connection error');
      conn.destroy();
    });
    if (conn.destroyed) return; // the sandbox side hung up before it was handed over
    // Each connection holds daemon memory and, once allowed, a host socket: one sandbox
    // must not be able to take all of them.
    if (this.openCount(sandboxId) >= this.maxStreams) {
      const reason = `the sandbox has too many egress connections open (at most ${this.maxStreams / 2})`;
      this.log.warn({ sandbox: sandboxId }, 'egress proxy: connection limit reached');
      conn.end(`HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain\r\ncontent-length: ${reason.length + 1}\r\nconnection: close\r\n\r\n${reason}\n`);
      return;
    }
    this.clients.set(conn, { sandboxId, policy });
    this.track(sandboxId, conn);
    this.server.emit('connection', conn);
  }

  closeAll(sandboxId: string): void {
    const streams = this.open.get(sandboxId);
    if (!streams) return;
    this.log.debug({ sandbox: sandboxId, connections: streams.size }, 'egress proxy: closing every connection');
    for (const s of [...streams]) s.destroy();
    this.open.delete(sandboxId);
  }

  /** Open streams of a sandbox (clients and upstreams); for tests and diagnostics. */
  openCount(sandboxId: string): number {
    return this.open.get(sandboxId)?.size ?? 0;
  }

  // ---------------------------------------------------------------------------------------
  // Plain HTTP: one absolute-form request at a time

  private async forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const conn = req.socket as Duplex;
    const client = this.clients.get(conn);
    if (!client) throw new Error('request on a connection the proxy is not serving');
    const method = req.method ?? 'GET';
    let target: Target;
    let path: string;
    try {
      ({ target, path } = parseAbsoluteForm(req.url ?? ''));
      checkHostHeader(req, target);
    } catch (err) {
      if (!(err instanceof Refusal)) throw err;
      const host = typeof req.headers.host === 'string' ? req.headers.host : '';
      this.recordDenied(client, { host, port: 0, method, path: req.url }, err.message);
      res.setHeader('Connection', 'close');
      respondText(res, err.status, err.message);
      return;
    }
    const attempt = { host: target.host, port: target.port, method, path };
    const opened = await this.openUpstream(client, conn, target);
    if (!opened) return; // the client went away meanwhile
    if (!opened.ok) {
      this.recordRefusal(client, attempt, opened);
      respondText(res, opened.status, opened.reason);
      return;
    }

    const { upstream } = opened;
    // Credential headers on plain HTTP travel in clear text (docs/network.md).
    const headers = forwardedRequestHeaders(req, target);
    const credential = credentialFor(client.policy().credentials, target.host, target.port);
    for (const [name, value] of credential?.headers ?? []) headers[name] = value;
    const reason = credential ? `${opened.reason}; credential headers added (${credential.headers.map(([n]) => n).join(', ')})` : opened.reason;
    const auditId = this.audit.start(this.record(client, attempt, 'allowed', reason));
    upstream.once('close', () => this.audit.finish(auditId, upstream.bytesWritten, upstream.bytesRead));
    const outgoing = http.request({
      method,
      path,
      headers,
      setHost: false,
      createConnection: () => upstream,
    });
    outgoing.on('error', (err: NodeJS.ErrnoException) => {
      const reason = `upstream ${target.host}:${target.port} failed: ${err.code ?? err.message}`;
      this.log.debug({ sandbox: client.sandboxId, host: target.host, port: target.port, err: err.code ?? err.message }, 'egress proxy: upstream error');
      if (res.headersSent) res.destroy();
      else respondText(res, 502, reason);
      upstream.destroy();
    });
    outgoing.on('response', (incoming: http.IncomingMessage) => {
      incoming.on('error', () => res.destroy()); // the upstream vanished mid-body: so must the client's response
      res.writeHead(incoming.statusCode ?? 502, incoming.statusMessage, forwardedResponseHeaders(incoming));
      incoming.pipe(res);
    });
    // The client went away (or closeAll): the upstream request has nobody to answer to.
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.on('error', () => upstream.destroy()); // client connection error; logged by serve()'s listener
    req.pipe(outgoing);
  }

  // ---------------------------------------------------------------------------------------
  // CONNECT: a byte tunnel, with the SNI checked when the client speaks TLS

  private async tunnel(req: http.IncomingMessage, conn: Duplex, head: Buffer): Promise<void> {
    const client = this.clients.get(conn);
    if (!client) throw new Error('CONNECT on a connection the proxy is not serving');
    let target: Target;
    try {
      target = parseAuthority(req.url ?? '', undefined);
    } catch (err) {
      if (!(err instanceof Refusal)) throw err;
      this.recordDenied(client, { host: req.url ?? '', port: 0, method: 'CONNECT' }, err.message);
      refuseRaw(conn, 400, err.message);
      return;
    }
    const attempt = { host: target.host, port: target.port, method: 'CONNECT' };
    const opened = await this.openUpstream(client, conn, target);
    if (!opened) return;
    if (!opened.ok) {
      this.recordRefusal(client, attempt, opened);
      refuseRaw(conn, opened.status, opened.reason);
      return;
    }

    const { upstream } = opened;
    // HTTPS to a credential host is terminated here instead of tunnelled (terminate.ts).
    const credential = this.terminator && credentialFor(client.policy().credentials, target.host, target.port);
    let terminated = false;
    let auditId: number | undefined;
    const decide = (decision: EgressRecord['decision'], reason: string) => {
      if (auditId !== undefined) return;
      auditId = this.audit.start(this.record(client, attempt, decision, reason));
      if (decision === 'denied') this.log.info({ sandbox: client.sandboxId, host: target.host, port: target.port, reason }, 'egress denied');
    };
    upstream.once('close', () => {
      decide('allowed', opened.reason); // closed before the client sent anything
      this.audit.finish(auditId!, upstream.bytesWritten, upstream.bytesRead);
      // A terminated tunnel ends the client's side itself, after the response in progress.
      if (terminated) return;
      // An upstream that answered and closed (echo, HTTP/1.0) had its end passed on by the
      // pipe: destroying now would drop the answer's last bytes, still on their way to the
      // sandbox. The client's side closes once they are out.
      if (conn.writableEnded && !conn.writableFinished && !conn.destroyed) conn.once('finish', () => conn.destroy());
      else conn.destroy();
    });
    conn.once('close', () => upstream.destroy());

    conn.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    // Server-speaks-first protocols need this before the client sends anything. A
    // credential host is expected to speak TLS, which the client starts: it waits.
    if (!credential) upstream.pipe(conn);

    const firstBytes: Buffer[] = head.length > 0 ? [head] : [];
    let buffered = head.length;
    const admit = () => {
      conn.off('data', onData);
      conn.off('end', onEnd);
      for (const chunk of firstBytes) upstream.write(chunk);
      conn.pipe(upstream);
      if (credential) upstream.pipe(conn);
    };
    const refuse = (reason: string) => {
      decide('denied', reason);
      conn.destroy();
      upstream.destroy();
    };
    const inspect = (final: boolean) => {
      const [only, ...more] = firstBytes;
      const scan = scanClientHello(only && !more.length ? only : Buffer.concat(firstBytes));
      switch (scan.kind) {
        case 'incomplete':
          if (final) refuse('the client closed the tunnel in the middle of a TLS ClientHello');
          else if (buffered > MAX_CLIENT_HELLO_BUFFER) refuse('TLS ClientHello too large');
          return;
        case 'not-tls':
          decide('allowed', `${opened.reason} (not TLS)`);
          return admit();
        case 'malformed':
          return refuse(`malformed TLS ClientHello: ${scan.reason}`);
        case 'client-hello': {
          const sni = scan.serverName;
          if (sni !== undefined && comparableName(sni) !== comparableName(target.host)) {
            return refuse(`SNI ${truncate(sni, MAX_AUDITED_HOST)} differs from CONNECT host ${target.host}`);
          }
          const terminating = credential !== undefined && this.terminator !== undefined;
          const ech = scan.encryptedName;
          // Terminated TLS is safe from it: the daemon's own server ignores ECH, and the daemon
          // connects upstream to the CONNECT host itself.
          if (ech !== undefined && !terminating && !allowsEch(client.policy(), target.host, target.port)) {
            return refuse(
              `TLS ClientHello with ${ech}: the name it asks a front end for is hidden, and may not be ${target.host}; an ech: rule for ${target.host} allows it`,
            );
          }
          let reason = sni === undefined ? `${opened.reason} (TLS without SNI)` : opened.reason;
          if (ech !== undefined && !terminating) reason += ` (${ech}, allowed by an ech: rule)`;
          if (credential && this.terminator) {
            decide('allowed', `${reason}; TLS terminated to add credential headers`);
            terminated = true;
            conn.off('data', onData);
            conn.off('end', onEnd);
            conn.pause();
            void this.terminator.take({ sandboxId: client.sandboxId, target, credential, conn, firstBytes: Buffer.concat(firstBytes), upstream });
            return;
          }
          decide('allowed', reason);
          return admit();
        }
      }
    };
    const onData = (chunk: Buffer) => {
      firstBytes.push(chunk);
      buffered += chunk.length;
      inspect(false);
    };
    const onEnd = () => {
      if (buffered > 0) return inspect(true);
      // The client sent nothing and shut its side: pass the half-close on.
      decide('allowed', opened.reason);
      upstream.end();
    };
    conn.on('data', onData);
    conn.on('end', onEnd);
    if (buffered > 0) inspect(false);
  }

  // ---------------------------------------------------------------------------------------
  // The decision and the connection, shared by both request kinds

  /**
   * Name check, resolution, address checks, connect. Returns undefined when the client is
   * gone by the time the upstream connects (nobody to answer; the upstream is destroyed).
   */
  private async openUpstream(client: ClientContext, conn: Duplex, target: Target): Promise<Opened | undefined> {
    const policy = client.policy(); // read once per request: a change applies from the next request
    const database = databaseOfHost(target.host);
    if (database !== undefined) return this.openDatabase(client, conn, target, database, policy);
    const byName = allowsName(policy, target.host, target.port);
    if (!byName.allowed) return { ok: false, status: 403, decision: 'denied', reason: notAllowed(target, byName.reason) };

    let addresses: string[];
    if (net.isIP(target.host)) {
      addresses = [target.host];
    } else {
      try {
        const found = await withTimeout(this.lookup(target.host, { all: true, verbatim: true }), this.connectTimeoutMs, 'lookup timed out');
        addresses = found.map((a) => a.address);
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        return { ok: false, status: 502, decision: 'allowed', reason: `cannot resolve ${target.host}: ${e.code ?? e.message}` };
      }
      if (addresses.length === 0) return { ok: false, status: 502, decision: 'allowed', reason: `cannot resolve ${target.host}: no addresses` };
    }
    const local = this.localAddresses();
    for (const address of addresses) {
      const byAddress = allowsAddress(policy, address, target.port, local);
      if (!byAddress.allowed) {
        return { ok: false, status: 403, decision: 'denied', reason: notAllowed(target, `${target.host} resolves to ${address}: ${byAddress.reason}`) };
      }
    }

    let lastError = '';
    for (const address of addresses) {
      if (conn.destroyed) return undefined;
      try {
        const upstream = await this.connect(client.sandboxId, address, target.port);
        if (conn.destroyed) {
          upstream.destroy();
          return undefined;
        }
        return { ok: true, upstream, reason: byName.reason };
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        lastError = `${address}: ${e.code ?? e.message}`;
        this.log.debug({ sandbox: client.sandboxId, host: target.host, address, port: target.port, err: e.code ?? e.message }, 'egress proxy: connect failed');
      }
    }
    if (conn.destroyed) return undefined;
    return { ok: false, status: 502, decision: 'allowed', reason: `cannot connect to ${target.host}:${target.port} (${lastError})` };
  }

  /** `NAME.db.warren:5432` under a `db:NAME` rule: the database's postgres, never a DNS name. */
  private async openDatabase(client: ClientContext, conn: Duplex, target: Target, name: string, policy: EgressPolicy): Promise<Opened | undefined> {
    if (target.port !== DATABASE_PORT || !allowsDatabase(policy, name)) {
      return { ok: false, status: 403, decision: 'denied', reason: notAllowed(target, `no rule db:${name} allows database ${name} (port ${DATABASE_PORT})`) };
    }
    if (!this.databases) return { ok: false, status: 502, decision: 'allowed', reason: `databases are not served by this daemon (db:${name})` };
    try {
      const inner = await this.databases.connect(client.sandboxId, name);
      if (conn.destroyed) {
        inner.destroy();
        return undefined;
      }
      const upstream = countedStream(inner);
      this.track(client.sandboxId, upstream);
      return { ok: true, upstream, reason: `rule 'db:${name}' allows database ${name}` };
    } catch (err) {
      return { ok: false, status: 502, decision: 'allowed', reason: `cannot reach database ${name}: ${(err as Error).message}` };
    }
  }

  private connect(sandboxId: string, address: string, port: number): Promise<net.Socket> {
    return new Promise((resolve, reject) => {
      // No Nagle: small writes (TLS handshakes, requests) would wait up to 40 ms for an ACK.
      const socket = net.connect({ host: address, port, noDelay: true });
      this.track(sandboxId, socket);
      const timer = setTimeout(() => socket.destroy(Object.assign(new Error('connect timed out'), { code: 'ETIMEDOUT' })), this.connectTimeoutMs);
      const failed = (err: Error) => {
        clearTimeout(timer);
        reject(err);
      };
      // closeAll destroys without an error: that is a failure too.
      const closed = () => failed(new Error('closed while connecting'));
      socket.once('error', failed);
      socket.once('close', closed);
      socket.once('connect', () => {
        clearTimeout(timer);
        socket.off('close', closed);
        socket.off('error', failed);
        socket.on('error', (err: NodeJS.ErrnoException) => {
          this.log.debug({ sandbox: sandboxId, address, port, err: err.code ?? err.message }, 'egress proxy: upstream connection error');
          socket.destroy();
        });
        resolve(socket);
      });
    });
  }

  private track(sandboxId: string, stream: Duplex): void {
    let streams = this.open.get(sandboxId);
    if (!streams) {
      streams = new Set();
      this.open.set(sandboxId, streams);
    }
    const set = streams;
    set.add(stream);
    stream.once('close', () => {
      set.delete(stream);
      if (set.size === 0 && this.open.get(sandboxId) === set) this.open.delete(sandboxId);
    });
  }

  // ---------------------------------------------------------------------------------------
  // Audit and errors

  private record(
    client: ClientContext,
    attempt: { host: string; port: number; method?: string; path?: string },
    decision: EgressRecord['decision'],
    reason: string,
  ): EgressRecord {
    return {
      time: Date.now(),
      sandboxId: client.sandboxId,
      host: truncate(attempt.host, MAX_AUDITED_HOST),
      port: attempt.port,
      ...(attempt.method === undefined ? {} : { method: attempt.method }),
      ...(attempt.path === undefined ? {} : { path: truncate(attempt.path, MAX_AUDITED_PATH) }),
      bytesUp: 0,
      bytesDown: 0,
      decision,
      reason,
    };
  }

  private recordDenied(client: ClientContext, attempt: { host: string; port: number; method?: string; path?: string }, reason: string): void {
    this.log.info({ sandbox: client.sandboxId, host: truncate(attempt.host, MAX_AUDITED_HOST), port: attempt.port, reason }, 'egress denied');
    this.audit.finish(this.audit.start(this.record(client, attempt, 'denied', reason)), 0, 0);
  }

  private recordRefusal(
    client: ClientContext,
    attempt: { host: string; port: number; method?: string; path?: string },
    opened: Extract<Opened, { ok: false }>,
  ): void {
    if (opened.decision === 'denied') {
      this.recordDenied(client, attempt, opened.reason);
      return;
    }
    this.log.info({ sandbox: client.sandboxId, host: attempt.host, port: attempt.port, reason: opened.reason }, 'egress failed');
    this.audit.finish(this.audit.start(this.record(client, attempt, 'allowed', opened.reason)), 0, 0);
  }

  /** A bug, not a refusal: log it and end the client's request. */
  private internalError(err: Error, conn: Duplex, res?: http.ServerResponse): void {
    this.log.error({ sandbox: this.clients.get(conn)?.sandboxId, err: err.message, stack: err.stack }, 'egress proxy: internal error');
    if (res && !res.headersSent) respondText(res, 500, 'internal proxy error');
    else conn.destroy();
  }
}

// -----------------------------------------------------------------------------------------
// Parsing targets

/** `http://authority/path?query` → the target and the origin-form path to send upstream. */
function parseAbsoluteForm(url: string): { target: Target; path: string } {
  if (url.startsWith('/') || url === '*') {
    throw new Refusal(400, 'this is an HTTP proxy: requests must use an absolute URL (http://host/path); use CONNECT for https');
  }
  const [, authority, rest] = /^http:\/\/([^/?#]*)([^#]*)/i.exec(url) ?? [];
  if (authority === undefined || rest === undefined) {
    throw new Refusal(400, 'only http:// URLs can be proxied as requests; use CONNECT for https and other protocols');
  }
  if (authority.includes('@')) throw new Refusal(400, 'credentials in the URL are not supported');
  const target = parseAuthority(authority, 80);
  const path = rest === '' ? '/' : rest.startsWith('?') ? `/${rest}` : rest;
  return { target, path };
}

// -----------------------------------------------------------------------------------------
// Small helpers

/** How long the host's own addresses are reused before they are read again. */
const HOST_ADDRESSES_TTL_MS = 5_000;
let hostAddressCache: { at: number; addresses: string[] } | undefined;

/** The host's interface addresses, read at most every few seconds: every request needs them. */
function hostAddresses(): string[] {
  const now = Date.now();
  if (!hostAddressCache || now - hostAddressCache.at > HOST_ADDRESSES_TTL_MS) {
    hostAddressCache = { at: now, addresses: Object.values(os.networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address)) };
  }
  return hostAddressCache.addresses;
}

function notAllowed(target: Target, reason: string): string {
  return `${hostPort(target)} is not allowed by the sandbox's network policy: ${reason}`;
}

/** A refusal on a connection that has left HTTP (CONNECT): written by hand, then closed. */
function refuseRaw(conn: Duplex, status: number, message: string): void {
  const body = `warren egress proxy: ${message}\n`;
  conn.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\nContent-Type: text/plain; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
  lingerThenDestroy(conn);
}

/** Closing at once could reset the connection before the client reads the refusal. */
function lingerThenDestroy(conn: Duplex): void {
  const timer = setTimeout(() => conn.destroy(), REFUSAL_LINGER_MS);
  timer.unref();
  conn.once('close', () => clearTimeout(timer));
}

function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(message), { code: 'ETIMEDOUT' })), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
