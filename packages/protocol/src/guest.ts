/**
 * Messages on the guest channel (daemon <-> agent inside a sandbox). Every host-to-guest
 * call is named once here. Requests and responses travel as JSON in Message frames; bulk
 * bytes (file contents, process output) travel in Data frames on a stream id.
 */
import { WarrenError, type ErrorCode } from './errors.js';
import type { TerminalInfo, TerminalOpenParams } from './terminals.js';
import type { DirExistsPolicy, DirUploadResult, FileStat, ProcessInfo, ProcessOutput } from './api.js';

export const GUEST_PROTOCOL_VERSION = 1;

/** Path inside the sandbox where the agent's control socket for attach relays lives. */
export const AGENT_SOCKET_PATH = '/run/warren/agent.sock';
/** Loopback port inside every sandbox where the agent takes connections for the egress proxy. */
export const EGRESS_PROXY_PORT = 3128;
/**
 * Streams the agent opens itself (egress tunnels) are numbered from here; the daemon's calls
 * (whose ids double as stream ids) stay below it.
 */
export const FIRST_AGENT_STREAM = 0x40000000;

/** `connect HOST PORT` inside every sandbox: TCP through the egress proxy on stdio (ssh ProxyCommand). */
export const CONNECT_HELPER_PATH = '/opt/warren/lib/connect';

/**
 * TCP forwarders (docs/network.md): for every allow rule naming one host and one port, the
 * agent listens on an address of this loopback network inside the sandbox, one address per
 * name, and maps the name to it in /etc/hosts, so clients without proxy support connect as
 * if the name were reachable. Each accepted connection goes to the daemon as a CONNECT to the
 * rule's host:port, so enforcement stays with the daemon's proxy.
 */
export const FORWARD_NETWORK_PREFIX = '127.77.';
/** The block of /etc/hosts the agent manages; lines outside it are the sandbox's own. */
export const HOSTS_BLOCK_BEGIN = '# >>> warren egress forwards (managed by the sandbox agent; edits inside are replaced)';
export const HOSTS_BLOCK_END = '# <<< warren egress forwards';

/** One TCP forwarder: connections to `host` on `port` inside go to host:port through the proxy. */
export interface TcpForward {
  host: string;
  port: number;
}

/**
 * A CONNECT target the agent answers itself (`200`) as soon as the request arrives, instead of
 * waiting for the daemon's: a name (`suffix`: any name under it) or an IPv4 address, and a
 * port (absent: any). The daemon sends one per allow rule; the connection then goes to the
 * daemon naming its target, like a forwarder's, and the proxy checks and audits it as any
 * CONNECT, closing it if refused. Saves one trip through the channel per HTTPS connection;
 * see docs/network.md for what a client sees when an allowed host cannot be reached.
 */
export interface ConnectHint {
  host: string;
  port?: number;
  suffix?: boolean;
}

/** The sandbox's egress CA certificate, when it has credential rules (docs/network.md). */
export const EGRESS_CA_PATH = '/etc/warren/egress-ca.pem';
/** The system CA bundle inside; the egress CA is appended to it. */
export const CA_BUNDLE_PATH = '/etc/ssl/certs/ca-certificates.crt';

/** Where the read-only agent bundle is mounted inside every sandbox. */
export const AGENT_MOUNT_DIR = '/opt/warren';

