/**
 * Daemon side of the guest channel. Calls are multiplexed by id; an id doubles as the stream
 * id for the Data frames that belong to the call (exec output, file bytes).
 */
import { Duplex, Readable, Writable } from 'node:stream';
import {
  FrameDecoder,
  FrameKind,
  encodeFrame,
  frameHeader,
  MAX_FRAME_PAYLOAD,
  MAX_MESSAGE_PAYLOAD,
  OutputStream,
  ReceiveCredit,
  SendWindow,
  WarrenError,
  type GuestEvent,
  type GuestOp,
  type GuestOps,
  type GuestResponse,
  type TcpForward,
} from '@warren/protocol';

/** An egress connection with no bytes either way for this long is closed. */
const TUNNEL_IDLE_MS = 120_000;

export interface StreamHandlers {
  onData?(chunk: Buffer): void;
  onEnd?(): void;
  onEvent?(event: GuestEvent): void;
}

export type ExitEvent = Extract<GuestEvent, { event: 'exit' }>;

interface Pending {
  op: GuestOp;
  resolve(v: unknown): void;
  reject(e: Error): void;
}

export class GuestClient {
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private streams = new Map<number, StreamHandlers>();
  /** The send windows of streams the daemon writes to (uploads, tunnels). */
  private windows = new Map<number, SendWindow>();
  /**
   * Streams read as plain bytes (readableFor: file downloads, tunnels): their Data frames are
   * passed on in pieces as they arrive, not assembled first (FrameDecoder).
   */
  private byteStreams = new Set<number>();
  private decoder = new FrameDecoder({ pieces: (stream) => this.byteStreams.has(stream) });
  private closeHandlers: Array<(reason: string) => void> = [];
  private losing = false;
  /** Egress tunnels the agent opened (streams without a call). */
  private tunnels = new Set<number>();
  private tunnelHandler?: (conn: Duplex, forward?: TcpForward) => void;
  /** Frames held back while the agent is quiesced for a checkpoint (see quiesce()). */
  private held: Buffer[] | null = null;
  closed = false;
  closeReason = '';

  /**
   * @param explainLoss turns a bare "channel closed" into the reason the sandbox died (for
   *   example out of memory), so callers waiting on the channel learn why.
   */
  constructor(
    input: Readable,
    private output: Writable,
    private explainLoss?: (raw: string) => Promise<string>,
  ) {
    input.on('data', (chunk: Buffer) => this.onBytes(chunk));
    input.on('end', () => void this.lose('guest channel closed'));
    input.on('error', (err) => void this.lose(`guest channel failed: ${err.message}`));
    output.on('error', (err) => void this.lose(`guest channel failed: ${err.message}`));
  }

  private async lose(raw: string): Promise<void> {
    if (this.closed || this.losing) return;
    this.losing = true;
    let reason = raw;
    if (this.explainLoss) reason = await this.explainLoss(raw).catch(() => raw);
    this.close(reason);
  }

