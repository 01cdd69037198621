/**
 * The rules on the members of a tar archive, apart from how they are framed in bytes
 * (tar-check.ts): what a member may be called, what it may be, where a link may lead. They run
 * on the checker's own parse of the bytes, in front of every extractor, and on the host also on
 * the entries node-tar itself reads (sdk dirs.ts), so that the decision rests on what the
 * extractor writes, not only on a second parser's idea of it. The Python SDK enforces the same
 * rules (packages/python/warren/dirs.py); docs/api.md, "Directories":
 *
 * - names are relative and plain: no absolute name, no `..`, `.` or empty component (a leading
 *   `./` and a directory's trailing `/` aside);
 * - nothing is written through or under a non-directory of the archive, nor replaces a member
 *   (a directory may be repeated);
 * - a symlink's target, resolved through the archive's other symlinks, stays inside: no
 *   absolute target, no way up past the root (checked again at the end, against every
 *   symlink, since a later one can change what an earlier target means);
 * - a hard link names a regular file earlier in the archive;
 * - only files carry data, only links carry a link name.
 *
 * Errors name the member, JSON-quoted so that control characters in a name arrive escaped.
 */
import { WarrenError } from './errors.js';

/** Symlink hops while resolving a target, as the kernel's limit (ELOOP). */
const MAX_HOPS = 40;
/**
 * Components walked and bytes of targets followed in one resolution: far beyond any real chain
 * of links (a few hops of a few components), and a bound on its cost (a lookup per step).
 */
const MAX_RESOLVE_STEPS = 256;
const MAX_RESOLVE_BYTES = 8192;
/** Bytes in a member name or link name: Linux's PATH_MAX; a longer one cannot be created or used anyway. */
export const MAX_NAME_BYTES = 4096;
/**
 * Components in a member name. Real trees stay far below: 20 in a Debian /usr, 10 in this
 * repository's node_modules, a few dozen in the deepest Java package or npm-2-era nested
 * node_modules tree. An extractor does work per member in proportion to depth times length
 * (node-tar builds and checks every ancestor path of each entry), so a hostile archive of one
 * deep name repeated costs about 9 s of CPU per MB at 256 components against 2 s at 64 (and
 * 0.3 s for shallow names); 128 leaves room for any real tree and halves the worst case.
 */
export const MAX_NAME_COMPONENTS = 128;

export type TarMemberType = 'file' | 'directory' | 'symlink' | 'hardlink';

/** One member as an extractor would write it: its name, what it is, its link name, its data size. */
export interface TarMember {
  name: string;
  type: TarMemberType;
  /** The target of a symlink or hard link; '' for anything else. */
  linkname: string;
  size: number;
}

/** How a member type reads in a message. */
export const MEMBER_WORDS: Record<TarMemberType, string> = { file: 'file', directory: 'directory', symlink: 'symlink', hardlink: 'hard link' };

export interface TarSummary {
  files: number;
  directories: number;
  symlinks: number;
  hardlinks: number;
  /** Bytes of file contents. */
  bytes: number;
  /** The archive has an entry for its root (`.` or `./`): its mode and time apply to the destination. */
  hasRoot: boolean;
}

/** Refusal of one member, naming it. */
export function refuseMember(name: string, why: string): WarrenError {
  return new WarrenError('invalid_argument', `refused tar member ${JSON.stringify(name)}: ${why}`, { details: { member: name } });
}

/** The start of a name too long to quote whole in a message. */
function shortened(name: string): string {
  return `${name.slice(0, 200)}...`;
}

/**
 * Components of a member name ([] for the root, `.` or `./`). Refuses empty, absolute and NUL
 * names, `..`, `.` and empty components, and a trailing `/` unless `directory`.
 */
