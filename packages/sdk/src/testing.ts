/**
 * A fake warren daemon for unit tests of code that talks to the daemon (the SDK's own, the
 * CLI's): a real node:http server on 127.0.0.1 that records every request and answers with
 * canned replies, so a test sees exactly what went over the wire. `@warren/sdk/testing`; not
 * something applications need.
 */
import http, { type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { SandboxInfo } from '@warren/protocol';

export interface RecordedRequest {
  method: string;
  /** The path without the query. */
  path: string;
  query: Record<string, string>;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** The body parsed as JSON; undefined when it is empty or not JSON. */
  json: unknown;
}

/**
 * How the fake answers: a status with a JSON or text body, an NDJSON stream of events,
 * `'drop'` (close the connection without answering, as a daemon closing an idle keep-alive
 * connection does), or a function that answers itself.
 */
export type Reply =
  | { status?: number; json?: unknown; text?: string; headers?: Record<string, string> }
  | { ndjson: unknown[] }
  | 'drop'
  | ((req: RecordedRequest, res: ServerResponse) => void);

export class FakeDaemon {
  readonly requests: RecordedRequest[] = [];
  private readonly routes = new Map<string, Reply[]>();

  private constructor(
    private readonly server: http.Server,
    /** `http://127.0.0.1:<port>` */
    readonly url: string,
  ) {}

  /** Listens on 127.0.0.1, on a free port. */
  static async start(): Promise<FakeDaemon> {
    let fake: FakeDaemon | undefined;
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => fake?.answer(req.method ?? 'GET', req.url ?? '/', req.headers, Buffer.concat(chunks), res));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', resolve);
    });
    fake = new FakeDaemon(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    return fake;
  }

  /**
   * Answers `method path` (the path without its query) with these replies in turn; the last
   * one repeats; none is an empty 204. Unrouted requests get a 404 not_found that names them.
   */
  on(method: string, path: string, ...replies: Reply[]): this {
    this.routes.set(`${method} ${path}`, replies.length ? replies : [{}]);
    return this;
  }

  /** The requests to `method path`, oldest first. */
  sent(method: string, path: string): RecordedRequest[] {
    return this.requests.filter((r) => r.method === method && r.path === path);
  }

  /** Forgets recorded requests and routes (between tests). */
  reset(): void {
    this.requests.length = 0;
    this.routes.clear();
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private answer(method: string, rawUrl: string, headers: IncomingHttpHeaders, body: Buffer, res: ServerResponse): void {
    const url = new URL(rawUrl, this.url);
    let json: unknown;
    try {
      json = body.length ? JSON.parse(body.toString('utf8')) : undefined;
    } catch {
      json = undefined;
    }
    const req: RecordedRequest = { method, path: url.pathname, query: Object.fromEntries(url.searchParams), headers, body, json };
    this.requests.push(req);
    const replies = this.routes.get(`${method} ${url.pathname}`);
    const reply: Reply = (replies && (replies.length > 1 ? replies.shift() : replies[0])) ?? {
      status: 404,
      json: { error: { code: 'not_found', message: `fake daemon: no route for ${method} ${url.pathname}` } },
    };
    if (reply === 'drop') {
      res.socket?.destroy();
      return;
    }
    if (typeof reply === 'function') {
      reply(req, res);
      return;
    }
    if ('ndjson' in reply) {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.end(reply.ndjson.map((e) => `${JSON.stringify(e)}\n`).join(''));
      return;
    }
    const status = reply.status ?? (reply.json === undefined && reply.text === undefined ? 204 : 200);
    if (reply.json !== undefined) {
      res.writeHead(status, { 'content-type': 'application/json', ...reply.headers });
      res.end(JSON.stringify(reply.json));
    } else {
      res.writeHead(status, { 'content-type': 'text/plain', ...reply.headers });
      res.end(reply.text ?? '');
    }
  }
}

/** A sandbox as the daemon describes it, with `over` laid on top. */
export function sandboxInfo(id = 'sb-test1', over: Partial<SandboxInfo> = {}): SandboxInfo {
  return {
    id,
    template: 'base',
    templateVersion: 'v1',
    boot: 'cold',
    state: 'running',
    createdAt: '2024-05-01T12:00:00.000Z',
    expiresAt: '2024-05-01T13:00:00.000Z',
    metadata: {},
    resources: { cpus: 1, memoryMB: 512, pids: 256, diskMB: 1024 },
    ...over,
  };
}