  onClose(fn: (reason: string) => void): void {
    if (this.closed) fn(this.closeReason);
    else this.closeHandlers.push(fn);
  }

  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.closeReason = reason;
    const err = new WarrenError('unavailable', `sandbox agent unreachable: ${reason}`);
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    for (const [id, s] of this.streams) s.onEvent?.({ event: 'stream-error', stream: id, code: 'unavailable', message: err.message });
    this.streams.clear();
    for (const w of this.windows.values()) w.wake();
    for (const fn of this.closeHandlers) fn(reason);
    this.closeHandlers = [];
    this.output.end();
  }

  /**
   * Receives each connection a client inside the sandbox makes to the egress proxy port, as
   * a Duplex of its bytes (see the agent's egress.ts); `forward`: it came to the TCP
   * forwarder for that host:port instead. Without a handler they are refused.
   */
  onTunnel(handler: (conn: Duplex, forward?: TcpForward) => void): void {
    this.tunnelHandler = handler;
  }

  private openTunnel(stream: number, forward?: TcpForward): void {
    if (!this.tunnelHandler) {
      this.notify('cancel', { stream });
      return;
    }
    this.tunnelHandler(this.streamDuplex(stream), forward);
  }

  /**
   * A TCP connection to `port` on the sandbox's loopback (a dev server, a notebook), as a
   * Duplex of its bytes: the agent connects, then relays, as it does for egress tunnels.
   */
  async connectPort(port: number): Promise<Duplex> {
    const { id, result } = this.call('net.connect', { port });
    // Registered before any Data frame can arrive (they follow the answer).
    const conn = this.streamDuplex(id);
    try {
      await result;
    } catch (err) {
      conn.destroy();
      throw err;
    }
    return conn;
  }

  /** Both directions of a tunnel stream as one Duplex, with batching, credit and an idle limit. */
  private streamDuplex(stream: number): Duplex {
    this.tunnels.add(stream);
    const readable = this.readableFor(stream);
    let ended = false;
    // Upstream sockets hand over 16 to 64 KiB at a time; each Data frame costs a trip through
    // the Sentry, so what arrives within one turn of the event loop goes out together, in
    // frames of up to MAX_FRAME_PAYLOAD.
    let batch: Buffer[] = [];
    let batched = 0;
    let flushing: Promise<void> | undefined;
    // An idle keep-alive connection would count as activity forever and keep the sandbox
    // from hibernating; clients reconnect when they need to.
    let idle: NodeJS.Timeout | undefined;
    const touch = () => {
      clearTimeout(idle);
      idle = setTimeout(() => conn.destroy(), TUNNEL_IDLE_MS);
    };
    const flush = (): Promise<void> => {
      flushing ??= new Promise<void>((resolve) => setImmediate(resolve))
        .then(async () => {
          while (batch.length) {
            const parts = batch;
            batch = [];
            batched = 0;
            await this.sendData(stream, parts);
          }
        })
        .finally(() => {
          flushing = undefined;
          // Chunks written after the loop's last look (from a write callback) go next.
          if (batch.length) void flush().catch((err: Error) => writable.destroy(err));
        });
      return flushing;
    };
    const writable = new Writable({
      write: (chunk: Buffer, _encoding, done) => {
        touch();
        batch.push(chunk);
        batched += chunk.length;
        const sent = flush();
        // Backpressure: hold the writer once a full frame waits, so memory stays bounded.
        if (batched >= MAX_FRAME_PAYLOAD) sent.then(() => done(), done);
        else done();
      },
      final: (done) => {
        ended = true;
        const drained = async () => {
          while (flushing || batch.length) await (flushing ?? flush());
        };
        drained().then(() => {
          this.sendEnd(stream);
          done();
        }, done);
      },
      // Also runs after a normal finish (autoDestroy), while replies may still come: the
      // tunnel stays registered until the whole connection closes.
      destroy: (err, done) => {
        if (!ended && this.tunnels.has(stream)) this.notify('cancel', { stream });
        done(err);
      },
    });
    const conn = Duplex.from({ readable, writable });
    // Destroying a Duplex.from emits an AbortError, and the agent may fail the stream at any
    // time; an 'error' nobody listens for would take the daemon down. Consumers see errors
    // through their own listeners and through 'close'.
    conn.on('error', () => undefined);
    touch();
    const handlers = this.streams.get(stream);
    const deliver = handlers?.onData;
    if (handlers && deliver) {
      handlers.onData = (chunk) => {
        touch();
        deliver(chunk);
      };
    }
    conn.on('close', () => {
      clearTimeout(idle);
      // The agent's End may still be on its way; a closed tunnel must not count as a call.
      this.streams.delete(stream);
      this.tunnels.delete(stream);
      this.windows.delete(stream);
    });
    return conn;
  }

  /**
   * Calls waiting for an answer and their streams: the channel is in use. The daemon's own
   * heartbeat does not count: a hibernate that cuts it costs nothing.
   */
  get busy(): number {
    return this.inUse().length;
  }

  /** What keeps the channel busy, for messages: the calls' operations and open streams. */
  inUse(): string[] {
    const uses: string[] = [];
    for (const p of this.pending.values()) if (p.op !== 'ping') uses.push(p.op);
    for (const id of this.streams.keys()) if (!this.tunnels.has(id) && !this.pending.has(id)) uses.push(`stream ${id}`);
    return uses;
  }

  /** Egress connections open now (activity, but not calls: a hibernate cuts them). */
  get openTunnels(): number {
    return this.tunnels.size;
  }

  /**
   * Brings the channel to rest between frames in both directions, for a checkpoint (see
   * the agent's channel.ts): after the agent's answer it writes nothing more, and from now on
   * everything this side sends is held until unquiesce(). Calls made meanwhile just wait.
   */
  async quiesce(timeoutMs: number): Promise<void> {
    if (this.held) throw new WarrenError('internal', 'the guest channel is already quiesced');
    const answered = this.request('quiesce', {}, timeoutMs);
    this.held ??= [];
    await answered;
  }

  /** Lets the agent send what it kept, then sends what was held here. */
  unquiesce(): void {
    const held = this.held ?? [];
    this.held = null;
    if (this.closed) return;
    this.output.cork();
    this.output.write(encodeFrame(FrameKind.Message, 0, JSON.stringify({ id: 0, op: 'unquiesce', params: {} })));
    for (const bytes of held) this.output.write(bytes);
    this.output.uncork();
  }

  private write(bytes: Buffer): void {
    if (this.held) this.held.push(bytes);
    else this.output.write(bytes);
  }

  /** Sends a call; `streams` receives Data frames and events tagged with the call's id. */
  call<K extends GuestOp>(op: K, params: GuestOps[K]['params'], streams?: StreamHandlers): { id: number; result: Promise<GuestOps[K]['result']> } {
    const id = this.nextId++;
    if (this.closed) return { id, result: Promise.reject(new WarrenError('unavailable', `sandbox agent unreachable: ${this.closeReason}`)) };
    const payload = Buffer.from(JSON.stringify({ id, op, params }), 'utf8');
    if (payload.length > MAX_MESSAGE_PAYLOAD) {
      // The agent would take it for a corrupt stream and drop the channel, killing the sandbox.
      return {
        id,
        result: Promise.reject(
          new WarrenError('too_large', `request to the sandbox agent is too large (${payload.length} bytes of '${op}', at most ${MAX_MESSAGE_PAYLOAD})`),
        ),
      };
    }
    if (streams) this.streams.set(id, streams);
    const result = new Promise<GuestOps[K]['result']>((resolve, reject) => {
      this.pending.set(id, { op, resolve: resolve as (v: unknown) => void, reject });
    });
    this.write(encodeFrame(FrameKind.Message, 0, payload));
    return { id, result };
  }

  async request<K extends GuestOp>(op: K, params: GuestOps[K]['params'], timeoutMs = 0): Promise<GuestOps[K]['result']> {
    const { result } = this.call(op, params);
    if (!timeoutMs) return result;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new WarrenError('deadline_exceeded', `sandbox agent did not answer '${op}' within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await Promise.race([result, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  endStream(id: number): void {
    this.streams.delete(id);
  }

  /** Fire-and-forget control message (credit, cancel). */
  notify(op: 'credit' | 'cancel', params: GuestOps['credit' | 'cancel']['params']): void {
    if (this.closed) return;
    this.write(encodeFrame(FrameKind.Message, 0, JSON.stringify({ id: 0, op, params })));
  }

  /**
   * Sends bytes on a stream, waiting for the agent's credit so memory stays bounded. `data`
   * may be several buffers (small HTTP body chunks): they are framed together, up to
   * MAX_FRAME_PAYLOAD a frame, and written as they are instead of being joined.
   */
  async sendData(stream: number, data: Buffer | Buffer[]): Promise<void> {
    let window = this.windows.get(stream);
    if (!window) {
      window = new SendWindow();
      this.windows.set(stream, window);
    }
    const parts = Array.isArray(data) ? data : [data];
    let index = 0;
    let at = 0;
    while (index < parts.length) {
      const frame: Buffer[] = [];
      let length = 0;
      while (length < MAX_FRAME_PAYLOAD) {
        const part = parts[index];
        if (part === undefined) break; // every part is framed
        const take = Math.min(part.length - at, MAX_FRAME_PAYLOAD - length);
        if (take > 0) frame.push(part.subarray(at, at + take));
        length += take;
        at += take;
        if (at >= part.length) {
          index++;
          at = 0;
        }
      }
      if (!length) break;
      const open = () => this.pending.has(stream) || this.tunnels.has(stream);
      const sent = await window.reserve(length, () => !this.closed && open());
      if (this.closed) throw new WarrenError('unavailable', `sandbox agent unreachable: ${this.closeReason}`);
      // The agent answers a streamed call only after End, so an answer now is a refusal: it
      // has dropped the stream and will grant no more credit. The call's result says why.
      if (!sent) throw new WarrenError('unavailable', `the sandbox agent closed stream ${stream}`);
      // One writev for the header and the pieces: no copy of the payload into a frame buffer.
      this.output.cork();
      this.write(frameHeader(FrameKind.Data, stream, length));
      for (const piece of frame) this.write(piece);
      this.output.uncork();
    }
  }

  sendEnd(stream: number): void {
    this.windows.delete(stream);
    if (!this.closed) this.write(encodeFrame(FrameKind.End, stream));
  }

  /**
   * Turns a stream of Data frames into a Readable that grants credit only as its consumer
   * reads, so a slow HTTP client slows the agent instead of filling daemon memory.
   */
  readableFor(id: number): Readable {
    // Half-window steps (ReceiveCredit): even quarter-window grants held the event loop in
    // write() for about a fifth of a download, as each write hands the CPU to the sandbox.
    const credit = new ReceiveCredit((bytes) => this.notify('credit', { stream: id, bytes }));
    const readable = new Readable({
      highWaterMark: 1024 * 1024,
      read: () => credit.pay(),
      destroy: (err, cb) => {
        this.byteStreams.delete(id);
        if (this.streams.has(id)) {
          this.notify('cancel', { stream: id });
          this.streams.delete(id);
        }
        cb(err);
      },
    });
    this.byteStreams.add(id);
    // The channel can fail the stream before anyone consumes it (a sandbox killed while the
    // call waits for its answer); an 'error' nobody listens for would take the daemon down.
    // Consumers still see the error: the stream is destroyed with it, and the call rejects.
    readable.on('error', () => undefined);
    this.streams.set(id, {
      onData: (chunk) => {
        credit.owe(chunk.length);
        if (readable.push(chunk)) credit.pay();
      },
      onEnd: () => {
        this.streams.delete(id);
        this.byteStreams.delete(id);
        readable.push(null);
      },
      onEvent: (ev) => {
        if (ev.event === 'stream-error') {
          this.streams.delete(id);
          readable.destroy(new WarrenError(ev.code, ev.message));
        }
      },
    });
    return readable;
  }

  private onBytes(chunk: Buffer): void {
    let frames: ReturnType<FrameDecoder['push']>;
    try {
      frames = this.decoder.push(chunk);
    } catch (err) {
      this.close((err as Error).message);
      return;
    }
    for (const frame of frames) {
      if (frame.kind === FrameKind.Message) this.onMessage(frame.payload);
      // Payloads are the handler's to keep (see FrameDecoder), so no copy here.
      else if (frame.kind === FrameKind.Data) this.streams.get(frame.stream)?.onData?.(frame.payload);
      else if (frame.kind === FrameKind.End) this.streams.get(frame.stream)?.onEnd?.();
    }
  }

  private onMessage(payload: Buffer): void {
    const msg = JSON.parse(payload.toString('utf8')) as GuestResponse | GuestEvent;
    if ('event' in msg) {
      if (msg.event === 'net.open') {
        this.openTunnel(msg.stream, msg.forward);
        return;
      }
      if (msg.event === 'credit') {
        this.windows.get(msg.stream)?.grant(msg.bytes);
        return;
      }
      if (msg.event === 'stream-error') {
        this.tunnels.delete(msg.stream);
        this.windows.get(msg.stream)?.wake();
      }
      this.streams.get(msg.stream)?.onEvent?.(msg);
      return;
    }
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    if (msg.ok) p.resolve(msg.result);
    else {
      this.streams.delete(msg.id);
      const credit = this.windows.get(msg.id);
      this.windows.delete(msg.id);
      p.reject(new WarrenError(msg.error.code, msg.error.message));
      // A sender blocked on credit for this call would otherwise wait forever: the agent
      // has dropped the stream and grants nothing more. Woken after the rejection so the
      // caller sees the agent's reason first.
      credit?.wake();
    }
  }
}

/** Splits an output Data frame into its stream name and bytes. */
export function splitOutput(chunk: Buffer): { stream: 'stdout' | 'stderr'; data: Buffer } {
  return { stream: chunk[0] === OutputStream.stderr ? 'stderr' : 'stdout', data: chunk.subarray(1) };
}
