/**
 * From a build request to a build plan: checks what the schema cannot (the base template
 * exists, copy sources exist inside the context) and computes every step's cache key. A
 * step's key hashes the step, the key before it and, for copy, the bytes it copies; the
 * first key hashes the base (debootstrap's package list, or the base template's version).
 * So changing step k changes the keys of k and everything after it, and nothing before.
 */
import { lstat, stat } from 'node:fs/promises';
import path from 'node:path';
import {
  DEBIAN_BASE,
  WarrenError,
  type RecipeStep,
  type RecipeStepType,
  type ResolvedRecipe,
  type StartCommand,
  type TemplateManifest,
  type TemplateNetwork,
} from '@warren/protocol';
import { checkAllow } from '../network/presets.js';
import type { TemplateCatalog, TemplateInfo } from './catalog.js';
import { canonicalJson, hashSource, sha256 } from './hashing.js';

/** Bump when what a step does changes (e.g. the apt command line), to invalidate layers. */
const LAYER_FORMAT = 1;

interface StepContext {
  env: Record<string, string>;
  workdir?: string;
  user?: string;
}

export interface PlannedStep {
  /** 1-based; step 1 is the base. */
  number: number;
  kind: RecipeStepType | 'from';
  description: string;
  key: string;
  step?: RecipeStep;
  /** Host path of a copy step's source. */
  copySource?: string;
  /** env/workdir/user in force when this step runs. */
  context: StepContext;
  /** What a run or apt step's sandbox reaches: the host's network, or only its own loopback. */
  network: 'host' | 'none';
}

/**
 * A build by a key that is not an admin key (templates/owners.ts). Its run steps get no
 * network (build sandboxes otherwise share the host's, loopback included, where the daemon
 * and database forwards listen); its apt steps do, so they must run apt as the operator's
 * template has it: before any run step of the key's, from a shared template. Its layers are
 * its own: salted with its key, never reused by another key's build or an admin's.
 */
export interface TenantBuild {
  keyId: string;
  /** `from` is a template of the key's own, not a shared one. */
  fromOwn: boolean;
}

export interface BuildPlan {
  name: string;
  from: string;
  base: { kind: 'debian'; include: string[] } | { kind: 'template'; template: TemplateInfo };
  steps: PlannedStep[];
  /** The runtime defaults, start/ready and default egress policy the manifest will carry. */
  final: StepContext & { start?: StartCommand; ready?: TemplateManifest['ready']; network?: TemplateNetwork; bake?: false };
  recipeHash: string;
  version: string;
}

