/**
 * Baked templates: boot a template once, run its start command, wait until its ready check
 * passes, and checkpoint the whole machine. Every later create of that template version is a
 * restore of the image: its processes are already running and warm.
 *
 * An image is only valid for the exact agent, warren-init, node binary and runsc it was made
 * with, so its key covers them; a missing or stale image makes the first create boot cold and
 * bake in the background, and later creates restore. Images live under the daemon's home.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { DEFAULT_RESOURCES, type BakeInfo } from '@warren/protocol';
import type { SandboxDriver, GuestStreams } from '../drivers/driver.js';
import type { TemplateCatalog, TemplateInfo } from '../templates/catalog.js';
import { GuestClient } from './guest-client.js';
import { newId } from './ids.js';
import { hasStartState, startTemplate, templateRuntime, type BakedImages } from './template-start.js';

/** Bump when the way images are made changes, so old ones are not restored. */
const BAKE_FORMAT = 1;
const AGENT_TIMEOUT_MS = 30_000;
const SMALL_INPUT_BYTES = 16 * 1024 * 1024;

interface BakeRecord extends BakeInfo {
  key: string;
}

export interface BakerOptions {
  driver: SandboxDriver;
  catalog: TemplateCatalog;
  /** <home>/bakes */
  dir: string;
  /** Files whose exact bytes the image depends on: agent bundle, warren-init, node, runsc. */
  inputs: string[];
  log: Logger;
  /** Which templates this daemon bakes (WARREN_BAKE). */
  mode: BakeMode;
}

/**
 * `all`: every template whose recipe does not say `bake: false` (the default); `start`: only
 * those with a start command or ready check (what warren did before baking every template);
 * `off`: none, every create boots cold.
 */
export type BakeMode = 'all' | 'start' | 'off';
export const BAKE_MODES: readonly BakeMode[] = ['all', 'start', 'off'];

export class Baker implements BakedImages {
  private records = new Map<string, BakeRecord>();
  private queue: Promise<unknown> = Promise.resolve();
  private queued = new Set<string>();
  private hostKey: string;
  private stopped = false;
  /** The bake sandbox being made now, so that stop() can end it. */
  private current?: string;

  constructor(private opts: BakerOptions) {
    const h = createHash('sha256').update(`format ${BAKE_FORMAT}\n`);
    for (const file of opts.inputs) {
      // The agent and warren-init are copied into the home at every start, so their bytes
      // count; for the big binaries (node is ~100 MB) path, size and mtime stand in.
      const st = statSync(file);
      if (st.size <= SMALL_INPUT_BYTES) h.update(readFileSync(file));
      else h.update(`${file} ${st.size} ${st.mtimeMs}\n`);
    }
    this.hostKey = h.digest('hex');
  }

  /**
   * The ready image for this template version, or undefined (and a bake is scheduled).
   * Templates without a start command are baked too: a restore saves the agent's own
   * start-up, and restores fill shells made ahead (drivers/gvisor/shells.ts), so a baked
   * base create takes about a quarter of a cold one (docs/fast-creates.md).
   */
  imageFor(template: TemplateInfo): string | undefined {
    if (!this.bakes(template)) return undefined;
    const record = this.record(template);
    if (record?.state === 'ready') return this.imageDir(record.key);
    if (!record) void this.bake(template).catch(() => undefined); // failures are recorded
    return undefined;
  }

  /** Queues a bake of a new template version if it would have one (after a build). */
  prepare(template: TemplateInfo): void {
    this.imageFor(template);
  }

  /** Whether a bake of this version is queued or running (the warm pool waits for it). */
  baking(template: TemplateInfo): boolean {
    return this.queued.has(this.key(template));
  }

  /** True when this version's bake failed: its ready check is not worth waiting for again. */
  failed(template: TemplateInfo): boolean {
    return this.record(template)?.state === 'failed';
  }

  info(template: TemplateInfo): BakeInfo {
    const r = this.record(template);
    if (!r) {
      if (this.queued.has(this.key(template))) return { state: 'baking', template: template.name, version: template.version };
      return { state: 'none', template: template.name, version: template.version, reason: this.whyNot(template) };
    }
    const { key: _key, ...info } = r;
    return info;
  }

