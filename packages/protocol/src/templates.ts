/**
 * Template recipes, manifests and the build stream. A recipe is what the CLI reads from a
 * JSON file and what the SDK's Template builder produces; the daemon validates it here,
 * builds it step by step (each step a cached layer) and writes a manifest beside the
 * template's rootfs. See docs/templates.md.
 */
import { z } from 'zod';
import type { ErrorCode } from './errors.js';

export const TEMPLATE_NAME_PATTERN = /^[a-z0-9][a-z0-9-]*$/;
/** The one base that is not another template: Debian 12, debootstrap minbase. */
export const DEBIAN_BASE = 'debian:bookworm';
export const DEFAULT_READY_TIMEOUT_SECONDS = 60;

export const TemplateName = z.string().max(63).regex(TEMPLATE_NAME_PATTERN, 'must be lowercase letters, digits and -, starting with a letter or digit');

const absolutePath = z
  .string()
  .min(1)
  .max(4096)
  .refine((p) => p.startsWith('/') && !p.includes('\0'), 'must be an absolute path');
const userName = z.string().regex(/^([a-z_][a-z0-9_-]*|[0-9]+)$/, 'must be a user name or a numeric uid');
const owner = z.string().regex(/^([a-z_][a-z0-9_-]*|[0-9]+)(:([a-z_][a-z0-9_-]*|[0-9]+))?$/, 'must be USER or USER:GROUP (names or numbers)');
// Debian package names, optionally pinned (=version) or from a suite (/bookworm-backports).
const packageName = z.string().regex(/^[a-z0-9][a-z0-9+.-]*([=/][A-Za-z0-9+.~:_-]+)?$/, 'must be a Debian package name');
const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'environment variable names are letters, digits and _');

export const AptStep = z.object({ type: z.literal('apt'), packages: z.array(packageName).min(1).max(1000) }).strict();
export const RunStep = z
  .object({
    type: z.literal('run'),
    cmd: z
      .string()
      .min(1)
      .max(128 * 1024),
    /** Default: the recipe's current user (root unless a `user` step set one). */
    user: userName.optional(),
    /** Default: the recipe's current workdir, else the user's home. */
    cwd: absolutePath.optional(),
  })
  .strict();
export const CopyStep = z
  .object({
    type: z.literal('copy'),
    /** A file or directory, relative to the build context. */
    src: z.string().min(1).max(4096),
    /** Absolute path in the template. A directory's contents are copied into it; a file
     * is copied to it, or into it when it ends with '/'. */
    dest: absolutePath,
    /** Default root:root. */
    owner: owner.optional(),
  })
  .strict();
export const EnvStep = z.object({ type: z.literal('env'), env: z.record(envName, z.string().max(128 * 1024)) }).strict();
export const WorkdirStep = z.object({ type: z.literal('workdir'), path: absolutePath }).strict();
export const UserStep = z.object({ type: z.literal('user'), user: userName }).strict();

export const RecipeStep = z.discriminatedUnion('type', [AptStep, RunStep, CopyStep, EnvStep, WorkdirStep, UserStep]);
export type RecipeStep = z.infer<typeof RecipeStep>;
export type RecipeStepType = RecipeStep['type'];

export const StartCommand = z
  .object({
    cmd: z
      .string()
      .min(1)
      .max(64 * 1024),
    user: userName.optional(),
    cwd: absolutePath.optional(),
  })
  .strict();
export type StartCommand = z.infer<typeof StartCommand>;

export const ReadyCheck = z
  .object({
    cmd: z
      .string()
      .min(1)
      .max(64 * 1024)
      .optional(),
    port: z.number().int().min(1).max(65535).optional(),
    timeoutSeconds: z.number().int().min(1).max(3600).default(DEFAULT_READY_TIMEOUT_SECONDS),
  })
  .strict()
  .refine((r) => (r.cmd === undefined) !== (r.port === undefined), 'give exactly one of cmd and port');
export type ReadyCheck = z.output<typeof ReadyCheck>;

/**
 * The egress policy the template's sandboxes get when their create request gives none: rules
 * and presets as in a create's `network.allow` (no credentials: a recipe is no place for
 * secrets). Checked at build; presets are expanded at each create, on the daemon's host.
 */
export const TemplateNetwork = z.object({ allow: z.array(z.string().min(1).max(300)).max(256) }).strict();
export type TemplateNetwork = z.infer<typeof TemplateNetwork>;

const recipeShape = {
  name: TemplateName,
  /** 'debian:bookworm' or the name of an installed template. */
  from: z
    .string()
    .refine((v) => v === DEBIAN_BASE || (TEMPLATE_NAME_PATTERN.test(v) && v.length <= 63), `must be '${DEBIAN_BASE}' or the name of an installed template`),
  /** Extra packages for debootstrap (only with from: 'debian:bookworm'). */
  include: z.array(packageName).max(1000).optional(),
  steps: z.array(RecipeStep).max(64).default([]),
  start: StartCommand.optional(),
  ready: ReadyCheck.optional(),
  network: TemplateNetwork.optional(),
  /**
   * false: never bake this template (every create boots it cold). Templates are baked by
   * default, those without a start command too: a restore skips the agent's own start-up.
   */
  bake: z.boolean().optional(),
};

