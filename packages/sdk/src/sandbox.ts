/** The Sandbox class: the SDK's entry point. */
import type {
  AttachedDatabase,
  CreateSandboxRequest,
  EgressEntry,
  EgressList,
  ExecRequest,
  ExecResult,
  ForkResult,
  Metadata,
  NetworkPolicy,
  NetworkPolicyView,
  PortUrl,
  PortForward,
  PortForwardList,
  SandboxDatabase,
  SandboxDatabaseList,
  SandboxInfo,
  SandboxList,
  SandboxState,
  SnapshotInfo,
  ToolCallRequest,
  ToolResult,
  CreateSandboxTokenRequest,
  NewSandboxToken,
  SandboxTokenInfo,
  SandboxTokenList,
} from '@warren/protocol';
import { HttpClient, type ConnectionOptions } from './client.js';
import { CommandError, InternalError } from './errors.js';
import { Files } from './files.js';
import { consumeExecStream, ProcessHandle, Processes, type OutputCallbacks } from './processes.js';
import { Pty } from './pty.js';
import { execWithStdin } from './exec-stdin.js';
import type { StdinData } from './stdin.js';

export interface ExecOptions extends OutputCallbacks {
  cwd?: string;
  env?: Record<string, string>;
  /** Run as this user (default `user`; `root` for passwordless root). */
  user?: string;
  /**
   * Written to stdin, which is then closed: text, or bytes, or a stream of bytes (a Node
   * Readable, a web ReadableStream, an async iterable) sent as the command reads it.
   */
  stdin?: StdinData;
  /** Kill the whole process tree after this long; the result has `timedOut: true`. */
  timeoutSeconds?: number;
  /** Throw a CommandError (with exitCode, stdout, stderr) unless the exit code is 0. */
  check?: boolean;
}

export interface BackgroundOptions extends Omit<ExecOptions, 'check' | 'onStdout' | 'onStderr'> {
  background: true;
  tag?: string;
  /** Keep stdin open for `sendStdin`. */
  keepStdinOpen?: boolean;
}

export type CreateOptions = CreateSandboxRequest & ConnectionOptions;

export interface ForkOptions {
  /** Metadata of the children (default: the parent's). */
  metadata?: Metadata;
  /** TTL of the children, from now (default: the default TTL). */
  ttlSeconds?: number;
  /** Auto-hibernate the children after this many idle seconds (default: as the parent). */
  idleSeconds?: number;
}

export class Sandbox {
  readonly files: Files;
  readonly processes: Processes;
  /** Terminals: `sbx.pty.create({ cols, rows, onData })` (pty.ts). */
  readonly pty: Pty;

  private constructor(
    private http: HttpClient,
    private current: SandboxInfo,
  ) {
    this.files = new Files(http, current.id);
    this.processes = new Processes(http, current.id);
    this.pty = new Pty(http, current.id);
  }

  get id(): string {
    return this.current.id;
  }

  /** The last known state; call `refresh()` for a fresh one. */
  get info(): SandboxInfo {
    return this.current;
  }

