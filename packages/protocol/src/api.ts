/**
 * Wire types of the public HTTP API (/v1). Schemas validate requests in the daemon; the
 * inferred types are what the SDKs send and receive.
 */
import { z } from 'zod';
import { DatabaseName, MAX_DATABASES_PER_SANDBOX } from './database-name.js';
import { LOG_LEVELS } from './log-levels.js';

export const API_VERSION = 'v1';

/**
 * 'hibernating' while its memory, processes and files are saved; 'hibernated' holds no host
 * process and no RAM, and any call on it resumes it.
 */
export const SandboxStates = ['creating', 'running', 'hibernating', 'hibernated', 'dead'] as const;
export type SandboxState = (typeof SandboxStates)[number];

/** Bounds of sandbox and snapshot metadata: labels for finding sandboxes, not a data store. */
export const METADATA_LIMITS = { keys: 64, keyLength: 128, valueLength: 1024, totalBytes: 16 * 1024 } as const;

const utf8Bytes = (s: string) => Buffer.byteLength(s, 'utf8');

/**
 * Marks a refinement's issue as a bound whose message follows the field's name ("must have
 * at most 64 keys (got 65)"), as the daemon words zod's own bounds.
 */
export const BOUND_PARAM = 'bound';
const bound = (message: string, path: PropertyKey[] = []) => ({ code: 'custom' as const, message, path, params: { [BOUND_PARAM]: true } });

export const Metadata = z.record(z.string().min(1).max(METADATA_LIMITS.keyLength), z.string().max(METADATA_LIMITS.valueLength)).superRefine((m, ctx) => {
  const keys = Object.keys(m).length;
  if (keys > METADATA_LIMITS.keys) ctx.addIssue(bound(`must have at most ${METADATA_LIMITS.keys} keys (got ${keys})`));
  const total = Object.entries(m).reduce((n, [k, v]) => n + utf8Bytes(k) + utf8Bytes(v), 0);
  if (total > METADATA_LIMITS.totalBytes)
    ctx.addIssue(bound(`must be at most ${METADATA_LIMITS.totalBytes} bytes in all, keys and values in UTF-8 (got ${total})`));
});
export type Metadata = z.infer<typeof Metadata>;

/**
 * Bounds of an environment (create, exec). One `NAME=value` longer than 131071 bytes makes
 * execve fail (Linux's and gVisor's MAX_ARG_STRLEN is 128 KiB with the NUL; measured: 131071
 * runs, 131072 fails with "File name too long"). The total keeps a request's environment well
 * inside the agent channel's 1.25 MiB frame, which also carries the template's environment.
 */
export const ENV_LIMITS = { vars: 4096, entryBytes: 128 * 1024 - 1, totalBytes: 1024 * 1024 } as const;

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'environment variable names are letters, digits and _');
export const EnvMap = z.record(envName, z.string()).superRefine((env, ctx) => {
  const entries = Object.entries(env);
  if (entries.length > ENV_LIMITS.vars) ctx.addIssue(bound(`must have at most ${ENV_LIMITS.vars} variables (got ${entries.length})`));
  let total = 0;
  for (const [name, value] of entries) {
    const bytes = utf8Bytes(name) + 1 + utf8Bytes(value);
    total += bytes - 1;
    if (bytes > ENV_LIMITS.entryBytes)
      ctx.addIssue(bound(`must be at most ${ENV_LIMITS.entryBytes} bytes as NAME=value in UTF-8, the kernel's limit for one variable (got ${bytes})`, [name]));
  }
  if (total > ENV_LIMITS.totalBytes) ctx.addIssue(bound(`must be at most ${ENV_LIMITS.totalBytes} bytes in all, names and values in UTF-8 (got ${total})`));
});

/**
 * Static bounds of a sandbox's resources, whatever the host. The minimums were measured with
 * the base template on a 2-core host (docs/sandboxes.md, Resources): below them a sandbox
 * boots too slowly to be of use or not at all. The maximums only keep numbers sane; the
 * daemon also refuses more than its host has (daemon core/admission.ts). `pids` is capped by
 * gVisor itself, which runs at most 65536 tasks per sandbox.
 */
