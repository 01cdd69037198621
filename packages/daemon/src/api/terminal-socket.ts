/**
 * The terminal WebSocket (docs/terminals.md):
 *
 *   GET /v1/sandboxes/:id/pty?cols=&rows=&cwd=&user=&cmd=&argv=...&env=NAME=value   new terminal
 *   GET /v1/sandboxes/:id/pty/:terminalId?offset=N                                  attach again
 *
 * Binary frames are terminal bytes both ways; text frames are JSON control messages. The key
 * or token comes in a header, or from a browser as a subprotocol (socketSecret). Every
 * check (API key, the query, the sandbox and terminal) happens before the upgrade, so a
 * refused client gets a plain HTTP status and a JSON error, never an open socket.
 */
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import {
  ErrorCodes,
  TERMINAL_BEARER_SUBPROTOCOL_PREFIX,
  TERMINAL_SUBPROTOCOL,
  TerminalClientMessage,
  TerminalCreateRequest,
  WarrenError,
  parse,
  type TerminalServerMessage,
} from '@warren/protocol';
import type { AttachedTerminal, TerminalService } from '../core/terminals.js';
import type { PortHosts } from '../network/ports.js';
import { authorizeSandboxCall, bearerKey, sameOrigin, sourceAddress, type Access } from './auth.js';
import { SESSION_COOKIE, type UiSessions } from './ui-sessions.js';
import { toWarrenError } from './errors.js';

const PTY_PATH = /^\/v1\/sandboxes\/([^/]+)\/pty(?:\/([^/]+))?\/?$/;
/** Largest frame a client may send: keystrokes and pastes, not file uploads. */
const MAX_CLIENT_FRAME_BYTES = 1024 * 1024;
/** How often the daemon pings a terminal's client; a client that misses one pong is dropped. */
const PING_INTERVAL_MS = 30_000;

type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer) => void;

export interface TerminalSocketDeps {
  access: Access;
  terminals: TerminalService;
  /** Port URLs forward any path, this one included: their hosts are not the API's. */
  portHosts: PortHosts;
  log: Logger;
}

/** Handles upgrades to the terminal paths of the API's host; every other upgrade goes to `next`. */
export function terminalUpgrade(deps: TerminalSocketDeps, next: UpgradeHandler): UpgradeHandler {
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_CLIENT_FRAME_BYTES,
    // Never the bearer entry: the answer would echo the secret.
    handleProtocols: (offered) => (offered.has(TERMINAL_SUBPROTOCOL) ? TERMINAL_SUBPROTOCOL : false),
  });
  return (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://daemon');
    const match = PTY_PATH.exec(url.pathname);
    // Port URLs (3000-sb-x.localhost) forward any path to the sandbox, this one included.
    if (!match || deps.portHosts.parse(req.headers.host)) {
      next(req, socket, head);
      return;
    }
    const sandboxId = decodeURIComponent(match[1] ?? '');
    const existing = match[2] === undefined ? undefined : decodeURIComponent(match[2]);
    void (async () => {
      let created: string | undefined;
      try {
        authorizeSandboxCall(deps.access, socketSecret(req, deps.access.sessions), sourceAddress(req.socket), sandboxId, 'sandboxes:exec', 'a terminal');
        if ((req.headers.upgrade ?? '').toLowerCase() !== 'websocket')
          throw new WarrenError('invalid_argument', 'this path takes a WebSocket upgrade (Upgrade: websocket)');
        let offset = offsetQuery(url);
        let terminalId = existing;
        if (terminalId === undefined) {
          terminalId = (await deps.terminals.create(sandboxId, parse(TerminalCreateRequest, createQuery(url)))).id;
          created = terminalId;
          offset = 0;
        } else await deps.terminals.get(sandboxId, terminalId); // 404 before the upgrade
        const id = terminalId;
        let upgraded = false;
        wss.handleUpgrade(req, socket, head, (ws) => {
          upgraded = true;
          bridge(deps, ws, sandboxId, id, offset);
        });
        // ws answered the handshake itself (a bad Sec-WebSocket-Key): nobody will use the terminal.
        if (!upgraded && created) void killQuietly(deps, sandboxId, created);
      } catch (err) {
        const e = toWarrenError(err);
        deps.log.info({ sandbox: sandboxId, terminal: existing, code: e.code, err: e.message }, 'terminal upgrade refused');
        refuse(socket, e);
        if (created) void killQuietly(deps, sandboxId, created);
      }
    })();
  };
}

/**
 * The key or token of an upgrade: the headers API clients send, else the bearer subprotocol a
 * browser offers (it cannot set headers on a WebSocket). Not the query string: URLs end up
 * in logs and histories.
 */
function socketSecret(req: IncomingMessage, sessions: UiSessions): string {
  const fromHeaders = bearerKey(req.headers);
  if (fromHeaders) return fromHeaders;
  const offered = (req.headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim());
  const bearer = offered.find((p) => p.startsWith(TERMINAL_BEARER_SUBPROTOCOL_PREFIX));
  if (bearer) return bearer.slice(TERMINAL_BEARER_SUBPROTOCOL_PREFIX.length);
  // The dashboard's terminal: its session cookie, from its own page only. A browser always
  // names the page's origin on a WebSocket, and a sandbox's port URL is another origin.
  const session = sessions.get(cookieValue(req.headers.cookie, SESSION_COOKIE));
  if (!session) return '';
  if (req.headers.origin === undefined || !sameOrigin(req.headers.origin, req.headers.host))
    throw new WarrenError('permission_denied', `a dashboard session cannot open a terminal from another origin (${req.headers.origin ?? 'none named'})`);
  return session.secret;
}