export async function planBuild(recipe: ResolvedRecipe & { contextDir?: string }, catalog: TemplateCatalog, tenant?: TenantBuild): Promise<BuildPlan> {
  let base: BuildPlan['base'];
  let context: StepContext = { env: {} };
  let inherited: Pick<BuildPlan['final'], 'start' | 'ready' | 'network' | 'bake'> = {};
  // Rules and preset names now, as a 400 before anything runs; presets expand at each create.
  if (recipe.network) checkAllow(recipe.network.allow, 'network.allow');
  let key: string;
  let description: string;
  if (recipe.from === DEBIAN_BASE) {
    const include = [...new Set(recipe.include ?? [])].sort();
    base = { kind: 'debian', include };
    key = sha256(canonicalJson({ format: LAYER_FORMAT, from: DEBIAN_BASE, include, ...(tenant ? { tenant: tenant.keyId } : {}) }));
    description = `from ${DEBIAN_BASE} (debootstrap minbase${include.length ? ` + ${include.length} packages` : ''})`;
  } else {
    const template = catalog.find(recipe.from);
    if (!template) {
      const installed = catalog.list().map((t) => t.name);
      throw new WarrenError(
        'invalid_argument',
        `from: unknown template '${recipe.from}' (installed: ${installed.join(', ') || 'none'}; or use '${DEBIAN_BASE}')`,
      );
    }
    base = { kind: 'template', template };
    context = { env: { ...template.env }, workdir: template.workdir, user: template.user };
    inherited = {
      start: template.start,
      ready: template.ready,
      ...(template.network ? { network: template.network } : {}),
      ...(template.bake === false ? { bake: false as const } : {}),
    };
    key = sha256(
      canonicalJson({
        format: LAYER_FORMAT,
        from: template.name,
        version: template.version,
        recipeHash: template.recipeHash ?? null,
        ...(tenant ? { tenant: tenant.keyId } : {}),
      }),
    );
    description = `from ${template.name} (${template.version})`;
  }
  const steps: PlannedStep[] = [{ number: 1, kind: 'from', description, key, context, network: 'host' }];
  let ranTenantCode = tenant?.fromOwn ?? false;

  const contextDir = recipe.contextDir ? await checkContextDir(recipe.contextDir) : undefined;
  for (const [i, step] of recipe.steps.entries()) {
    let content: string | undefined;
    let copySource: string | undefined;
    if (step.type === 'copy') {
      copySource = await checkCopySource(contextDir, step.src, i);
      content = await hashSource(copySource);
    }
    if (tenant && step.type === 'apt' && ranTenantCode)
      throw new WarrenError(
        'permission_denied',
        `steps.${i}: a key's apt step runs with the host's network, so it must come before the recipe's run steps and build from a shared template (not one of the key's own); move the packages to an apt step at the start, or ask an operator for a shared template with them`,
      );
    if (step.type === 'run') ranTenantCode = true;
    key = sha256(canonicalJson({ format: LAYER_FORMAT, parent: key, step, content: content ?? null }));
    const network = tenant && step.type !== 'apt' ? 'none' : 'host';
    steps.push({ number: i + 2, kind: step.type, description: describe(step), key, step, copySource, context, network });
    context = apply(context, step);
  }
  const final = {
    ...context,
    ...inherited,
    ...(recipe.start ? { start: recipe.start } : {}),
    ...(recipe.ready ? { ready: recipe.ready } : {}),
    ...(recipe.network ? { network: { allow: recipe.network.allow.map((r) => r.trim()) } } : {}),
  };
  // `bake: true` in a recipe undoes an inherited opt-out; only `false` is ever stored.
  if (recipe.bake === true) delete final.bake;
  else if (recipe.bake === false) final.bake = false;
  // The network default and the bake opt-out are hashed only when there is one, so versions
  // built before they existed keep their hash.
  const recipeHash = sha256(
    canonicalJson({
      layers: key,
      start: final.start ?? null,
      ready: final.ready ?? null,
      ...(final.network ? { network: final.network } : {}),
      ...(final.bake === false ? { bake: false } : {}),
    }),
  );
  return { name: recipe.name, from: recipe.from, base, steps, final, recipeHash, version: recipeHash.slice(0, 12) };
}

function apply(ctx: StepContext, step: RecipeStep): StepContext {
  if (step.type === 'env') return { ...ctx, env: { ...ctx.env, ...step.env } };
  if (step.type === 'workdir') return { ...ctx, workdir: step.path };
  if (step.type === 'user') return { ...ctx, user: step.user };
  return ctx;
}

function describe(step: RecipeStep): string {
  const short = (s: string, n = 60) => {
    const one = s.replace(/\s+/g, ' ').trim();
    return one.length > n ? `${one.slice(0, n - 3)}...` : one;
  };
  switch (step.type) {
    case 'apt':
      return `apt install ${short(step.packages.join(' '))}`;
    case 'run':
      return `run ${short(step.cmd)}${step.user ? ` (as ${step.user})` : ''}`;
    case 'copy':
      return `copy ${step.src} -> ${step.dest}${step.owner ? ` (owner ${step.owner})` : ''}`;
    case 'env':
      return `env ${short(
        Object.entries(step.env)
          .map(([k, v]) => `${k}=${v}`)
          .join(' '),
      )}`;
    case 'workdir':
      return `workdir ${step.path}`;
    case 'user':
      return `user ${step.user}`;
  }
}

async function checkContextDir(dir: string): Promise<string> {
  const st = await stat(dir).catch(() => undefined);
  if (!st?.isDirectory()) throw new WarrenError('invalid_argument', `contextDir: ${dir} is not a directory on the daemon's host`);
  return path.resolve(dir);
}

async function checkCopySource(contextDir: string | undefined, src: string, i: number): Promise<string> {
  if (!contextDir) throw new WarrenError('invalid_argument', `contextDir: required, because steps.${i} copies files`);
  const abs = path.resolve(contextDir, src);
  if (abs !== contextDir && !abs.startsWith(contextDir + path.sep)) {
    throw new WarrenError('invalid_argument', `steps.${i}.src: '${src}' is outside the build context ${contextDir}`);
  }
  if (!(await lstat(abs).catch(() => undefined))) {
    throw new WarrenError('invalid_argument', `steps.${i}.src: '${src}' does not exist in the build context ${contextDir}`);
  }
  return abs;
}
