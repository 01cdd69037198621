/** Wire types of the dashboard (docs/dashboard.md): its login link and its live event stream. */
import type { EgressEntry, ProcessInfo, SandboxInfo } from './api.js';

/** POST /v1/ui/login-links: a one-time link that logs a browser in as the calling key. */
export interface UiLoginLink {
  url: string;
  expiresAt: string;
}

/** GET /ui/session: who the browser is logged in as, and the token its changes must carry. */
export interface UiSessionInfo {
  keyId: string;
  admin: boolean;
  scopes: string[];
  /** Sent back in the X-Warren-CSRF header of every call that changes something. */
  csrf: string;
}

/** What the dashboard shows of a sandbox: its record and what it uses now. */
export interface LiveSandbox extends SandboxInfo {
  /** Cores busy over the last sample (0.5: half a core); absent unless running. */
  cpu?: number;
  /** Memory its cgroup holds now; absent unless running. */
  memoryBytes?: number;
  /** Host disk its own writes use, sampled less often; absent until sampled. */
  diskBytes?: number;
}

/**
 * Server-sent events of GET /v1/events (`event:` is the type, `data:` the JSON). The first
 * event is `sandboxes`, the whole list; `changed` then carries only rows that changed and the
 * ids that left. With `?sandbox=ID`, that sandbox's processes and new egress entries come too.
 */
export type LiveEvent =
  | { type: 'sandboxes'; sandboxes: LiveSandbox[] }
  | { type: 'changed'; sandboxes: LiveSandbox[]; removed: string[] }
  | { type: 'processes'; sandboxId: string; processes: ProcessInfo[] }
  | { type: 'egress'; sandboxId: string; entries: EgressEntry[] }
  /** Reading what changed failed (the stream goes on; the next tick tries again). Not `error`, which EventSource keeps for its own. */
  | { type: 'failure'; message: string };
