/**
 * Installed templates. A template lives in <home>/templates/<name>/<version>/rootfs, with
 * <home>/templates/<name>/current pointing at the version that new sandboxes get.
 */
import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';

export interface TemplateInfo {
  name: string;
  version: string;
  rootfs: string;
  builtAt?: string;
}

export class TemplateCatalog {
  constructor(private dir: string) {}

  list(): TemplateInfo[] {
    if (!existsSync(this.dir)) return [];
    return readdirSync(this.dir)
      .map((name) => this.find(name))
      .filter((t): t is TemplateInfo => t !== undefined);
  }

  find(name: string): TemplateInfo | undefined {
    const current = path.join(this.dir, name, 'current');
    if (!existsSync(path.join(current, 'rootfs'))) return undefined;
    const versionDir = realpathSync(current);
    let builtAt: string | undefined;
    try {
      builtAt = (JSON.parse(readFileSync(path.join(versionDir, 'manifest.json'), 'utf8')) as { builtAt?: string }).builtAt;
    } catch {
      builtAt = undefined;
    }
    return { name, version: path.basename(versionDir), rootfs: path.join(versionDir, 'rootfs'), builtAt };
  }

  resolve(name: string): TemplateInfo {
    const t = this.find(name);
    if (t) return t;
    const available = this.list().map((x) => x.name);
    throw new WarrenError('not_found', `unknown template '${name}'; available: ${available.length ? available.join(', ') : 'none (run scripts/setup.sh to build base)'}`, {
      available,
    });
  }
}
