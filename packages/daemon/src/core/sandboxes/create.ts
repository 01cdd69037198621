/**
 * New sandboxes: from a template (a warm-pool claim, a baked image or a cold boot), from a
 * saved image (a fork's child, a snapshot), and the warm pool's unbound members.
 */
import { DEFAULT_TTL_SECONDS, WarrenError, type CreateSandboxRequest, type ResolvedResources, type SandboxInfo } from '@warren/protocol';
import type { TemplateInfo } from '../../templates/catalog.js';
import type { PoolMember } from '../pool.js';
import { templateRuntime } from '../template-start.js';
import { newId } from '../ids.js';
import type { SandboxRecord } from '../registry.js';
import { ImageStore } from '../images.js';
import { admitResources } from '../admission.js';
import type { ImageSource, Live, SandboxContext, SandboxServiceOptions } from './context.js';
import type { Booter } from './boot.js';
import type { SandboxEgress } from './egress.js';
import { infoOf, pinnedTemplate, recordFromImage, sameResources } from './records.js';

export class Creator {
  private readonly opts: SandboxServiceOptions;
  private readonly live: Map<string, Live>;
  private readonly pooled: Map<string, Live>;
  private readonly defaults: ResolvedResources;

  constructor(
    ctx: SandboxContext,
    private booter: Booter,
    private egress: SandboxEgress,
  ) {
    this.opts = ctx.opts;
    this.live = ctx.live;
    this.pooled = ctx.pooled;
    this.defaults = ctx.defaults;
  }

  async create(req: CreateSandboxRequest & { template: string }, apiKeyId: string, granted: string[] = []): Promise<SandboxInfo> {
    if (req.snapshot) return this.createFromSnapshot(req, apiKeyId, granted);
    const started = Date.now();
    const template = this.opts.templates.resolve(req.template);
    const resources: ResolvedResources = { ...this.defaults, ...(req.resources ?? {}) };
    // Before a pool member is claimed or anything registered: a refusal leaves no trace.
    admitResources(resources, this.opts.capacity);
    const policy = await this.egress.createPolicy(req.network, template.name, template.network, granted);
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
    const undo = this.booter.beginCreate(record, log);
    try {
      if (member) {
        this.live.set(record.id, this.pooled.get(record.id)!);
        this.pooled.delete(record.id);
        // It booted at a low CPU weight (bootForPool); from now on someone waits for it.
        await this.opts.driver.promote(record.id);
        // Members boot with the default limits; the request's are applied as it claims one.
        if (!sameResources(resources, this.defaults)) await this.opts.driver.resize(record.id, resources);
      } else {
        const booted = await this.booter.boot(record.id, template, resources);
        this.live.set(record.id, booted.live);
        if (booted.kind !== record.boot) this.opts.registry.setBoot(record.id, (record.boot = booted.kind));
      }
      await this.booter.bind(record, { fresh: true });
      this.booter.markRunning(record, 'ready');
      undo.dismiss();
      const ms = Date.now() - started;
      if (member) this.opts.pool?.recordClaim(template.name, ms);
      log.info({ template: template.name, version: template.version, boot: record.boot, ms }, 'sandbox created');
      return infoOf(this.opts.registry, record.id);
    } catch (err) {
      await undo.run();
      throw err;
    }
  }

  /**
   * A new sandbox from a saved image (a fork's parent, a snapshot): registered as
   * 'creating' until its agent answered and took its new identity, so a failure or a daemon
   * crash leaves nothing half made.
   */
  async createFromImage(record: SandboxRecord, from: ImageSource): Promise<SandboxInfo> {
    const started = Date.now();
    const log = this.opts.log.child({ sandbox: record.id });
    const undo = this.booter.beginCreate(record, log);
    try {
      const booted = await this.booter.boot(record.id, pinnedTemplate(record), record.resources, from);
      this.live.set(record.id, booted.live);
      await this.booter.bind(record);
      this.booter.markRunning(record, 'ready');
      undo.dismiss();
      log.info({ template: record.template, boot: record.boot, source: record.source, ms: Date.now() - started }, 'sandbox created');
      return infoOf(this.opts.registry, record.id);
    } catch (err) {
      await undo.run();
      throw err;
    }
  }

  private async createFromSnapshot(req: CreateSandboxRequest, apiKeyId: string, granted: string[]): Promise<SandboxInfo> {
    const snap = this.opts.registry.getSnapshot(req.snapshot!);
    if (!snap) throw new WarrenError('not_found', `no snapshot with id ${req.snapshot}`);
    const dir = this.opts.images.snapshot(snap.id);
    if (!this.opts.images.isComplete(dir)) throw new WarrenError('failed_precondition', `snapshot ${snap.id} has no complete image on disk; delete it`);
    const resources = { ...snap.resources, ...(req.resources ?? {}) };
    // The snapshot's own values may come from another host or an older daemon.
    admitResources(resources, this.opts.capacity, `snapshot ${snap.id}`, req.resources);
    // The request's policy, else the default of the template version the snapshot was taken from.
    const policy = await this.egress.createPolicy(req.network, snap.template, templateRuntime(snap.rootfs).network, granted);
    return this.createFromImage(
      // Billed to whoever creates it, not to whoever took the snapshot.
      recordFromImage({ ...snap, apiKeyId }, { ...req, env: { ...snap.env, ...(req.env ?? {}) }, resources }, 'snapshot', snap.id, policy),
      { image: ImageStore.imagePath(dir), kind: 'snapshot' },
    );
  }

  /** PoolHost: a fresh, unbound sandbox of the template for the warm pool. */
  async bootForPool(template: TemplateInfo): Promise<PoolMember> {
    const id = newId('sb');
    // In the background (a low host CPU weight until claimed): a refill must not slow down
    // the sandboxes that are serving requests, the one just claimed above all.
    const { live } = await this.booter.boot(id, template, this.defaults, undefined, this.opts.poolBackground ?? true);
    this.pooled.set(id, live);
    try {
      await this.booter.prebind(id, live, template, this.defaults);
    } catch (err) {
      await this.discardPooled({ id, template: template.name, version: template.version, alive: () => false }, 'prebind failed');
      throw err;
    }
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
}
