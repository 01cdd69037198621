/** Request bodies of bytes sent to the daemon (file writes, streamed stdin). */
import { Readable } from 'node:stream';

export type WriteData = string | Uint8Array | Readable | AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>;

/**
 * Bytes above this size are sent as a stream of views. fetch copies a Uint8Array body whole,
 * twice (about a second of CPU for 100 MiB here), and then writes it to the socket in one
 * piece; views of it cost no copy at all. The declared length keeps the daemon's early size
 * check, and the bytes must not change until the write settles.
 */
const STREAM_BYTES_ABOVE = 1024 * 1024;
const VIEW_BYTES = 256 * 1024;

function viewStream(bytes: Uint8Array): ReadableStream<Uint8Array> {
  let at = 0;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (at >= bytes.byteLength) return controller.close();
      controller.enqueue(bytes.subarray(at, at + VIEW_BYTES));
      at += VIEW_BYTES;
    },
  });
}

/**
 * `data` as a fetch body: strings and small byte arrays as they are, large byte arrays as a
 * factory of view streams (so a retry can send them again) with their `length`, streams as
 * web streams read as they are sent.
 */
export function uploadBody(data: WriteData): { body: BodyInit | (() => BodyInit); length?: number } {
  if (typeof data === 'string' && data.length > STREAM_BYTES_ABOVE) data = Buffer.from(data, 'utf8');
  if (data instanceof Uint8Array && data.byteLength > STREAM_BYTES_ABOVE) {
    const bytes = data;
    return { body: () => viewStream(bytes), length: bytes.byteLength };
  }
  if (typeof data === 'string' || data instanceof Uint8Array) return { body: data as BodyInit };
  if (data instanceof ReadableStream) return { body: data as BodyInit };
  return { body: Readable.toWeb(data instanceof Readable ? data : Readable.from(data)) as unknown as BodyInit };
}