export const RESOURCE_LIMITS = {
  cpus: { min: 0.1, max: 1024 },
  memoryMB: { min: 64, max: 16 * 1024 * 1024 },
  pids: { min: 32, max: 65536 },
  diskMB: { min: 64, max: 1024 * 1024 * 1024 },
} as const;

export const Resources = z
  .object({
    cpus: z.number().min(RESOURCE_LIMITS.cpus.min).max(RESOURCE_LIMITS.cpus.max).optional(),
    memoryMB: z.number().int().min(RESOURCE_LIMITS.memoryMB.min).max(RESOURCE_LIMITS.memoryMB.max).optional(),
    pids: z.number().int().min(RESOURCE_LIMITS.pids.min).max(RESOURCE_LIMITS.pids.max).optional(),
    diskMB: z.number().int().min(RESOURCE_LIMITS.diskMB.min).max(RESOURCE_LIMITS.diskMB.max).optional(),
  })
  .strict();
export type Resources = z.infer<typeof Resources>;
export type ResolvedResources = Required<Resources>;

export const DEFAULT_RESOURCES: ResolvedResources = { cpus: 2, memoryMB: 2048, pids: 1024, diskMB: 10240 };
export const MAX_TTL_SECONDS = 30 * 24 * 3600;
export const DEFAULT_TTL_SECONDS = 3600;

const ttlSeconds = z.number().int().min(1).max(MAX_TTL_SECONDS);
/** Seconds without activity after which a sandbox hibernates by itself. */
const idleSeconds = z.number().int().min(1).max(MAX_TTL_SECONDS);
const snapshotId = z.string().regex(/^snap-[a-z0-9]+$/, 'a snapshot id looks like snap-…');

/** The template of a create that names none; it is baked and keeps a warm pool by default. */
export const DEFAULT_TEMPLATE = 'base';

export const CreateSandboxRequest = z
  .object({
    template: z.string().min(1).max(128).default(DEFAULT_TEMPLATE),
    ttlSeconds: ttlSeconds.optional(),
    metadata: Metadata.optional(),
    env: EnvMap.optional(),
    resources: Resources.optional(),
    /** Auto-hibernate after this many seconds without activity (absent: never). */
    idleSeconds: idleSeconds.optional(),
    /** Start from this snapshot (its template, files, memory and processes) instead of the template. */
    snapshot: snapshotId.optional(),
    /**
     * Egress policy; absent: the template's default, else the daemon's, else the sandbox
     * reaches nothing outside itself. `{ allow: [] }` is explicit: nothing, whatever the defaults.
     */
    network: z.lazy(() => NetworkPolicy).optional(),
    /**
     * Databases the sandbox uses (docs/databases.md, "Databases of a workspace"): each name is
     * reached inside as `NAME.db.warren:5432`, with its URL in DATABASE_URL_NAME (and the first
     * in DATABASE_URL). A name no database has is created for the sandbox and goes with it.
     */
    databases: z.array(DatabaseName).max(MAX_DATABASES_PER_SANDBOX).optional(),
  })
  .strict();
export type CreateSandboxRequest = z.input<typeof CreateSandboxRequest>;

/**
 * How a sandbox came up: cold boot, restore of its template's baked image, warm-pool claim,
 * fork of a running sandbox, or restore of a snapshot.
 */
export type BootKind = 'cold' | 'baked' | 'pool' | 'fork' | 'snapshot';

export interface SandboxInfo {
  id: string;
  template: string;
  /** The template version this sandbox was created from (pinned for its whole life). */
  templateVersion: string;
  boot: BootKind;
  state: SandboxState;
  createdAt: string;
  expiresAt: string;
  metadata: Metadata;
  resources: ResolvedResources;
  /** Auto-hibernate after this many idle seconds; absent: never. */
  idleSeconds?: number;
  /** The sandbox it was forked from (boot 'fork') or the snapshot it came from (boot 'snapshot'). */
  source?: string;
  /** Host disk its own writes use (running), or its saved image (hibernated). Only from get. */
  diskBytes?: number;
  /** Why the sandbox died, when state is 'dead'. */
  error?: string;
}

export interface SandboxList {
  sandboxes: SandboxInfo[];
  /** Pass as `cursor` to get the next page; absent on the last page. */
  nextCursor?: string;
}

