/**
 * The sandbox service: create, inspect, list, kill, ttl, and access to each running
 * sandbox's guest channel. Holds the only in-memory map of live sandboxes; the registry
 * holds the durable truth.
 */
import path from 'node:path';
import type { Logger } from 'pino';
import {
  DEFAULT_RESOURCES,
  DEFAULT_TTL_SECONDS,
  WarrenError,
  type CreateSandboxRequest,
  type ResolvedResources,
  type SandboxInfo,
  type SandboxList,
  type SandboxState,
  type BootKind,
} from '@warren/protocol';
import type { SandboxDriver, GuestStreams } from '../drivers/driver.js';
import type { TemplateCatalog, TemplateInfo } from '../templates/catalog.js';
import type { PoolMember, WarmPool } from './pool.js';
import { hasStartState, startTemplateCold, templateRuntime } from './bake.js';
import { GuestClient } from './guest-client.js';
import { newId } from './ids.js';
import { requireState, type Operation } from './lifecycle.js';
import type { Registry, SandboxRecord } from './registry.js';
import { Cleanup } from './cleanup.js';

const AGENT_READY_TIMEOUT_MS = 30_000;
const HEARTBEAT_INTERVAL_MS = 5_000;
const HEARTBEAT_TIMEOUT_MS = 10_000;
/** Consecutive missed heartbeats before a sandbox without an OOM record is declared hung. */
const HEARTBEAT_MISSES_ALLOWED = 3;

interface Live {
  client: GuestClient;
  streams: GuestStreams;
  missed: number;
  checking: boolean;
}

export interface SandboxServiceOptions {
  registry: Registry;
  driver: SandboxDriver;
  templates: TemplateCatalog;
  log: Logger;
  maxResources?: Partial<ResolvedResources>;
  pool?: WarmPool;
  bakes?: BakedImages;
}

/** Where restorable images of baked templates come from (core/bake.ts). */
export interface BakedImages {
  /** The image directory of the template version's bake, if one is ready. */
  imageFor(template: TemplateInfo): string | undefined;
  /** Whether the version's bake failed (its ready check never passed). */
  failed(template: TemplateInfo): boolean;
}

export class SandboxService {
  private live = new Map<string, Live>();
  /** Booted warm-pool members, not yet claimed (and not in the registry). */
  private pooled = new Map<string, Live>();
  private heartbeat?: NodeJS.Timeout;

  constructor(private opts: SandboxServiceOptions) {}

  startHeartbeat(): void {
    this.heartbeat = setInterval(() => void this.checkAll(), HEARTBEAT_INTERVAL_MS);
    this.heartbeat.unref();
  }

  async create(req: CreateSandboxRequest & { template: string }, apiKeyId: string): Promise<SandboxInfo> {
    const started = Date.now();
    const template = this.opts.templates.resolve(req.template);
    const resources: ResolvedResources = { ...DEFAULT_RESOURCES, ...(req.resources ?? {}) };
    const member = this.opts.pool?.claim(template);
    const record: SandboxRecord = {
      id: member?.id ?? newId('sb'),
      template: template.name,
      state: 'creating',
      createdAt: started,
      expiresAt: started + (req.ttlSeconds ?? DEFAULT_TTL_SECONDS) * 1000,
      metadata: req.metadata ?? {},
      env: req.env ?? {},
      resources,
      rootfs: template.rootfs,
      apiKeyId,
      boot: member ? 'pool' : 'cold',
    };
    const log = this.opts.log.child({ sandbox: record.id });
    const undo = new Cleanup(log);
    try {
      this.opts.registry.insert(record);
      undo.add('forget record', () => this.opts.registry.delete(record.id));
      undo.add('destroy sandbox', () => this.teardown(record.id, 'create failed'));
      if (member) {
        this.live.set(record.id, this.pooled.get(record.id)!);
        this.pooled.delete(record.id);
        // Members boot with the default limits; the request's are applied as it claims one.
        if (!sameResources(resources, DEFAULT_RESOURCES)) await this.opts.driver.resize(record.id, resources);
      } else {
        const booted = await this.boot(record.id, template, resources);
        this.live.set(record.id, booted.live);
        if (booted.kind !== record.boot) this.opts.registry.setBoot(record.id, (record.boot = booted.kind));
      }
      await this.bind(record);
      this.opts.registry.setState(record.id, 'running');
      undo.dismiss();
      const ms = Date.now() - started;
      if (member) this.opts.pool?.recordClaim(template.name, ms);
      log.info({ template: template.name, version: template.version, boot: record.boot, ms }, 'sandbox created');
      return this.get(record.id);
    } catch (err) {
      await undo.run();
      throw err;
    }
  }

