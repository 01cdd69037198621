/**
 * Terminals in a sandbox (docs/terminals.md): a command on a pseudo-terminal, driven over
 * the daemon's WebSocket. The terminal lives in the sandbox: a handle that disconnects (or a
 * process that exits) leaves it running, and `connect(id)` attaches again with its recent
 * output replayed. Node 20 has no global WebSocket, hence the `ws` package, loaded on first
 * use so that programs (and the CLI) that never open a terminal do not load it.
 */
import type { IncomingMessage } from 'node:http';
import type { WebSocket as WsSocket } from 'ws';
import type { TerminalClientMessage, TerminalInfo, TerminalServerMessage } from '@warren/protocol';
import type { HttpClient } from './client.js';
import { NetworkError, UnavailableError, errorFromBody, type WarrenError } from './errors.js';

export interface PtyOutputOptions {
  /** Every byte the terminal writes (not necessarily whole UTF-8 characters). */
  onData?: (data: Buffer) => void;
}

export interface PtyCreateOptions extends PtyOutputOptions {
  /** Size in cells; default 80 x 24, at most 1000 each. */
  cols?: number;
  rows?: number;
  /** Default: the template's working directory, else the user's home. */
  cwd?: string;
  env?: Record<string, string>;
  /** Default: the template's user. */
  user?: string;
  /** A command line (run by `bash -lc`) or argv; default: the user's login shell. */
  cmd?: string | string[];
}

export interface PtyConnectOptions extends PtyOutputOptions {
  /** Replay output from this offset (default: everything the sandbox kept, up to 64 KiB). */
  offset?: number;
}

/** `sbx.pty`: open terminals, attach to them again, list them. */
export class Pty {
  constructor(
    private http: HttpClient,
    readonly sandboxId: string,
  ) {}

  /**
   * Opens a terminal and attaches to it.
   *
   *   const term = await sbx.pty.create({ cols: 120, rows: 40, onData: (d) => process.stdout.write(d) });
   *   term.write('ls -la\r');
   *   term.write('exit 3\r');
   *   await term.wait(); // 3
   */
  async create(opts: PtyCreateOptions = {}): Promise<PtyHandle> {
    const q = new URLSearchParams();
    if (opts.cols !== undefined) q.set('cols', String(opts.cols));
    if (opts.rows !== undefined) q.set('rows', String(opts.rows));
    if (opts.cwd !== undefined) q.set('cwd', opts.cwd);
    if (opts.user !== undefined) q.set('user', opts.user);
    if (typeof opts.cmd === 'string') q.set('cmd', opts.cmd);
    else for (const arg of opts.cmd ?? []) q.append('argv', arg);
    for (const [k, v] of Object.entries(opts.env ?? {})) q.append('env', `${k}=${v}`);
    return PtyHandle.open(this.http, this.sandboxId, `/v1/sandboxes/${this.sandboxId}/pty`, q, opts.onData);
  }

  /** Attaches to a terminal opened earlier (by this or any other client), replaying its recent output. */
  async connect(terminalId: string, opts: PtyConnectOptions = {}): Promise<PtyHandle> {
    const q = new URLSearchParams();
    if (opts.offset !== undefined) q.set('offset', String(opts.offset));
    return PtyHandle.open(this.http, this.sandboxId, `/v1/sandboxes/${this.sandboxId}/pty/${encodeURIComponent(terminalId)}`, q, opts.onData);
  }

  /** The sandbox's terminals, running and finished. */
  async list(): Promise<TerminalInfo[]> {
    return (await this.http.json<{ terminals: TerminalInfo[] }>('GET', `/v1/sandboxes/${this.sandboxId}/terminals`)).terminals;
  }

  /** Kills a terminal's command and all it started; a finished terminal is forgotten. */
  async kill(terminalId: string): Promise<void> {
    await this.http.request('POST', `/v1/sandboxes/${this.sandboxId}/terminals/${encodeURIComponent(terminalId)}/kill`);
  }
}

/** One attached terminal. */
export class PtyHandle {
  /** Offset of the first byte onData got (the replay's start). */
  readonly offset: number;
  private exit: Promise<number | null>;
  private settleExit!: { resolve(code: number | null): void; reject(err: Error): void };
  private lastError?: WarrenError;
  private detached = false;

