/** File access inside a sandbox, streamed both ways through the guest channel. */
import { Transform, pipeline, type Readable } from 'node:stream';
import { MAX_FRAME_PAYLOAD, WarrenError } from '@warren/protocol';
import type { DirExistsPolicy, DirUploadResult, FileStat } from '@warren/protocol';
import type { GuestClient } from './guest-client.js';
import type { SandboxService } from './sandboxes.js';

export class FileService {
  constructor(private sandboxes: SandboxService) {}

  async read(id: string, path: string, user?: string): Promise<{ size: number; body: Readable }> {
    const client = await this.sandboxes.guest(id, 'files');
    const { id: stream, result } = client.call('file.read', { path, user });
    // Register the reader before any Data frame can arrive (they follow the response).
    const body = client.readableFor(stream);
    try {
      const { size } = await result;
      return { size, body: exactly(size, body) };
    } catch (err) {
      body.destroy();
      throw err;
    }
  }

  /** Streams `source` into the file; the file appears whole, or not at all. */
  async write(id: string, path: string, source: AsyncIterable<Uint8Array>, user?: string, mode?: number): Promise<{ size: number; path: string }> {
    const client = await this.sandboxes.guest(id, 'files');
    const { id: stream, result } = client.call('file.write', { path, user, mode });
    return sendBody(client, stream, source, result);
  }

  /** Streams a tar archive into the directory `path` (guest dirs.ts); it appears whole, or not at all. */
  async writeDir(id: string, path: string, source: AsyncIterable<Uint8Array>, user?: string, exists?: DirExistsPolicy): Promise<DirUploadResult> {
    const client = await this.sandboxes.guest(id, 'files');
    const { id: stream, result } = client.call('dir.write', { path, user, exists });
    return sendBody(client, stream, source, result);
  }

  /** The directory `path` as a tar stream, of a length nobody knows ahead. */
  async readDir(id: string, path: string, user?: string): Promise<Readable> {
    const client = await this.sandboxes.guest(id, 'files');
    const { id: stream, result } = client.call('dir.read', { path, user });
    const body = client.readableFor(stream);
    try {
      await result;
      return body;
    } catch (err) {
      body.destroy();
      throw err;
    }
  }

  async stat(id: string, path: string, user?: string): Promise<FileStat> {
    return (await this.sandboxes.guest(id, 'files')).request('fs.stat', { path, user });
  }

  async list(id: string, path: string, depth?: number, user?: string): Promise<FileStat[]> {
    return (await (await this.sandboxes.guest(id, 'files')).request('fs.list', { path, depth, user })).entries;
  }

  async mkdir(id: string, path: string, user?: string): Promise<FileStat> {
    return (await this.sandboxes.guest(id, 'files')).request('fs.mkdir', { path, user });
  }

  async move(id: string, from: string, to: string, user?: string): Promise<FileStat> {
    return (await this.sandboxes.guest(id, 'files')).request('fs.move', { from, to, user });
  }

  async remove(id: string, path: string, user?: string): Promise<boolean> {
    return (await (await this.sandboxes.guest(id, 'files')).request('fs.remove', { path, user })).removed;
  }
}

/**
 * Sends an upload's body on `stream` in full Data frames, then End, and returns the agent's
 * answer, which comes after End. When the agent refuses midway, its reason is the error.
 */
async function sendBody<T>(client: GuestClient, stream: number, source: AsyncIterable<Uint8Array>, result: Promise<T>): Promise<T> {
  let failed: Error | undefined;
  result.catch((err: Error) => (failed = err));
  try {
    // HTTP bodies arrive in socket-read pieces (up to 64 KiB); gathering them into full
    // frames means a quarter of the frames, and the agent writes the file in bigger steps.
    let batch: Buffer[] = [];
    let batched = 0;
    for await (const chunk of source) {
      if (failed) break;
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
  } catch (err) {
    client.notify('cancel', { stream });
    // When the agent refused the write, its reason beats the sender's "stream closed".
    throw failed ?? err;
  }
  if (failed) throw failed;
  client.sendEnd(stream);
  return result;
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

/**
 * Passes on exactly `size` bytes or fails. The size becomes the response's Content-Length, so
 * a byte more would corrupt the client's connection and a byte less would leave it waiting;
 * failing instead aborts the response, which the client sees as an incomplete body.
 */
function exactly(size: number, source: Readable): Readable {
  let seen = 0;
  const guard = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      if (seen > size) done(new WarrenError('internal', `the file grew past its announced ${size} bytes while being read`));
      else done(null, chunk);
    },
    flush(done) {
      done(seen === size ? null : new WarrenError('internal', `the file ended after ${seen} of its announced ${size} bytes`));
    },
  });
  // Destroying either side (the HTTP client went away, or a mismatch) destroys the other,
  // which cancels the agent's stream.
  pipeline(source, guard, () => undefined);
  return guard;
}
