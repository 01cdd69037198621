/**
 * Framing for the guest channel: one byte stream (the init process's stdio, or an attach
 * relay) carrying many concurrent operations.
 *
 * Frame layout (big endian):
 *   u32 length of everything after this field
 *   u8  kind   (FrameKind)
 *   u32 stream id (0 for control messages)
 *   ...payload (JSON text for Message, raw bytes for Data, empty for End)
 *
 * A channel is never resumed mid-stream: a daemon that restarts attaches a fresh relay with
 * fresh pipes (see docs/guest-protocol.md), so the decoder never needs to resynchronise.
 */
export enum FrameKind {
  Message = 1,
  Data = 2,
  End = 3,
}

export interface Frame {
  kind: FrameKind;
  stream: number;
  payload: Buffer;
}

export const FRAME_HEADER_BYTES = 9;
/** Largest payload a sender may put in one frame; larger writes are split. */
export const MAX_FRAME_PAYLOAD = 256 * 1024;
/**
 * Largest Message payload (JSON) a decoder accepts. A bigger one is taken for a corrupt
 * stream and ends the whole channel, so senders must check before they write.
 */
export const MAX_MESSAGE_PAYLOAD = MAX_FRAME_PAYLOAD + 1024 * 1024;

export function encodeFrame(kind: FrameKind, stream: number, payload: Buffer | string = Buffer.alloc(0)): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  return Buffer.concat([frameHeader(kind, stream, body.length), body]);
}

/**
 * The header alone, for senders that write it and a large payload as two buffers (corked,
 * so one writev) instead of copying the payload into one buffer with it.
 */
export function frameHeader(kind: FrameKind, stream: number, payloadLength: number): Buffer {
  const header = Buffer.allocUnsafe(FRAME_HEADER_BYTES);
  header.writeUInt32BE(payloadLength + 5, 0);
  header.writeUInt8(kind, 4);
  header.writeUInt32BE(stream, 5);
  return header;
}

export class FrameDecodeError extends Error {}

const MAX_FRAME_LENGTH = Math.max(MAX_FRAME_PAYLOAD, MAX_MESSAGE_PAYLOAD) + 5;

/**
 * Incremental decoder: push bytes in, get whole frames out.
 *
 * Each byte is copied at most once. A frame that lies inside one pushed chunk is a view of it,
 * and one that spans chunks is assembled once it is complete; re-joining everything buffered
 * on every push made large frames cost several copies each (a 256 KiB frame arrives in 64 KiB
 * pipe reads). Payloads may be kept by the caller: the decoder never writes into a chunk it
 * was given, and a small payload is copied out rather than pinning a much larger chunk.
 *
 * With `reuse`, frames that span chunks are assembled in one buffer that the next push
 * overwrites, so their payloads are valid only until then. That suits a receiver that
 * consumes every frame at once (the agent writes upload data straight to the file): in
 * gVisor, faulting in a fresh buffer per frame cost more than the copy.
 *
 * With `pieces`, Data frames of the streams it accepts are not assembled at all: each part
 * of such a frame comes out as a Data frame of its own, a view of the chunk it arrived in, as
 * soon as the frame's header is known. For plain byte streams (file downloads, tunnels) where
 * frame boundaries mean nothing: assembling each 256 KiB frame from 64 KiB pipe reads cost
 * the daemon a fresh buffer and a copy per frame, a quarter of its CPU per downloaded byte.
 */
export class FrameDecoder {
  private scratch?: Buffer;
  /** The Data frame being passed on in pieces: its stream and the payload bytes still to come. */
  private piecing?: { stream: number; left: number };

  constructor(private readonly opts: { reuse?: boolean; pieces?: (stream: number) => boolean } = {}) {}

  /** Bytes of a frame not yet complete, as views of the chunks they came in. */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  /** 4 + length of the partial frame, or 0 while its length field is itself incomplete. */
  private partialNeed = 0;

  push(data: Buffer): Frame[] {
    const frames: Frame[] = [];
    let offset = this.piecing ? this.continuePiece(data, frames) : this.partialBytes ? this.continuePartial(data, frames) : 0;
    while (data.length - offset >= 4) {
      const need = 4 + checkedLength(data.readUInt32BE(offset));
      if (data.length - offset < need) {
        if (this.startPiece(data, offset, need, frames)) offset = data.length;
        break;
      }
      frames.push(viewFrame(data, offset, need));
      offset += need;
    }
    if (offset < data.length) this.keep(data.subarray(offset));
    return frames;
  }