  private constructor(
    private http: HttpClient,
    readonly sandboxId: string,
    private ws: WsSocket,
    /** `term-…`: give it to `sbx.pty.connect` to attach again. */
    readonly id: string,
    /** The terminal helper's pid in the sandbox. */
    readonly pid: number,
    offset: number,
  ) {
    this.offset = offset;
    this.exit = new Promise((resolve, reject) => (this.settleExit = { resolve, reject }));
    this.exit.catch(() => undefined); // a caller may never wait
  }

  /** Upgrades, then waits for the daemon's 'ready'; a refusal is the HTTP error it came with. */
  static async open(http: HttpClient, sandboxId: string, route: string, query: URLSearchParams, onData?: (data: Buffer) => void): Promise<PtyHandle> {
    const { WebSocket } = await import('ws');
    const target = http.socketTarget(route, query);
    const ws = new WebSocket(target.url, { headers: target.headers, perMessageDeflate: false, ...(target.ca ? { ca: target.ca } : {}) });
    return new Promise<PtyHandle>((resolve, reject) => {
      let handle: PtyHandle | undefined;
      ws.on('unexpected-response', (_req, res: IncomingMessage) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => {
          let body: unknown;
          try {
            body = JSON.parse(text);
          } catch {
            body = undefined;
          }
          reject(errorFromBody(res.statusCode ?? 500, body));
          ws.terminate();
        });
      });
      ws.on('error', (err) => {
        if (!handle) reject(new NetworkError('network', `cannot open the terminal socket at ${target.url}: ${err.message}`));
      });
      ws.on('message', (data, isBinary) => {
        const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
        if (isBinary) {
          onData?.(bytes);
          return;
        }
        const msg = JSON.parse(bytes.toString('utf8')) as TerminalServerMessage;
        if (msg.type === 'ready') {
          handle = new PtyHandle(http, sandboxId, ws, msg.terminalId, msg.pid, msg.offset);
          resolve(handle);
        } else if (msg.type === 'exit') handle?.settleExit.resolve(msg.exitCode);
        else {
          const err = errorFromBody(500, { error: { code: msg.code, message: msg.message } });
          if (handle) handle.lastError = err;
          else reject(err);
        }
      });
      ws.on('close', () => {
        if (!handle) {
          reject(new UnavailableError('unavailable', 'the terminal socket closed before the terminal was ready'));
          return;
        }
        const why = handle.detached ? 'the handle was disconnected' : (handle.lastError?.message ?? 'the connection closed');
        handle.settleExit.reject(new UnavailableError('unavailable', `terminal ${handle.id}: no exit status: ${why}; it may still run (connect again)`));
      });
    });
  }

  /** Keystrokes: a string goes as UTF-8 ("\r" is Enter, "\x03" is Ctrl-C). */
  write(data: string | Uint8Array): void {
    this.ws.send(typeof data === 'string' ? Buffer.from(data, 'utf8') : data, { binary: true });
  }

  /** New size in cells; the command gets SIGWINCH. */
  resize(cols: number, rows: number): void {
    this.control({ type: 'resize', cols, rows });
  }

  /** A signal to the terminal's foreground process group, as its key would send (SIGINT for Ctrl-C). */
  signal(signal: string): void {
    this.control({ type: 'signal', signal });
  }

  /** Kills the command and everything it started; wait() then gives 128+9. */
  async kill(): Promise<void> {
    await this.http.request('POST', `/v1/sandboxes/${this.sandboxId}/terminals/${encodeURIComponent(this.id)}/kill`);
  }

  /** The command's exit code (128+N when killed by signal N). Rejects if the connection ends first. */
  wait(): Promise<number | null> {
    return this.exit;
  }

  /** Closes this connection only: the terminal keeps running; `sbx.pty.connect(id)` attaches again. */
  disconnect(): void {
    this.detached = true;
    this.ws.close(1000, 'detached');
  }

  private control(msg: TerminalClientMessage): void {
    this.ws.send(JSON.stringify(msg));
  }
}