  /**
   * Creates a sandbox and returns once it is ready for exec.
   * @example const sbx = await Sandbox.create({ template: 'base', ttlSeconds: 3600, metadata: { task: 'fix-123' } })
   */
  static async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const { url, apiKey, ca, ...req } = opts;
    const http = new HttpClient({ url, apiKey, ...(ca ? { ca } : {}) });
    return new Sandbox(http, await http.json<SandboxInfo>('POST', '/v1/sandboxes', { json: req }));
  }

  /** Attaches to an existing sandbox by id. */
  static async connect(id: string, opts: ConnectionOptions = {}): Promise<Sandbox> {
    const http = new HttpClient(opts);
    return new Sandbox(http, await http.json<SandboxInfo>('GET', `/v1/sandboxes/${encodeURIComponent(id)}`));
  }

  /** Lists sandboxes, optionally filtered by metadata and state; follows pagination. */
  static async list(opts: ConnectionOptions & { metadata?: Record<string, string>; state?: SandboxState } = {}): Promise<SandboxInfo[]> {
    const http = new HttpClient(opts);
    const query: Record<string, string | undefined> = { state: opts.state };
    for (const [k, v] of Object.entries(opts.metadata ?? {})) query[`metadata.${k}`] = v;
    const all: SandboxInfo[] = [];
    let cursor: string | undefined;
    do {
      const page: SandboxList = await http.json('GET', '/v1/sandboxes', { query: { ...query, cursor } });
      all.push(...page.sandboxes);
      cursor = page.nextCursor;
    } while (cursor);
    return all;
  }

  async refresh(): Promise<SandboxInfo> {
    this.current = await this.http.json('GET', `/v1/sandboxes/${this.id}`);
    return this.current;
  }

  /**
   * Runs a command (a shell string run by bash, or an argv array) and returns its result.
   * With `background: true`, returns a ProcessHandle at once instead.
   * @example const r = await sbx.exec('npm test', { timeoutSeconds: 900 })
   * @example await sbx.exec(['git', 'status'], { check: true })
   */
  exec(command: string | string[], opts: BackgroundOptions): Promise<ProcessHandle>;
  exec(command: string | string[], opts?: ExecOptions): Promise<ExecResult>;
  async exec(command: string | string[], opts: ExecOptions | BackgroundOptions = {}): Promise<ExecResult | ProcessHandle> {
    const base: ExecRequest = {
      ...(Array.isArray(command) ? { argv: command } : { cmd: command }),
      cwd: opts.cwd,
      env: opts.env,
      user: opts.user,
      // Text goes in the request; bytes and streams follow it (stdin.ts).
      stdin: typeof opts.stdin === 'string' ? opts.stdin : undefined,
      timeoutSeconds: opts.timeoutSeconds,
    };
    const streamedStdin = opts.stdin !== undefined && typeof opts.stdin !== 'string' ? opts.stdin : undefined;
    const route = `/v1/sandboxes/${this.id}/exec`;
    if ('background' in opts && opts.background) {
      const { pid } = await this.http.json<{ pid: number }>('POST', route, {
        json: { ...base, background: true, tag: opts.tag, keepStdinOpen: opts.keepStdinOpen || streamedStdin !== undefined || undefined },
      });
      const handle = new ProcessHandle(this.http, this.id, pid);
      if (streamedStdin !== undefined) await handle.writeStdin(streamedStdin, { close: !opts.keepStdinOpen });
      return handle;
    }
    const o = opts as ExecOptions;
    // Always the streaming form: its keepalives let commands run longer than fetch's
    // 300-second idle limit, and output can be shown as it comes.
    const result =
      streamedStdin === undefined
        ? await consumeExecStream(await this.http.request('POST', route, { json: base, query: { stream: 1 } }), o)
        : await execWithStdin(this.http, this.id, base, streamedStdin, o);
    if (o.check && (result.exitCode !== 0 || result.timedOut)) {
      throw new CommandError(Array.isArray(command) ? command.join(' ') : command, result);
    }
    return result;
  }

  /** Extends the dead-man's switch: the sandbox now expires `ttlSeconds` from now. */
  async setTtl(ttlSeconds: number): Promise<SandboxInfo> {
    this.current = await this.http.json('POST', `/v1/sandboxes/${this.id}/ttl`, { json: { ttlSeconds } });
    return this.current;
  }

  /**
   * Saves memory, processes and files to disk and frees the sandbox's RAM and host
   * processes. Any later call on it (exec, files, processes) resumes it transparently.
   */
  async hibernate(): Promise<SandboxInfo> {
    this.current = await this.http.json('POST', `/v1/sandboxes/${this.id}/hibernate`);
    return this.current;
  }

  /** Resumes a hibernated sandbox now (any call would also do it). */
  async resume(): Promise<SandboxInfo> {
    this.current = await this.http.json('POST', `/v1/sandboxes/${this.id}/resume`);
    return this.current;
  }

  /**
   * One new sandbox that continues from this instant of this one: same memory, processes
   * and files, its own id and copy-on-write files. This sandbox keeps running.
   * @example const attempt = await sbx.fork({ metadata: { attempt: '1' } })
   */
  async fork(opts: ForkOptions = {}): Promise<Sandbox> {
    const [child] = await this.forkTree(1, opts);
    if (!child) throw new InternalError('internal', 'the daemon answered a fork of one with no sandbox');
    return child;
  }

  /**
   * `count` new sandboxes from the same instant of this one, restored in parallel: best-of-N
   * attempts from one warm state. All or none: if one child fails, none is kept.
   * @example const [a, b, c] = await sbx.forkTree(3)
   */
  async forkTree(count: number, opts: ForkOptions = {}): Promise<Sandbox[]> {
    const r = await this.http.json<ForkResult>('POST', `/v1/sandboxes/${this.id}/fork`, { json: { count, ...opts } });
    return r.sandboxes.map((info) => new Sandbox(this.http, info));
  }

  /**
   * A durable save of this sandbox (memory, processes, files) that keeps running; start new
   * sandboxes from it with `Sandbox.create({ snapshot: snap.id })`.
   */
  async snapshot(opts: { metadata?: Metadata } = {}): Promise<SnapshotInfo> {
    return this.http.json<SnapshotInfo>('POST', `/v1/sandboxes/${this.id}/snapshots`, { json: opts });
  }

  /**
   * A URL on the daemon for a port inside the sandbox (a dev server, a notebook): HTTP and
   * WebSocket, opened in a browser on this machine with the signed token it carries.
   * Traffic resumes a hibernated sandbox.
   * @example const url = await sbx.getUrl(3000) // http://3000-sb-….localhost:7070/?warren_token=…
   */
  async getUrl(port: number, opts: { expiresInSeconds?: number } = {}): Promise<string> {
    return (await this.http.json<PortUrl>('POST', `/v1/sandboxes/${this.id}/ports/${port}/url`, { json: opts })).url;
  }

  /**
   * A TCP listener on the host's loopback (127.0.0.1) whose connections reach `port` inside
   * the sandbox, for clients that speak TCP rather than HTTP (psql, redis-cli). It lasts until
   * `closeForward`, the sandbox's end, or the daemon's restart; asking again answers the open one.
   * @example const { hostPort } = await sbx.forwardPort(5432) // psql -h 127.0.0.1 -p hostPort
   */
  async forwardPort(port: number, opts: { hostPort?: number } = {}): Promise<PortForward> {
    return this.http.json<PortForward>('POST', `/v1/sandboxes/${this.id}/ports/${port}/forward`, { json: opts });
  }

  /** The sandbox's open TCP forwards. */
  async forwards(): Promise<PortForward[]> {
    return (await this.http.json<PortForwardList>('GET', `/v1/sandboxes/${this.id}/forwards`)).forwards;
  }

  /** Closes the forward of `port` and its connections. */
  async closeForward(port: number): Promise<void> {
    await this.http.request('DELETE', `/v1/sandboxes/${this.id}/ports/${port}/forward`);
  }

  /**
   * The databases this sandbox uses (`Sandbox.create({ databases })`, attachDatabase); a fork's
   * children use their own branches of them under the same names.
   */
  async databases(): Promise<SandboxDatabase[]> {
    return (await this.http.json<SandboxDatabaseList>('GET', `/v1/sandboxes/${this.id}/databases`)).databases;
  }

  /**
   * The sandbox uses database `name` from now on, reached inside as `name.db.warren:5432`; one
   * is created for it (and goes with it) unless a database of that name exists. The answer's
   * `url`, with the password, is what to give its commands (DATABASE_URL is set only at create).
   * @example const { url } = await sbx.attachDatabase('app'); await sbx.exec('psql "$DATABASE_URL" -c "select 1"', { env: { DATABASE_URL: url } })
   */
  async attachDatabase(name: string): Promise<AttachedDatabase> {
    return this.http.json<AttachedDatabase>('POST', `/v1/sandboxes/${this.id}/databases`, { json: { name } });
  }

  /**
   * A token for this sandbox only, to hand to an agent or a browser instead of a key: it
   * can do what its scopes say (`read`, `exec`, `files`, `manage`) here and nothing anywhere
   * else, until it expires (ttlSeconds, default 1 hour) or is revoked. The secret is in
   * `token`, this once; connect with it as the apiKey.
   * @example const { token } = await sbx.createToken({ scopes: ['exec', 'files'], ttlSeconds: 600 })
   */
  async createToken(opts: CreateSandboxTokenRequest): Promise<NewSandboxToken> {
    return this.http.json<NewSandboxToken>('POST', `/v1/sandboxes/${this.id}/tokens`, { json: opts });
  }

  /** This sandbox's tokens (never their secrets). */
  async tokens(): Promise<SandboxTokenInfo[]> {
    return (await this.http.json<SandboxTokenList>('GET', `/v1/sandboxes/${this.id}/tokens`)).tokens;
  }

  /** The token stops working at once. */
  async revokeToken(tokenId: string): Promise<SandboxTokenInfo> {
    return this.http.json<SandboxTokenInfo>('DELETE', `/v1/sandboxes/${this.id}/tokens/${encodeURIComponent(tokenId)}`);
  }

  /**
   * The egress policy: what the sandbox may reach through the daemon's proxy. `allow` is as
   * given (presets by name); when it names presets, `expanded` holds every rule the proxy
   * applies and `presets` what each expanded to; `default` says whose default it is, if it
   * is one. Credential header values are never returned (each shows as '[redacted]').
   */
  async getNetwork(): Promise<NetworkPolicyView> {
    return this.http.json<NetworkPolicyView>('GET', `/v1/sandboxes/${this.id}/network`);
  }

  /**
   * Replaces the egress policy (`allow: []` refuses everything). Open connections end; new
   * ones follow the new rules. `credentials` replace the sandbox's credentials too (absent:
   * none): the daemon adds those headers to requests to that host, and the values never
   * enter the sandbox (docs/network.md). Presets (`@github`, `@npm`, `@pypi`, `@debian`)
   * stand for the hosts the daemon's host is configured for.
   * @example await sbx.setNetwork({ allow: ['@github', '@npm', 'pkg.example.com:443'] })
   * @example await sbx.setNetwork({ allow: ['api.example.com:443'], credentials: [{ host: 'api.example.com:443', headers: { Authorization: `Bearer ${token}` } }] })
   */
  async setNetwork(policy: NetworkPolicy): Promise<NetworkPolicyView> {
    return this.http.json<NetworkPolicyView>('PUT', `/v1/sandboxes/${this.id}/network`, { json: policy });
  }

  /** Egress attempts (allowed and refused), oldest first, after the entry id `after`. */
  async egressLog(opts: { after?: number; limit?: number } = {}): Promise<EgressEntry[]> {
    const query = { after: opts.after?.toString(), limit: opts.limit?.toString() };
    return (await this.http.json<EgressList>('GET', `/v1/sandboxes/${this.id}/egress`, { query })).entries;
  }

  /**
   * One call of an agent tool (`bash`, `str_replace_based_edit_tool`) run by the daemon; a
   * failed action comes back as `{is_error: true, error}`. Most callers want `Toolset`.
   */
  async callTool(name: string, input: Record<string, unknown>, opts: Omit<ToolCallRequest, 'input'> = {}): Promise<ToolResult> {
    return this.http.json<ToolResult>('POST', `/v1/sandboxes/${this.id}/tools/${encodeURIComponent(name)}`, { json: { ...opts, input } });
  }

  /** Destroys the sandbox and everything in it. */
  async kill(): Promise<void> {
    await this.http.json('DELETE', `/v1/sandboxes/${this.id}`);
  }
}
