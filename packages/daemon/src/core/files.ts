/** File access inside a sandbox, streamed both ways through the guest channel. */
import { Transform, pipeline, type Readable } from 'node:stream';
import { WarrenError } from '@warren/protocol';
import type { DirExistsPolicy, DirUploadResult, FileStat } from '@warren/protocol';
import type { SandboxService } from './sandboxes.js';
import { upload } from './upload.js';

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
    return upload(await this.sandboxes.guest(id, 'files'), 'file.write', { path, user, mode }, source);
  }

  /** Streams a tar archive into the directory `path` (guest dirs.ts); it appears whole, or not at all. */
  async writeDir(id: string, path: string, source: AsyncIterable<Uint8Array>, user?: string, exists?: DirExistsPolicy): Promise<DirUploadResult> {
    return upload(await this.sandboxes.guest(id, 'files'), 'dir.write', { path, user, exists }, source);
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