export const SetTtlRequest = z.object({ ttlSeconds }).strict();

export const ExecRequest = z
  .object({
    cmd: z.string().min(1).optional(),
    argv: z.array(z.string()).min(1).optional(),
    cwd: z.string().optional(),
    env: EnvMap.optional(),
    user: z
      .string()
      .regex(/^[a-z_][a-z0-9_-]*$/)
      .optional(),
    /** Bytes written to the command's stdin, then stdin is closed (UTF-8 text). */
    stdin: z.string().optional(),
    timeoutSeconds: z
      .number()
      .positive()
      .max(7 * 24 * 3600)
      .optional(),
    /** Start and return the pid at once; read output later through /processes. */
    background: z.boolean().optional(),
    /** A label for background processes, shown in process listings. */
    tag: z.string().max(128).optional(),
    /**
     * Keep stdin open so it can be written later (POST or PUT /processes/:pid/stdin): for
     * background processes, and for a streamed foreground exec (`?stream=1`), whose pid comes
     * in the `start` event.
     */
    keepStdinOpen: z.boolean().optional(),
  })
  .strict()
  .refine((r) => (r.cmd === undefined) !== (r.argv === undefined), { message: 'give exactly one of cmd or argv' });
export type ExecRequest = z.input<typeof ExecRequest>;

export interface ExecResult {
  pid: number;
  exitCode: number | null;
  signal?: string;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  durationMs: number;
}

/** One line of an NDJSON exec stream (`POST /exec?stream=1`). */
export type ExecStreamEvent =
  | { type: 'start'; pid: number }
  /** Sent every KEEPALIVE_SECONDS while nothing else is, so idle-timeout proxies and HTTP
   * clients (Node's fetch gives up after 300 s of silence) keep long commands' streams open. */
  | { type: 'keepalive' }
  | { type: 'stdout'; data: string }
  | { type: 'stderr'; data: string }
  | ({ type: 'exit' } & Omit<ExecResult, 'stdout' | 'stderr'>);

export const KEEPALIVE_SECONDS = 20;

/**
 * A change seen by a file watch (GET /files/watch, docs/api.md). Paths are absolute inside
 * the sandbox. `rename` has `oldPath` when the agent could pair the two names (same inode,
 * same read of the kernel's events); otherwise a move shows as `remove` + `create`.
 */
export interface WatchChange {
  type: 'create' | 'write' | 'remove' | 'rename';
  path: string;
  oldPath?: string;
  isDir?: boolean;
}

/**
 * Lines of a watch stream: `ready` first (the watch is in place: changes from now on are
 * seen), then changes; `overflow`: changes were dropped (a reader too slow, or the
 * directory cap), look again at the tree; `error` ends the stream (the sandbox died, or the
 * watched path was removed: code not_found).
 */
export type WatchEvent =
  | WatchChange
  | { type: 'ready'; path: string; isDir: boolean }
  | { type: 'keepalive' }
  | { type: 'overflow'; message: string }
  | { type: 'error'; code: string; message: string };

export interface ProcessInfo {
  pid: number;
  tag?: string;
  command: string[];
  running: boolean;
  exitCode: number | null;
  signal?: string;
  timedOut: boolean;
  startedAt: string;
  endedAt?: string;
}

export interface ProcessOutput {
  pid: number;
  stdout: string;
  stderr: string;
  /** Offsets to pass next time to get only newer output. */
  stdoutOffset: number;
  stderrOffset: number;
  running: boolean;
  exitCode: number | null;
}

export const SignalRequest = z
  .object({
    signal: z
      .string()
      .regex(/^SIG[A-Z0-9]+$/)
      .default('SIGTERM'),
  })
  .strict();
/** `encoding: 'base64'` for bytes that are not UTF-8 text (binary-safe); default `utf8`. */
export const StdinRequest = z.object({ data: z.string().default(''), close: z.boolean().optional(), encoding: z.enum(['utf8', 'base64']).optional() }).strict();

/** Answer of `PUT /processes/:pid/stdin` (a streamed body): bytes written to the process's stdin. */
export interface StdinStreamResult {
  bytes: number;
}