export function memberComponents(name: string, directory = false): string[] {
  if (name === '') throw refuseMember(name, 'a member without a name');
  const bytes = Buffer.byteLength(name);
  if (bytes > MAX_NAME_BYTES) throw refuseMember(shortened(name), `a name of ${bytes} bytes, over the limit of ${MAX_NAME_BYTES} (PATH_MAX)`);
  if (name.includes('\0')) throw refuseMember(name, 'a name with a NUL byte');
  if (name.startsWith('/')) throw refuseMember(name, 'absolute names are not allowed');
  if (name === '.' || name === './') return [];
  let rest = name.startsWith('./') ? name.slice(2) : name;
  if (rest.endsWith('/')) {
    if (!directory) throw refuseMember(name, "a name ending in '/' on a member that is not a directory");
    rest = rest.slice(0, -1);
  }
  const parts = rest.split('/');
  if (parts.length > MAX_NAME_COMPONENTS)
    throw refuseMember(name, `a name of ${parts.length} components, over the limit of ${MAX_NAME_COMPONENTS} (no real tree is that deep)`);
  if (parts.includes('..')) throw refuseMember(name, "'..' components are not allowed");
  if (parts.some((p) => p === '' || p === '.')) throw refuseMember(name, "empty or '.' components are not allowed");
  return parts;
}

/**
 * `d/..` in a target climbs back over a name whose meaning a later transfer can change: `d`
 * unknown (a directory, as far as this tree can tell) makes `e -> d/d/../..` stay inside, and a
 * later download merged beside it that brings `d -> .` makes `e` lead two levels up. A target
 * that climbs only at its start climbs over its own link's parents, which are directories for
 * good (a merge never puts a symlink where a directory is); normalized targets (`ln -sr`,
 * packagers) never do otherwise.
 */
function climbsAfterName(target: string): boolean {
  let named = false;
  for (const c of target.split('/')) {
    if (c === '..') {
      if (named) return true;
    } else if (c !== '' && c !== '.') named = true;
  }
  return false;
}

/**
 * Where a symlink's target leads, resolved through `links` (normalized path -> target: the
 * archive's symlinks, or a merged view of a download over its destination, sdk merge-check.ts;
 * one lookup per component): undefined when it stays inside the root, else why not. Dangling
 * targets inside are fine.
 */
export function symlinkEscape(linkPath: string, target: string, links: { get(path: string): string | undefined }): string | undefined {
  if (target === '') return 'empty symlink target';
  if (target.startsWith('/')) return `points to the absolute path ${JSON.stringify(target)}`;
  if (climbsAfterName(target)) return `its target ${JSON.stringify(target)} has '..' after a name ('..' may only begin a target)`;
  const stack = linkPath.split('/').slice(0, -1);
  // Components still to walk, the next one last: taking one and adding a link's are O(1).
  const pending = target.split('/').reverse();
  let hops = 0;
  let steps = 0;
  let bytes = target.length;
  while (pending.length) {
    const c = pending.pop() as string;
    if (c === '' || c === '.') continue;
    // Each step costs a lookup of the whole path so far: bounded, a hostile chain of long
    // targets cannot make one resolution cost seconds.
    if (++steps > MAX_RESOLVE_STEPS) return `its target ${JSON.stringify(target)} resolves through more than ${MAX_RESOLVE_STEPS} components`;
    if (c === '..') {
      if (!stack.length) return `its target ${JSON.stringify(target)} leads outside the destination`;
      stack.pop();
      continue;
    }
    stack.push(c);
    const next = links.get(stack.join('/'));
    if (next === undefined) continue;
    if (++hops > MAX_HOPS) return `its target ${JSON.stringify(target)} loops through symlinks`;
    stack.pop();
    if (next.startsWith('/')) return `its target ${JSON.stringify(target)} leads outside the destination`;
    bytes += next.length;
    if (bytes > MAX_RESOLVE_BYTES) return `its target ${JSON.stringify(target)} resolves through more than ${MAX_RESOLVE_BYTES} bytes of link targets`;
    pending.push(...next.split('/').reverse());
  }
  return undefined;
}

/**
 * A name of the archive: what its member is (undefined for a parent no member named, a
 * directory as far as the rules go) and the names under it. One node per component, so the
 * rules cost time in proportion to the bytes of the names, however deep they are.
 */
interface NameNode {
  kind?: TarMemberType;
  children?: Map<string, NameNode>;
}

/** The member rules, fed one member at a time in archive order; throws on the first refused one. */
export class TarMembers {
  /** The archive's names (normalized), from the destination down. */
  private root: NameNode = {};
  private links = new Map<string, string>();
  private summary: TarSummary = { files: 0, directories: 0, symlinks: 0, hardlinks: 0, bytes: 0, hasRoot: false };

