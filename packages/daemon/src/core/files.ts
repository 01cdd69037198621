/** File access inside a sandbox, streamed both ways through the guest channel. */
import type { Readable } from 'node:stream';
import type { FileStat } from '@warren/protocol';
import type { SandboxService } from './sandboxes.js';

export class FileService {
  constructor(private sandboxes: SandboxService) {}

  async read(id: string, path: string, user?: string): Promise<{ size: number; body: Readable }> {
    const client = this.sandboxes.guest(id, 'files');
    const { id: stream, result } = client.call('file.read', { path, user });
    // Register the reader before any Data frame can arrive (they follow the response).
    const body = client.readableFor(stream);
    try {
      const { size } = await result;
      return { size, body };
    } catch (err) {
      body.destroy();
      throw err;
    }
  }

  /** Streams `source` into the file; the file appears whole, or not at all. */
  async write(id: string, path: string, source: AsyncIterable<Uint8Array>, user?: string, mode?: number): Promise<{ size: number; path: string }> {
    const client = this.sandboxes.guest(id, 'files');
    const { id: stream, result } = client.call('file.write', { path, user, mode });
    let failed: Error | undefined;
    result.catch((err: Error) => (failed = err));
    try {
      for await (const chunk of source) {
        if (failed) break;
        await client.sendData(stream, Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      }
    } catch (err) {
      client.notify('cancel', { stream });
      throw err;
    }
    if (failed) throw failed;
    client.sendEnd(stream);
    return result;
  }

  async stat(id: string, path: string, user?: string): Promise<FileStat> {
    return this.sandboxes.guest(id, 'files').request('fs.stat', { path, user });
  }

  async list(id: string, path: string, depth?: number, user?: string): Promise<FileStat[]> {
    return (await this.sandboxes.guest(id, 'files').request('fs.list', { path, depth, user })).entries;
  }

  async mkdir(id: string, path: string, user?: string): Promise<FileStat> {
    return this.sandboxes.guest(id, 'files').request('fs.mkdir', { path, user });
  }

  async move(id: string, from: string, to: string, user?: string): Promise<FileStat> {
    return this.sandboxes.guest(id, 'files').request('fs.move', { from, to, user });
  }

  async remove(id: string, path: string, user?: string): Promise<boolean> {
    return (await this.sandboxes.guest(id, 'files').request('fs.remove', { path, user })).removed;
  }
}