export interface GuestOps {
  /** First call on a channel. On a channel that carried calls before (a restored or forked
   * sandbox), it drops everything of the earlier conversation: kept frames, streams, answers. */
  hello: { params: Record<string, never>; result: { version: number; agentPid: number; hostname: string } };
  configure: {
    /** defaultUser/defaultCwd: what exec uses when the call names no user or cwd (the template's). */
    params: { env: Record<string, string>; hostname?: string; pidsLimit?: number; defaultUser?: string; defaultCwd?: string };
    result: Record<string, never>;
  };
  /** busy: running processes that keep the sandbox awake (all but services). */
  ping: { params: Record<string, never>; result: { now: number; busy: number } };
  /**
   * Holds the channel still for a checkpoint: after its answer the agent writes nothing more
   * (it keeps what it would send) until 'unquiesce', or drops it at the next 'hello'.
   */
  quiesce: { params: Record<string, never>; result: Record<string, never> };
  /** Sends what the agent kept since 'quiesce' and carries on (no answer). */
  unquiesce: { params: Record<string, never>; result: Record<string, never> };
  exec: {
    params: {
      argv?: string[];
      cmd?: string;
      cwd?: string;
      env?: Record<string, string>;
      user?: string;
      stdin?: string;
      keepStdinOpen?: boolean;
      timeoutMs?: number;
      tag?: string;
      /** A long-running service (the template's start command): does not keep the sandbox awake. */
      service?: boolean;
      /** Stream output and exit of this process on this channel (stream id = request id). */
      subscribe?: boolean;
      /**
       * Keep only the last this many bytes of each stream, sent at exit (the agent tools' cut:
       * megabytes of build log never leave the sandbox). The exit event then counts every
       * character written in `outputChars`.
       */
      tailBytes?: number;
    };
    result: { pid: number };
  };
  'proc.list': { params: Record<string, never>; result: { processes: ProcessInfo[] } };
  'proc.output': { params: { pid: number; stdoutOffset?: number; stderrOffset?: number; maxBytes?: number }; result: ProcessOutput };
  /** Stream a process's output from the given offsets and its exit (stream id = request id). */
  'proc.subscribe': { params: { pid: number; stdoutOffset?: number; stderrOffset?: number }; result: { pid: number } };
  /** `encoding: 'base64'`: `data` is base64 of the bytes to write (binary-safe); else UTF-8 text. */
  'proc.stdin': { params: { pid: number; data: string; close?: boolean; encoding?: 'utf8' | 'base64' }; result: Record<string, never> };
  'proc.signal': { params: { pid: number; signal: string }; result: Record<string, never> };
  /** Drops a finished process from the table, with its kept output. */
  'proc.forget': { params: { pid: number }; result: Record<string, never> };
  /** Sends the file as Data frames on stream id = request id after the result, then End. */
  'file.read': { params: { path: string; user?: string }; result: { size: number } };
  /** Receives Data frames on stream id = request id, End finishes; the result comes after End. */
  'file.write': { params: { path: string; user?: string; mode?: number }; result: { size: number; path: string } };
  'fs.stat': { params: { path: string; user?: string }; result: FileStat };
  'fs.list': { params: { path: string; depth?: number; user?: string }; result: { entries: FileStat[] } };
  'fs.mkdir': { params: { path: string; user?: string }; result: FileStat };
  'fs.move': { params: { from: string; to: string; user?: string }; result: FileStat };
  'fs.remove': { params: { path: string; user?: string }; result: { removed: boolean } };
  /**
   * Connects to 127.0.0.1:port inside the sandbox; after the answer, the connection's bytes
   * travel as Data frames on stream id = request id, both ways, until End or cancel.
   */
  'net.connect': { params: { port: number }; result: Record<string, never> };
  /**
   * The TCP forwarders the sandbox should have now (the daemon sends the whole list whenever
   * the policy may have changed: create, claim, fork, restore, resume, PUT network). The agent
   * opens and closes listeners to match and rewrites its block of /etc/hosts. `error`: a
   * listener that could not be opened (its port taken inside); its name is then not mapped
   * unless another port of it works, and the next call tries again. `connectHints`: the
   * CONNECT targets the agent may answer itself (ConnectHint), replacing the earlier list.
   */
  'net.forwards': {
    params: { forwards: TcpForward[]; connectHints?: ConnectHint[] };
    result: { forwards: Array<TcpForward & { address: string; error?: string }> };
  };
  /** Terminals (docs/terminals.md): a command on a pseudo-terminal, kept by the agent. */
  'term.open': { params: TerminalOpenParams; result: TerminalInfo };
  /** `data`: base64 bytes for the terminal (keystrokes are not always UTF-8). */
  'term.input': { params: { id: string; data: string }; result: Record<string, never> };
  'term.resize': { params: { id: string; cols: number; rows: number }; result: Record<string, never> };
  /** To the terminal's foreground process group, as the key that sends it would. */
  'term.signal': { params: { id: string; signal: string }; result: Record<string, never> };
  /** Kills the command and all it started; a finished terminal is dropped from the list. */
  'term.kill': { params: { id: string }; result: Record<string, never> };
  /**
   * Output from `offset` (the oldest kept byte if older, default: all kept) as Data frames on
   * stream id = request id, with credit; at the command's exit an 'exit' event, then End.
   * `offset` in the result is where the replay starts. Cancel detaches. `follow: false`:
   * only what is kept now, then End (with the exit event first if it has exited).
   */
  'term.attach': { params: { id: string; offset?: number; follow?: boolean }; result: { terminal: TerminalInfo; offset: number } };
  'term.list': { params: Record<string, never>; result: { terminals: TerminalInfo[] } };
  /**
   * A directory as a tar stream (GNU tar run as the user): Data frames on stream id = request
   * id after the result, then End; a failure of tar after the start is a 'stream-error'.
   */
  'dir.read': { params: { path: string; user?: string }; result: Record<string, never> };
  /**
   * Receives a tar stream as Data frames on stream id = request id; checked member by member
   * (TarChecker), extracted as the user into a temporary directory beside `path`, and moved
   * into place only once the whole archive checked out. The result comes after End.
   */
  'dir.write': { params: { path: string; user?: string; exists?: DirExistsPolicy }; result: DirUploadResult };
  /**
   * Watches a file or directory (with `recursive`, the whole tree under it) as `user`. After
   * the answer, events travel as NDJSON lines (WatchEvent) in Data frames on stream id =
   * request id, until the daemon cancels the stream; End: the watched path itself is gone.
   * At most MAX_WATCHES open per sandbox (resource_exhausted past it).
   */
  'fs.watch': { params: { path: string; recursive?: boolean; user?: string }; result: { path: string; isDir: boolean } };
  /** Flow control: the reader of a Data stream grants the sender more bytes. */
  credit: { params: { stream: number; bytes: number }; result: Record<string, never> };
  /** Abort a stream (reader went away). */
  cancel: { params: { stream: number }; result: Record<string, never> };
  /**
   * Streams bytes into a process's stdin: Data frames on stream id = request id, written to
   * its pipe as they come (credit is granted as the pipe takes them), End finishes and closes
   * stdin when `close`; the result (bytes written) comes after End. Refused at once with
   * failed_precondition when the process has exited or its stdin is closed, and answered early
   * with it when the process exits mid-stream. A cancel closes stdin too when `close`.
   */
  'proc.stdinStream': { params: { pid: number; close?: boolean }; result: { bytes: number } };
}

