/**
 * The sandbox service: create, inspect, list, kill, ttl, and access to each running
 * sandbox's guest channel. Holds the only in-memory map of live sandboxes; the registry
 * holds the durable truth.
 */
import { mkdir, rename, statfs } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import {
  DEFAULT_TTL_SECONDS,
  WarrenError,
  type CreateSandboxRequest,
  type ResolvedResources,
  type SandboxInfo,
  type SandboxList,
  type SandboxState,
  type BootKind,
  type ForkRequest,
  type ForkResult,
  DEFAULT_MAX_FORK_COUNT,
  type NetworkPolicy,
  type NetworkPolicyView,
} from '@warren/protocol';
import { parsePolicy, type EgressPolicy } from '../network/policy.js';
import { Presets } from '../network/presets.js';
import { credentialRules, parseCredentials, redactedCredentials } from '../network/credentials.js';
import { installEgressCa, TRUST_ENV } from './egress-trust.js';
import { CONNECT_HELPER_PATH, EGRESS_PROXY_PORT, type GuestOps, type TcpForward } from '@warren/protocol';
import { asConnect, connectHints, tcpForwards } from '../network/forwards.js';
import type { Duplex } from 'node:stream';
import type { SandboxDriver, GuestStreams } from '../drivers/driver.js';
import type { TemplateCatalog, TemplateInfo } from '../templates/catalog.js';
import type { PoolMember, WarmPool } from './pool.js';
import { hasStartState, startTemplateCold, templateRuntime, type BakedImages } from './bake.js';
import { GuestClient } from './guest-client.js';
import { newId } from './ids.js';
import { requireState, type Operation } from './lifecycle.js';
import type { NetworkGiven, Registry, SandboxRecord } from './registry.js';
import { Cleanup } from './cleanup.js';
import { ImageStore } from './images.js';
import { admitResources, defaultResources, type HostCapacity } from './admission.js';

const AGENT_READY_TIMEOUT_MS = 30_000;
const HEARTBEAT_INTERVAL_MS = 5_000;
const HEARTBEAT_TIMEOUT_MS = 10_000;
/** Consecutive missed heartbeats before a sandbox without an OOM record is declared hung. */
const HEARTBEAT_MISSES_ALLOWED = 3;
/**
 * Children of one fork restored at once. Restores are CPU-bound (each one alone keeps both
 * cores of the test machine busy), so fewer at a time is no faster: 8 children of a 120 MB
 * parent took 5.6 to 5.8 s with 8 at once, 6.2 to 6.4 s with 4 and 6.3 to 7.0 s with 2. The
 * cap only keeps a 16-child fork from starting 16 runsc processes together.
 */
const FORK_RESTORE_CONCURRENCY = 8;
/** Free disk kept beyond a save's estimated size (runsc's own files, the registry, logs). */
const IMAGE_HEADROOM_BYTES = 64 * 1024 * 1024;
/** The agent answers 'quiesce' at once unless it is swamped; a hung one fails the checkpoint. */
const QUIESCE_TIMEOUT_MS = 10_000;

interface Live {
  client: GuestClient;
  streams: GuestStreams;
  missed: number;
  checking: boolean;
  /**
   * The channel goes through an attach relay: the agent's stdio channel ended with the
   * daemon that started it (a restart), so every later image of it needs a relay too.
   */
  relayed: boolean;
}

export interface SandboxServiceOptions {
  registry: Registry;
  driver: SandboxDriver;
  templates: TemplateCatalog;
  log: Logger;
  /** What one sandbox may have at most on this host (admission.ts); absent: no host check. */
  capacity?: HostCapacity;
  pool?: WarmPool;
  /** Boot pool members at a low CPU weight (default true; WARREN_POOL_BACKGROUND=0 for measurements). */
  poolBackground?: boolean;
  bakes?: BakedImages;
  meter?: ActivityMeter;
  images: ImageStore;
  /** Most children one fork may ask for (default DEFAULT_MAX_FORK_COUNT). */
  maxForkCount?: number;
  /** The daemon's egress proxy (network/proxy.ts); without it tunnels are refused. */
  egress?: EgressServer;
  /** Per-sandbox CAs for credential brokering (network/ca.ts); without it credentials are refused. */
  egressCa?: EgressCaStore;
  /** Expands `@github` and the like (network/presets.ts); default: read from this host. */
  presets?: Presets;
  /** The policy of a create that gives none and whose template has none (WARREN_DEFAULT_ALLOW). */
  defaultAllow?: string[];
}

/** A sandbox record's egress fields, from a policy as given. */
type PolicyFields = Pick<SandboxRecord, 'network' | 'networkGiven' | 'credentials'>;

/** What the sandbox service needs of the per-sandbox CA store. */
export interface EgressCaStore {
  /** The sandbox's CA certificate (PEM), created on first use. */
  ensure(sandboxId: string): Promise<string>;
  remove(sandboxId: string): Promise<void>;
}

/** What the sandbox service needs of the egress proxy. */
export interface EgressServer {
  serve(conn: Duplex, sandboxId: string, policy: () => EgressPolicy): void;
  closeAll(sandboxId: string): void;
}

