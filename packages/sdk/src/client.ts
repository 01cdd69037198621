/** Low-level HTTP client: base URL, API key, JSON and streaming requests, error mapping. */
import { readFileSync } from 'node:fs';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { errorFromBody, NetworkError } from './errors.js';

export interface ConnectionOptions {
  /** Daemon URL; default $WARREN_URL or http://127.0.0.1:7070. */
  url?: string;
  /** API key; default $WARREN_API_KEY, else the admin key file under $WARREN_HOME when readable. */
  apiKey?: string;
}

const DEFAULT_URL = 'http://127.0.0.1:7070';

export function resolveApiKey(explicit?: string): string | undefined {
  if (explicit) return explicit;
  if (process.env.WARREN_API_KEY) return process.env.WARREN_API_KEY;
  const home = process.env.WARREN_HOME ?? '/var/lib/warren';
  try {
    return readFileSync(path.join(home, 'admin.key'), 'utf8').trim();
  } catch {
    return undefined;
  }
}

export class HttpClient {
  readonly url: string;
  private apiKey?: string;

  constructor(opts: ConnectionOptions = {}) {
    this.url = (opts.url ?? process.env.WARREN_URL ?? DEFAULT_URL).replace(/\/+$/, '');
    this.apiKey = resolveApiKey(opts.apiKey);
  }

  /**
   * `body` may be a function that makes a fresh body for each attempt: a stream made that way
   * can be sent again when a stale connection forces a retry, as an in-memory body can.
   */
  async request(
    method: string,
    route: string,
    init: { json?: unknown; body?: BodyInit | (() => BodyInit); query?: Record<string, string | number | undefined>; headers?: Record<string, string> } = {},
  ): Promise<Response> {
    const url = new URL(this.url + route);
    for (const [k, v] of Object.entries(init.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const headers: Record<string, string> = { ...(init.headers ?? {}) };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    let body = init.body;
    if (init.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(init.json);
    }
    const send = () => {
      const b = typeof body === 'function' ? body() : body;
      return fetch(url, { method, headers, body: b, ...(b instanceof ReadableStream ? { duplex: 'half' } : {}) } as RequestInit);
    };
    let res: Response;
    try {
      try {
        res = await send();
      } catch (err) {
        // A pooled keep-alive connection can be closed by the daemon just as a request is put
        // on it (its idle timeout, or a busy client that noticed late). Like most HTTP clients,
        // send once more on a fresh connection when doing so cannot apply a change twice.
        if (!replayable(method, body) || !isStaleConnection(err)) throw err;
        res = await send();
      }
    } catch (err) {
      throw new NetworkError('network', `cannot reach warren daemon at ${this.url}: ${(err as Error).cause ?? (err as Error).message}`, { cause: err });
    }
    if (!res.ok) {
      const text = await res.text();
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = { error: { message: text || `HTTP ${res.status}` } };
      }
      throw errorFromBody(res.status, parsed);
    }
    return res;
  }

  /**
   * A GET whose body comes back as a Node stream, for large downloads. It goes through
   * node:http rather than fetch: fetch copies every chunk into its parser's memory and out
   * again, then passes it through a web stream, which cost the client more CPU than the
   * rest of a 100 MiB download's path on the host.
   */
  async download(route: string, query: Record<string, string | number | undefined> = {}): Promise<IncomingMessage> {
    const url = new URL(this.url + route);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    const headers: Record<string, string> = this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {};
    const send = () =>
      new Promise<IncomingMessage>((resolve, reject) => {
        (url.protocol === 'https:' ? https : http).get(url, { headers }, resolve).on('error', reject);
      });
    let res: IncomingMessage;
    try {
      try {
        res = await send();
      } catch (err) {
        // As in request(): a stale keep-alive connection; a GET is safe to send again.
        if (!isStaleConnection(err)) throw err;
        res = await send();
      }
    } catch (err) {
      throw new NetworkError('network', `cannot reach warren daemon at ${this.url}: ${(err as Error).message}`, { cause: err });
    }
    const status = res.statusCode ?? 0;
    if (status >= 200 && status < 300) return res;
    let text = '';
    for await (const chunk of res) text += (chunk as Buffer).toString('utf8');
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = { error: { message: text || `HTTP ${status}` } };
    }
    throw errorFromBody(status, parsed);
  }

  async json<T>(method: string, route: string, init: Parameters<HttpClient['request']>[2] = {}): Promise<T> {
    const res = await this.request(method, route, init);
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }
}

/**
 * Whether sending the request again is harmless: reads, and uploads of whole in-memory
 * bodies or of body factories (a file write replaces the file atomically). A stream that was
 * passed in cannot be re-read.
 */
function replayable(method: string, body: BodyInit | (() => BodyInit) | undefined): boolean {
  if (method === 'GET' || method === 'HEAD') return true;
  return method === 'PUT' && (typeof body === 'string' || body instanceof Uint8Array || typeof body === 'function');
}

/**
 * The connection failed under the request before any response: closed or reset by the peer.
 * fetch puts the code on the error's cause, node:http on the error itself.
 */
function isStaleConnection(err: unknown): boolean {
  const code = ((err as Error).cause as { code?: string } | undefined)?.code ?? (err as { code?: string }).code;
  return code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE';
}

/** Parses an NDJSON response body line by line. */
export async function* ndjson<T>(res: Response): AsyncGenerator<T> {
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      if (line.trim()) yield JSON.parse(line) as T;
    }
  }
  if (buffered.trim()) yield JSON.parse(buffered) as T;
}
