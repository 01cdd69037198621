/**
 * One framed connection to the daemon. The agent serves any number of these at once: the
 * init process's stdio, and attach relays started after a daemon restart.
 *
 * A checkpoint (snapshot, fork, hibernate) must find the channel between frames in both
 * directions, or a restored agent and its new daemon would read each other's half frames.
 * So the daemon first sends 'quiesce' and then holds its own writes; the agent answers and
 * from then on keeps what it would write. The running sandbox then carries on at
 * 'unquiesce'; a restored copy starts a new conversation with 'hello', which drops
 * everything of the old one (kept frames, streams, subscriptions, answers still to come).
 */
import type { Readable, Writable } from 'node:stream';
import {
  FrameDecoder,
  FrameKind,
  encodeFrame,
  frameHeader,
  MAX_FRAME_PAYLOAD,
  MAX_MESSAGE_PAYLOAD,
  SendWindow,
  WarrenError,
  type GuestEvent,
  type GuestRequest,
  type GuestResponse,
} from '@warren/protocol/wire';

export interface IncomingStream {
  /** `chunk` is valid only during the call (the decoder reuses its memory): copy to keep. */
  onData(chunk: Buffer): void;
  onEnd(): void;
  onAbort(): void;
}

type Handler = (req: GuestRequest, channel: Channel) => Promise<unknown>;

export class Channel {
  private decoder = new FrameDecoder({ reuse: true });
  private incoming = new Map<number, IncomingStream>();
  private outgoing = new Map<number, OutgoingStream>();
  private closeHandlers: Array<() => void> = [];
  private conversationEndHandlers: Array<() => void> = [];
  /** Frames kept while quiesced, with the callbacks waiting for them to be written. */
  private kept: Array<{ bytes: Buffer; onFlushed?: () => void }> | null = null;
  /** Bumped by every 'hello': answers to calls of an earlier conversation are dropped. */
  private conversation = 0;
  closed = false;

  constructor(
    input: Readable,
    private output: Writable,
    private handler: Handler,
  ) {
    input.on('data', (chunk: Buffer) => this.onBytes(chunk));
    input.on('end', () => this.close());
    input.on('error', () => this.close());
    // The daemon going away (EPIPE) must never take the agent down with it.
    output.on('error', () => this.close());
  }

  onClose(fn: () => void): void {
    if (this.closed) fn();
    else this.closeHandlers.push(fn);
  }

  /**
   * Runs when the current conversation ends: at close, or when a 'hello' starts a new one.
   * Returns a function that drops the handler (for things that end before the conversation).
   */
  onConversationEnd(fn: () => void): () => void {
    if (this.closed) {
      fn();
      return () => undefined;
    }
    this.conversationEndHandlers.push(fn);
    return () => {
      const i = this.conversationEndHandlers.indexOf(fn);
      if (i >= 0) this.conversationEndHandlers.splice(i, 1);
    };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.endConversation();
    for (const fn of this.closeHandlers) fn();
    this.closeHandlers = [];
  }

  private endConversation(): void {
    for (const s of this.incoming.values()) s.onAbort();
    this.incoming.clear();
    for (const s of this.outgoing.values()) s.abort();
    this.outgoing.clear();
    const kept = this.kept ?? [];
    this.kept = null;
    for (const k of kept) k.onFlushed?.(); // never written, but their buffers are free again
    const handlers = this.conversationEndHandlers;
    this.conversationEndHandlers = [];
    for (const fn of handlers) fn();
    this.conversation++;
  }

  /** Writes a frame, or keeps it while the channel is quiesced. */
  private write(bytes: Buffer, onFlushed?: () => void): void {
    if (this.kept) this.kept.push({ bytes, onFlushed });
    else if (onFlushed) this.output.write(bytes, () => onFlushed());
    else this.output.write(bytes);
  }

  private unquiesce(): void {
    const kept = this.kept ?? [];
    this.kept = null;
    this.output.cork();
    for (const k of kept) this.write(k.bytes, k.onFlushed);
    this.output.uncork();
  }

  sendMessage(msg: GuestResponse | GuestEvent): void {
    if (this.closed) return;
    let payload = Buffer.from(JSON.stringify(msg), 'utf8');
    if (payload.length > MAX_MESSAGE_PAYLOAD) {
      // The daemon would take an oversized frame for a corrupt stream and drop the channel.
      process.stderr.write(`warren-agent: message of ${payload.length} bytes is too large\n`);
      if (!('id' in msg)) return;
      const error = { code: 'too_large' as const, message: `the sandbox agent's answer is too large (${payload.length} bytes)` };
      payload = Buffer.from(JSON.stringify({ id: msg.id, ok: false, error } satisfies GuestResponse), 'utf8');
    }
    this.write(encodeFrame(FrameKind.Message, 0, payload));
  }

  /** `onFlushed` runs once the bytes are out of the process, when `data` may be reused. */
  sendData(stream: number, data: Buffer, onFlushed?: () => void): void {
    if (this.closed) return;
    // Header and payload go out as two buffers in one writev: copying the payload behind
    // its header cost a copy of every byte sent.
    this.output.cork();
    for (let at = 0; at < data.length; at += MAX_FRAME_PAYLOAD) {
      const part = data.subarray(at, at + MAX_FRAME_PAYLOAD);
      this.write(frameHeader(FrameKind.Data, stream, part.length));
      this.write(part, onFlushed && at + MAX_FRAME_PAYLOAD >= data.length ? onFlushed : undefined);
    }
    this.output.uncork();
  }

  sendEnd(stream: number): void {
    if (this.closed) return;
    this.write(encodeFrame(FrameKind.End, stream));
  }

