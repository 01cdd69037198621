/** Low-level HTTP client: base URL, API key, JSON and streaming requests, error mapping. */
import { readFileSync } from 'node:fs';
import http, { type IncomingMessage } from 'node:http';
import path from 'node:path';
import { errorFromBody, NetworkError } from './errors.js';

export interface ConnectionOptions {
  /** Daemon URL; default $WARREN_URL or http://127.0.0.1:7070. */
  url?: string;
  /** API key; default $WARREN_API_KEY, else the admin key file under $WARREN_HOME when readable. */
  apiKey?: string;
  /**
   * Certificates (PEM) to trust for an https daemon URL, e.g. the daemon's self-signed one;
   * default: the file $WARREN_CA_FILE names, else the system's.
   */
  ca?: string | Buffer;
}

/** The CA a connection trusts beyond the system's: given, else $WARREN_CA_FILE's content. */
function resolveCa(explicit?: string | Buffer): string | Buffer | undefined {
  if (explicit) return explicit;
  const file = process.env.WARREN_CA_FILE;
  if (!file) return undefined;
  try {
    return readFileSync(file);
  } catch (err) {
    throw new NetworkError('network', `cannot read WARREN_CA_FILE ${file}: ${(err as Error).message}`, { cause: err });
  }
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
  /** Extra trusted certificates for https (undefined: the system's). */
  readonly ca?: string | Buffer;
  private dispatcher?: Promise<unknown>;

  constructor(opts: ConnectionOptions = {}) {
    this.url = (opts.url ?? process.env.WARREN_URL ?? DEFAULT_URL).replace(/\/+$/, '');
    this.apiKey = resolveApiKey(opts.apiKey);
    const ca = this.url.startsWith('https:') ? resolveCa(opts.ca) : undefined;
    if (ca) this.ca = ca;
  }

  /**
   * fetch with the connection's CA: Node's own fetch takes no CA per request, so a client
   * with one uses undici's fetch and an agent that trusts it (made once per client).
   */
  private async fetchWith(url: URL, init: RequestInit): Promise<Response> {
    if (!this.ca) return fetch(url, init);
    const undici = await import('undici');
    this.dispatcher ??= Promise.resolve(new undici.Agent({ connect: { ca: this.ca } }));
    const dispatcher = (await this.dispatcher) as InstanceType<typeof undici.Agent>;
    return (await undici.fetch(url, { ...(init as object), dispatcher } as Parameters<typeof undici.fetch>[1])) as unknown as Response;
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
    const url = this.urlFor(route, init.query);
    const headers = this.headersFor(init.headers);
    let body = init.body;
    if (init.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(init.json);
    }
    const send = () => {
      const b = typeof body === 'function' ? body() : body;
      return this.fetchWith(url, { method, headers, body: b, ...(b instanceof ReadableStream ? { duplex: 'half' } : {}) } as RequestInit);
    };
    // A pooled keep-alive connection can be closed by the daemon just as a request is put on
    // it (its idle timeout, or a busy client that noticed late). Like most HTTP clients, send
    // once more on a fresh connection when doing so cannot apply a change twice.
    const res = await this.exchange(send, replayable(method, body));
    if (!res.ok) throw errorOf(res.status, await res.text());
    return res;
  }

  /**
   * A GET whose body comes back as a Node stream, for large downloads. It goes through
   * node:http rather than fetch: fetch copies every chunk into its parser's memory and out
   * again, then passes it through a web stream, which cost the client more CPU than the
   * rest of a 100 MiB download's path on the host.
   */
  async download(route: string, query: Record<string, string | number | undefined> = {}): Promise<IncomingMessage> {
    const url = this.urlFor(route, query);
    const headers = this.headersFor();
    const transport = await transportFor(url);
    const send = () =>
      new Promise<IncomingMessage>((resolve, reject) => {
        transport.get(url, { headers, ...this.tlsOptions() }, resolve).on('error', reject);
      });
    const res = await this.exchange(send, true);
    const status = res.statusCode ?? 0;
    if (status >= 200 && status < 300) return res;
    throw errorOf(status, await textOf(res));
  }

  /**
   * A request whose answer is JSON. Without a streamed body it goes through node:http, not
   * fetch: the first fetch of a process loads and compiles Node's fetch client, which cost a
   * one-shot `warren ls` more than all of its own work (docs/cli.md, start-up).
   */
  async json<T>(method: string, route: string, init: Parameters<HttpClient['request']>[2] = {}): Promise<T> {
    if (init.body !== undefined) {
      const res = await this.request(method, route, init);
      if (res.status === 204) return undefined as T;
      return (await res.json()) as T;
    }
    const url = this.urlFor(route, init.query);
    const headers = this.headersFor(init.headers);
    let payload: string | undefined;
    if (init.json !== undefined) {
      payload = JSON.stringify(init.json);
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(payload));
    }
    const transport = await transportFor(url);
    const send = () =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = transport.request(url, { method, headers, ...this.tlsOptions() }, (res) => {
          textOf(res).then((text) => resolve({ status: res.statusCode ?? 0, text }), reject);
        });
        req.on('error', reject);
        req.end(payload);
      });
    const answer = await this.exchange(send, replayable(method, payload));
    if (answer.status < 200 || answer.status >= 300) throw errorOf(answer.status, answer.text);
    if (answer.status === 204 || answer.text === '') return undefined as T;
    return JSON.parse(answer.text) as T;
  }

  /**
   * Sends; on a stale keep-alive connection sends once more when the request may be replayed
   * (see replayable). Any failure to get an answer is a NetworkError naming the daemon.
   */
  private async exchange<T>(send: () => Promise<T>, canReplay: boolean): Promise<T> {
    try {
      try {
        return await send();
      } catch (err) {
        if (!canReplay || !isStaleConnection(err)) throw err;
        return await send();
      }
    } catch (err) {
      // fetch puts the reason (ECONNREFUSED...) on the error's cause, node:http on the error.
      const why = (err as Error).cause ?? (err as Error).message;
      throw new NetworkError('network', `cannot reach warren daemon at ${this.url}: ${String(why)}`, { cause: err });
    }
  }

  /** URL (ws: or wss:) and headers for a WebSocket to the daemon (terminals: pty.ts). */
  socketTarget(route: string, query: URLSearchParams = new URLSearchParams()): { url: string; headers: Record<string, string>; ca?: string | Buffer } {
    const url = new URL(this.url + route);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.search = query.toString();
    return { url: url.toString(), headers: this.headersFor(), ...this.tlsOptions() };
  }

  /** node:https options for the connection's CA. */
  private tlsOptions(): { ca?: string | Buffer } {
    return this.ca ? { ca: this.ca } : {};
  }

  private urlFor(route: string, query: Record<string, string | number | undefined> = {}): URL {
    const url = new URL(this.url + route);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    return url;
  }

  private headersFor(extra: Record<string, string> = {}): Record<string, string> {
    const headers: Record<string, string> = { ...extra };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    return headers;
  }
}

