/**
 * Who may see and change which template (docs/security.md, "Templates and keys").
 *
 * A template built by a key that is not an admin key is that key's alone: other keys do not
 * see it, cannot create from it and cannot build over its name. A template without an owner
 * row is shared: the operator's (built with an admin key, by setup, or before templates had
 * owners). Every key may create from a shared template; only an admin key may change one,
 * since every key's sandboxes run what it holds.
 */
import type Database from 'better-sqlite3';
import { DEBIAN_BASE, TEMPLATE_NAME_PATTERN, WarrenError } from '@warren/protocol';
import type { Principal } from '../keys/service.js';
import { unknownTemplate, type TemplateCatalog, type TemplateInfo } from './catalog.js';

export class TemplateOwners {
  private readonly selectOwner: Database.Statement;

  constructor(private readonly db: Database.Database) {
    db.exec(`
CREATE TABLE IF NOT EXISTS template_owners (
  name TEXT PRIMARY KEY,
  api_key_id TEXT NOT NULL,
  claimed_at INTEGER NOT NULL
);
`);
    this.selectOwner = db.prepare('SELECT api_key_id FROM template_owners WHERE name = ?');
  }

  /** The key a template (or a name being built) belongs to; undefined: shared. */
  ownerOf(name: string): string | undefined {
    return (this.selectOwner.get(name) as { api_key_id: string } | undefined)?.api_key_id;
  }

  /** Takes a free name for a key; the key that holds it already keeps it. True when `keyId` holds it now. */
  claim(name: string, keyId: string): boolean {
    this.db.prepare('INSERT OR IGNORE INTO template_owners (name, api_key_id, claimed_at) VALUES (?, ?, ?)').run(name, keyId, Date.now());
    return this.ownerOf(name) === keyId;
  }

  /** The name is free again (its template was removed, or its first build failed). */
  release(name: string): void {
    this.db.prepare('DELETE FROM template_owners WHERE name = ?').run(name);
  }
}

/** The catalog as one principal sees it. */
export class TemplateAccess {
  constructor(
    private readonly catalog: TemplateCatalog,
    readonly owners: TemplateOwners,
  ) {}

  private visible(p: Principal, name: string): boolean {
    if (p.admin) return true;
    const owner = this.owners.ownerOf(name);
    return owner === undefined || owner === p.keyId;
  }

  list(p: Principal): TemplateInfo[] {
    return this.catalog.list().filter((t) => this.visible(p, t.name));
  }

  /** The template if the principal may use it; another key's is answered as a missing one. */
  resolve(p: Principal, name: string): TemplateInfo {
    const t = this.visible(p, name) ? this.catalog.find(name) : undefined;
    if (t) return t;
    throw unknownTemplate(
      name,
      this.list(p).map((x) => x.name),
    );
  }

  /** A build's `from`: a 400 naming the field unless it is a template the principal may use. */
  requireBase(p: Principal, name: string): void {
    if (this.visible(p, name) && this.catalog.find(name)) return;
    const installed = this.list(p).map((t) => t.name);
    throw new WarrenError('invalid_argument', `from: unknown template '${name}' (installed: ${installed.join(', ') || 'none'}; or use '${DEBIAN_BASE}')`);
  }

  /**
   * 403 or 404 unless the principal may change the template (build a version, remove it, bake
   * it, size its pool): an admin key may change any, another key only its own.
   */
  requireChange(p: Principal, name: string, what: string): void {
    if (p.admin || this.owners.ownerOf(name) === p.keyId) return;
    this.resolve(p, name); // missing, or another key's: 404
    throw new WarrenError('permission_denied', `template '${name}' is shared by every key; only an admin key may ${what} it`);
  }

  /**
   * The name, if the principal may read the template's build logs: an admin key any
   * template's, another key its own. A build's output can carry what its steps printed.
   */
  requireReadLogs(p: Principal, name: string): string {
    if (!TEMPLATE_NAME_PATTERN.test(name)) throw new WarrenError('invalid_argument', `'${name}' is not a template name`);
    if (p.admin || this.owners.ownerOf(name) === p.keyId) return name;
    this.resolve(p, name); // missing, or another key's: 404
    throw new WarrenError('permission_denied', `the build logs of template '${name}', which every key shares, are an admin key's to read`);
  }

  /**
   * Before a build: the name becomes the key's unless it is already someone's. A name another
   * key holds is a 409 (names are one namespace; this tells only that the name is taken).
   */
  claimForBuild(p: Principal, name: string): { claimed: boolean } {
    if (p.admin) return { claimed: false };
    const owner = this.owners.ownerOf(name);
    if (owner === p.keyId) return { claimed: false };
    if (owner === undefined && this.catalog.find(name))
      throw new WarrenError('permission_denied', `template '${name}' is shared by every key; only an admin key may build it; choose another name`);
    if (!this.owners.claim(name, p.keyId)) throw new WarrenError('conflict', `the template name '${name}' is taken; choose another`);
    return { claimed: true };
  }
}