  /**
   * Starts passing on in pieces the incomplete frame at `offset`, if it is a Data frame whose
   * header is all there and whose stream takes pieces.
   */
  private startPiece(data: Buffer, offset: number, need: number, frames: Frame[]): boolean {
    if (!this.opts.pieces || data.length - offset < FRAME_HEADER_BYTES || data.readUInt8(offset + 4) !== FrameKind.Data) return false;
    const stream = data.readUInt32BE(offset + 5);
    if (!this.opts.pieces(stream)) return false;
    const piece = data.subarray(offset + FRAME_HEADER_BYTES);
    if (piece.length) frames.push(pieceFrame(stream, piece, data));
    this.piecing = { stream, left: need - (data.length - offset) };
    return true;
  }

  /** Passes on the next piece of the frame begun earlier; returns how much of `data` it used. */
  private continuePiece(data: Buffer, frames: Frame[]): number {
    const piecing = this.piecing!; // only called while a frame is being pieced
    const used = Math.min(piecing.left, data.length);
    if (!used) return 0;
    frames.push(pieceFrame(piecing.stream, data.subarray(0, used), data));
    piecing.left -= used;
    if (!piecing.left) this.piecing = undefined;
    return used;
  }

  /** Feeds the start of `data` to the frame begun earlier; returns how much of it was used. */
  private continuePartial(data: Buffer, frames: Frame[]): number {
    let used = 0;
    if (!this.partialNeed) {
      // The length field itself was split: complete it from the new chunk.
      used = Math.min(4 - this.partialBytes, data.length);
      this.keep(data.subarray(0, used));
      if (!this.partialNeed) return used;
    }
    if (this.opts.pieces && this.partialBytes < FRAME_HEADER_BYTES) {
      // Complete the header first: the frame may be one to pass on in pieces.
      const head = Math.min(FRAME_HEADER_BYTES - this.partialBytes, data.length - used);
      this.keep(data.subarray(used, used + head));
      used += head;
      if (this.partialBytes < FRAME_HEADER_BYTES) return used;
      if (this.pieceFromPartial()) return used + (this.piecing ? this.continuePiece(data.subarray(used), frames) : 0);
    }
    const take = Math.min(this.partialNeed - this.partialBytes, data.length - used);
    this.keep(data.subarray(used, used + take));
    used += take;
    if (this.partialBytes === this.partialNeed) {
      const whole = this.assemble();
      this.partial = [];
      this.partialBytes = 0;
      this.partialNeed = 0;
      frames.push(frameAt(whole, 0, whole.length));
    }
    return used;
  }

  /** Switches the partial frame, exactly its header so far, to pieces if it takes them. */
  private pieceFromPartial(): boolean {
    const kept = Buffer.concat(this.partial, this.partialBytes);
    const stream = kept.readUInt32BE(5);
    if (kept.readUInt8(4) !== FrameKind.Data || !this.opts.pieces?.(stream)) return false;
    this.piecing = { stream, left: this.partialNeed - this.partialBytes };
    this.partial = [];
    this.partialBytes = 0;
    this.partialNeed = 0;
    if (!this.piecing.left) this.piecing = undefined;
    return true;
  }

  private assemble(): Buffer {
    const need = this.partialNeed;
    if (!this.opts.reuse) return Buffer.concat(this.partial, need);
    if (!this.scratch || this.scratch.length < need) this.scratch = Buffer.allocUnsafe(Math.max(need, MAX_FRAME_PAYLOAD + FRAME_HEADER_BYTES));
    let at = 0;
    for (const part of this.partial) at += part.copy(this.scratch, at);
    return this.scratch.subarray(0, need);
  }

  private keep(bytes: Buffer): void {
    if (!bytes.length) return;
    this.partial.push(bytes);
    this.partialBytes += bytes.length;
    if (!this.partialNeed && this.partialBytes >= 4) {
      this.partialNeed = 4 + checkedLength(Buffer.concat(this.partial, 4).readUInt32BE(0));
    }
  }
}

function checkedLength(length: number): number {
  if (length < 5 || length > MAX_FRAME_LENGTH) throw new FrameDecodeError(`corrupt frame header (length ${length})`);
  return length;
}

function frameAt(buf: Buffer, offset: number, need: number): Frame {
  return {
    kind: buf.readUInt8(offset + 4) as FrameKind,
    stream: buf.readUInt32BE(offset + 5),
    payload: buf.subarray(offset + FRAME_HEADER_BYTES, offset + need),
  };
}

/** A piece of a Data frame; copied out, as in viewFrame, when it is small next to its chunk. */
function pieceFrame(stream: number, piece: Buffer, chunk: Buffer): Frame {
  return { kind: FrameKind.Data, stream, payload: piece.length * 4 < chunk.buffer.byteLength ? Buffer.from(piece) : piece };
}

/** A frame inside a pushed chunk; copied out when it is small next to the memory it would pin. */
function viewFrame(chunk: Buffer, offset: number, need: number): Frame {
  const frame = frameAt(chunk, offset, need);
  if (frame.payload.length * 4 < chunk.buffer.byteLength) frame.payload = Buffer.from(frame.payload);
  return frame;
}
