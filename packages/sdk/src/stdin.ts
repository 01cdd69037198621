/**
 * Stdin of any size and content for commands: bytes and streams go as the raw body of
 * `PUT /processes/:pid/stdin`, which the daemon feeds to the command as it reads (paced by
 * it, never buffered whole). The Python SDK's stdin.py does the same.
 */
import { Readable } from 'node:stream';
import type { StdinStreamResult } from '@warren/protocol';
import type { HttpClient } from './client.js';
import { uploadBody, type WriteData } from './upload-body.js';

/** What a command's stdin may be: text, bytes, or a stream of bytes (Node, web, async iterable). */
export type StdinData = WriteData;

/**
 * Streams `data` into a process's stdin; `close`: stdin is closed at the end. Returns the
 * bytes written. Never sent twice: a retry after a broken connection could feed the command
 * some bytes twice, so even in-memory data goes as a one-shot stream.
 */
export async function putStdin(http: HttpClient, processRoute: string, data: StdinData, close: boolean): Promise<number> {
  const { body, length } = uploadBody(data);
  const made = typeof body === 'function' ? body() : body;
  const once = made instanceof ReadableStream ? made : (Readable.toWeb(Readable.from([made as string | Uint8Array])) as unknown as ReadableStream<Uint8Array>);
  const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
  if (length !== undefined) headers['content-length'] = String(length);
  const r = await http.json<StdinStreamResult>('PUT', `${processRoute}/stdin`, { body: once, query: { close: close ? 1 : 0 }, headers });
  return r.bytes;
}