/** What every command inside sees: clients find the egress proxy through these. */
const PROXY_URL = `http://127.0.0.1:${EGRESS_PROXY_PORT}`;
const PROXY_ENV: Record<string, string> = {
  HTTP_PROXY: PROXY_URL,
  HTTPS_PROXY: PROXY_URL,
  http_proxy: PROXY_URL,
  https_proxy: PROXY_URL,
  NO_PROXY: 'localhost,127.0.0.1,::1',
  no_proxy: 'localhost,127.0.0.1,::1',
  // git over ssh goes through the same proxy and policy (docs/network.md).
  GIT_SSH_COMMAND: `ssh -o ProxyCommand="${CONNECT_HELPER_PATH} %h %p"`,
};

/** Where a sandbox boots from instead of its template: a saved image. */
interface ImageSource {
  image: string;
  kind: BootKind;
}

/** Metering of the time a sandbox runs (core/usage.ts): hibernated time is not billed. */
export interface ActivityMeter {
  /** The sandbox runs, and is billed for these resources, from `at` (default now). */
  start(id: string, apiKeyId: string, resources: ResolvedResources, at?: number): void;
  /** It stops being billed (hibernated, killed, died). Idempotent. */
  stop(id: string, at?: number): void;
}

export class SandboxService {
  private live = new Map<string, Live>();
  /** Booted warm-pool members, not yet claimed (and not in the registry). */
  private pooled = new Map<string, Live>();
  private heartbeat?: NodeJS.Timeout;
  /** Hibernate, resume, fork and snapshot of one sandbox run one at a time, in order. */
  private operations = new Map<string, Promise<unknown>>();
  /** Parsed egress policies, by sandbox, with the rules they were parsed from. */
  private policies = new Map<string, { rules: string; policy: EgressPolicy }>();
  /** When each sandbox last saw activity (an API call on it, a running command). */
  private lastActive = new Map<string, number>();
  /** What a create leaves out: the protocol's defaults, cut down to this host. */
  private readonly defaults: ResolvedResources;
  private readonly presets: Presets;

  constructor(private opts: SandboxServiceOptions) {
    this.defaults = defaultResources(opts.capacity);
    this.presets = opts.presets ?? new Presets();
  }

  startHeartbeat(): void {
    this.heartbeat = setInterval(() => void this.checkAll(), HEARTBEAT_INTERVAL_MS);
    this.heartbeat.unref();
  }