/**
 * node:https only for an https daemon URL: loading it pulls in TLS and crypto, about 5-10 ms
 * of every one-shot CLI start on the 2-core machine, and the daemon is usually plain http on
 * loopback.
 */
async function transportFor(url: URL): Promise<Pick<typeof http, 'get' | 'request'>> {
  return url.protocol === 'https:' ? await import('node:https') : http;
}

async function textOf(res: IncomingMessage): Promise<string> {
  let text = '';
  res.setEncoding('utf8');
  for await (const chunk of res) text += chunk as string;
  return text;
}

/** The typed error of a failed answer; a body that is not JSON becomes its message. */
function errorOf(status: number, text: string): Error {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = { error: { message: text || `HTTP ${status}` } };
  }
  return errorFromBody(status, parsed);
}

/**
 * Whether sending the request again is harmless: reads, deletes (the daemon closes an idle
 * connection only between requests, so a request that met a closed one was never handled; a
 * kill or remove that did happen twice answers 404), and uploads of whole in-memory bodies
 * or of body factories (a file write replaces the file atomically). A stream that was passed
 * in cannot be re-read.
 */
function replayable(method: string, body: BodyInit | (() => BodyInit) | undefined): boolean {
  if (method === 'GET' || method === 'HEAD' || method === 'DELETE') return true;
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

export { ndjson } from '@warren/protocol';