function includeOnlyWithDebian(r: { from: string; include?: string[] }, ctx: z.RefinementCtx): void {
  if (r.include?.length && r.from !== DEBIAN_BASE) {
    ctx.addIssue({ code: 'custom', path: ['include'], message: `only allowed with from: '${DEBIAN_BASE}'` });
  }
}

export const Recipe = z.object(recipeShape).strict().superRefine(includeOnlyWithDebian);
export type Recipe = z.input<typeof Recipe>;
export type ResolvedRecipe = z.output<typeof Recipe>;

/** POST /v1/templates/build: a recipe plus where its copy sources live on the daemon's host. */
export const BuildTemplateRequest = z
  .object({
    ...recipeShape,
    /** Absolute host path that copy steps' `src` are relative to (the daemon is local). */
    contextDir: absolutePath.optional(),
  })
  .strict()
  .superRefine(includeOnlyWithDebian);
export type BuildTemplateRequest = z.input<typeof BuildTemplateRequest>;

/**
 * <templatesDir>/<name>/<version>/manifest.json, and what the API returns for a template.
 * `env`, `workdir` and `user` are the runtime defaults the recipe's steps left behind;
 * `start` and `ready` are what baking runs; `network` is its sandboxes' default egress
 * policy. Templates built from another template inherit all of these unless their recipe
 * sets them.
 */
export interface TemplateManifest {
  name: string;
  /** 12 hex chars: the start of recipeHash. */
  version: string;
  builtAt: string;
  /** sha256 over the final layer's key and start/ready. */
  recipeHash: string;
  /** The recipe's `from`: 'debian:bookworm' or a template name. */
  from: string;
  env: Record<string, string>;
  workdir?: string;
  user?: string;
  start?: StartCommand;
  ready?: { cmd?: string; port?: number; timeoutSeconds: number };
  /** The default egress policy of its sandboxes (docs/network.md); absent: none. */
  network?: TemplateNetwork;
  /** false when the recipe opted out of baking (absent: baked). */
  bake?: false;
  /** The cached build layers this version was made from (their dirs under .layers); kept by a prune. Missing in versions built before prune existed. */
  layers?: string[];
}

/** A template as listed by the API. Templates built before recipes lack the recipe fields. */
export type TemplateInfo = Omit<TemplateManifest, 'builtAt' | 'recipeHash' | 'from' | 'layers'> &
  Partial<Pick<TemplateManifest, 'builtAt' | 'recipeHash' | 'from'>>;

/** POST /v1/templates/prune: drop cached build layers. */
export const PruneLayersRequest = z
  .object({
    /** Also the layers that template versions on disk were built from (their next rebuild runs every step). */
    all: z.boolean().default(false),
  })
  .strict();
export type PruneLayersRequest = z.input<typeof PruneLayersRequest>;

export interface PruneLayersResult {
  /** Cached layers removed. */
  removed: number;
  /** Cached layers left: those template versions were built from (none with `all`). */
  kept: number;
  /** Disk space given back: blocks of files no template version shares (versions hard-link layer files). */
  freedBytes: number;
}

export interface TemplateList {
  templates: TemplateInfo[];
}

/** NDJSON lines of POST /v1/templates/build, in order; `done` or `error` ends the stream. */
export type TemplateBuildEvent =
  /** A step starts; `cached` means its layer exists and it will not run. Step 1 is `from`. */
  | { type: 'step'; step: number; total: number; kind: RecipeStepType | 'from'; description: string; cached: boolean }
  /** One line of a running step's output. */
  | { type: 'log'; step: number; stream: 'stdout' | 'stderr'; line: string }
  | { type: 'step_done'; step: number; total: number; cached: boolean; elapsedMs: number }
  | { type: 'done'; template: TemplateInfo; elapsedMs: number }
  /** The build failed; for a failed step, its exit code and the tail of its output. */
  | { type: 'error'; code: ErrorCode; message: string; step?: number; exitCode?: number | null; output?: string }
  | { type: 'keepalive' };

/** GET /v1/templates/:name/builds: one build's log (GET .../builds/:id is its text). */
export interface TemplateBuildLog {
  /** Start time in ms and a random suffix; logs sort by it. */
  id: string;
  startedAt: string;
  /** `running` until the build ends; a daemon that died mid-build marks it `failed` at its next start. */
  state: 'running' | 'ok' | 'failed';
  /** The version an `ok` build made. */
  version?: string;
}

export interface TemplateBuildLogList {
  builds: TemplateBuildLog[];
}

/** GET /v1/templates/:name/versions: every version on disk, newest first. */
export interface TemplateVersionList {
  versions: Array<{ version: string; builtAt?: string; current: boolean }>;
}
