/**
 * The sandbox service: the one object the API routes, exec, files, snapshots, the reaper
 * and recovery use for sandboxes. A thin facade: each job lives in a module of its own under
 * core/sandboxes/, and every change of a sandbox's state goes through lifecycle.ts.
 *
 *   create.ts     creates from a template, a saved image or a snapshot; warm-pool members
 *   boot.ts       boot up to an answering agent, late binding, registration, ready/resume
 *   save.ts       checkpoints of a running sandbox (quiesce, room for the image)
 *   hibernate.ts  hibernate and resume
 *   fork.ts       fork
 *   snapshot.ts   the save behind a snapshot
 *   heartbeat.ts  pings, death diagnosis, disk limit, auto-hibernation
 *   teardown.ts   kill, teardown, death with its reason
 *   channels.ts   guest channels and attach relays
 *   egress.ts     egress policy, tunnels and TCP forwarders
 *   records.ts    records and their API views
 *   operations.ts hibernate/resume/fork/snapshot of one sandbox one at a time
 *   context.ts    what they share: options and the maps of live channels
 *
 * Holds the only in-memory map of live sandboxes; the registry holds the durable truth.
 */
import type { Logger } from 'pino';
import {
  WarrenError,
  type CreateSandboxRequest,
  type SandboxInfo,
  type SandboxList,
  type ResolvedResources,
  type SandboxState,
  type ForkRequest,
  type ForkResult,
  type NetworkPolicy,
  type NetworkPolicyView,
  type Metadata,
} from '@warren/protocol';
import type { GuestStreams } from '../drivers/driver.js';
import type { TemplateInfo } from '../templates/catalog.js';
import type { PoolMember } from './pool.js';
import type { GuestClient } from './guest-client.js';
import type { Operation } from './lifecycle.js';
import type { SandboxRecord } from './registry.js';
import { defaultResources } from './admission.js';
import type { SandboxContext, SandboxServiceOptions } from './sandboxes/context.js';
import { Booter } from './sandboxes/boot.js';
import { Channels } from './sandboxes/channels.js';
import { Creator } from './sandboxes/create.js';
import { networkView, SandboxEgress, withGrantedRules } from './sandboxes/egress.js';
import { Forker } from './sandboxes/fork.js';
import { Heartbeat } from './sandboxes/heartbeat.js';
import { Hibernation } from './sandboxes/hibernate.js';
import { SerialOperations } from './sandboxes/operations.js';
import { infoOf, recordFor, toInfo } from './sandboxes/records.js';
import { Saver } from './sandboxes/save.js';
import { Snapshotter } from './sandboxes/snapshot.js';
import { Teardown } from './sandboxes/teardown.js';

export type { ActivityMeter } from './sandboxes/context.js';

export class SandboxService {
  private readonly ctx: SandboxContext;
  private readonly log: Logger;
  private readonly channels: Channels;
  private readonly egress: SandboxEgress;
  private readonly ending: Teardown;
  private readonly booter: Booter;
  private readonly creator: Creator;
  private readonly hibernation: Hibernation;
  private readonly forker: Forker;
  private readonly snapshotter: Snapshotter;
  private readonly heartbeat: Heartbeat;
  private admitResume?: (id: string) => { release(): void };
  private admitHibernate?: (id: string) => void;

  constructor(private opts: SandboxServiceOptions) {
    this.log = opts.log;
    this.ctx = { opts, live: new Map(), pooled: new Map(), lastActive: new Map(), defaults: defaultResources(opts.capacity) };
    const ops = new SerialOperations();
    // Channels report back to teardown and egress, which are made after them (they use
    // channels): the hooks are late-bound on purpose.
    this.channels = new Channels(this.ctx, {
      explain: (id, fallback) => this.ending.explain(id, fallback),
      lost: (id, reason) => this.ending.onChannelLost(id, reason),
      tunnel: (egress, id, conn, forward) => this.egress.serveTunnel(egress, id, conn, forward),
    });
    this.egress = new SandboxEgress(this.ctx, this.channels);
    this.ending = new Teardown(this.ctx, this.channels, this.egress);
    this.booter = new Booter(this.ctx, this.channels, this.egress, this.ending);
    this.creator = new Creator(this.ctx, this.booter, this.egress);
    const saver = new Saver(this.ctx, this.channels, this.ending);
    this.hibernation = new Hibernation(this.ctx, ops, saver, this.booter, this.channels, this.egress, this.ending);
    this.forker = new Forker(this.ctx, ops, saver, this.creator, this.ending);
    this.snapshotter = new Snapshotter(this.ctx, ops, saver);
    this.heartbeat = new Heartbeat(this.ctx, ops, this.ending, (id, reason) => this.hibernate(id, reason));
  }

  startHeartbeat(): void {
    this.heartbeat.start();
  }