  /**
   * Boots a sandbox of the template and waits for its agent: a restore of the template's
   * baked image when one is ready, a cold boot otherwise. Not registered and not bound to any
   * request yet: create and the warm pool do that.
   */
  private async boot(id: string, template: TemplateInfo, resources: ResolvedResources): Promise<{ live: Live; kind: BootKind }> {
    const image = this.opts.bakes?.imageFor(template);
    const spec = { id, hostname: id, rootfs: template.rootfs, resources };
    let streams: GuestStreams;
    try {
      streams = image ? await this.opts.driver.restore(spec, image) : await this.opts.driver.start(spec);
    } catch (err) {
      await this.opts.driver.destroy(id);
      throw err;
    }
    const live = this.openChannel(id, streams);
    try {
      await live.client.request('hello', {}, AGENT_READY_TIMEOUT_MS);
      // A cold boot starts what a baked image would already be running, and waits for it to
      // be ready unless the bake already found that it never gets there.
      const runtime = templateRuntime(template.rootfs);
      if (!image && hasStartState(runtime)) {
        await startTemplateCold(live.client, runtime, this.opts.log.child({ sandbox: id }), !this.opts.bakes?.failed(template));
      }
    } catch (err) {
      live.client.close('boot failed');
      streams.release();
      await this.opts.driver.destroy(id);
      throw err;
    }
    return { live, kind: image ? 'baked' : 'cold' };
  }

  /** PoolHost: a fresh, unbound sandbox of the template for the warm pool. */
  async bootForPool(template: TemplateInfo): Promise<PoolMember> {
    const id = newId('sb');
    const { live } = await this.boot(id, template, DEFAULT_RESOURCES);
    this.pooled.set(id, live);
    return { id, template: template.name, version: template.version, alive: () => !live.client.closed };
  }

  /** PoolHost: destroys a member nobody claimed. */
  async discardPooled(member: PoolMember, reason: string): Promise<void> {
    const live = this.pooled.get(member.id);
    this.pooled.delete(member.id);
    if (live) {
      live.client.close(reason);
      live.streams.release();
    }
    await this.opts.driver.destroy(member.id);
  }

  /** Re-opens the guest channel of a registered sandbox (after a daemon restart). */
  async connect(record: SandboxRecord, streams: GuestStreams): Promise<void> {
    this.live.set(record.id, this.openChannel(record.id, streams));
    await this.guestOf(record.id).request('hello', {}, AGENT_READY_TIMEOUT_MS);
    await this.bind(record);
  }

  /**
   * Late binding: what makes a booted sandbox this request's sandbox. Applied through the
   * agent, so a baked image or a pool member can serve any request.
   */
  private async bind(record: SandboxRecord): Promise<void> {
    const runtime = templateRuntime(record.rootfs);
    await this.guestOf(record.id).request(
      'configure',
      {
        env: { ...runtime.env, ...record.env },
        hostname: record.id,
        pidsLimit: record.resources.pids,
        defaultUser: runtime.user,
        defaultCwd: runtime.workdir,
      },
      AGENT_READY_TIMEOUT_MS,
    );
  }

  private guestOf(id: string): GuestClient {
    const live = this.live.get(id);
    if (!live) throw new WarrenError('unavailable', `sandbox ${id} has no guest channel`);
    return live.client;
  }

  private openChannel(id: string, streams: GuestStreams): Live {
    const client = new GuestClient(streams.fromGuest, streams.toGuest, (raw) => this.explain(id, `agent channel lost (${raw})`));
    const live: Live = { client, streams, missed: 0, checking: false };
    client.onClose((reason) => {
      if (this.live.get(id) === live) void this.onChannelLost(id, reason);
    });
    return live;
  }

  get(id: string): SandboxInfo {
    return toInfo(this.record(id, 'get'));
  }

  list(q: { state?: SandboxState; metadata?: Record<string, string>; limit?: number; cursor?: string }): SandboxList {
    const limit = q.limit ?? 100;
    const rows = this.opts.registry.list({ state: q.state, metadata: q.metadata, limit: limit + 1, after: q.cursor });
    const page = rows.slice(0, limit);
    return { sandboxes: page.map(toInfo), ...(rows.length > limit ? { nextCursor: page[page.length - 1].id } : {}) };
  }

  setTtl(id: string, ttlSeconds: number): SandboxInfo {
    this.record(id, 'setTtl');
    this.opts.registry.setExpiry(id, Date.now() + ttlSeconds * 1000);
    return this.get(id);
  }

  async kill(id: string, reason = 'killed'): Promise<void> {
    this.record(id, 'kill');
    await this.teardown(id, reason);
    this.opts.registry.delete(id);
  }

  /** The guest channel of a running sandbox, for an operation that needs one. */
  guest(id: string, op: Operation): GuestClient {
    this.record(id, op);
    const live = this.live.get(id);
    if (!live || live.client.closed) throw new WarrenError('unavailable', `sandbox ${id} is not reachable right now; retry shortly`);
    return live.client;
  }

  record(id: string, op: Operation): SandboxRecord {
    const r = this.opts.registry.get(id);
    if (!r) throw new WarrenError('not_found', `no sandbox with id ${id}`);
    requireState(id, r.state, op, r.error);
    return r;
  }

  liveIds(): string[] {
    return [...this.live.keys()];
  }

