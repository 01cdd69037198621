/**
 * Builds a template from a plan (plan.ts): each step's result is a layer under
 * <templatesDir>/.layers/<key>/ (an overlayfs upper dir in fs/, plus layer.json; steps that
 * only change env/workdir/user have no fs/). A layer whose key exists is reused; otherwise
 * the step runs in a staging dir (staging.ts) and the layer is committed by one rename, only
 * if the step succeeded. The version's rootfs is then flattened from the layers
 * (flatten.ts) into <name>/<version>/ and `current` is switched to it, again by renames, so
 * a failed or killed build never leaves a half-built template visible.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, realpathSync } from 'node:fs';
import { chown, mkdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { WarrenError, type RecipeStep, type TemplateBuildEvent, type TemplateManifest } from '@warren/protocol';
import type { Runsc } from '../drivers/gvisor/runsc.js';
import { buildRunsc, runBuildCommand } from './build-sandbox.js';
import type { TemplateCatalog, TemplateInfo } from './catalog.js';
import { copyInto, resolveInRoot } from './copy.js';
import { debootstrap } from './debootstrap.js';
import { applyTop, flatten, type FlattenCounts } from './flatten.js';
import { mountOverlay, unmount } from './mounts.js';
import { lookupOwner, lookupUser } from './passwd.js';
import type { BuildPlan, PlannedStep } from './plan.js';
import { buildRegistryEnv } from './registries.js';
import { clearStaleStaging, Staging } from './staging.js';
import type { SandboxHostFiles } from '../storage/sandbox-host-files.js';

export interface TemplateBuilderOptions {
  templatesDir: string;
  runscBinary: string;
  /** The daemon's runsc --root: build containers live beside sandboxes, as build-<key>-<rand>. */
  runscRoot: string;
  /** Host files build steps mount (node at /opt/warren/bin/node when the template has that mount point, resolv.conf). */
  hostFiles: SandboxHostFiles;
  catalog: TemplateCatalog;
  log: Logger;
}

export type BuildEmitter = (event: TemplateBuildEvent) => void;

/** Container ids of build steps start with this; recovery and leftover checks rely on it. */
export const BUILD_CONTAINER_PREFIX = 'build-';

/** Step types that write a layer. */
const FS_STEPS = new Set(['apt', 'run', 'copy']);

/** The layers below a build's last step, flattened while it runs (builder.flattenEarly). */
interface EarlyFlatten {
  layers: string[];
  done: Promise<Staging>;
}

const APT_SCRIPT = (packages: string[]) =>
  // Lists and downloaded .debs are dropped in the same step so they never reach a layer.
  `apt-get update && apt-get install -y --no-install-recommends ${packages.map(shellQuote).join(' ')} && apt-get clean && rm -rf /var/lib/apt/lists/*`;

export class TemplateBuilder {
  private runsc: Runsc;
  /** Read once, at the first step that runs a command. */
  private registryEnv?: Promise<Record<string, string>>;
  readonly layersDir: string;
  readonly buildRoot: string;
  readonly trashDir: string;

  constructor(private opts: TemplateBuilderOptions) {
    this.runsc = buildRunsc(opts.runscBinary, opts.runscRoot);
    this.layersDir = path.join(opts.templatesDir, '.layers');
    this.buildRoot = path.join(opts.templatesDir, '.build');
    this.trashDir = path.join(opts.templatesDir, '.trash');
  }

  /** Clears builds left by processes that died (called on daemon start and before local builds). */
  async recover(): Promise<void> {
    const cleared = await clearStaleStaging(this.buildRoot, this.opts.log);
    if (existsSync(this.trashDir)) await rm(this.trashDir, { recursive: true, force: true });
    if (cleared) this.opts.log.info({ cleared }, 'cleared stale template builds');
  }

  async build(plan: BuildPlan, emit: BuildEmitter, signal: AbortSignal): Promise<TemplateInfo> {
    // Marks the build as running for its whole length, so a prune (of this process or
    // another) leaves the layer cache alone meanwhile; a crash leaves it to clearStaleStaging.
    const running = await Staging.create(this.buildRoot, `build-${plan.name}`);
    try {
      return await this.buildSteps(plan, emit, signal);
    } finally {
      await running.remove();
    }
  }