export type GuestOp = keyof GuestOps;

/** Operations the channel itself serves on both ends (flow control, checkpoint quiescence). */
export type ChannelOp = 'quiesce' | 'unquiesce' | 'credit' | 'cancel';

/** Operations the agent serves: one handler each (GuestHandlers). */
export type AgentOp = Exclude<GuestOp, ChannelOp>;

/**
 * The agent's side of the protocol as a table: one handler per operation, typed by GuestOps,
 * so a new operation is one entry in GuestOps plus one handler, and the compiler checks the
 * agent's answer against what the daemon's GuestClient.request() promises its callers.
 * `stream` is the request's id, which doubles as the id of any stream the operation opens.
 */
export type GuestHandlers<Ctx> = {
  [K in AgentOp]: (params: GuestOps[K]['params'], ctx: Ctx & { stream: number }) => GuestOps[K]['result'] | Promise<GuestOps[K]['result']>;
};

/** Calls the handler of req.op; an operation without one is the caller's error. */
export function dispatchGuestRequest<Ctx>(handlers: GuestHandlers<Ctx>, req: GuestRequest, ctx: Ctx): Promise<unknown> {
  if (!Object.hasOwn(handlers, req.op)) {
    return Promise.reject(new WarrenError('invalid_argument', `unknown guest operation ${String(req.op)}`));
  }
  // req.op and req.params come as a pair (GuestRequest<K>), which TypeScript cannot see
  // through the union of handlers: this is the one place that joins them.
  const handler = handlers[req.op as AgentOp] as (params: unknown, ctx: Ctx & { stream: number }) => unknown;
  // Called at once, not on a later tick: a handler that accepts a stream (file.write) must
  // register it before the Data frames that follow its request in the same read are handled.
  try {
    return Promise.resolve(handler(req.params, { ...ctx, stream: req.id }));
  } catch (err) {
    return Promise.reject(err);
  }
}

export interface GuestRequest<K extends GuestOp = GuestOp> {
  id: number;
  op: K;
  params: GuestOps[K]['params'];
}

export type GuestResponse = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: { code: ErrorCode; message: string } };

/** Unsolicited messages from the agent. */
export type GuestEvent =
  | {
      event: 'exit';
      stream: number;
      pid: number;
      exitCode: number | null;
      signal?: string;
      timedOut: boolean;
      durationMs: number;
      /** With `tailBytes`: characters (UTF-8 sequences) each stream wrote in all, kept or not. */
      outputChars?: { stdout: number; stderr: number };
    }
  /**
   * A client inside the sandbox connected to the egress proxy port, or with `forward`, to the
   * TCP forwarder for that host:port (the daemon treats it as a CONNECT to it): its bytes
   * follow on `stream`.
   */
  | { event: 'net.open'; stream: number; forward?: TcpForward }
  | { event: 'credit'; stream: number; bytes: number }
  | { event: 'stream-error'; stream: number; code: ErrorCode; message: string };

/** First payload byte of an output Data frame says which stream it belongs to. */
export const OutputStream = { stdout: 1, stderr: 2 } as const;

/**
 * Bytes a sender may have in flight on one Data stream before it waits for credit. 16 MiB
 * rather than 4: on this 2-core machine it took 100 MiB transfers from about 117/128/103
 * MiB/s (Buffer write, stream write, read) to 162/161/118, measured back to back.
 */
export const STREAM_WINDOW_BYTES = 16 * 1024 * 1024;

/** Open watches (fs.watch) one sandbox may have at once. */
export const MAX_WATCHES = 32;
/** Directories all watches of one sandbox may watch at once (one inotify watch each). */
export const MAX_WATCHED_DIRS = 16384;
