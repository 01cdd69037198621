/**
 * Templates: a builder for recipes, and list/get/delete of installed templates.
 * (The Python SDK mirrors these names in snake_case.)
 */
import path from 'node:path';
import {
  ErrorCodes,
  type ErrorCode,
  type PruneLayersRequest,
  type PruneLayersResult,
  type Recipe,
  type RecipeStep,
  type StartCommand,
  type TemplateBuildEvent,
  type TemplateInfo,
  type TemplateList,
  type TemplateNetwork,
} from '@warren/protocol';
import { HttpClient, ndjson, type ConnectionOptions } from './client.js';
import { NetworkError, UnavailableError, WarrenError, type WarrenErrorOptions } from './errors.js';

export interface BuildOptions extends ConnectionOptions {
  /** Name of the template to build (overrides the name given to `Template.from`'s chain). */
  name: string;
  /** Host directory that copy sources are relative to; default the current directory. */
  contextDir?: string;
  /** Every event of the build stream, as it happens (step starts, log lines, step ends). */
  onEvent?: (event: TemplateBuildEvent) => void;
}

export interface TemplateBuildErrorOptions extends WarrenErrorOptions {
  /** The step that failed (1 is `from`). */
  step?: number;
  /** The failed step's exit code (null if it was killed). */
  exitCode?: number | null;
  /** The tail of the failed step's output. */
  output?: string;
}

/**
 * Thrown when a build fails after it started (a bad recipe fails before, as an
 * InvalidArgumentError): `failed_precondition` for a step that failed or a cancelled build,
 * `internal` for the host's own failure. `step`, `exitCode` and `output` describe a failed step.
 */
export class TemplateBuildError extends WarrenError {
  declare readonly step?: number;
  declare readonly exitCode?: number | null;
  declare readonly output?: string;

  constructor(code: ErrorCode, message: string, opts: TemplateBuildErrorOptions = {}) {
    const { step, exitCode, output, ...rest } = opts;
    super(code, message, rest);
    if (step !== undefined) this.step = step;
    if (exitCode !== undefined) this.exitCode = exitCode;
    if (output !== undefined) this.output = output;
  }
}

/**
 * A template recipe, built up step by step. Each call returns a new Template, so a chain can
 * be branched. env, workdir and user apply to later steps and become the template's
 * runtime defaults.
 * @example
 * const info = await Template.from('base')
 *   .aptInstall(['jq'])
 *   .copy('server.js', '/app/server.js', { owner: 'user' })
 *   .env({ PORT: '3000' }).workdir('/app').user('user')
 *   .start('node server.js').readyPort(3000)
 *   .build({ name: 'my-app' })
 */
export class Template {
  private constructor(private readonly recipe: Omit<Recipe, 'name'>) {}

  /** 'debian:bookworm' (debootstrap minbase; `include` adds packages) or an installed template's name. */
  static from(base: string, opts: { include?: string[] } = {}): Template {
    return new Template({ from: base, ...(opts.include ? { include: opts.include } : {}), steps: [] });
  }

  /** `apt-get install -y --no-install-recommends` as root (apt lists are cleaned in the same step). */
  aptInstall(packages: string[]): Template {
    return this.step({ type: 'apt', packages });
  }

  /** A shell command (`/bin/sh -c`); default user: the current `user` step's, else root. */
  run(cmd: string, opts: { user?: string; cwd?: string } = {}): Template {
    return this.step({ type: 'run', cmd, ...opts });
  }

  /** Copies a file or directory from the build context to an absolute path in the template. */
  copy(src: string, dest: string, opts: { owner?: string } = {}): Template {
    return this.step({ type: 'copy', src, dest, ...opts });
  }

  env(vars: Record<string, string>): Template {
    return this.step({ type: 'env', env: vars });
  }

  workdir(dir: string): Template {
    return this.step({ type: 'workdir', path: dir });
  }

  user(name: string): Template {
    return this.step({ type: 'user', user: name });
  }

  /** The command baking starts (and keeps running) in the template's sandboxes. */
  start(cmd: string, opts: Omit<StartCommand, 'cmd'> = {}): Template {
    return new Template({ ...this.recipe, start: { cmd, ...opts } });
  }

  /** Ready once something listens on this port inside the sandbox. */
  readyPort(port: number, opts: { timeoutSeconds?: number } = {}): Template {
    return new Template({ ...this.recipe, ready: { port, ...opts } });
  }