/** One cookie of a Cookie header (the session id is URL-safe base64: no decoding). */
function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** The create request a query string carries; numbers are checked by the schema. */
function createQuery(url: URL): unknown {
  const q = url.searchParams;
  const num = (name: string) => (q.has(name) ? Number(q.get(name)) : undefined);
  const env: Record<string, string> = {};
  for (const pair of q.getAll('env')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new WarrenError('invalid_argument', `env must be NAME=value (got '${pair}')`);
    env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  const argv = q.getAll('argv');
  return {
    cols: num('cols'),
    rows: num('rows'),
    ...(q.has('cwd') ? { cwd: q.get('cwd') } : {}),
    ...(q.has('user') ? { user: q.get('user') } : {}),
    ...(q.has('cmd') ? { cmd: q.get('cmd') } : {}),
    ...(argv.length ? { argv } : {}),
    ...(Object.keys(env).length ? { env } : {}),
  };
}

function offsetQuery(url: URL): number | undefined {
  const text = url.searchParams.get('offset');
  if (text === null) return undefined;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 0) throw new WarrenError('invalid_argument', `offset must be a non-negative integer (got '${text}')`);
  return n;
}

function refuse(socket: Duplex, e: WarrenError): void {
  if (!socket.writable) return;
  const status = ErrorCodes[e.code];
  const body = JSON.stringify(e.toBody());
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

async function killQuietly(deps: TerminalSocketDeps, sandboxId: string, terminalId: string): Promise<void> {
  try {
    await deps.terminals.kill(sandboxId, terminalId);
  } catch (err) {
    deps.log.warn({ sandbox: sandboxId, terminal: terminalId, err: (err as Error).message }, 'could not kill an unused terminal');
  }
}

/** Joins an upgraded socket to the terminal: output out, keystrokes and control in. */
function bridge(deps: TerminalSocketDeps, ws: WebSocket, sandboxId: string, terminalId: string, offset: number | undefined): void {
  const send = (msg: TerminalServerMessage) => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
  };
  const fail = (err: unknown) => {
    const e = toWarrenError(err);
    send({ type: 'error', code: e.code, message: e.message });
  };
  // Output that arrives with the attach call's answer waits for the 'ready' message.
  let early: Array<{ chunk: Buffer; handedOn: () => void }> | null = [];
  const sendBytes = (chunk: Buffer, handedOn: () => void) => {
    if (ws.readyState !== ws.OPEN) return handedOn();
    ws.send(chunk, { binary: true }, () => handedOn());
  };
  let attached: AttachedTerminal | undefined;
  let ending: (() => void) | undefined;
  let closed = false;
  // An attached client keeps its sandbox awake: one that vanished without closing (a dead
  // network, a suspended laptop) must not do so forever. No pong within a period: gone.
  let alive = true;
  ws.on('pong', () => (alive = true));
  const heartbeat = setInterval(() => {
    if (!alive) return ws.terminate();
    alive = false;
    ws.ping();
  }, PING_INTERVAL_MS);
  heartbeat.unref();
  ws.on('close', () => {
    closed = true;
    clearInterval(heartbeat);
    attached?.detach();
  });
  ws.on('error', (err) => deps.log.info({ sandbox: sandboxId, terminal: terminalId, err: err.message }, 'terminal socket error'));
  ws.on('message', (data: RawData, isBinary: boolean) => {
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    if (!attached) return fail(new WarrenError('unavailable', 'the terminal is not attached yet: wait for the ready message'));
    if (isBinary) return void attached.input(bytes).catch(fail);
    let msg: TerminalClientMessage;
    try {
      msg = parse(TerminalClientMessage, JSON.parse(bytes.toString('utf8')));
    } catch (err) {
      return fail(err instanceof SyntaxError ? new WarrenError('invalid_argument', `control message is not JSON: ${err.message}`) : err);
    }
    if (msg.type === 'resize') void attached.resize(msg.cols, msg.rows).catch(fail);
    else void attached.signal(msg.signal).catch(fail);
  });
  deps.terminals
    .attach(
      sandboxId,
      terminalId,
      { offset },
      {
        onData: (chunk, handedOn) => (early ? early.push({ chunk, handedOn }) : sendBytes(chunk, handedOn)),
        onExit: (exitCode) =>
          afterReady(() => {
            send({ type: 'exit', exitCode });
            ws.close(1000, 'exited');
          }),
        onClose: (reason) =>
          afterReady(() => {
            send({ type: 'error', code: 'unavailable', message: reason });
            ws.close(1011, 'terminal stream ended');
          }),
      },
    )
    .then(
      (a) => {
        attached = a;
        if (closed) return a.detach();
        send({ type: 'ready', terminalId, pid: a.terminal.pid, offset: a.offset });
        flush();
        ending?.();
      },
      (err: unknown) => {
        fail(err);
        ws.close(1011, 'attach failed');
      },
    );
  /** The end of a terminal that exited before its answer came: after 'ready' and its output. */
  function afterReady(end: () => void): void {
    if (early) ending = end;
    else end();
  }
  function flush(): void {
    const pending = early ?? [];
    early = null;
    for (const { chunk, handedOn } of pending) sendBytes(chunk, handedOn);
  }
}