  private async buildSteps(plan: BuildPlan, emit: BuildEmitter, signal: AbortSignal): Promise<TemplateInfo> {
    const started = Date.now();
    const total = plan.steps.length;
    if (this.versionBuilt(plan)) {
      // The version is the hash of every input, so it is the whole build's cache: no step
      // needs to run even if its layer was pruned.
      for (const s of plan.steps) {
        emit({ type: 'step', step: s.number, total, kind: s.kind, description: s.description, cached: true });
        emit({ type: 'step_done', step: s.number, total, cached: true, elapsedMs: 0 });
      }
      emit({ type: 'log', step: total, stream: 'stdout', line: `version ${plan.version} is already built` });
      return this.install(plan, started);
    }
    await mkdir(this.layersDir, { recursive: true, mode: 0o700 });
    const lowers: string[] = []; // layer trees, bottom first
    const lastLayerStep = plan.steps.filter((s) => s.kind === 'from' || FS_STEPS.has(s.step!.type)).pop();
    let early: EarlyFlatten | undefined;
    try {
      for (const s of plan.steps) {
        if (signal.aborted) throw cancelled();
        const t0 = Date.now();
        const cached = s.kind === 'from' && plan.base.kind === 'template' ? true : this.hasLayer(s.key);
        emit({ type: 'step', step: s.number, total, kind: s.kind, description: s.description, cached });
        if (!cached) {
          this.opts.log.info({ template: plan.name, step: s.number, description: s.description }, 'build step');
          // The layers below the last step are flattened while it runs (on another core).
          if (s === lastLayerStep && lowers.length > 0 && !this.versionBuilt(plan)) early = this.flattenEarly(plan, [...lowers]);
          await this.runStep(plan, s, lowers, emit, signal);
        }
        if (s.kind === 'from' && plan.base.kind === 'template') lowers.push(realpathSync(plan.base.template.rootfs));
        else if (existsSync(this.layerFs(s.key))) lowers.push(this.layerFs(s.key));
        emit({ type: 'step_done', step: s.number, total, cached, elapsedMs: Date.now() - t0 });
      }
      if (signal.aborted) throw cancelled();
    } catch (err) {
      if (early) await (await early.done.catch(() => undefined))?.remove();
      throw err;
    }
    await this.commitVersion(plan, lowers, (line) => emit({ type: 'log', step: total, stream: 'stdout', line }), early);
    return this.install(plan, started);
  }

  /** Makes the built version the template's current one. */
  private async install(plan: BuildPlan, started: number): Promise<TemplateInfo> {
    await this.setCurrent(plan.name, plan.version);
    const info = this.opts.catalog.find(plan.name);
    if (!info) throw new WarrenError('internal', `template ${plan.name} was built but cannot be read back`);
    this.opts.log.info({ template: plan.name, version: plan.version, ms: Date.now() - started }, 'template built');
    return info;
  }

  layerDir(key: string): string {
    return path.join(this.layersDir, key.slice(0, 32));
  }

  private layerFs(key: string): string {
    return path.join(this.layerDir(key), 'fs');
  }

  private hasLayer(key: string): boolean {
    return existsSync(path.join(this.layerDir(key), 'layer.json'));
  }

  private async runStep(plan: BuildPlan, s: PlannedStep, lowers: string[], emit: BuildEmitter, signal: AbortSignal): Promise<void> {
    const staging = await Staging.create(this.buildRoot, `step-${s.key.slice(0, 12)}`);
    try {
      const layer = staging.path('layer');
      await mkdir(layer);
      const onLine = (stream: 'stdout' | 'stderr', line: string) => emit({ type: 'log', step: s.number, stream, line });
      if (s.kind === 'from') {
        await this.debootstrapStep(plan, s, staging, onLine, signal);
      } else if (s.step!.type === 'apt' || s.step!.type === 'run' || s.step!.type === 'copy') {
        await this.fsStep(plan, s, s.step!, lowers, staging, onLine, signal);
      }
      // env, workdir and user steps have no fs/: their layer only marks the key as built.
      await writeFile(
        path.join(layer, 'layer.json'),
        `${JSON.stringify({ key: s.key, step: s.step ?? { from: plan.from }, builtAt: new Date().toISOString() })}\n`,
      );
      try {
        await rename(layer, this.layerDir(s.key));
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        // A concurrent build of the same step got there first; its layer is as good as ours.
        if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err;
      }
    } finally {
      await staging.remove();
    }
  }

