/**
 * E2B's control-plane API (e2b-dev/E2B spec/openapi.yml) as warren serves it under /e2b:
 * the request bodies it accepts (checked) and the shapes it answers with. Fields warren has no
 * counterpart for are accepted where ignoring them changes nothing the caller relies on, and
 * refused with a 400 naming them otherwise (docs/e2b.md).
 */
import { z } from 'zod';

const Metadata = z.record(z.string(), z.string());
const timeout = z
  .number()
  .int()
  .min(1)
  .max(30 * 24 * 3600);

/** E2B's "all traffic" selector: what warren denies anyway when it is not allowed. */
export const E2B_ALL_TRAFFIC = '0.0.0.0/0';

export const E2bNetwork = z
  .object({
    allowOut: z.array(z.string().min(1).max(300)).max(256).optional(),
    allow_internet_access: z.boolean().optional(),
    denyOut: z
      .array(z.string())
      .refine((d) => d.every((r) => r === E2B_ALL_TRAFFIC), {
        message: `denyOut may only be [${E2B_ALL_TRAFFIC}]: warren denies everything allowOut does not allow, and has no deny rules`,
      })
      .optional(),
    allowPublicTraffic: z.boolean().optional(),
    maskRequestHost: z.string().optional(),
  })
  .passthrough();

export const E2bNewSandbox = z
  .object({
    templateID: z.string().min(1).max(128),
    timeout: timeout.optional(),
    metadata: Metadata.optional(),
    envVars: z.record(z.string(), z.string()).optional(),
    autoPause: z.boolean().optional(),
    autoPauseMemory: z.boolean().optional(),
    autoResume: z.object({ enabled: z.boolean() }).optional(),
    secure: z.boolean().optional(),
    allow_internet_access: z.boolean().optional(),
    network: E2bNetwork.optional(),
    mcp: z.unknown().optional(),
    iam: z.unknown().optional(),
    volumeMounts: z.array(z.unknown()).max(0, 'volume mounts are not supported by warren').optional(),
  })
  .passthrough();
export type E2bNewSandbox = z.infer<typeof E2bNewSandbox>;

export const E2bTimeoutRequest = z
  .object({
    timeout: z
      .number()
      .int()
      .min(0)
      .max(30 * 24 * 3600),
  })
  .passthrough();
export const E2bRefreshRequest = z.object({ duration: z.number().int().min(0).max(3600).optional() }).passthrough();
export const E2bConnectRequest = z.object({ timeout: timeout.optional(), memory: z.boolean().optional() }).passthrough();
export const E2bResumeRequest = z.object({ timeout: timeout.optional(), autoPause: z.boolean().optional() }).passthrough();
export const E2bForkRequest = z.object({ count: z.number().int().min(1).max(64).default(1), timeout: timeout.optional() }).passthrough();

export type E2bState = 'running' | 'paused';

/** POST /sandboxes, /connect, /resume, and each fork's sandbox. */
export interface E2bSandbox {
  sandboxID: string;
  templateID: string;
  clientID: string;
  envdVersion: string;
  envdAccessToken: string;
  trafficAccessToken: string;
  /** Where `<port>-<sandboxID>.<domain>` host names reach the daemon. */
  domain: string;
}

/** GET /sandboxes/:id, and each entry of the lists. */
export interface E2bSandboxDetail {
  sandboxID: string;
  templateID: string;
  alias: string;
  clientID: string;
  startedAt: string;
  endAt: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  metadata: Record<string, string>;
  state: E2bState;
  envdVersion: string;
  domain: string;
  volumeMounts: never[];
}

export interface E2bSandboxMetric {
  timestamp: string;
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

export interface E2bTemplate {
  templateID: string;
  buildID: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  public: boolean;
  aliases: string[];
  names: string[];
  createdAt: string;
  updatedAt: string;
  lastSpawnedAt: string | null;
  spawnCount: number;
  buildCount: number;
  envdVersion: string;
  buildStatus: 'ready';
}

/** POST /v3/templates: a name (`name` or `name:tag`) for a build that follows. */
export const E2bTemplateRequest = z
  .object({
    name: z.string().min(1).max(128).optional(),
    alias: z.string().min(1).max(128).optional(),
    tags: z.array(z.string()).max(0, 'tags are not supported: a warren template has one current version').optional(),
    cpuCount: z.number().int().optional(),
    memoryMB: z.number().int().optional(),
    minFreeDiskMb: z.number().int().optional(),
  })
  .passthrough();

/** One of the SDK's build instructions. */
export const E2bInstruction = z
  .object({
    type: z.enum(['RUN', 'COPY', 'ENV', 'WORKDIR', 'USER']),
    args: z.array(z.string()),
    force: z.boolean().optional(),
    filesHash: z.string().optional(),
  })
  .passthrough();

/** POST /v2/templates/:id/builds/:buildID: what to build. */
export const E2bTemplateBuild = z
  .object({
    fromImage: z.string().optional(),
    fromTemplate: z.string().optional(),
    fromImageRegistry: z.unknown().optional(),
    steps: z.array(E2bInstruction).max(64).default([]),
    startCmd: z.string().optional(),
    readyCmd: z.string().optional(),
    force: z.boolean().optional(),
  })
  .passthrough();
export type E2bTemplateBuild = z.infer<typeof E2bTemplateBuild>;

export type E2bBuildStatus = 'waiting' | 'building' | 'ready' | 'error';

export interface E2bLogEntry {
  timestamp: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
}

/** GET /templates/:id/builds/:buildID/status */
export interface E2bBuildInfo {
  templateID: string;
  buildID: string;
  status: E2bBuildStatus;
  logEntries: E2bLogEntry[];
  logs: string[];
  reason?: { message: string; step?: string; logEntries?: E2bLogEntry[] };
}
