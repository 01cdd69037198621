/**
 * File watches: changes inside a sandbox as they happen (GET /files/watch, NDJSON). The
 * Python SDK's `files.watch` (warren/watch.py) reads the same stream the same way: `ready`
 * first, keepalives skipped, an `error` line ends the watch with that error.
 */
import type { IncomingMessage } from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import type { WatchChange, WatchEvent } from '@warren/protocol';
import type { HttpClient } from './client.js';
import { errorFromBody, UnavailableError, type WarrenError } from './errors.js';

/** A change, or `overflow`: changes were dropped (a reader too slow); look at the tree again. */
export type FileWatchEvent = WatchChange | { type: 'overflow'; message: string };

export interface WatchOptions {
  /** Watch the whole tree under a directory, including directories made later. */
  recursive?: boolean;
  /** Watch as this user (default `user`): only what the user may list is seen. */
  user?: string;
}

/**
 * An open watch. Events go to the callback given to `files.watch`, and to a `for await` over
 * the watch while it iterates; without a callback they wait for the iteration.
 */
export class FileWatch implements AsyncIterable<FileWatchEvent> {
  /** The watched path, absolute inside the sandbox. */
  path = '';
  isDir = false;
  /**
   * Settles when the watch ends: with undefined after close(), or with the error that ended
   * it (NotFoundError: the watched path was removed; UnavailableError: the sandbox stopped).
   */
  readonly done: Promise<WarrenError | undefined>;
  private finish!: (err: WarrenError | undefined) => void;
  private ended = false;
  private closing = false;
  private queue: FileWatchEvent[] = [];
  private waiting?: () => void;
  private error?: WarrenError;
  private iterating = false;

  /** @internal use `sandbox.files.watch` */
  constructor(
    private res: IncomingMessage,
    private onEvent?: (event: FileWatchEvent) => void,
  ) {
    this.done = new Promise((resolve) => (this.finish = resolve));
  }

  /** @internal reads the stream; resolves once the watch is in place. */
  start(): Promise<void> {
    return new Promise((resolve, reject) => {
      const decoder = new StringDecoder('utf8');
      let buffered = '';
      let ready = false;
      const fail = (err: WarrenError) => {
        if (!ready) reject(err);
        this.end(err);
      };
      this.res.on('data', (chunk: Buffer) => {
        buffered += decoder.write(chunk);
        let nl: number;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          if (!line.trim()) continue;
          const e = JSON.parse(line) as WatchEvent;
          if (e.type === 'ready') {
            this.path = e.path;
            this.isDir = e.isDir;
            ready = true;
            resolve();
          } else if (e.type === 'error') {
            fail(errorFromBody(0, { error: { code: e.code, message: e.message } }));
          } else if (e.type !== 'keepalive') this.deliver(e);
        }
      });
      const lost = () => fail(new UnavailableError('unavailable', 'the watch stream ended without a reason (daemon restarted?)'));
      this.res.on('end', lost);
      this.res.on('error', lost);
      this.res.on('close', lost);
    });
  }

  /** Stops the watch; events already received are still iterated. */
  close(): void {
    if (this.ended) return;
    this.closing = true;
    this.end(undefined);
    this.res.destroy();
  }

  private deliver(e: FileWatchEvent): void {
    if (this.ended) return;
    this.onEvent?.(e);
    // Without a callback the events are for iterating, whenever that starts.
    if (this.iterating || !this.onEvent) {
      this.queue.push(e);
      this.wake();
    }
  }

  private end(err: WarrenError | undefined): void {
    if (this.ended) return;
    this.ended = true;
    this.error = this.closing ? undefined : err;
    this.finish(this.error);
    this.wake();
  }

  private wake(): void {
    const w = this.waiting;
    this.waiting = undefined;
    w?.();
  }

  /** Ends after close(); throws the error that ended the watch otherwise. */
  async *[Symbol.asyncIterator](): AsyncGenerator<FileWatchEvent> {
    this.iterating = true;
    try {
      while (true) {
        const e = this.queue.shift();
        if (e) {
          yield e;
          continue;
        }
        if (this.ended) {
          if (this.error) throw this.error;
          return;
        }
        await new Promise<void>((resolve) => (this.waiting = resolve));
      }
    } finally {
      this.iterating = false;
    }
  }
}

/** Opens a watch; resolves once it is in place inside the sandbox. */
export async function openWatch(
  http: HttpClient,
  sandboxId: string,
  path: string,
  opts: WatchOptions,
  onEvent?: (event: FileWatchEvent) => void,
): Promise<FileWatch> {
  const res = await http.download(`/v1/sandboxes/${sandboxId}/files/watch`, { path, recursive: opts.recursive ? 1 : undefined, user: opts.user });
  const watch = new FileWatch(res, onEvent);
  try {
    await watch.start();
  } catch (err) {
    res.destroy();
    throw err;
  }
  return watch;
}