  /** Closes every channel without touching the sandboxes (daemon shutdown). */
  detachAll(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    for (const [id, live] of this.live) {
      this.live.delete(id);
      live.client.close('daemon shutting down');
      live.streams.release();
    }
  }

  async teardown(id: string, reason: string): Promise<void> {
    const live = this.live.get(id);
    this.live.delete(id);
    if (live) {
      live.client.close(reason);
      live.streams.release();
    }
    await this.opts.driver.destroy(id);
  }

  /** A sandbox died or hung on its own: keep the record as dead, with the reason. */
  async markDead(id: string, reason: string): Promise<void> {
    const r = this.opts.registry.get(id);
    if (!r || r.state === 'dead') return;
    this.opts.log.warn({ sandbox: id, reason }, 'sandbox died');
    this.opts.registry.setState(id, 'dead', reason);
    await this.teardown(id, reason).catch((err: Error) => this.opts.log.error({ sandbox: id, err: err.message }, 'cleanup of dead sandbox failed'));
  }

  private async onChannelLost(id: string, reason: string): Promise<void> {
    const r = this.opts.registry.get(id);
    if (!r || r.state !== 'running') return;
    await this.markDead(id, reason);
  }

  private async explain(id: string, fallback: string): Promise<string> {
    const cause = await this.opts.driver.diagnose(id);
    const limits = this.opts.registry.get(id)?.resources;
    if (cause.oomKilled) return `the sandbox died: out of memory (it exceeded its ${limits?.memoryMB ?? '?'} MB memory limit)`;
    if (cause.pidsExhausted) return `the sandbox died: too many processes (it exceeded its limit of ${limits?.pids ?? '?'} processes)`;
    return fallback;
  }

  private async checkAll(): Promise<void> {
    await Promise.all([...this.live.entries()].map(([id, live]) => this.check(id, live)));
    await Promise.all([...this.pooled.values()].map((live) => this.checkPooled(live)));
  }

  /**
   * A pooled member that stops answering gets its channel closed, which marks it dead for
   * the pool: it is replaced instead of handed to a create that would wait on it.
   */
  private async checkPooled(live: Live): Promise<void> {
    if (live.checking || live.client.closed) return;
    live.checking = true;
    try {
      await live.client.request('ping', {}, HEARTBEAT_TIMEOUT_MS);
      live.missed = 0;
    } catch {
      if (++live.missed >= HEARTBEAT_MISSES_ALLOWED) live.client.close('stopped answering while pooled');
    } finally {
      live.checking = false;
    }
  }

  private async check(id: string, live: Live): Promise<void> {
    if (live.checking || live.client.closed) return;
    live.checking = true;
    try {
      await live.client.request('ping', {}, HEARTBEAT_TIMEOUT_MS);
      live.missed = 0;
      await this.enforceDisk(id);
    } catch {
      live.missed++;
      const cause = await this.opts.driver.diagnose(id);
      if (cause.oomKilled || live.missed >= HEARTBEAT_MISSES_ALLOWED) {
        await this.markDead(id, await this.explain(id, `sandbox stopped responding for ${(live.missed * HEARTBEAT_TIMEOUT_MS) / 1000}s`));
      }
    } finally {
      live.checking = false;
    }
  }

  /** Bytes the sandbox may still write before it reaches its disk limit. */
  async diskHeadroom(id: string): Promise<number> {
    const r = this.record(id, 'files');
    return Math.max(0, r.resources.diskMB * 1024 * 1024 - (await this.opts.driver.diskUsage(id)));
  }

  /**
   * gVisor's overlay has no size limit and this kernel has no filesystem quotas, so diskMB
   * is enforced from outside: a sandbox whose writes exceed it is stopped, with that reason.
   * (Uploads through the API are refused up front instead; see api/routes/files.ts.)
   */
  private async enforceDisk(id: string): Promise<void> {
    const r = this.opts.registry.get(id);
    if (!r || r.state !== 'running') return;
    const used = await this.opts.driver.diskUsage(id);
    if (used > r.resources.diskMB * 1024 * 1024) {
      await this.markDead(id, `the sandbox was stopped: disk limit exceeded (it wrote ${Math.round(used / 1048576)} MB, limit ${r.resources.diskMB} MB)`);
    }
  }
}

function sameResources(a: ResolvedResources, b: ResolvedResources): boolean {
  return a.cpus === b.cpus && a.memoryMB === b.memoryMB && a.pids === b.pids && a.diskMB === b.diskMB;
}

export function toInfo(r: SandboxRecord): SandboxInfo {
  return {
    id: r.id,
    template: r.template,
    // The rootfs of a template version is <templates>/<name>/<version>/rootfs.
    templateVersion: path.basename(path.dirname(r.rootfs)),
    boot: r.boot,
    state: r.state,
    createdAt: new Date(r.createdAt).toISOString(),
    expiresAt: new Date(r.expiresAt).toISOString(),
    metadata: r.metadata,
    resources: r.resources,
    ...(r.error ? { error: r.error } : {}),
  };
}