  acceptStream(stream: number, handler: IncomingStream): void {
    this.incoming.set(stream, handler);
  }

  finishIncoming(stream: number): void {
    this.incoming.delete(stream);
  }

  /** An outgoing data stream that waits for the reader's credit (bounded memory both sides). */
  openOutgoing(stream: number): OutgoingStream {
    const s = new OutgoingStream(this, stream);
    this.outgoing.set(stream, s);
    return s;
  }

  dropOutgoing(stream: number): void {
    this.outgoing.delete(stream);
  }

  private onBytes(chunk: Buffer): void {
    let frames: ReturnType<FrameDecoder['push']>;
    try {
      frames = this.decoder.push(chunk);
    } catch (err) {
      process.stderr.write(`warren-agent: closing corrupt channel: ${(err as Error).message}\n`);
      this.close();
      return;
    }
    for (const frame of frames) {
      if (frame.kind === FrameKind.Message) this.onMessage(frame.payload);
      // Handlers consume a payload during the call (IncomingStream), so no copy here.
      else if (frame.kind === FrameKind.Data) this.incoming.get(frame.stream)?.onData(frame.payload);
      else if (frame.kind === FrameKind.End) {
        const s = this.incoming.get(frame.stream);
        this.incoming.delete(frame.stream);
        s?.onEnd();
      }
    }
  }

  private onMessage(payload: Buffer): void {
    let req: GuestRequest;
    try {
      req = JSON.parse(payload.toString('utf8')) as GuestRequest;
    } catch {
      process.stderr.write('warren-agent: dropping unparsable message\n');
      return;
    }
    if (req.op === 'credit') {
      const p = req.params as { stream: number; bytes: number };
      this.outgoing.get(p.stream)?.grant(p.bytes);
      return;
    }
    if (req.op === 'cancel') {
      const p = req.params as { stream: number };
      this.outgoing.get(p.stream)?.abort();
      this.incoming.get(p.stream)?.onAbort();
      this.incoming.delete(p.stream);
      return;
    }
    if (req.op === 'quiesce') {
      // The answer is the last frame out; everything after it is kept.
      this.sendMessage({ id: req.id, ok: true, result: {} });
      this.kept ??= [];
      return;
    }
    if (req.op === 'unquiesce') {
      this.unquiesce();
      return;
    }
    if (req.op === 'hello') this.endConversation();
    const conversation = this.conversation;
    const answer = (msg: GuestResponse) => {
      if (conversation === this.conversation) this.sendMessage(msg);
    };
    this.handler(req, this).then(
      (result) => answer({ id: req.id, ok: true, result: result ?? {} }),
      (err: unknown) => answer({ id: req.id, ok: false, error: toWireError(err) }),
    );
  }
}

export class OutgoingStream {
  private window = new SendWindow();
  private abortHandlers: Array<() => void> = [];
  aborted = false;

  constructor(
    private channel: Channel,
    readonly stream: number,
  ) {}

  /**
   * Resolves once the chunk has been sent without exceeding the reader's window.
   * `onFlushed`: see Channel.sendData.
   */
  async write(chunk: Buffer, onFlushed?: () => void): Promise<void> {
    if (!(await this.window.reserve(chunk.length, () => !this.aborted))) throw new WarrenError('unavailable', 'stream aborted by reader');
    this.channel.sendData(this.stream, chunk, onFlushed);
  }

  end(): void {
    this.channel.sendEnd(this.stream);
    this.channel.dropOutgoing(this.stream);
  }

  grant(bytes: number): void {
    this.window.grant(bytes);
  }

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.channel.dropOutgoing(this.stream);
    this.window.wake();
    const handlers = this.abortHandlers;
    this.abortHandlers = [];
    for (const fn of handlers) fn();
  }

  /** Runs when the reader cancels the stream or the conversation ends (a reader that was waiting for nothing). */
  onAbort(fn: () => void): void {
    if (this.aborted) fn();
    else this.abortHandlers.push(fn);
  }
}

function toWireError(err: unknown): { code: WarrenError['code']; message: string } {
  if (err instanceof WarrenError) return { code: err.code, message: err.message };
  const e = err as NodeJS.ErrnoException;
  const path = e.path ? `: ${e.path}` : '';
  switch (e.code) {
    case 'ENOENT':
      return { code: 'not_found', message: `no such file or directory${path}` };
    case 'EISDIR':
      return { code: 'invalid_argument', message: `is a directory${path}` };
    case 'ENOTDIR':
      return { code: 'invalid_argument', message: `not a directory${path}` };
    case 'EACCES':
    case 'EPERM':
      return { code: 'permission_denied', message: `permission denied${path}` };
    case 'EEXIST':
      return { code: 'conflict', message: `already exists${path}` };
    case 'ENOTEMPTY':
      return { code: 'conflict', message: `directory not empty${path}` };
    case 'ENOSPC':
    case 'EDQUOT':
      return { code: 'resource_exhausted', message: `no space left in the sandbox's disk${path}` };
    // Bad paths from the caller, not faults of the agent.
    case 'ENAMETOOLONG':
      return { code: 'invalid_argument', message: `file name too long${path}` };
    case 'ELOOP':
      return { code: 'invalid_argument', message: `too many levels of symbolic links${path}` };
    case 'EINVAL':
      return { code: 'invalid_argument', message: `invalid argument${path}` };
    case 'EROFS':
      return { code: 'permission_denied', message: `read-only file system${path}` };
    case 'EBUSY':
    case 'ETXTBSY':
      return { code: 'conflict', message: `in use${path}` };
    case 'EFBIG':
      return { code: 'too_large', message: `file too large${path}` };
    default:
      return { code: 'internal', message: e.message ?? String(err) };
  }
}