export type FileType = 'file' | 'directory' | 'symlink' | 'other';
export interface FileStat {
  path: string;
  name: string;
  type: FileType;
  size: number;
  mode: number;
  uid: number;
  gid: number;
  mtime: string;
}

export const MkdirRequest = z.object({ path: z.string().min(1) }).strict();
export const MoveRequest = z.object({ from: z.string().min(1), to: z.string().min(1) }).strict();

/**
 * Which runsc binary the daemon runs sandboxes with, and why (docs/runsc.md):
 * `patched`: warren's own build (scripts/build-runsc.sh) passed its self-check;
 * `packaged`: the runsc found in PATH, because there is no usable patched build (`reason` says why);
 * `override`: WARREN_RUNSC named the binary.
 */
export interface RunscInfo {
  kind: 'patched' | 'packaged' | 'override';
  /** Absolute path of the binary. */
  binary: string;
  /** First line of `runsc --version`. */
  version: string;
  reason: string;
}

export interface HealthInfo {
  ok: true;
  version: string;
  sandboxes: number;
  runsc: RunscInfo;
}

/** The daemon's parts a request can reach, each with its own credential (docs/security.md). */
export type Facade = 'api' | 'e2b' | 'envd' | 'mcp' | 'ui';

/**
 * One route of the daemon, as registered (GET /v1/routes, admin): `method` ALL is a
 * middleware's or a catch-all's, `path` Hono's pattern (`:name` one segment, `*` the rest);
 * `facade` null outside every facade; `public` when no credential is needed.
 */
export interface RouteInfo {
  method: string;
  path: string;
  facade: Facade | null;
  public: boolean;
}

export interface RouteTable {
  routes: RouteInfo[];
}

/** A template's warm pool: configured size, members ready now, and how claims went. */
export interface PoolInfo {
  template: string;
  size: number;
  ready: number;
  booting: number;
  hits: number;
  misses: number;
  /** Members destroyed because host memory ran low. */
  reclaimed: number;
  bootFailures: number;
  lastError?: string;
  /** Create latency of pool hits, from request to ready, in ms; null before the first hit. */
  claimMs: { p50: number; p95: number; p99: number; count: number } | null;
}

/** Most sandboxes one template's warm pool may keep ready. */
export const MAX_POOL_SIZE = 64;
export const SetPoolRequest = z.object({ size: z.number().int().min(0).max(MAX_POOL_SIZE) }).strict();

/** A template version's baked image: `ready` means creates restore it instead of booting. */
export interface BakeInfo {
  state: 'none' | 'baking' | 'ready' | 'failed';
  template?: string;
  version?: string;
  bakedAt?: string;
  /** How long the bake took (boot, start command, ready check, checkpoint). */
  ms?: number;
  /** Why the bake failed; creates of the template then boot cold. */
  error?: string;
  /** Why there is no image (state 'none'). */
  reason?: string;
}

export const DEFAULT_MAX_FORK_COUNT = 16;

export const ForkRequest = z
  .object({
    count: z.number().int().min(1).default(1),
    /** Metadata of the children (default: the parent's). */
    metadata: Metadata.optional(),
    /** TTL of the children (default: the default TTL, counted from the fork). */
    ttlSeconds: ttlSeconds.optional(),
    idleSeconds: idleSeconds.optional(),
  })
  .strict();
export type ForkRequest = z.input<typeof ForkRequest>;

export interface ForkResult {
  sandboxes: SandboxInfo[];
  /**
   * How long the parent's processes were stopped at most: the `runsc checkpoint` that saved
   * it (0 for a hibernated parent, forked from its image), in ms.
   */
  parentPausedMs: number;
  /** How long calls on the parent waited: the quiesce of its channel plus the checkpoint, in ms. */
  channelHeldMs: number;
  /** Fork start to every child ready, in ms. */
  totalMs: number;
}

export const CreateSnapshotRequest = z.object({ metadata: Metadata.optional() }).strict();
export type CreateSnapshotRequest = z.input<typeof CreateSnapshotRequest>;

export interface SnapshotInfo {
  id: string;
  /** The sandbox it was taken from (it may be gone since). */
  sandboxId: string;
  template: string;
  templateVersion: string;
  createdAt: string;
  /** Bytes of host disk its image occupies. */
  sizeBytes: number;
  metadata: Metadata;
  resources: ResolvedResources;
}

