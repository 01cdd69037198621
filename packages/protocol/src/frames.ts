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
  const header = Buffer.allocUnsafe(FRAME_HEADER_BYTES);
  header.writeUInt32BE(body.length + 5, 0);
  header.writeUInt8(kind, 4);
  header.writeUInt32BE(stream, 5);
  return Buffer.concat([header, body]);
}

export class FrameDecodeError extends Error {}

/** Incremental decoder: push bytes in, get whole frames out. */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;
  push(data: Buffer): Frame[] {
    this.chunks.push(data);
    this.buffered += data.length;
    const frames: Frame[] = [];
    const buf = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.buffered);
    let offset = 0;
    while (buf.length - offset >= 4) {
      const length = buf.readUInt32BE(offset);
      if (length < 5 || length > Math.max(MAX_FRAME_PAYLOAD, MAX_MESSAGE_PAYLOAD) + 5) {
        throw new FrameDecodeError(`corrupt frame header (length ${length})`);
      }
      if (buf.length - offset < 4 + length) break;
      const kind = buf.readUInt8(offset + 4) as FrameKind;
      const stream = buf.readUInt32BE(offset + 5);
      const payload = buf.subarray(offset + FRAME_HEADER_BYTES, offset + 4 + length);
      frames.push({ kind, stream, payload });
      offset += 4 + length;
    }
    const rest = buf.subarray(offset);
    this.chunks = rest.length ? [rest] : [];
    this.buffered = rest.length;
    return frames;
  }
}