  /** `granted`: allow rules the daemon grants itself (see addAllowRules), in force from the first instant. */
  create(req: CreateSandboxRequest & { template: string }, apiKeyId: string, granted: string[] = []): Promise<SandboxInfo> {
    return this.creator.create(req, apiKeyId, granted);
  }

  /**
   * Hibernates a running sandbox; the admission check (a key's disk quota) may refuse it first,
   * as a rejection like any other failure (callers such as the heartbeat only catch those).
   */
  async hibernate(id: string, reason = 'requested'): Promise<SandboxInfo> {
    if (this.opts.registry.get(id)?.state === 'running') this.admitHibernate?.(id);
    return this.hibernation.hibernate(id, reason);
  }

  /** Checks each hibernate of a running sandbox before it starts; throws to refuse it. */
  onHibernateAdmission(check: (id: string) => void): void {
    this.admitHibernate = check;
  }

  /**
   * Resumes a hibernated sandbox (an explicit resume, or any call that needs it running). The
   * admission check runs first and may refuse it (a key's quota); what it admitted is held
   * until the resume has ended.
   */
  async resume(id: string): Promise<SandboxInfo> {
    const admitted = this.opts.registry.get(id)?.state === 'hibernated' ? this.admitResume?.(id) : undefined;
    try {
      return await this.hibernation.resume(id);
    } finally {
      admitted?.release();
    }
  }

  /** Checks each resume before it starts; throws to refuse it. */
  onResumeAdmission(check: (id: string) => { release(): void }): void {
    this.admitResume = check;
  }

  /**
   * `whileHeld` runs after the parent's channel is held and before its image is taken (for a
   * hibernated parent: before its children are restored): the parent can reach nothing
   * outside meanwhile, so work done there sees the parent's outside state at the fork's instant.
   */
  fork(id: string, req: ForkRequest & { count: number }, whileHeld?: () => Promise<void>): Promise<ForkResult> {
    return this.forker.fork(id, req, whileHeld);
  }

  snapshotInto(id: string, dir: string): Promise<SandboxRecord> {
    return this.snapshotter.snapshotInto(id, dir);
  }

  /** PoolHost: a fresh, unbound sandbox of the template for the warm pool. */
  bootForPool(template: TemplateInfo): Promise<PoolMember> {
    return this.creator.bootForPool(template);
  }

  /** PoolHost: destroys a member nobody claimed. */
  discardPooled(member: PoolMember, reason: string): Promise<void> {
    return this.creator.discardPooled(member, reason);
  }

  /** Re-opens the guest channel of a registered sandbox (after a daemon restart). */
  connect(record: SandboxRecord, streams: GuestStreams): Promise<void> {
    return this.booter.connect(record, streams);
  }

  get(id: string): SandboxInfo {
    return infoOf(this.opts.registry, id);
  }

  /** The resources a create with these would get (the defaults filled in). */
  resourcesFor(requested: Partial<ResolvedResources> | undefined): ResolvedResources {
    return { ...this.ctx.defaults, ...(requested ?? {}) };
  }

  /** A sandbox's resources (what each child of a fork of it gets). */
  resourcesOf(id: string): ResolvedResources {
    return this.record(id, 'get').resources;
  }

  /** The API key that made the sandbox; undefined when there is no such sandbox. */
  apiKeyOf(id: string): string | undefined {
    return this.opts.registry.ownerOf(id);
  }

  /** The policy as the API shows it: credential values are never given back. */
  getNetwork(id: string): NetworkPolicyView {
    return networkView(this.record(id, 'get'));
  }

  /**
   * Replaces the sandbox's egress policy. New connections follow it at once; open ones are
   * ended, so a tightened policy leaves nothing it no longer allows.
   */
  async setNetwork(id: string, policy: NetworkPolicy): Promise<NetworkPolicyView> {
    const before = this.record(id, 'setNetwork');
    const next = await this.egress.policyFields(policy);
    if (next.credentials?.length) this.egress.caStore();
    // Credentials on a sandbox that had none: it must trust its egress CA before any request
    // is terminated with it (a hibernated sandbox is resumed for that; one still being
    // created gets it from its own bind, which reads the registry).
    if (next.credentials?.length && !before.credentials?.length && before.state !== 'creating') {
      await this.guest(id, 'setNetwork');
      await this.booter.bind({ ...this.record(id, 'setNetwork'), credentials: next.credentials });
    }
    const rules = next.network;
    this.opts.registry.setNetwork(id, rules, next.credentials, next.networkGiven);
    this.opts.egress?.closeAll(id);
    // Hosts only: the values are secrets and stay out of logs.
    this.log.info(
      { sandbox: id, allow: next.networkGiven?.allow ?? rules, expanded: rules, credentialHosts: next.credentials?.map((c) => c.host) ?? [] },
      'network policy changed',
    );
    await this.refreshForwarders(id);
    return this.getNetwork(id);
  }

