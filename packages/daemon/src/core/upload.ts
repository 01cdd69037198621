/**
 * Bytes from an HTTP body into the sandbox over one guest call's Data stream (file.write,
 * dir.write, proc.stdinStream): gathered into full frames, sent as the agent grants credit, so a fast
 * client waits for the sandbox instead of filling the daemon's memory.
 */
import { MAX_FRAME_PAYLOAD, type GuestOps } from '@warren/protocol';
import type { GuestClient } from './guest-client.js';

/** Guest calls that take a Data stream and answer after its End. */
export type UploadOp = 'file.write' | 'dir.write' | 'proc.stdinStream';

/**
 * Calls `op` and streams `source` to it, then End; resolves with the call's answer. When the
 * agent refuses or stops the stream early, its reason is what the caller gets; when the
 * source fails, the agent's stream is cancelled.
 */
export async function upload<K extends UploadOp>(
  client: GuestClient,
  op: K,
  params: GuestOps[K]['params'],
  source: AsyncIterable<Uint8Array>,
  opts: { eager?: boolean } = {},
): Promise<GuestOps[K]['result']> {
  const { id: stream, result } = client.call(op, params);
  let failed: Error | undefined;
  result.catch((err: Error) => (failed = err));
  const chunks = source[Symbol.asyncIterator]();
  // As a for-await's break would: stop reading, the rest of the body is discarded (lingerOnUnreadBody).
  const release = () => void chunks.return?.().catch(() => undefined);
  try {
    // HTTP bodies arrive in socket-read pieces (up to 64 KiB); gathering them into full
    // frames means a quarter of the frames, and the agent writes in bigger steps.
    let batch: Buffer[] = [];
    let batched = 0;
    const pull = () => {
      const p = chunks.next();
      // Left pending when the loop stops early; a body that fails afterwards is nobody's error.
      p.catch(() => undefined);
      return p;
    };
    let next = pull();
    for (;;) {
      // `eager` (stdin): what has come goes as soon as the body has nothing more at hand,
      // since a command may answer each line before the client sends the next one.
      const got = opts.eager && batched > 0 ? await Promise.race([next, turn()]) : await next;
      if (failed) break;
      if (got === IDLE) {
        await client.sendData(stream, batch);
        batch = [];
        batched = 0;
        continue;
      }
      if (got.done) break;
      next = pull();
      const chunk = got.value;
      batch.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      batched += chunk.byteLength;
      if (batched >= MAX_FRAME_PAYLOAD) {
        const whole = batched - (batched % MAX_FRAME_PAYLOAD);
        const [send, keep] = splitAt(batch, whole);
        await client.sendData(stream, send);
        batch = keep;
        batched -= whole;
      }
    }
    if (batched && !failed) await client.sendData(stream, batch);
    if (failed) release();
  } catch (err) {
    release();
    client.notify('cancel', { stream });
    // When the agent refused the stream, its reason beats the sender's "stream closed".
    throw failed ?? err;
  }
  if (failed) throw failed;
  client.sendEnd(stream);
  return result;
}

const IDLE = Symbol('idle');

/** Resolves after the event loop's current turn: a body chunk already at hand comes first. */
function turn(): Promise<typeof IDLE> {
  return new Promise((resolve) => setImmediate(() => resolve(IDLE)));
}

/** Splits a list of buffers at byte `n` without copying. */
function splitAt(parts: Buffer[], n: number): [Buffer[], Buffer[]] {
  const head: Buffer[] = [];
  let left = n;
  for (const [i, part] of parts.entries()) {
    if (left <= 0) return [head, parts.slice(i)];
    if (part.length <= left) {
      head.push(part);
      left -= part.length;
    } else {
      head.push(part.subarray(0, left));
      return [head, [part.subarray(left), ...parts.slice(i + 1)]];
    }
  }
  return [head, []];
}
