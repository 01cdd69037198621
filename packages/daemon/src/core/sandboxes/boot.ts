/**
 * Booting a sandbox and making it a request's: boot (a baked image, a saved image or its
 * template cold) up to an answering agent, late binding (env, hostname, limits, egress CA and
 * forwarders), registration as 'creating' with its undo, and the step to 'running'.
 */
import type { Logger } from 'pino';
import type { BootKind, ResolvedResources } from '@warren/protocol';
import type { GuestStreams } from '../../drivers/driver.js';
import type { TemplateInfo } from '../../templates/catalog.js';
import { hasStartState, startTemplateCold, templateRuntime } from '../template-start.js';
import { installEgressCa, TRUST_ENV } from '../egress-trust.js';
import type { SandboxRecord } from '../registry.js';
import { Cleanup } from '../cleanup.js';
import { ImageStore } from '../images.js';
import { transition } from '../lifecycle.js';
import { AGENT_READY_TIMEOUT_MS, type ImageSource, type Live, type SandboxContext, type SandboxServiceOptions } from './context.js';
import type { Channels } from './channels.js';
import type { GuestClient } from '../guest-client.js';
import { runInGuest } from '../guest-run.js';
import { PROXY_ENV, type SandboxEgress } from './egress.js';
import type { Teardown } from './teardown.js';

/**
 * The warm-up command of a pool member (prebind): bash when the template has it, as most
 * first commands are `bash -c` (the SDKs' string form), else sh. The first bash a sandbox
 * runs reads bash and its libraries through the gofer: ~170 ms more than later ones.
 */
const WARM_UP_ARGV = ['/bin/sh', '-c', 'if command -v bash >/dev/null; then exec bash -c :; fi'];
const WARM_UP_TIMEOUT_MS = 10_000;

export class Booter {
  private readonly opts: SandboxServiceOptions;

  constructor(
    private ctx: SandboxContext,
    private channels: Channels,
    private egress: SandboxEgress,
    private ending: Teardown,
  ) {
    this.opts = ctx.opts;
  }

  /**
   * Boots a sandbox of the template and waits for its agent: a restore of the template's
   * baked image when one is ready, a cold boot otherwise. Not registered and not bound to any
   * request yet: create and the warm pool do that.
   */
  async boot(
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
      if (image) {
        // A packed image (a hibernated sandbox's) is unpacked into a scratch copy for runsc.
        const unpacked = await this.opts.images.unpack(image);
        try {
          streams = await this.opts.driver.restore(spec, unpacked.path);
        } finally {
          await unpacked.release();
        }
      } else streams = await this.opts.driver.start(spec);
      if (relayed) streams = await this.channels.relayTo(id, streams);
    } catch (err) {
      await this.opts.driver.destroy(id);
      throw err;
    }
    const live = this.channels.openChannel(id, streams, relayed);
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

  /** Registers a sandbox being created; the Cleanup undoes that (and any boot) unless dismissed. */
  beginCreate(record: SandboxRecord, log: Logger): Cleanup {
    const undo = new Cleanup(log);
    // Every record starts as 'creating' (lifecycle.ts); only 'ready' or 'remove' leave it.
    this.opts.registry.insert(record);
    undo.add('forget record', () => transition(this.opts.registry, record.id, 'remove'));
    undo.add('destroy sandbox', () => this.ending.teardown(record.id, 'create failed'));
    return undo;
  }

  /**
   * Billing and activity start when a sandbox is up: 'ready' after a create, 'resume' after
   * a hibernation.
   */
  markRunning(record: SandboxRecord, action: 'ready' | 'resume'): void {
    transition(this.opts.registry, record.id, action);
    this.ctx.lastActive.set(record.id, Date.now());
    this.opts.meter?.start(record.id, record.apiKeyId, record.resources);
  }

  /** Re-opens the guest channel of a registered sandbox (after a daemon restart). */
  async connect(record: SandboxRecord, streams: GuestStreams): Promise<void> {
    this.ctx.live.set(record.id, this.channels.openChannel(record.id, streams, true));
    this.ctx.lastActive.set(record.id, Date.now());
    await this.channels.guestOf(record.id).request('hello', {}, AGENT_READY_TIMEOUT_MS);
    await this.bind(record);
  }

  /**
   * Late binding: what makes a booted sandbox this request's sandbox. Applied through the
   * agent, so a baked image or a pool member can serve any request.
   */
  async bind(record: SandboxRecord, opts: { fresh?: boolean } = {}): Promise<void> {
    const client = this.channels.guestOf(record.id);
    // Read again: a PUT during a create may have added credentials since record was made.
    const trust = (this.opts.registry.get(record.id)?.credentials ?? record.credentials ?? []).length > 0;
    // Only a sandbox with credentials pays for a CA; the pooled fast path does nothing here.
    if (trust) await installEgressCa(client, await this.egress.caStore().ensure(record.id));
    await this.configure(client, record.id, record.rootfs, record.env, record.resources.pids, trust);
    // A sandbox booted from its template has no forwarders yet: nothing to send without rules.
    await this.egress.pushForwards(record.id, opts.fresh);
  }

  /**
   * A warm-pool member takes its identity while it waits: its id is already the one a claim
   * gives the sandbox, so the hostname (a round trip to the guest's init) and /etc/hosts are
   * set now, and the claim's own configure finds them in place and only swaps the request's
   * env and limits. It also starts one command: the first process a restored sandbox spawns
   * pays for faulting in its init's and agent's memory (~20-60 ms), better paid before the
   * claim than by the caller's first exec.
   */
  async prebind(id: string, live: Live, template: TemplateInfo, resources: ResolvedResources): Promise<void> {
    await this.configure(live.client, id, template.rootfs, {}, resources.pids, false);
    try {
      const warm = await runInGuest(live.client, { argv: WARM_UP_ARGV, user: 'root', cwd: '/', timeoutMs: WARM_UP_TIMEOUT_MS, tag: 'warren-warm-up' });
      if (warm.exitCode !== 0) throw new Error(`exit ${warm.exitCode}: ${warm.stderr.slice(-200)}`);
    } catch (err) {
      // A template without /bin/sh still serves: only its first exec stays slower.
      this.opts.log.warn({ sandbox: id, err: (err as Error).message }, 'pool member warm-up command failed');
    }
  }

  private async configure(client: GuestClient, id: string, rootfs: string, env: Record<string, string>, pidsLimit: number, trust: boolean): Promise<void> {
    const runtime = templateRuntime(rootfs);
    await client.request(
      'configure',
      {
        env: { ...PROXY_ENV, ...(trust ? TRUST_ENV : {}), ...runtime.env, ...env },
        hostname: id,
        pidsLimit,
        defaultUser: runtime.user,
        defaultCwd: runtime.workdir,
      },
      AGENT_READY_TIMEOUT_MS,
    );
  }
}