  private async debootstrapStep(
    plan: BuildPlan,
    s: PlannedStep,
    staging: Staging,
    onLine: (stream: 'stdout' | 'stderr', line: string) => void,
    signal: AbortSignal,
  ): Promise<void> {
    if (plan.base.kind !== 'debian') return;
    const r = await debootstrap({ target: staging.path('layer', 'fs'), include: plan.base.include, onLine, onSpawn: (pid) => staging.addChild(pid), signal });
    if (r.aborted) throw cancelled();
    if (r.exitCode !== 0) throw stepFailed(s, plan.steps.length, r.exitCode, r.tail);
  }

  private async fsStep(
    plan: BuildPlan,
    s: PlannedStep,
    step: Extract<RecipeStep, { type: 'apt' | 'run' | 'copy' }>,
    lowers: string[],
    staging: Staging,
    onLine: (stream: 'stdout' | 'stderr', line: string) => void,
    signal: AbortSignal,
  ): Promise<void> {
    const merged = staging.path('rootfs');
    await Promise.all([mkdir(staging.path('layer', 'fs')), mkdir(staging.path('work')), mkdir(merged), mkdir(staging.path('bundle'))]);
    await mountOverlay({
      lower: [...lowers].reverse(),
      upper: staging.path('layer', 'fs'),
      work: staging.path('work'),
      target: merged,
      cwdDir: this.opts.templatesDir,
    });
    try {
      if (step.type === 'copy') {
        const owner = await lookupOwner(merged, step.owner ?? 'root').catch((err: Error) => {
          throw stepFailed(s, plan.steps.length, null, [err.message]);
        });
        const n = await copyInto(s.copySource!, merged, step.dest, owner);
        onLine('stdout', `copied ${n} ${n === 1 ? 'entry' : 'entries'}`);
        return;
      }
      const userName = step.type === 'apt' ? 'root' : (step.user ?? s.context.user ?? 'root');
      const user = await lookupUser(merged, userName).catch((err: Error) => {
        throw stepFailed(s, plan.steps.length, null, [err.message]);
      });
      const cwd = step.type === 'apt' ? '/' : (step.cwd ?? s.context.workdir ?? user.home);
      await this.ensureWorkdir(merged, cwd, user);
      const containerId = `${BUILD_CONTAINER_PREFIX}${s.key.slice(0, 12)}-${randomBytes(3).toString('hex')}`;
      await staging.addContainer({ runscBinary: this.opts.runscBinary, root: this.opts.runscRoot, id: containerId });
      const r = await runBuildCommand(this.runsc, {
        containerId,
        bundleDir: staging.path('bundle'),
        rootfs: merged,
        script: step.type === 'apt' ? APT_SCRIPT(step.packages) : step.cmd,
        user,
        cwd,
        env: {
          ...(await (this.registryEnv ??= buildRegistryEnv(this.opts.log))),
          ...s.context.env,
          ...(step.type === 'apt' ? { DEBIAN_FRONTEND: 'noninteractive' } : {}),
        },
        network: s.network,
        hostFiles: this.opts.hostFiles,
        onLine,
        signal,
      });
      if (r.aborted) throw cancelled();
      if (r.exitCode !== 0) throw stepFailed(s, plan.steps.length, r.exitCode, r.tail);
    } finally {
      await unmount(merged);
    }
  }

  /** A run step's working directory is created if missing (owned by the step's user), as Docker's WORKDIR does. */
  private async ensureWorkdir(merged: string, cwd: string, user: { uid: number; gid: number }): Promise<void> {
    const host = await resolveInRoot(merged, cwd, true);
    if (!existsSync(host)) {
      await mkdir(host, { mode: 0o755 });
      await chown(host, user.uid, user.gid);
    }
  }

  private versionBuilt(plan: BuildPlan): boolean {
    return existsSync(path.join(this.opts.templatesDir, plan.name, plan.version, 'manifest.json'));
  }

  /** Flattens `layers` into a version staging dir's rootfs. */
  private async flattenInto(staging: Staging, layers: string[]): Promise<FlattenCounts> {
    await mkdir(staging.path('merged'));
    await mkdir(staging.path('version'));
    return flatten({ layers, mergedDir: staging.path('merged'), dest: staging.path('version', 'rootfs'), cwdDir: this.opts.templatesDir });
  }