  /**
   * Sends the policy's TCP forwarders (and their /etc/hosts names) to a running sandbox. A
   * hibernated one gets them when it resumes. The policy already applies either way: this
   * only moves listeners.
   */
  private async refreshForwarders(id: string): Promise<void> {
    const live = this.ctx.live.get(id);
    if (!live || live.client.closed) return;
    await this.egress
      .pushForwards(id)
      .catch((err: Error) => this.log.warn({ sandbox: id, err: err.message }, 'TCP forwarders not updated; the next resume or restore updates them'));
  }

  /** get, plus the host disk it uses: its own writes while running, its image while hibernated. */
  async getWithDisk(id: string): Promise<SandboxInfo> {
    const info = this.get(id);
    if (info.state === 'running') return { ...info, diskBytes: await this.opts.driver.diskUsage(id) };
    if (info.state === 'hibernated') return { ...info, diskBytes: await this.opts.images.size(this.opts.images.hibernated(id)) };
    return info;
  }

  /** `apiKeyId`: only that key's sandboxes. */
  list(q: { state?: SandboxState; metadata?: Record<string, string>; limit?: number; cursor?: string; apiKeyId?: string }): SandboxList {
    const limit = q.limit ?? 100;
    const rows = this.opts.registry.list({ state: q.state, metadata: q.metadata, limit: limit + 1, after: q.cursor, apiKeyId: q.apiKeyId });
    const page = rows.slice(0, limit);
    const last = rows.length > limit ? page.at(-1) : undefined;
    return { sandboxes: page.map(toInfo), ...(last ? { nextCursor: last.id } : {}) };
  }

  setTtl(id: string, ttlSeconds: number): SandboxInfo {
    this.record(id, 'setTtl');
    this.opts.registry.setExpiry(id, Date.now() + ttlSeconds * 1000);
    return this.get(id);
  }

  /** Merges `metadata` into the sandbox's (for sandboxes the daemon makes itself, such as database branches). */
  setMetadata(id: string, metadata: Metadata): void {
    const r = this.record(id, 'setTtl');
    this.opts.registry.setMetadata(id, { ...r.metadata, ...metadata });
  }

  /**
   * Adds allow rules to the sandbox's egress policy, keeping its credentials (for rules the
   * daemon grants itself, such as `db:ALIAS` for the databases a sandbox uses). Widening a
   * policy ends no connection.
   */
  async addAllowRules(id: string, rules: string[]): Promise<void> {
    const r = this.record(id, 'setNetwork');
    const next = withGrantedRules(r, rules);
    if (next.network === r.network) return;
    this.opts.registry.setNetwork(id, next.network, r.credentials, next.networkGiven);
    this.log.info({ sandbox: id, added: next.network.slice(r.network.length) }, 'egress allow rules added');
    await this.refreshForwarders(id);
  }

  kill(id: string, reason = 'killed'): Promise<void> {
    return this.ending.kill(id, reason);
  }

  /** After a sandbox hibernated (explicitly or when idle). */
  onHibernated(hook: (id: string) => void): void {
    this.hibernation.onHibernated(hook);
  }

  /** After a hibernated sandbox was brought back. */
  onResumed(hook: (id: string) => void): void {
    this.hibernation.onResumed(hook);
  }

  /** Runs `hook` for each sandbox that ends (killed, expired, dead), as it is torn down. */
  onTeardown(hook: (id: string) => void): void {
    this.ending.onTeardown(hook);
  }

  /**
   * The guest channel of a sandbox, for an operation that needs one: a call on a hibernated
   * sandbox resumes it first. Counts as activity.
   */
  async guest(id: string, op: Operation): Promise<GuestClient> {
    const r = this.record(id, op);
    this.ctx.lastActive.set(id, Date.now());
    // Calls during a fork or snapshot of a running sandbox just wait in the quiesced channel.
    if (r.state !== 'running') await this.resume(id);
    this.ctx.lastActive.set(id, Date.now());
    const live = this.ctx.live.get(id);
    if (!live || live.client.closed) throw new WarrenError('unavailable', `sandbox ${id} is not reachable right now; retry shortly`);
    return live.client;
  }

  record(id: string, op: Operation): SandboxRecord {
    return recordFor(this.opts.registry, id, op);
  }

  liveIds(): string[] {
    return [...this.ctx.live.keys()];
  }

  /** Closes every channel without touching the sandboxes (daemon shutdown). */
  detachAll(): void {
    this.heartbeat.stop();
    this.channels.detachAll();
  }

  teardown(id: string, reason: string): Promise<void> {
    return this.ending.teardown(id, reason);
  }

  /** A sandbox died or hung on its own: keep the record as dead, with the reason. */
  markDead(id: string, reason: string): Promise<void> {
    return this.ending.markDead(id, reason);
  }

  /** Bytes the sandbox may still write before it reaches its disk limit. */
  async diskHeadroom(id: string): Promise<number> {
    const r = this.record(id, 'files');
    return Math.max(0, r.resources.diskMB * 1024 * 1024 - (await this.opts.driver.diskUsage(id)));
  }
}