  async create(req: CreateSandboxRequest & { template: string }, apiKeyId: string): Promise<SandboxInfo> {
    if (req.snapshot) return this.createFromSnapshot(req, apiKeyId);
    const started = Date.now();
    const template = this.opts.templates.resolve(req.template);
    const resources: ResolvedResources = { ...this.defaults, ...(req.resources ?? {}) };
    // Before a pool member is claimed or anything registered: a refusal leaves no trace.
    admitResources(resources, this.opts.capacity);
    const policy = await this.createPolicy(req.network, template.name, template.network);
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
      ...(req.idleSeconds ? { idleSeconds: req.idleSeconds } : {}),
      ...policy,
    };
    const log = this.opts.log.child({ sandbox: record.id });
    const undo = this.beginCreate(record, log);
    try {
      if (member) {
        this.live.set(record.id, this.pooled.get(record.id)!);
        this.pooled.delete(record.id);
        // It booted at a low CPU weight (bootForPool); from now on someone waits for it.
        await this.opts.driver.promote(record.id);
        // Members boot with the default limits; the request's are applied as it claims one.
        if (!sameResources(resources, this.defaults)) await this.opts.driver.resize(record.id, resources);
      } else {
        const booted = await this.boot(record.id, template, resources);
        this.live.set(record.id, booted.live);
        if (booted.kind !== record.boot) this.opts.registry.setBoot(record.id, (record.boot = booted.kind));
      }
      await this.bind(record, { fresh: true });
      this.markRunning(record);
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
  private async boot(
    id: string,
    template: TemplateInfo,
    resources: ResolvedResources,
    from?: ImageSource,
    background = false,
  ): Promise<{ live: Live; kind: BootKind }> {
    const image = from ? from.image : this.opts.bakes?.imageFor(template);
    const spec = { id, hostname: id, rootfs: template.rootfs, resources, background };
    const relayed = image !== undefined && ImageStore.isRelayed(image);
    let streams: GuestStreams;
    try {
      streams = image ? await this.opts.driver.restore(spec, image) : await this.opts.driver.start(spec);
      if (relayed) streams = await this.relayTo(id, streams);
    } catch (err) {
      await this.opts.driver.destroy(id);
      throw err;
    }
    const live = this.openChannel(id, streams, relayed);
    try {
      // On a restored agent, hello also drops what the channel carried when it was saved.
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
    return { live, kind: from ? from.kind : image ? 'baked' : 'cold' };
  }

  /**
   * A new sandbox from a saved image (a fork's parent, a snapshot): registered as
   * 'creating' until its agent answered and took its new identity, so a failure or a daemon
   * crash leaves nothing half made.
   */
  private async createFromImage(record: SandboxRecord, from: ImageSource): Promise<SandboxInfo> {
    const started = Date.now();
    const log = this.opts.log.child({ sandbox: record.id });
    const undo = this.beginCreate(record, log);
    try {
      const booted = await this.boot(record.id, pinnedTemplate(record), record.resources, from);
      this.live.set(record.id, booted.live);
      await this.bind(record);
      this.markRunning(record);
      undo.dismiss();
      log.info({ template: record.template, boot: record.boot, source: record.source, ms: Date.now() - started }, 'sandbox created');
      return this.get(record.id);
    } catch (err) {
      await undo.run();
      throw err;
    }
  }

  private async createFromSnapshot(req: CreateSandboxRequest, apiKeyId: string): Promise<SandboxInfo> {
    const snap = this.opts.registry.getSnapshot(req.snapshot!);
    if (!snap) throw new WarrenError('not_found', `no snapshot with id ${req.snapshot}`);
    const dir = this.opts.images.snapshot(snap.id);
    if (!this.opts.images.isComplete(dir)) throw new WarrenError('failed_precondition', `snapshot ${snap.id} has no complete image on disk; delete it`);
    const resources = { ...snap.resources, ...(req.resources ?? {}) };
    // The snapshot's own values may come from another host or an older daemon.
    admitResources(resources, this.opts.capacity, `snapshot ${snap.id}`, req.resources);
    // The request's policy, else the default of the template version the snapshot was taken from.
    const policy = await this.createPolicy(req.network, snap.template, templateRuntime(snap.rootfs).network);
    return this.createFromImage(
      // Billed to whoever creates it, not to whoever took the snapshot.
      recordFromImage({ ...snap, apiKeyId }, { ...req, env: { ...snap.env, ...(req.env ?? {}) }, resources }, 'snapshot', snap.id, policy),
      { image: ImageStore.imagePath(dir), kind: 'snapshot' },
    );
  }

  /**
   * The channel of a restored sandbox whose agent no longer serves its stdio: an attach
   * relay. The restore's own stdio stays open (drained) for the sandbox's init, which still
   * holds it.
   */
  private async relayTo(id: string, restored: GuestStreams): Promise<GuestStreams> {
    restored.fromGuest.resume();
    try {
      const relay = await this.opts.driver.attach(id);
      return {
        fromGuest: relay.fromGuest,
        toGuest: relay.toGuest,
        release: () => {
          relay.release();
          restored.release();
        },
        ...(relay.detach ? { detach: relay.detach } : {}),
      };
    } catch (err) {
      restored.release();
      throw err;
    }
  }

  /** Registers a sandbox being created; the Cleanup undoes that (and any boot) unless dismissed. */
  private beginCreate(record: SandboxRecord, log: Logger): Cleanup {
    const undo = new Cleanup(log);
    this.opts.registry.insert(record);
    undo.add('forget record', () => this.opts.registry.delete(record.id));
    undo.add('destroy sandbox', () => this.teardown(record.id, 'create failed'));
    return undo;
  }

  /** Billing and activity start when a sandbox is up (create, resume). */
  private markRunning(record: SandboxRecord): void {
    this.opts.registry.setState(record.id, 'running');
    this.lastActive.set(record.id, Date.now());
    this.opts.meter?.start(record.id, record.apiKeyId, record.resources);
  }

  /** Runs fn after every earlier hibernate/resume/fork/snapshot of the sandbox has finished. */
  private serialized<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const before = this.operations.get(id) ?? Promise.resolve();
    const run = before.then(fn, fn);
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.operations.set(id, settled);
    void settled.then(() => {
      if (this.operations.get(id) === settled) this.operations.delete(id);
    });
    return run;
  }

  /**
   * Saves a running sandbox into dir (an ImageStore directory) and marks it complete. The
   * guest channel is quiesced first so that the image holds it between frames; with
   * leaveRunning the sandbox carries on afterwards. Returns how long the checkpoint took
   * (the processes are stopped only inside it) and how long calls waited.
   */
  private async save(id: string, dir: string, leaveRunning: boolean): Promise<{ checkpointMs: number; heldMs: number }> {
    const live = this.live.get(id);
    if (!live || live.client.closed) throw new WarrenError('unavailable', `sandbox ${id} is not reachable right now; retry shortly`);
    await this.requireRoomForImage(id, dir);
    await this.opts.images.prepare(dir);
    // From here calls on the sandbox wait in the held channel; its processes keep running
    // until the checkpoint stops them, and (leaveRunning) start again as it returns.
    const held = Date.now();
    await live.client.quiesce(QUIESCE_TIMEOUT_MS);
    // A relay's host descriptors cannot be restored: it must not be in the image.
    if (live.relayed) await this.dropRelay(id, live);
    const quiesced = Date.now();
    let stopped = false;
    let checkpointMs = 0;
    try {
      await this.opts.driver.checkpoint(id, ImageStore.imagePath(dir), { leaveRunning });
      checkpointMs = Date.now() - quiesced;
      stopped = !leaveRunning;
    } catch (err) {
      await this.opts.images.remove(dir);
      throw err;
    } finally {
      // A failed checkpoint leaves the sandbox running: it must get its channel back.
      if (!stopped) {
        if (live.relayed)
          await this.reattach(id).catch((err: Error) => this.markDead(id, `its agent could not be reached again after a checkpoint: ${err.message}`));
        else live.client.unquiesce();
      }
    }
    const heldMs = Date.now() - held;
    this.opts.log.info({ sandbox: id, quiesceMs: quiesced - held, checkpointMs, heldMs, relayed: live.relayed }, 'sandbox saved');
    if (live.relayed) await this.opts.images.markRelayed(dir);
    await this.opts.images.markComplete(dir);
    return { checkpointMs, heldMs };
  }

  /**
   * Refuses a save that would not fit: runsc kills a sandbox whose checkpoint fails midway
   * (measured with a full disk, 2026-12-02), so the space is checked before it starts.
   */
  private async requireRoomForImage(id: string, dir: string): Promise<void> {
    const needed = (await this.opts.driver.imageSizeEstimate(id)) + IMAGE_HEADROOM_BYTES;
    const fs = await statfs(path.dirname(dir)).catch(async () => {
      await mkdir(path.dirname(dir), { recursive: true, mode: 0o700 });
      return statfs(path.dirname(dir));
    });
    const free = fs.bavail * fs.bsize;
    if (needed > free) {
      throw new WarrenError(
        'resource_exhausted',
        `not enough disk for the image of sandbox ${id}: it needs up to ${mb(needed)} MB, ${mb(free)} MB are free under ${path.dirname(dir)}; the sandbox was not touched`,
      );
    }
  }

  /**
   * Hibernates a sandbox: its memory, processes and files go to disk, and it then holds no
   * host process and no RAM. Refused while calls on it are in progress (their streams would
   * be cut); running commands are fine, they continue after the resume.
   */
  hibernate(id: string, reason = 'requested'): Promise<SandboxInfo> {
    this.record(id, 'hibernate');
    return this.serialized(id, async () => {
      const r = this.record(id, 'hibernate');
      if (r.state === 'hibernated') return this.get(id);
      const live = this.live.get(id);
      const inUse = live?.client.inUse() ?? [];
      if (inUse.length) {
        throw new WarrenError('conflict', `sandbox ${id} has ${inUse.length} call(s) in progress (${inUse.join(', ')}); hibernate it when they have finished`);
      }
      const started = Date.now();
      const dir = this.opts.images.hibernated(id);
      this.opts.registry.setState(id, 'hibernating');
      try {
        await this.save(id, dir, false);
      } catch (err) {
        this.opts.registry.setState(id, 'running');
        const code = err instanceof WarrenError ? err.code : 'internal';
        throw new WarrenError(code, `could not hibernate sandbox ${id}; it keeps running: ${(err as Error).message}`);
      }
      this.opts.meter?.stop(id);
      await this.release(id, 'hibernated', { stopped: true });
      if (!this.opts.registry.get(id)) {
        // Killed while it was being saved: the image is nobody's.
        await this.opts.images.remove(dir);
        throw new WarrenError('not_found', `sandbox ${id} was killed while it hibernated`);
      }
      // Only now is it true that the sandbox holds nothing on the host. A crash before this
      // line is finished by recovery: a complete image makes it hibernated.
      this.opts.registry.setState(id, 'hibernated');
      this.opts.log.info({ sandbox: id, reason, ms: Date.now() - started, imageBytes: await this.opts.images.size(dir) }, 'sandbox hibernated');
      return this.get(id);
    });
  }

  /** Brings a hibernated sandbox back from its image, as it was. Running: nothing to do. */
  resume(id: string): Promise<SandboxInfo> {
    this.record(id, 'resume');
    return this.serialized(id, async () => {
      const r = this.record(id, 'resume');
      if (r.state === 'running') return this.get(id);
      const started = Date.now();
      const dir = this.opts.images.hibernated(id);
      if (!this.opts.images.isComplete(dir)) {
        await this.markDead(id, 'its hibernation image is missing');
        throw new WarrenError('not_found', `sandbox ${id} is dead (its hibernation image is missing); create a new one`);
      }
      let booted: { live: Live };
      try {
        booted = await this.boot(id, pinnedTemplate(r), r.resources, { image: ImageStore.imagePath(dir), kind: r.boot });
      } catch (err) {
        // The image is untouched: the sandbox stays hibernated and a later call tries again.
        throw new WarrenError('unavailable', `could not resume sandbox ${id} (it stays hibernated): ${(err as Error).message}`);
      }
      this.live.set(id, booted.live);
      // The forwarders came back with the agent's memory; the policy may have changed since.
      await this.pushForwards(id).catch((err: Error) => this.opts.log.warn({ sandbox: id, err: err.message }, 'TCP forwarders not updated after resume'));
      this.markRunning(r);
      await this.opts.images.remove(dir);
      this.opts.log.info({ sandbox: id, ms: Date.now() - started }, 'sandbox resumed');
      return this.get(id);
    });
  }

  /**
   * N new sandboxes that continue from this instant of the parent: its memory, processes and
   * files. The parent is paused only while its image is written; the children are restored
   * from that image in parallel. All or nothing: if one child fails, none is kept.
   */
  async fork(id: string, req: ForkRequest & { count: number }): Promise<ForkResult> {
    const max = this.opts.maxForkCount ?? DEFAULT_MAX_FORK_COUNT;
    if (req.count > max)
      throw new WarrenError('invalid_argument', `count must be at most ${max} children per fork, WARREN_MAX_FORK (got ${req.count})`, {
        details: { field: 'count', limit: max },
      });
    // Children get the parent's resources, which an older daemon may have admitted unchecked.
    admitResources(this.record(id, 'fork').resources, this.opts.capacity, `the parent ${id}`);
    return this.serialized(id, async () => {
      const started = Date.now();
      const parent = this.record(id, 'fork');
      let dir = this.opts.images.hibernated(id);
      let parentPausedMs = 0;
      let channelHeldMs = 0;
      let temporary: string | undefined;
      try {
        if (parent.state !== 'hibernated') {
          temporary = dir = await this.opts.images.forkDir();
          ({ checkpointMs: parentPausedMs, heldMs: channelHeldMs } = await this.save(id, dir, true));
        }
        const children = await settleLimited(FORK_RESTORE_CONCURRENCY, req.count, () =>
          this.createFromImage(recordFromImage(parent, { ...req, idleSeconds: req.idleSeconds ?? parent.idleSeconds }, 'fork', id), {
            image: ImageStore.imagePath(dir),
            kind: 'fork',
          }),
        );
        const failed = children.filter((c): c is PromiseRejectedResult => c.status === 'rejected');
        const made = children.filter((c): c is PromiseFulfilledResult<SandboxInfo> => c.status === 'fulfilled').map((c) => c.value);
        const [firstFailure] = failed;
        if (firstFailure) {
          await Promise.all(made.map((c) => this.kill(c.id, 'fork failed').catch(() => undefined)));
          const why = (firstFailure.reason as Error).message;
          throw new WarrenError(
            'unavailable',
            `fork of ${id} failed: ${failed.length} of ${req.count} children could not start (${why}); no child was kept, the parent is unharmed`,
          );
        }
        const totalMs = Date.now() - started;
        this.opts.log.info({ sandbox: id, children: made.map((c) => c.id), parentPausedMs, channelHeldMs, totalMs }, 'sandbox forked');
        return { sandboxes: made, parentPausedMs, channelHeldMs, totalMs };
      } finally {
        if (temporary) await this.opts.images.remove(temporary);
      }
    });
  }

  /**
   * Saves the sandbox into dir without stopping it (a snapshot); a hibernated sandbox's image
   * is linked instead, without waking it.
   */
  snapshotInto(id: string, dir: string): Promise<SandboxRecord> {
    this.record(id, 'snapshot');
    return this.serialized(id, async () => {
      const r = this.record(id, 'snapshot');
      if (r.state === 'hibernated') await this.opts.images.linkCopy(this.opts.images.hibernated(id), dir);
      else {
        const tmp = `${dir}.tmp`;
        await this.save(id, tmp, true);
        await this.opts.images.remove(dir);
        await rename(tmp, dir);
      }
      return r;
    });
  }

  /** PoolHost: a fresh, unbound sandbox of the template for the warm pool. */
  async bootForPool(template: TemplateInfo): Promise<PoolMember> {
    const id = newId('sb');
    // In the background (a low host CPU weight until claimed): a refill must not slow down
    // the sandboxes that are serving requests, the one just claimed above all.
    const { live } = await this.boot(id, template, this.defaults, undefined, this.opts.poolBackground ?? true);
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
    this.live.set(record.id, this.openChannel(record.id, streams, true));
    this.lastActive.set(record.id, Date.now());
    await this.guestOf(record.id).request('hello', {}, AGENT_READY_TIMEOUT_MS);
    await this.bind(record);
  }

  /**
   * Late binding: what makes a booted sandbox this request's sandbox. Applied through the
   * agent, so a baked image or a pool member can serve any request.
   */
  private async bind(record: SandboxRecord, opts: { fresh?: boolean } = {}): Promise<void> {
    const runtime = templateRuntime(record.rootfs);
    const client = this.guestOf(record.id);
    // Read again: a PUT during a create may have added credentials since record was made.
    const trust = (this.opts.registry.get(record.id)?.credentials ?? record.credentials ?? []).length > 0;
    // Only a sandbox with credentials pays for a CA; the pooled fast path does nothing here.
    if (trust) await installEgressCa(client, await this.caStore().ensure(record.id));
    await client.request(
      'configure',
      {
        env: { ...PROXY_ENV, ...(trust ? TRUST_ENV : {}), ...runtime.env, ...record.env },
        hostname: record.id,
        pidsLimit: record.resources.pids,
        defaultUser: runtime.user,
        defaultCwd: runtime.workdir,
      },
      AGENT_READY_TIMEOUT_MS,
    );
    // A sandbox booted from its template has no forwarders yet: nothing to send without rules.
    await this.pushForwards(record.id, opts.fresh);
  }

  private guestOf(id: string): GuestClient {
    const live = this.live.get(id);
    if (!live) throw new WarrenError('unavailable', `sandbox ${id} has no guest channel`);
    return live.client;
  }

  /** Ends a quiesced sandbox's relay channel on purpose (not a lost sandbox). */
  private async dropRelay(id: string, live: Live): Promise<void> {
    this.live.delete(id);
    live.client.close('relay ended for a checkpoint');
    await live.streams.detach?.();
    live.streams.release();
  }

  /** A new relay channel to a sandbox whose relay was dropped for a checkpoint that left it running. */
  private async reattach(id: string): Promise<void> {
    const live = this.openChannel(id, await this.opts.driver.attach(id), true);
    this.live.set(id, live);
    await live.client.request('hello', {}, AGENT_READY_TIMEOUT_MS);
  }

  private openChannel(id: string, streams: GuestStreams, relayed = false): Live {
    const client = new GuestClient(streams.fromGuest, streams.toGuest, (raw) => this.explain(id, `agent channel lost (${raw})`));
    const egress = this.opts.egress;
    if (egress) client.onTunnel((conn, forward) => this.serveTunnel(egress, id, conn, forward));
    const live: Live = { client, streams, missed: 0, checking: false, relayed };
    client.onClose((reason) => {
      if (this.live.get(id) === live) void this.onChannelLost(id, reason);
    });
    return live;
  }

  /** An egress connection from the sandbox; one from a TCP forwarder enters the proxy as a CONNECT. */
  private serveTunnel(egress: EgressServer, id: string, conn: Duplex, forward: TcpForward | undefined): void {
    let client = conn;
    if (forward) {
      try {
        client = asConnect(conn, forward);
      } catch (err) {
        this.opts.log.warn({ sandbox: id, err: (err as Error).message }, 'egress: forwarded connection refused');
        return;
      }
    }
    egress.serve(client, id, () => this.policyOf(id));
  }

  /**
   * Sends the agent the TCP forwarders and CONNECT hints the sandbox's policy gives now (network/forwards.ts).
   * The list is read when the call is sent, and the agent applies calls in order, so the
   * last policy set wins. Forwards are a convenience on top of the proxy, which enforces the
   * policy whatever the agent listens on: a forward the agent could not open is logged.
   */
  private async pushForwards(id: string, skipIfNone = false): Promise<void> {
    const policy = this.policyOf(id);
    const forwards = tcpForwards(policy);
    const hints = connectHints(policy);
    if (skipIfNone && forwards.length === 0 && hints.length === 0) return;
    let result: GuestOps['net.forwards']['result']['forwards'];
    try {
      ({ forwards: result } = await this.guestOf(id).request('net.forwards', { forwards, connectHints: hints }, AGENT_READY_TIMEOUT_MS));
    } catch (err) {
      // An image saved before forwarders existed (a snapshot, a hibernated sandbox) carries
      // an agent without them: it keeps working through the proxy alone.
      if (!(err instanceof WarrenError && err.code === 'invalid_argument' && err.message.startsWith('unknown guest operation'))) throw err;
      this.opts.log.warn({ sandbox: id }, 'the sandbox agent predates TCP forwarders; only proxy clients reach outside');
      return;
    }
    const failed = result.filter((f) => f.error);
    if (failed.length) this.opts.log.warn({ sandbox: id, failed }, 'some TCP forwarders could not be opened inside the sandbox');
  }

  get(id: string): SandboxInfo {
    return toInfo(this.record(id, 'get'));
  }

  /** The sandbox's egress policy as the proxy applies it (nothing allowed when unknown). */
  private policyOf(id: string): EgressPolicy {
    const r = this.opts.registry.get(id);
    const rules = r?.network ?? [];
    const key = `${rules.join('\n')}\n${JSON.stringify(r?.credentials ?? [])}`;
    let cached = this.policies.get(id);
    if (!cached || cached.rules !== key) {
      const policy = parsePolicy(rules);
      policy.credentials = parseCredentials(r?.credentials, policy);
      cached = { rules: key, policy };
      this.policies.set(id, cached);
    }
    return cached.policy;
  }

  /** The policy as the API shows it: credential values are never given back. */
  getNetwork(id: string): NetworkPolicyView {
    return networkView(this.record(id, 'get'));
  }

  /**
   * The egress fields of a new sandbox: the request's policy if it gives one (even an empty
   * list), else its template's default, else the daemon's (WARREN_DEFAULT_ALLOW), else none.
   */
  private async createPolicy(requested: NetworkPolicy | undefined, template: string, templateDefault: { allow: string[] } | undefined): Promise<PolicyFields> {
    if (requested) return this.policyFields(requested);
    if (templateDefault) return this.policyFields(templateDefault, 'template', `template '${template}' network.allow`);
    if (this.opts.defaultAllow) return this.policyFields({ allow: this.opts.defaultAllow }, 'daemon', 'WARREN_DEFAULT_ALLOW');
    return { network: [] };
  }

  /**
   * A policy's allow rules (presets expanded) and credentials, validated: 400 naming a bad
   * rule, field or unknown preset, 409 for a preset this host's configuration gives no hosts.
   */
  private async policyFields(policy: NetworkPolicy, from?: NetworkGiven['default'], field = 'network.allow'): Promise<PolicyFields> {
    const expanded = await this.presets.expand(policy.allow, field);
    const credentials = credentialRules(parseCredentials(policy.credentials, parsePolicy(expanded.rules)));
    const named = Object.keys(expanded.presets).length > 0;
    const given: NetworkGiven | undefined =
      named || from ? { allow: expanded.given, ...(named ? { presets: expanded.presets } : {}), ...(from ? { default: from } : {}) } : undefined;
    return { network: expanded.rules, ...(given ? { networkGiven: given } : {}), ...(credentials.length ? { credentials } : {}) };
  }

  private caStore(): EgressCaStore {
    if (!this.opts.egressCa) throw new WarrenError('failed_precondition', 'this daemon has no egress CA store: credentials are not supported');
    return this.opts.egressCa;
  }

  /**
   * Replaces the sandbox's egress policy. New connections follow it at once; open ones are
   * ended, so a tightened policy leaves nothing it no longer allows.
   */
  async setNetwork(id: string, policy: NetworkPolicy): Promise<NetworkPolicyView> {
    const before = this.record(id, 'setNetwork');
    const next = await this.policyFields(policy);
    if (next.credentials?.length) this.caStore();
    // Credentials on a sandbox that had none: it must trust its egress CA before any request
    // is terminated with it (a hibernated sandbox is resumed for that; one still being
    // created gets it from its own bind, which reads the registry).
    if (next.credentials?.length && !before.credentials?.length && before.state !== 'creating') {
      await this.guest(id, 'setNetwork');
      await this.bind({ ...this.record(id, 'setNetwork'), credentials: next.credentials });
    }
    const rules = next.network;
    this.opts.registry.setNetwork(id, rules, next.credentials, next.networkGiven);
    this.opts.egress?.closeAll(id);
    // Hosts only: the values are secrets and stay out of logs.
    this.opts.log.info(
      { sandbox: id, allow: next.networkGiven?.allow ?? rules, expanded: rules, credentialHosts: next.credentials?.map((c) => c.host) ?? [] },
      'network policy changed',
    );
    // A hibernated sandbox gets its forwarders when it resumes. The policy already applies
    // either way: this only moves listeners.
    const live = this.live.get(id);
    if (live && !live.client.closed) {
      await this.pushForwards(id).catch((err: Error) =>
        this.opts.log.warn({ sandbox: id, err: err.message }, 'TCP forwarders not updated; the next resume or restore updates them'),
      );
    }
    return this.getNetwork(id);
  }

  /** get, plus the host disk it uses: its own writes while running, its image while hibernated. */
  async getWithDisk(id: string): Promise<SandboxInfo> {
    const info = this.get(id);
    if (info.state === 'running') return { ...info, diskBytes: await this.opts.driver.diskUsage(id) };
    if (info.state === 'hibernated') return { ...info, diskBytes: await this.opts.images.size(this.opts.images.hibernated(id)) };
    return info;
  }

  list(q: { state?: SandboxState; metadata?: Record<string, string>; limit?: number; cursor?: string }): SandboxList {
    const limit = q.limit ?? 100;
    const rows = this.opts.registry.list({ state: q.state, metadata: q.metadata, limit: limit + 1, after: q.cursor });
    const page = rows.slice(0, limit);
    const last = rows.length > limit ? page.at(-1) : undefined;
    return { sandboxes: page.map(toInfo), ...(last ? { nextCursor: last.id } : {}) };
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

  /**
   * The guest channel of a sandbox, for an operation that needs one: a call on a hibernated
   * sandbox resumes it first. Counts as activity.
   */
  async guest(id: string, op: Operation): Promise<GuestClient> {
    const r = this.record(id, op);
    this.lastActive.set(id, Date.now());
    // Calls during a fork or snapshot of a running sandbox just wait in the quiesced channel.
    if (r.state !== 'running') await this.resume(id);
    this.lastActive.set(id, Date.now());
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
    this.opts.meter?.stop(id);
    this.lastActive.delete(id);
    this.policies.delete(id);
    this.opts.egress?.closeAll(id);
    await this.release(id, reason);
    await this.opts.egressCa?.remove(id);
    await this.opts.images.remove(this.opts.images.hibernated(id));
  }

  /**
   * Closes the sandbox's channel and removes its runsc container and host directory;
   * `stopped`: a checkpoint has already stopped it.
   */
  private async release(id: string, reason: string, opts: { stopped?: boolean } = {}): Promise<void> {
    const live = this.live.get(id);
    this.live.delete(id);
    if (live) {
      live.client.close(reason);
      live.streams.release();
    }
    if (opts.stopped) await this.opts.driver.removeStopped(id);
    else await this.opts.driver.destroy(id);
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
    if (r?.state !== 'running') return;
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
    // A sandbox being saved has its channel quiesced: a ping would wait for the checkpoint.
    if (live.checking || live.client.closed || this.operations.has(id)) return;
    live.checking = true;
    let idle = false;
    try {
      const { busy } = await live.client.request('ping', {}, HEARTBEAT_TIMEOUT_MS);
      live.missed = 0;
      // A running command or an open call is activity; the ping itself was the only call.
      if (busy > 0 || live.client.busy > 0 || live.client.openTunnels > 0) this.lastActive.set(id, Date.now());
      await this.enforceDisk(id);
      idle = this.idleTooLong(id);
    } catch {
      live.missed++;
      const cause = await this.opts.driver.diagnose(id);
      if (cause.oomKilled || live.missed >= HEARTBEAT_MISSES_ALLOWED) {
        await this.markDead(id, await this.explain(id, `sandbox stopped responding for ${(live.missed * HEARTBEAT_TIMEOUT_MS) / 1000}s`));
      }
    } finally {
      live.checking = false;
    }
    if (idle) {
      await this.hibernate(id, 'idle').catch((err: Error) => this.opts.log.warn({ sandbox: id, err: err.message }, 'auto-hibernate failed'));
    }
  }

  /** Whether a running sandbox with idleSeconds set has seen no activity for that long. */
  private idleTooLong(id: string): boolean {
    const r = this.opts.registry.get(id);
    if (r?.state !== 'running' || !r.idleSeconds) return false;
    const last = this.lastActive.get(id) ?? Date.now();
    return Date.now() - last >= r.idleSeconds * 1000;
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
    if (r?.state !== 'running') return;
    const used = await this.opts.driver.diskUsage(id);
    if (used > r.resources.diskMB * 1024 * 1024) {
      await this.markDead(id, `the sandbox was stopped: disk limit exceeded (it wrote ${Math.round(used / 1048576)} MB, limit ${r.resources.diskMB} MB)`);
    }
  }
}

/** Runs `count` tasks, at most `limit` at a time, and settles them all. */
async function settleLimited<T>(limit: number, count: number, task: () => Promise<T>): Promise<PromiseSettledResult<T>[]> {
  const results: PromiseSettledResult<T>[] = new Array(count);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      results[i] = await task().then(
        (value) => ({ status: 'fulfilled', value }) as const,
        (reason: unknown) => ({ status: 'rejected', reason }) as const,
      );
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  return results;
}

/**
 * The record of a new sandbox restored from a saved one (a fork's parent, a snapshot): its
 * template version, env, resources and key, with the request's ttl, metadata and idleSeconds.
 */
function recordFromImage(
  from: Pick<SandboxRecord, 'template' | 'rootfs' | 'env' | 'resources' | 'metadata' | 'apiKeyId'> & Partial<PolicyFields>,
  req: {
    ttlSeconds?: number;
    metadata?: SandboxRecord['metadata'];
    idleSeconds?: number;
    env?: Record<string, string>;
    resources?: ResolvedResources;
  },
  boot: BootKind,
  source: string,
  policy?: PolicyFields,
): SandboxRecord {
  const now = Date.now();
  return {
    id: newId('sb'),
    template: from.template,
    state: 'creating',
    createdAt: now,
    expiresAt: now + (req.ttlSeconds ?? DEFAULT_TTL_SECONDS) * 1000,
    metadata: req.metadata ?? from.metadata,
    env: req.env ?? from.env,
    resources: req.resources ?? from.resources,
    rootfs: from.rootfs,
    apiKeyId: from.apiKeyId,
    boot,
    source,
    ...(req.idleSeconds ? { idleSeconds: req.idleSeconds } : {}),
    // A fork keeps its parent's policy, credentials and how it was given included; a
    // snapshot's sandbox gets the one its create resolved (createPolicy).
    ...(policy ?? {
      network: from.network ?? [],
      ...(from.networkGiven ? { networkGiven: from.networkGiven } : {}),
      ...(from.credentials?.length ? { credentials: from.credentials } : {}),
    }),
  };
}

/**
 * The policy as GET and PUT show it: the allow list as given, the expansion when it names
 * presets, whose default it is, and credential headers by name only.
 */
function networkView(r: SandboxRecord): NetworkPolicyView {
  const given = r.networkGiven;
  return {
    allow: given?.allow ?? r.network,
    ...(given?.presets ? { expanded: r.network, presets: given.presets } : {}),
    ...(given?.default ? { default: given.default } : {}),
    ...(r.credentials?.length ? { credentials: redactedCredentials(parseCredentials(r.credentials, parsePolicy(r.network))) } : {}),
  };
}

/** The template version a sandbox is pinned to, as boot() takes it (from its record). */
function pinnedTemplate(r: SandboxRecord): TemplateInfo {
  return { name: r.template, version: path.basename(path.dirname(r.rootfs)), rootfs: r.rootfs, env: {} };
}

function mb(bytes: number): number {
  return Math.round(bytes / 1e6);
}

function sameResources(a: ResolvedResources, b: ResolvedResources): boolean {
  return a.cpus === b.cpus && a.memoryMB === b.memoryMB && a.pids === b.pids && a.diskMB === b.diskMB;
}

function toInfo(r: SandboxRecord): SandboxInfo {
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
    ...(r.idleSeconds ? { idleSeconds: r.idleSeconds } : {}),
    ...(r.source ? { source: r.source } : {}),
    ...(r.error ? { error: r.error } : {}),
  };
}