  add(m: TarMember): void {
    const { name, type } = m;
    const parts = memberComponents(name, type === 'directory');
    const path = parts.join('/');
    // Down the parents that exist: below the first one missing, nothing of the archive is.
    let node: NameNode | undefined = this.root;
    for (let i = 0; i < parts.length - 1 && node; i++) {
      node = node.children?.get(parts[i] as string);
      const kind = node?.kind;
      if (kind === 'symlink') throw refuseMember(name, `it would be written through the symlink ${JSON.stringify(parts.slice(0, i + 1).join('/'))}`);
      if (kind !== undefined && kind !== 'directory')
        throw refuseMember(name, `it would be written under the ${MEMBER_WORDS[kind]} ${JSON.stringify(parts.slice(0, i + 1).join('/'))}`);
    }
    const before = parts.length === 0 ? this.root.kind : node?.children?.get(parts[parts.length - 1] as string)?.kind;
    if (before === 'symlink') throw refuseMember(name, `it would replace the symlink ${JSON.stringify(path)} of the same archive`);
    if (before !== undefined && !(before === 'directory' && type === 'directory'))
      throw refuseMember(name, `it would replace the ${MEMBER_WORDS[before]} of the same name earlier in the archive`);
    if (path === '' && type !== 'directory') throw refuseMember(name, 'only a directory can stand for the destination itself');
    if (type !== 'file' && m.size !== 0) throw refuseMember(name, `a ${MEMBER_WORDS[type]} with ${m.size} bytes of data`);
    if ((type === 'file' || type === 'directory') && m.linkname !== '') throw refuseMember(name, `a link name on a ${type}`);
    const linkBytes = Buffer.byteLength(m.linkname);
    // symlinkEscape walks a target component by component: a megabyte of `a/a/...` would cost minutes.
    if (linkBytes > MAX_NAME_BYTES) throw refuseMember(name, `a link name of ${linkBytes} bytes, over the limit of ${MAX_NAME_BYTES} (PATH_MAX)`);
    if (type === 'symlink') {
      const why = symlinkEscape(path, m.linkname, this.links);
      if (why) throw refuseMember(name, `symlink: ${why}`);
      this.links.set(path, m.linkname);
    }
    if (type === 'hardlink') this.checkHardLink(name, m.linkname);
    this.place(parts).kind = type;
    this.count(m, path === '');
  }

  /** After the last member: every symlink again, against all of them. */
  end(): TarSummary {
    for (const [path, target] of this.links) {
      const why = symlinkEscape(path, target, this.links);
      if (why) throw refuseMember(path, `symlink: ${why}`);
    }
    return this.summary;
  }

  /** A hard link to a symlink would copy its relative target to another place; to a directory, fail. */
  private checkHardLink(name: string, linkname: string): void {
    let target: string[];
    try {
      target = memberComponents(linkname);
    } catch {
      throw refuseMember(name, `hard link to ${JSON.stringify(linkname)}, outside the destination or not a plain name`);
    }
    const kind = this.find(target)?.kind;
    if (kind !== 'file' && kind !== 'hardlink')
      throw refuseMember(name, `hard link to ${JSON.stringify(linkname)}, which is not a regular file earlier in the archive`);
  }

  /** The node of a name, or undefined when the archive has nothing there. */
  private find(parts: string[]): NameNode | undefined {
    let node: NameNode | undefined = this.root;
    for (const part of parts) node = node?.children?.get(part);
    return node;
  }

  /** The node of a name, made with its parents where missing. */
  private place(parts: string[]): NameNode {
    let node = this.root;
    for (const part of parts) {
      node.children ??= new Map();
      let child = node.children.get(part);
      if (!child) node.children.set(part, (child = {}));
      node = child;
    }
    return node;
  }

  private count(m: TarMember, root: boolean): void {
    const s = this.summary;
    if (m.type === 'file') {
      s.files++;
      s.bytes += m.size;
    } else if (m.type === 'directory') {
      if (root) s.hasRoot = true;
      else s.directories++;
    } else if (m.type === 'symlink') s.symlinks++;
    else s.hardlinks++;
  }
}
