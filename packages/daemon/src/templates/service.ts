/**
 * Templates as the API sees them: list, get, build (plan, then stream the build), remove,
 * and pruning the build cache. Removal asks every registered usage check first (sandboxes
 * today; snapshots register theirs when they exist) and refuses while anything uses the
 * template; then the remove hooks let holders that can let go do so (the warm pool drains).
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { type BuildTemplateRequest, TEMPLATE_NAME_PATTERN, WarrenError, type PruneLayersResult, type TemplateVersionList } from '@warren/protocol';
import type { TemplateCatalog, TemplateInfo } from './catalog.js';
import type { BuildEmitter, TemplateBuilder } from './builder.js';
import { planBuild, type BuildPlan, type TenantBuild } from './plan.js';
import { pruneLayers } from './prune.js';
import type { BuildLogs } from './build-logs.js';
import type { z } from 'zod';

/** Returns what uses the template (e.g. "sandbox sbx_123"); empty when nothing does. */
export type TemplateUsageCheck = (name: string) => string[];

export class TemplateService {
  private usageChecks: TemplateUsageCheck[] = [];
  private removeHooks: Array<(name: string) => Promise<void>> = [];
  private builtHooks: Array<(template: TemplateInfo) => void> = [];

  constructor(
    readonly catalog: TemplateCatalog,
    readonly builder: TemplateBuilder,
    private log: Logger,
    readonly buildLogs: BuildLogs,
  ) {}

  /** The hook for anything that holds on to a template (sandboxes, snapshots, pools). */
  addUsageCheck(check: TemplateUsageCheck): void {
    this.usageChecks.push(check);
  }

  /** Runs after the usage checks passed, before the files go (e.g. drain a warm pool). */
  onRemove(hook: (name: string) => Promise<void>): void {
    this.removeHooks.push(hook);
  }

  /** Runs after every successful build (e.g. queue a bake of the new version). */
  onBuilt(hook: (template: TemplateInfo) => void): void {
    this.builtHooks.push(hook);
  }

  list(): TemplateInfo[] {
    return this.catalog.list();
  }

  get(name: string): TemplateInfo {
    return this.catalog.resolve(name);
  }

  /** Validates what the schema cannot; throws invalid_argument naming the field. */
  plan(req: z.output<typeof BuildTemplateRequest>, tenant?: TenantBuild): Promise<BuildPlan> {
    return planBuild(req, this.catalog, tenant);
  }

  /** Builds, streaming events to `emit` and writing them to the template's build log. */
  async build(plan: BuildPlan, emit: BuildEmitter, signal: AbortSignal): Promise<TemplateInfo> {
    const started = Date.now();
    const recording = this.buildLogs.start(plan.name);
    let info: TemplateInfo;
    try {
      info = await this.builder.build(
        plan,
        (e) => {
          recording.write(e);
          emit(e);
        },
        signal,
      );
    } catch (err) {
      const details = (err instanceof WarrenError ? err.details : undefined) as { output?: string } | undefined;
      recording.write({
        type: 'error',
        code: 'internal',
        message: err instanceof Error ? err.message : String(err),
        ...(details?.output ? { output: details.output } : {}),
      });
      await recording.finish(undefined);
      throw err;
    }
    recording.write({ type: 'done', template: info, elapsedMs: Date.now() - started });
    await recording.finish(info.version);
    for (const hook of this.builtHooks) hook(info);
    return info;
  }

  /** Every version of a template on disk, newest first, and which one creates use. */
  versions(name: string): TemplateVersionList['versions'] {
    const current = this.catalog.resolve(name).version;
    return this.catalog
      .versionManifests()
      .filter((m) => m.name === name && m.version)
      .map((m) => ({ version: m.version ?? '', ...(m.builtAt ? { builtAt: m.builtAt } : {}), current: m.version === current }))
      .sort((a, b) => (b.builtAt ?? '').localeCompare(a.builtAt ?? ''));
  }

  /**
   * Removes every version of a template. Other templates built from it keep working: their
   * rootfs is their own hard-link farm. Build layers stay as cache.
   */
  async remove(name: string): Promise<void> {
    if (!TEMPLATE_NAME_PATTERN.test(name) || !existsSync(path.join(this.catalog.templatesDir, name))) {
      throw new WarrenError('not_found', `unknown template '${name}'`);
    }
    const users = this.usageChecks.flatMap((check) => check(name));
    if (users.length) {
      const shown = users.slice(0, 5).join(', ') + (users.length > 5 ? `, and ${users.length - 5} more` : '');
      throw new WarrenError('conflict', `template '${name}' is in use by ${shown}; kill those first`, { details: { users } });
    }
    for (const hook of this.removeHooks) await hook(name);
    // Out of sight in one rename, then deleted: a crash mid-delete leaves only .trash,
    // which the next start clears.
    const trash = path.join(this.builder.trashDir, `${name}-${randomBytes(4).toString('hex')}`);
    await mkdir(this.builder.trashDir, { recursive: true, mode: 0o700 });
    await rename(path.join(this.catalog.templatesDir, name), trash);
    await rm(trash, { recursive: true, force: true });
    this.buildLogs.remove(name);
    this.log.info({ template: name }, 'template removed');
  }

  /** Drops cached build layers: those no template version was built from, or with `all` every one. */
  async pruneLayers(opts: { all: boolean }): Promise<PruneLayersResult> {
    const b = this.builder;
    const result = await pruneLayers(this.catalog, { layersDir: b.layersDir, buildRoot: b.buildRoot, trashDir: b.trashDir }, opts);
    this.log.info({ ...result, all: opts.all }, 'template build cache pruned');
    return result;
  }
}