  /** Flattens the layers below the last step into a version staging dir, in the background. */
  private flattenEarly(plan: BuildPlan, layers: string[]): EarlyFlatten {
    const done = (async () => {
      const staging = await Staging.create(this.buildRoot, `version-${plan.name}-${plan.version}`);
      try {
        await this.flattenInto(staging, layers);
        return staging;
      } catch (err) {
        await staging.remove();
        throw err;
      }
    })();
    // Awaited by commitVersion or the build's failure path; this only keeps it from being unhandled meanwhile.
    done.catch(() => undefined);
    return { layers, done };
  }

  private async commitVersion(plan: BuildPlan, lowers: string[], note: (line: string) => void, early?: EarlyFlatten): Promise<void> {
    const versionDir = path.join(this.opts.templatesDir, plan.name, plan.version);
    const ready = early
      ? await early.done.catch((err: Error) => {
          this.opts.log.warn({ template: plan.name, err: err.message }, 'flattening the lower layers during the last step failed; flattening all layers now');
          return undefined;
        })
      : undefined;
    if (this.versionBuilt(plan)) {
      await ready?.remove();
      note(`version ${plan.version} is already built`);
      return;
    }
    const staging = ready ?? (await Staging.create(this.buildRoot, `version-${plan.name}-${plan.version}`));
    try {
      const t0 = Date.now();
      if (ready) {
        // Only what the last step changed is left to apply.
        const top = lowers.slice(early!.layers.length);
        if (top.length > 1) throw new WarrenError('internal', `early flatten covered ${early!.layers.length} of ${lowers.length} layers`);
        const counts = top.length
          ? await applyTop({ layers: lowers, mergedDir: staging.path('merged'), dest: staging.path('version', 'rootfs'), cwdDir: this.opts.templatesDir })
          : undefined;
        note(
          `assembled rootfs from ${lowers.length} layers (the lower ${early!.layers.length} while the last step ran): ${counts?.files ?? 0} files and ${counts?.dirs ?? 0} dirs of the last layer applied in ${((Date.now() - t0) / 1000).toFixed(1)}s`,
        );
      } else {
        const counts = await this.flattenInto(staging, lowers);
        note(
          `assembled rootfs from ${lowers.length} layers: ${counts.trees} directory trees linked whole, ${counts.files} files and ${counts.dirs} dirs one by one, in ${((Date.now() - t0) / 1000).toFixed(1)}s`,
        );
      }
      const manifest: TemplateManifest = {
        name: plan.name,
        version: plan.version,
        builtAt: new Date().toISOString(),
        recipeHash: plan.recipeHash,
        from: plan.from,
        env: plan.final.env,
        ...(plan.final.workdir ? { workdir: plan.final.workdir } : {}),
        ...(plan.final.user ? { user: plan.final.user } : {}),
        ...(plan.final.start ? { start: plan.final.start } : {}),
        ...(plan.final.ready ? { ready: plan.final.ready } : {}),
        ...(plan.final.network ? { network: plan.final.network } : {}),
        ...(plan.final.bake === false ? { bake: false as const } : {}),
        // Every step but a template `from` left a layer dir (env and the like only a marker).
        layers: plan.steps.filter((s) => !(s.kind === 'from' && plan.base.kind === 'template')).map((s) => path.basename(this.layerDir(s.key))),
      };
      await writeFile(staging.path('version', 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
      await mkdir(path.dirname(versionDir), { recursive: true, mode: 0o755 });
      try {
        await rename(staging.path('version'), versionDir);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err; // built concurrently: same content
      }
    } finally {
      await staging.remove();
    }
  }

  /** Points <name>/current at version, atomically (a new symlink renamed over the old). */
  private async setCurrent(name: string, version: string): Promise<void> {
    const dir = path.join(this.opts.templatesDir, name);
    const tmp = path.join(dir, `.current-${randomBytes(4).toString('hex')}`);
    await symlink(version, tmp);
    await rename(tmp, path.join(dir, 'current'));
  }
}

function stepFailed(s: PlannedStep, total: number, exitCode: number | null, tail: string[]): WarrenError {
  const why = exitCode === null ? 'failed' : `failed with exit code ${exitCode}`;
  const output = tail.join('\n');
  const last = tail
    .filter((l) => l.trim())
    .slice(-3)
    .join(' | ');
  return new WarrenError('failed_precondition', `step ${s.number}/${total} (${s.description}) ${why}${last ? `: ${last}` : ''}`, {
    details: { step: s.number, exitCode, output },
  });
}

function cancelled(): WarrenError {
  return new WarrenError('failed_precondition', 'the build was cancelled');
}

function shellQuote(s: string): string {
  return /^[A-Za-z0-9_.+:=/-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}
