/**
 * GET /v1/events[?sandbox=ID]: the dashboard's one live stream, as server-sent events
 * (LiveEvent). The whole sandbox list first, then at each tick only the rows that changed;
 * with `sandbox`, also that sandbox's processes (when they change) and its new egress entries.
 * A stream still writing its last tick skips the next one instead of queueing it: what it
 * sends next is computed against what it last sent, so nothing is lost and a slow browser
 * cannot grow the daemon's memory.
 */
import { Hono } from 'hono';
import { streamSSE, type SSEStreamingApi } from 'hono/streaming';
import { WarrenError, type LiveEvent, type LiveSandbox } from '@warren/protocol';
import type { ExecService } from '../../core/exec.js';
import type { LiveFeed, ListScope } from '../../core/live.js';
import type { SandboxService } from '../../core/sandboxes.js';
import { publicEgressEntry, type EgressLog } from '../../network/audit.js';
import type { Principal } from '../../keys/service.js';
import { requireAccess, type Access, type AuthVars } from '../auth.js';
import { toWarrenError } from '../errors.js';

/** A comment line this often keeps proxies and the browser from giving up on a quiet stream. */
const KEEPALIVE_MS = 15_000;
/** Egress entries sent when a sandbox's stream opens, and most per tick after that. */
const EGRESS_PAGE = 200;

export interface EventDeps {
  feed: LiveFeed;
  sandboxes: SandboxService;
  exec: ExecService;
  egress: EgressLog;
  access: Access;
}

export function eventRoutes(deps: EventDeps): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.get('/', (c) => {
    const p = c.get('principal');
    const sandboxId = c.req.query('sandbox');
    if (sandboxId !== undefined) {
      requireAccess(p, deps.access.owners, 'sandbox', sandboxId);
      deps.sandboxes.get(sandboxId); // 404 before the stream starts
    }
    const scope: ListScope = p.admin ? { admin: true } : { admin: false, apiKeyId: p.keyId };
    return streamSSE(c, (stream) => follow(deps, stream, scope, p, sandboxId));
  });
  return app;
}

async function follow(deps: EventDeps, stream: SSEStreamingApi, scope: ListScope, p: Principal, sandboxId: string | undefined): Promise<void> {
  const send = (e: LiveEvent) => stream.writeSSE({ event: e.type, data: JSON.stringify(e) });
  const first = deps.feed.list(scope);
  let sent = first.json;
  let lastWrite = Date.now();
  await send({ type: 'sandboxes', sandboxes: first.rows });
  const detail = sandboxId === undefined ? undefined : new SandboxDetail(deps, sandboxId, p);
  if (detail) {
    const opening = await detail.changes().catch((err: unknown) => [{ type: 'failure', message: toWarrenError(err).message } satisfies LiveEvent]);
    for (const e of opening) await send(e);
  }

  let busy = false;
  const push = async () => {
    const now = deps.feed.list(scope);
    const changed: LiveSandbox[] = now.rows.filter((r) => sent.get(r.id) !== now.json.get(r.id));
    const removed = [...sent.keys()].filter((id) => !now.json.has(id));
    sent = now.json;
    const events: LiveEvent[] = changed.length || removed.length ? [{ type: 'changed', sandboxes: changed, removed }] : [];
    if (detail) events.push(...(await detail.changes()));
    for (const e of events) await send(e);
    if (events.length) lastWrite = Date.now();
    else if (Date.now() - lastWrite >= KEEPALIVE_MS) {
      await stream.write(': keepalive\n\n');
      lastWrite = Date.now();
    }
  };
  await new Promise<void>((resolve) => {
    const unsubscribe = deps.feed.subscribe(() => {
      if (busy || stream.aborted) return;
      busy = true;
      push()
        .catch((err: unknown) => send({ type: 'failure', message: toWarrenError(err).message }))
        // Writing failed too: the browser is gone; ending the stream unsubscribes it.
        .catch(() => stream.abort())
        .finally(() => {
          busy = false;
        });
    });
    const end = () => {
      unsubscribe();
      resolve();
    };
    stream.onAbort(end);
    // Gone while the first events were written: onAbort would never call back.
    if (stream.aborted) end();
  });
}

/** One sandbox's processes and egress log, as events of what is new since the last call. */
class SandboxDetail {
  private egressAfter: number;
  private processesJson = '';
  private readonly seesProcesses: boolean;

  constructor(
    private readonly deps: EventDeps,
    private readonly id: string,
    p: Principal,
  ) {
    // The processes route needs sandboxes:exec; the stream shows them only to keys that have it.
    this.seesProcesses = p.admin || p.scopes.has('sandboxes:exec');
    this.egressAfter = deps.egress.idBeforeLast(id, EGRESS_PAGE);
  }

  async changes(): Promise<LiveEvent[]> {
    const events: LiveEvent[] = [];
    const entries = this.deps.egress.list(this.id, { afterId: this.egressAfter, limit: EGRESS_PAGE });
    if (entries.length) {
      this.egressAfter = entries.at(-1)?.id ?? this.egressAfter;
      events.push({ type: 'egress', sandboxId: this.id, entries: entries.map(publicEgressEntry) });
    }
    // Asking a hibernated sandbox would resume it: only a running one is asked.
    if (this.seesProcesses && this.state() === 'running') {
      const processes = await this.deps.exec.list(this.id);
      const json = JSON.stringify(processes);
      if (json !== this.processesJson) {
        this.processesJson = json;
        events.push({ type: 'processes', sandboxId: this.id, processes });
      }
    }
    return events;
  }

  private state(): string | undefined {
    try {
      return this.deps.sandboxes.get(this.id).state;
    } catch (err) {
      // Killed since the stream opened: its row leaves the list; nothing more to show here.
      if (err instanceof WarrenError && err.code === 'not_found') return undefined;
      throw err;
    }
  }
}