  /** Bakes the template's current version (queued: one bake at a time). Idempotent. */
  bake(template: TemplateInfo): Promise<BakeInfo> {
    if (!this.bakes(template)) return Promise.resolve(this.info(template)); // says why not
    const key = this.key(template);
    const existing = this.record(template);
    if (existing && existing.state !== 'failed') return Promise.resolve(this.info(template));
    if (this.queued.has(key)) return this.queue.then(() => this.info(template));
    this.queued.add(key);
    this.records.delete(key);
    const run = this.queue.then(async () => {
      try {
        await this.run(template, key);
      } finally {
        this.queued.delete(key);
      }
      return this.info(template);
    });
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Ends a bake in progress (its sandbox is destroyed) and refuses new ones (shutdown). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.current) await this.opts.driver.destroy(this.current);
    await this.queue;
  }

  /** Whether this daemon bakes the template at all (see imageFor). */
  private bakes(template: TemplateInfo): boolean {
    return !this.stopped && this.refusal(template) === undefined;
  }

  /** Why the template is never baked here, or undefined when it is. */
  private refusal(template: TemplateInfo): string | undefined {
    const runtime = templateRuntime(template.rootfs);
    if (this.opts.mode === 'off') return 'baking is turned off (WARREN_BAKE=0)';
    if (runtime.bake === false) return 'the recipe opts out of baking (bake: false): every create boots cold';
    if (this.opts.mode === 'start' && !hasStartState(runtime))
      return 'the template has no start command, and this daemon bakes only templates that start something (WARREN_BAKE=start)';
    return undefined;
  }

  private whyNot(template: TemplateInfo): string {
    return this.refusal(template) ?? 'not baked yet: the first create bakes it';
  }

  /** Removes every image of a template (it is being deleted). */
  async forget(name: string): Promise<void> {
    for (const [key, r] of this.records) if (r.template === name) this.records.delete(key);
    for (const entry of await readdir(this.opts.dir).catch(() => [] as string[])) {
      const meta = this.readMeta(entry);
      if (meta?.template === name) await rm(path.join(this.opts.dir, entry), { recursive: true, force: true });
    }
  }

  private key(template: TemplateInfo): string {
    return createHash('sha256').update(`${this.hostKey}\n${template.name}\n${template.version}\n`).digest('hex').slice(0, 24);
  }

  private imageDir(key: string): string {
    return path.join(this.opts.dir, key, 'image');
  }

  private record(template: TemplateInfo): BakeRecord | undefined {
    const key = this.key(template);
    let r = this.records.get(key);
    if (!r) {
      r = this.readMeta(key);
      if (r) this.records.set(key, r);
    }
    return r;
  }

  private readMeta(key: string): BakeRecord | undefined {
    const file = path.join(this.opts.dir, key, 'bake.json');
    if (!existsSync(file)) return undefined;
    try {
      return { ...(JSON.parse(readFileSync(file, 'utf8')) as BakeRecord), key };
    } catch {
      return undefined; // a torn write from a crash: bake again
    }
  }

  private async run(template: TemplateInfo, key: string): Promise<void> {
    if (this.stopped) return;
    const started = Date.now();
    const log = this.opts.log.child({ template: template.name, version: template.version });
    const final = path.join(this.opts.dir, key);
    const work = `${final}.tmp`;
    await rm(work, { recursive: true, force: true });
    await mkdir(work, { recursive: true, mode: 0o700 });
    const record: BakeRecord = { key, template: template.name, version: template.version, state: 'ready' };
    try {
      log.info('baking template');
      await this.boot(template, path.join(work, 'image'), log);
      record.bakedAt = new Date().toISOString();
      record.ms = Date.now() - started;
      log.info({ ms: record.ms }, 'template baked');
    } catch (err) {
      if (this.stopped) {
        // Cut short by shutdown: not the template's fault, so nothing is recorded.
        await rm(work, { recursive: true, force: true });
        return;
      }
      record.state = 'failed';
      record.error = (err as Error).message;
      log.warn({ err: record.error }, 'bake failed; creates of this template boot cold');
      await rm(path.join(work, 'image'), { recursive: true, force: true });
    }
    await writeFile(path.join(work, 'bake.json'), JSON.stringify(record, null, 1));
    await rm(final, { recursive: true, force: true });
    await rename(work, final);
    this.records.set(key, record);
    if (record.state === 'ready') await this.removeOlder(template.name, key);
  }

  /** Boots the template, starts it, waits for ready and checkpoints into imageDir. */
  private async boot(template: TemplateInfo, imageDir: string, log: Logger): Promise<void> {
    const runtime = templateRuntime(template.rootfs);
    const id = newId('bake');
    this.current = id;
    let streams: GuestStreams | undefined;
    let client: GuestClient | undefined;
    try {
      // In the background: a bake (often started by the daemon itself) must not slow the
      // sandboxes serving requests.
      streams = await this.opts.driver.start({ id, hostname: id, rootfs: template.rootfs, resources: DEFAULT_RESOURCES, background: true });
      client = new GuestClient(streams.fromGuest, streams.toGuest);
      await client.request('hello', {}, AGENT_TIMEOUT_MS);
      await startTemplate(client, runtime, log, { waitReady: true });
      // Every call above has been answered, so the agent's channel is idle: the restored
      // agent continues with a clean stream on its new stdio.
      await this.opts.driver.checkpoint(id, imageDir);
    } finally {
      client?.close('bake finished');
      streams?.release();
      await this.opts.driver.destroy(id);
      this.current = undefined;
    }
  }

  private async removeOlder(name: string, keep: string): Promise<void> {
    for (const entry of await readdir(this.opts.dir).catch(() => [] as string[])) {
      if (entry === keep || entry.endsWith('.tmp')) continue;
      const meta = this.readMeta(entry);
      if (meta?.template !== name) continue;
      this.records.delete(entry);
      await rm(path.join(this.opts.dir, entry), { recursive: true, force: true });
    }
  }
}