  /** Ready once this shell command exits 0 inside the sandbox. */
  readyCommand(cmd: string, opts: { timeoutSeconds?: number } = {}): Template {
    return new Template({ ...this.recipe, ready: { cmd, ...opts } });
  }

  /**
   * The egress policy of the template's sandboxes when their create gives none: rules and
   * presets (`@github`, `@npm`, `@pypi`, `@debian`), expanded at each create on the daemon's
   * host. `{ allow: [] }` overrides a base template's default with none.
   */
  network(policy: TemplateNetwork): Template {
    return new Template({ ...this.recipe, network: policy });
  }

  /**
   * Whether the template is baked (default true): its first create's image is restored by
   * every later create. `false` makes every create boot cold, e.g. for a template whose
   * start-up must not be shared between sandboxes (a secret generated at boot).
   * @example Template.from('base').run('make-host-key').bake(false)
   */
  bake(enabled: boolean): Template {
    return new Template({ ...this.recipe, bake: enabled });
  }

  /** The recipe as JSON (what `warren template build` reads from a file). */
  toRecipe(name: string): Recipe {
    return { name, ...this.recipe, steps: [...(this.recipe.steps ?? [])] };
  }

  /**
   * Builds (or finds cached) and installs the template; resolves with the installed template.
   * Throws TemplateBuildError with the failing step's exit code and output tail.
   */
  async build(opts: BuildOptions): Promise<TemplateInfo> {
    const { name, contextDir, onEvent, url, apiKey } = opts;
    return Template.buildRecipe(this.toRecipe(name), { contextDir, onEvent, url, apiKey });
  }

  /** Builds a recipe given as JSON (e.g. read from a recipe.json). */
  static async buildRecipe(
    recipe: Recipe,
    opts: ConnectionOptions & { contextDir?: string; onEvent?: (e: TemplateBuildEvent) => void } = {},
  ): Promise<TemplateInfo> {
    const http = new HttpClient(opts);
    const send = () => http.request('POST', '/v1/templates/build', { json: { ...recipe, contextDir: path.resolve(opts.contextDir ?? process.cwd()) } });
    let res: Response;
    try {
      res = await send();
    } catch (err) {
      // A pooled keep-alive connection the daemon just closed fails the request before any
      // response. Unlike most POSTs, a build is safe to send again: layers are cached and
      // every commit is atomic, so a duplicate build finds the first one's work.
      if (!(err instanceof NetworkError)) throw err;
      res = await send();
    }
    for await (const e of ndjson<TemplateBuildEvent>(res)) {
      opts.onEvent?.(e);
      if (e.type === 'done') return e.template;
      if (e.type === 'error') {
        throw new TemplateBuildError(e.code, e.message, { status: ErrorCodes[e.code], step: e.step, exitCode: e.exitCode, output: e.output });
      }
    }
    throw new UnavailableError('unavailable', 'the build stream ended without a result (did the daemon stop?)');
  }

  static async list(opts: ConnectionOptions = {}): Promise<TemplateInfo[]> {
    return (await new HttpClient(opts).json<TemplateList>('GET', '/v1/templates')).templates;
  }

  static async get(name: string, opts: ConnectionOptions = {}): Promise<TemplateInfo> {
    return new HttpClient(opts).json<TemplateInfo>('GET', `/v1/templates/${encodeURIComponent(name)}`);
  }

  /** Removes every version of a template; refused (ConflictError) while a sandbox uses it. */
  static async delete(name: string, opts: ConnectionOptions = {}): Promise<void> {
    await new HttpClient(opts).json('DELETE', `/v1/templates/${encodeURIComponent(name)}`);
  }

  /**
   * Drops cached build layers: those no template version on disk was built from, or with
   * `all` every one (the next build of anything runs every step). Refused (ConflictError)
   * while a build runs. Templates and sandboxes never need a layer to run.
   */
  static async pruneLayers(req: PruneLayersRequest = {}, opts: ConnectionOptions = {}): Promise<PruneLayersResult> {
    return new HttpClient(opts).json<PruneLayersResult>('POST', '/v1/templates/prune', { json: req });
  }

  private step(s: RecipeStep): Template {
    return new Template({ ...this.recipe, steps: [...(this.recipe.steps ?? []), s] });
  }
}
