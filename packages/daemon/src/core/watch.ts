/**
 * File watches inside a sandbox (the agent's fs.watch, docs/api.md): the agent's NDJSON
 * lines are read back, checked and handed on as WatchEvents. The agent is untrusted: a line
 * that is not a well-formed change is dropped, and one longer than MAX_LINE_CHARS ends the
 * watch instead of growing daemon memory.
 */
import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { WarrenError, type WatchEvent } from '@warren/protocol';
import type { SandboxService } from './sandboxes.js';

const MAX_LINE_CHARS = 16 * 1024;
const MAX_PATH_CHARS = 4096;
const CHANGE_TYPES = new Set(['create', 'write', 'remove', 'rename']);

export interface OpenWatch {
  /** The watched path, absolute inside the sandbox. */
  path: string;
  isDir: boolean;
  /**
   * Changes as they come, then one `error` event that says why the watch ended (the path was
   * removed, the sandbox died). Reading slowly slows the agent, which coalesces meanwhile.
   */
  events: AsyncIterable<WatchEvent>;
  /** Stops the watch inside the sandbox. */
  close(): void;
}

export class WatchService {
  constructor(private sandboxes: SandboxService) {}

  async open(id: string, path: string, opts: { recursive?: boolean; user?: string } = {}): Promise<OpenWatch> {
    const client = await this.sandboxes.guest(id, 'files');
    const { id: stream, result } = client.call('fs.watch', { path, recursive: opts.recursive, user: opts.user });
    // Registered before any Data frame can arrive (they follow the answer).
    const body = client.readableFor(stream);
    let root: { path: string; isDir: boolean };
    try {
      root = await result;
    } catch (err) {
      body.destroy();
      throw err;
    }
    return { ...root, events: eventsOf(body, root.path), close: () => body.destroy() };
  }
}

async function* eventsOf(body: Readable, root: string): AsyncGenerator<WatchEvent> {
  const decoder = new StringDecoder('utf8');
  let buffered = '';
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      buffered += decoder.write(chunk);
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const event = checked(buffered.slice(0, nl));
        buffered = buffered.slice(nl + 1);
        if (event) yield event;
      }
      if (buffered.length > MAX_LINE_CHARS) throw new WarrenError('internal', `the sandbox agent sent a watch event longer than ${MAX_LINE_CHARS} characters`);
    }
  } catch (err) {
    if (body.destroyed && !(err instanceof WarrenError)) return; // closed by our side
    const e = err instanceof WarrenError ? err : new WarrenError('internal', (err as Error).message);
    yield { type: 'error', code: e.code, message: e.message };
    return;
  }
  // The agent ends the stream only when the watched path itself is gone.
  yield { type: 'error', code: 'not_found', message: `${root} was removed; the watch has ended` };
}

function isPath(v: unknown): v is string {
  return typeof v === 'string' && v.startsWith('/') && v.length <= MAX_PATH_CHARS;
}

/** The event a line describes, or undefined for anything else. */
function checked(line: string): WatchEvent | undefined {
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (v === null || typeof v !== 'object') return undefined;
  if (v.type === 'overflow') return { type: 'overflow', message: String(v.message ?? '').slice(0, 500) };
  if (typeof v.type !== 'string' || !CHANGE_TYPES.has(v.type) || !isPath(v.path)) return undefined;
  const event: WatchEvent = { type: v.type as 'create', path: v.path };
  if (v.type === 'rename' && isPath(v.oldPath)) event.oldPath = v.oldPath;
  if (typeof v.isDir === 'boolean') event.isDir = v.isDir;
  return event;
}