export interface SnapshotList {
  snapshots: SnapshotInfo[];
}

/** An ISO 8601 date or date-time; `Date.parse` alone would also take "May 1" or "1". */
const isoInstant = z
  .string()
  .refine(
    (s) => /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/.test(s) && !Number.isNaN(Date.parse(s)),
    'must be an ISO 8601 date or time, e.g. 2024-05-01 or 2024-05-01T12:00:00Z',
  );

/** Query of GET /v1/usage: the window (default the last 24 h) and optionally one API key. */
export const UsageQuery = z
  .object({
    since: isoInstant.optional(),
    until: isoInstant.optional(),
    apiKey: z.string().min(1).optional(),
  })
  .strict();
export type UsageQuery = z.input<typeof UsageQuery>;

export const DEFAULT_USAGE_WINDOW_MS = 24 * 3600 * 1000;

/**
 * Query of GET /v1/logs: the daemon's own structured log, for an operator following up a
 * request id from an error body. Newest entries last; `limit` keeps the newest ones.
 */
export const LogsQuery = z
  .object({
    requestId: z
      .string()
      .regex(/^[\w=-]{1,64}$/, 'must be a request id as the X-Request-Id header gives it')
      .optional(),
    level: z.enum(LOG_LEVELS).optional(),
    since: isoInstant.optional(),
    limit: z.coerce.number().int().min(1).max(10_000).optional(),
  })
  .strict();
export type LogsQuery = z.input<typeof LogsQuery>;

export const DEFAULT_LOGS_LIMIT = 200;

/** One line of the daemon's log as pino wrote it: time (ms), level (number), msg, fields. */
export interface LogEntry {
  time: number;
  level: number;
  msg: string;
  requestId?: string;
  [field: string]: unknown;
}

export interface LogsResponse {
  entries: LogEntry[];
  /** True when more entries matched than `limit` (the oldest were left out). */
  truncated: boolean;
}

/** Billable amounts in a window: allocated resources × seconds running (hibernated time is free). */
export interface UsageTotals {
  activeSeconds: number;
  /** vCPUs allocated × active seconds. */
  vcpuSeconds: number;
  /** GiB of memory allocated × active seconds. */
  gibSeconds: number;
  /** USD at the report's prices. */
  cost: number;
}

export interface SandboxUsage extends UsageTotals {
  sandboxId: string;
  apiKeyId: string;
  template: string;
  /** Whether it is being billed right now (running, not hibernated or dead). */
  active: boolean;
}

export interface ApiKeyUsage extends UsageTotals {
  apiKeyId: string;
  sandboxes: number;
}

export interface UsagePrices {
  currency: 'USD';
  vcpuHour: number;
  gibHour: number;
}

export interface UsageReport {
  since: string;
  until: string;
  prices: UsagePrices;
  /** Sandboxes with usage in the window (killed ones included), most expensive first. */
  sandboxes: SandboxUsage[];
  apiKeys: ApiKeyUsage[];
  total: UsageTotals & { sandboxes: number };
}

/**
 * What a sandbox may reach, through the daemon's egress proxy: rules `DOMAIN[:PORT]`,
 * `*.SUFFIX[:PORT]`, `IP[:PORT]` or `IP/CIDR[:PORT]`, or presets (`@github`, `@npm`,
 * `@pypi`, `@debian`) that the daemon expands into such rules; everything else is refused.
 * An empty list refuses everything. Absent at create: the template's default, else the
 * daemon's (WARREN_DEFAULT_ALLOW), else nothing (docs/network.md).
 */
export const NetworkPolicy = z
  .object({
    allow: z.array(z.string().min(1).max(300)).max(256),
    /** Headers the daemon adds to requests to a host; the values never enter the sandbox. */
    credentials: z
      .array(z.lazy(() => CredentialRule))
      .max(64)
      .optional(),
  })
  .strict();
export type NetworkPolicy = z.infer<typeof NetworkPolicy>;

