/**
 * Installed templates. A template lives in <home>/templates/<name>/<version>/rootfs, with
 * <home>/templates/<name>/current pointing at the version that new sandboxes get, and
 * <version>/manifest.json holding its recipe's runtime defaults (see TemplateManifest).
 * Version directories are only ever read once they exist: builds stage elsewhere and rename.
 */
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import { TEMPLATE_NAME_PATTERN, WarrenError, type StartCommand, type TemplateManifest, type TemplateNetwork } from '@warren/protocol';

export interface TemplateInfo {
  name: string;
  version: string;
  /** Host path of the version's root filesystem (never sent to API clients). */
  rootfs: string;
  builtAt?: string;
  /** Absent for templates built before recipes (the old recipe.sh). */
  recipeHash?: string;
  from?: string;
  /** Runtime defaults left by the recipe's env/workdir/user steps. */
  env: Record<string, string>;
  workdir?: string;
  user?: string;
  start?: StartCommand;
  ready?: { cmd?: string; port?: number; timeoutSeconds: number };
  /** The default egress policy of its sandboxes (a create without `network` gets it). */
  network?: TemplateNetwork;
  /** false: the recipe opted out of baking (core/bake.ts). */
  bake?: false;
}

export class TemplateCatalog {
  /** `warn` hears about unreadable manifests (the template is still listed, with defaults). */
  constructor(
    private dir: string,
    private warn: (msg: string, fields: Record<string, unknown>) => void = () => {},
  ) {}

  get templatesDir(): string {
    return this.dir;
  }

  list(): TemplateInfo[] {
    return this.names()
      .map((name) => this.find(name))
      .filter((t): t is TemplateInfo => t !== undefined);
  }

  /** The manifest of every version on disk of every template, current or not (prune.ts keeps what they name). */
  versionManifests(): Array<Partial<TemplateManifest>> {
    return this.names().flatMap((name) => {
      const dir = path.join(this.dir, name);
      if (!statSync(dir, { throwIfNoEntry: false })?.isDirectory()) return [];
      return readdirSync(dir)
        .filter((version) => version !== 'current' && !version.startsWith('.')) // .current-*: a symlink being swapped in
        .map((version) => this.readManifest(path.join(dir, version)));
    });
  }

  private names(): string[] {
    if (!existsSync(this.dir)) return [];
    return readdirSync(this.dir)
      .filter((name) => TEMPLATE_NAME_PATTERN.test(name)) // skips .layers, .build, .trash
      .sort();
  }

  find(name: string): TemplateInfo | undefined {
    if (!TEMPLATE_NAME_PATTERN.test(name)) return undefined;
    const current = path.join(this.dir, name, 'current');
    if (!existsSync(path.join(current, 'rootfs'))) return undefined;
    const versionDir = realpathSync(current);
    // The layer list is the build cache's business (prune.ts), not the API's.
    const { layers: _layers, ...manifest } = this.readManifest(versionDir);
    return {
      env: {},
      ...manifest,
      name,
      version: path.basename(versionDir),
      rootfs: path.join(versionDir, 'rootfs'),
    };
  }

  resolve(name: string): TemplateInfo {
    const t = this.find(name);
    if (t) return t;
    throw unknownTemplate(
      name,
      this.list().map((x) => x.name),
    );
  }

  private readManifest(versionDir: string): Partial<TemplateManifest> {
    const file = path.join(versionDir, 'manifest.json');
    try {
      return JSON.parse(readFileSync(file, 'utf8')) as Partial<TemplateManifest>;
    } catch (err) {
      this.warn('unreadable template manifest; using defaults', { file, err: (err as Error).message });
      return {};
    }
  }
}

/** The 404 for a template name, with the templates the caller could have meant. */
export function unknownTemplate(name: string, available: string[]): WarrenError {
  return new WarrenError(
    'not_found',
    `unknown template '${name}'; available: ${available.length ? available.join(', ') : 'none (run scripts/setup.sh to build base)'}`,
    { details: { available } },
  );
}

/** What API clients see of a template: everything but host paths. */
export function publicTemplateInfo(t: TemplateInfo): Omit<TemplateInfo, 'rootfs'> {
  const { rootfs: _rootfs, ...rest } = t;
  return rest;
}
