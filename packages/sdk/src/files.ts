/** Files inside a sandbox. Reads and writes stream; nothing is held whole in memory. */
import { Readable } from 'node:stream';
import type { DirExistsPolicy, DirUploadResult, FileStat, WriteManyResult } from '@warren/protocol';
import type { HttpClient } from './client.js';
import { extractDir, packDir, type DirProgress } from './dirs.js';
import { uploadBody, type WriteData } from './upload-body.js';
import { openWatch, type FileWatch, type FileWatchEvent, type WatchOptions } from './watch.js';

export interface FileOptions {
  /** Act as this user (default `user`); relative paths resolve against their home. */
  user?: string;
}

export type { WriteData } from './upload-body.js';

/** Options of uploadDir and downloadDir. */
export interface DirOptions extends FileOptions {
  /** When the destination directory exists: 'merge' (default), 'replace' or 'error' (docs/files.md). */
  exists?: DirExistsPolicy;
  /** Called as bytes go (upload: bytes sent, files packed; download: bytes received, files extracted). */
  onProgress?: (p: DirProgress) => void;
}

export class Files {
  constructor(
    private http: HttpClient,
    private sandboxId: string,
  ) {}

  private get base(): string {
    return `/v1/sandboxes/${this.sandboxId}/files`;
  }

  /** The whole file as bytes. For large files prefer `readStream`. */
  async read(path: string, opts: FileOptions = {}): Promise<Buffer> {
    const res = await this.http.request('GET', this.base, { query: { path, user: opts.user } });
    return Buffer.from(await res.arrayBuffer());
  }

  async readText(path: string, opts: FileOptions = {}): Promise<string> {
    return (await this.read(path, opts)).toString('utf8');
  }

  /**
   * The file as a Node stream, for files of any size. A transfer cut short (the sandbox
   * died, the file changed size while being read) ends the stream with an error.
   * @example await pipeline(await sbx.files.readStream('/work/out.tar'), createWriteStream('out.tar'))
   */
  async readStream(path: string, opts: FileOptions = {}): Promise<Readable> {
    return this.http.download(this.base, { path, user: opts.user });
  }

  /**
   * Writes a file (created or replaced whole, atomically). `data` may be a string, bytes or
   * a stream; streams are sent as they are read.
   * @example await sbx.files.write('/work/fix.patch', patchBytes)
   */
  async write(path: string, data: WriteData, opts: FileOptions & { mode?: number } = {}): Promise<{ size: number; path: string }> {
    const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
    const { body, length } = uploadBody(data);
    if (length !== undefined) headers['content-length'] = String(length);
    return this.http.json('PUT', this.base, {
      body,
      query: { path, user: opts.user, mode: opts.mode?.toString(8) },
      headers,
    });
  }

  async list(path: string, opts: FileOptions & { depth?: number } = {}): Promise<FileStat[]> {
    return (await this.http.json<{ entries: FileStat[] }>('GET', `${this.base}/list`, { query: { path, depth: opts.depth, user: opts.user } })).entries;
  }

  stat(path: string, opts: FileOptions = {}): Promise<FileStat> {
    return this.http.json('GET', `${this.base}/stat`, { query: { path, user: opts.user } });
  }

  async exists(path: string, opts: FileOptions = {}): Promise<boolean> {
    return (await this.http.json<{ exists: boolean }>('GET', `${this.base}/exists`, { query: { path, user: opts.user } })).exists;
  }

  /** mkdir -p */
  mkdir(path: string, opts: FileOptions = {}): Promise<FileStat> {
    return this.http.json('POST', `${this.base}/mkdir`, { json: { path }, query: { user: opts.user } });
  }

  move(from: string, to: string, opts: FileOptions = {}): Promise<FileStat> {
    return this.http.json('POST', `${this.base}/move`, { json: { from, to }, query: { user: opts.user } });
  }

  /**
   * Watches a file or directory for changes made inside the sandbox; resolves once the watch
   * is in place. An open watch keeps the sandbox awake (docs/api.md); close it when done.
   * @example
   * const w = await sbx.files.watch('/work', { recursive: true }, (e) => console.log(e.type, e.path));
   * ...
   * w.close();
   */
  watch(path: string, opts: WatchOptions = {}, onEvent?: (event: FileWatchEvent) => void): Promise<FileWatch> {
    return openWatch(this.http, this.sandboxId, path, opts, onEvent);
  }

  /** Removes a file or a directory tree; false if it did not exist. */
  async remove(path: string, opts: FileOptions = {}): Promise<boolean> {
    return (await this.http.json<{ removed: boolean }>('DELETE', this.base, { query: { path, user: opts.user } })).removed;
  }

  /**
   * Uploads the local directory `localDir` as `remoteDir` (streamed as tar; modes, symlinks and
   * times kept). The sandbox checks every member and extracts into a temporary directory
   * first: the upload appears whole, or not at all. An existing `remoteDir` is merged into
   * unless `exists` says otherwise.
   * @example await sbx.files.uploadDir('./src', '/work/src')
   */
  uploadDir(localDir: string, remoteDir: string, opts: DirOptions = {}): Promise<DirUploadResult> {
    const body = Readable.toWeb(packDir(localDir, opts.onProgress)) as unknown as BodyInit;
    return this.http.json('PUT', `${this.base}/dir`, {
      body,
      query: { path: remoteDir, user: opts.user, exists: opts.exists },
      headers: { 'content-type': 'application/x-tar' },
    });
  }

  /**
   * Downloads the sandbox directory `remoteDir` to `localDir`. The archive is checked as it
   * arrives (no absolute names, no `..`, no link leading outside) and extracted beside
   * `localDir` first; nothing is written outside `localDir`.
   * @example await sbx.files.downloadDir('/work/out', './out')
   */
  async downloadDir(remoteDir: string, localDir: string, opts: DirOptions = {}): Promise<void> {
    const body = await this.http.download(`${this.base}/dir`, { path: remoteDir, user: opts.user });
    await extractDir(body, localDir, opts.exists, opts.onProgress);
  }

  /**
   * Writes several files in one call, one after another, each created or replaced whole.
   * A failure names the file; the ones before it stay written. At most 16 MiB in all.
   * @example await sbx.files.writeMany([{ path: 'a.txt', data: 'A' }, { path: '/work/run.sh', data: script, mode: 0o755 }])
   */
  async writeMany(entries: Array<{ path: string; data: string | Uint8Array; mode?: number }>, opts: FileOptions = {}): Promise<WriteManyResult> {
    const files = entries.map((e) => ({
      path: e.path,
      data: Buffer.from(typeof e.data === 'string' ? Buffer.from(e.data, 'utf8') : e.data).toString('base64'),
      ...(e.mode === undefined ? {} : { mode: e.mode }),
    }));
    return this.http.json('POST', `${this.base}/batch`, { json: { files }, query: { user: opts.user } });
  }
}