/** A sandbox's policy as GET and PUT `/v1/sandboxes/:id/network` return it. */
export interface NetworkPolicyView extends NetworkPolicy {
  /** Only when `allow` names presets: every rule the proxy applies, presets expanded, in order. */
  expanded?: string[];
  /** Only when `allow` names presets: the rules each expanded to when the policy was set. */
  presets?: Record<string, string[]>;
  /** Only for a default policy: whose it is (the template's recipe, or WARREN_DEFAULT_ALLOW). */
  default?: 'template' | 'daemon';
}

/**
 * Credential brokering: `headers` are added to (or replace those of) every request the
 * sandbox makes to `host` (`NAME[:PORT]` or `IP[:PORT]`, no wildcards; it must also be allowed
 * by an allow rule). HTTPS to that host is terminated by the daemon with a per-sandbox CA the
 * sandbox trusts. Responses never carry the values: GET shows them as REDACTED.
 */
export const CredentialRule = z
  .object({
    host: z.string().min(1).max(300),
    headers: z.record(z.string().min(1).max(256), z.string().max(8192)),
  })
  .strict();
export type CredentialRule = z.infer<typeof CredentialRule>;
/** What GET and PUT return in place of a credential header's value. */
export const REDACTED = '[redacted]';

/** One egress attempt through the proxy, allowed or refused. */
export interface EgressEntry {
  id: number;
  time: string;
  host: string;
  port: number;
  /** 'CONNECT' for tunnels (HTTPS and other TCP), else the HTTP method. */
  method?: string;
  /** The request path, for plain HTTP. */
  path?: string;
  bytesUp: number;
  bytesDown: number;
  decision: 'allowed' | 'denied';
  reason?: string;
}

export interface EgressList {
  entries: EgressEntry[];
}

/** POST /v1/sandboxes/:id/ports/:port/url: a signed URL for a port inside the sandbox. */
export const PortUrlRequest = z
  .object({
    expiresInSeconds: z
      .number()
      .int()
      .min(1)
      .max(7 * 24 * 3600)
      .default(3600),
  })
  .strict();
export interface PortUrl {
  /** `http://<port>-<sandbox>.localhost:<daemon port>/?warren_token=…`: HTTP and WebSocket. */
  url: string;
  /** The asked-for expiry, capped at the expiry of the token (and key) that made the URL. */
  expiresAt: string;
}

/** POST /v1/sandboxes/:id/ports/:port/forward: a TCP listener on the host's loopback for that port. */
export const PortForwardRequest = z
  .object({
    /** The host port to listen on; 0 (the default) picks a free one. */
    hostPort: z.number().int().min(0).max(65535).default(0),
  })
  .strict();
export interface PortForward {
  /** The port inside the sandbox. */
  port: number;
  host: '127.0.0.1';
  /** Where to connect on the host. */
  hostPort: number;
  createdAt: string;
}
export interface PortForwardList {
  forwards: PortForward[];
}

/**
 * Directory uploads (PUT /files/dir, docs/files.md "Directories"): what happens when the
 * destination already exists. `merge` (default, as `cp -r SRC/. DST` or `tar x -C DST`):
 * entries are added, files and symlinks of the same name replaced, existing directories kept
 * with their own mode; a directory against a non-directory is a conflict, found before
 * anything moves. `replace`: the old directory goes, the new one takes its name. `error`: 409.
 */
export const DIR_EXISTS_POLICIES = ['merge', 'replace', 'error'] as const;
export type DirExistsPolicy = (typeof DIR_EXISTS_POLICIES)[number];

/** Result of a directory upload: where it landed and what the archive held. */
export interface DirUploadResult {
  path: string;
  files: number;
  directories: number;
  symlinks: number;
  hardlinks: number;
  /** Bytes of file contents. */
  bytes: number;
}

/** POST /files/batch: several files in one call; `data` is base64; mode as a number (0o644). */
export const WriteManyRequest = z
  .object({
    files: z
      .array(z.object({ path: z.string().min(1), data: z.string(), mode: z.number().int().min(0).max(0o7777).optional() }).strict())
      .min(1)
      .max(10000),
  })
  .strict();
export type WriteManyRequest = z.infer<typeof WriteManyRequest>;
export interface WriteManyResult {
  files: Array<{ path: string; size: number }>;
}
