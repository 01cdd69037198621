/**
 * The check of a download that merges into an existing destination, before anything is moved
 * into it: each archive is checked only against itself, and what it merges into may already
 * hold links (with `..` only at the start of targets, links that each stay inside keep each
 * other inside; what is left is a new link leading out through one of the user's own). Every
 * symlink of the new tree is resolved again against the merged view, as placeDirectory's merge
 * would leave it: a path of the new tree is the new tree's entry, any other the destination's
 * existing one. Both trees are read with lstat and readlink only, one directory level at a time
 * from the root, so no link on either side is ever followed. A new link whose target goes out
 * through one of the destination's own links is refused too (conservative); the destination's
 * links alone never fail a download. The Python SDK does the same (warren/merge_check.py).
 */
import { lstatSync, readlinkSync, type Stats } from 'node:fs';
import path from 'node:path';
import { refuseMember, symlinkEscape } from '@warren/protocol';

/** What a merged path is: whether each tree has a directory there, and a symlink's target. */
interface Entry {
  newDir: boolean;
  oldDir: boolean;
  link?: string;
}

function lstatOrNull(p: string): Stats | null {
  try {
    return lstatSync(p);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw err;
  }
}

/** The merged view of `tmp` over `dest`, by relative path; memoized, so each path costs at most one lstat per tree. */
class MergedView {
  private entries = new Map<string, Entry | null>([['', { newDir: true, oldDir: true }]]);

  constructor(
    private tmp: string,
    private dest: string,
    private newLinks: ReadonlyMap<string, string>,
  ) {}

  /** The symlink target at `rel` in the merged view, if a symlink is there. */
  get(rel: string): string | undefined {
    return this.entry(rel)?.link;
  }

  private entry(rel: string): Entry | null {
    const known = this.entries.get(rel);
    if (known !== undefined) return known;
    const cut = rel.lastIndexOf('/');
    const parent = this.entry(cut < 0 ? '' : rel.slice(0, cut));
    let found: Entry | null = null;
    // Only under a directory of a tree is that tree looked at: never through a link of either.
    const fresh = parent?.newDir ? lstatOrNull(path.join(this.tmp, rel)) : null;
    const old = parent?.oldDir ? lstatOrNull(path.join(this.dest, rel)) : null;
    if (fresh) found = { newDir: fresh.isDirectory(), oldDir: fresh.isDirectory() && !!old?.isDirectory(), link: this.newLinks.get(rel) };
    else if (old) found = { newDir: false, oldDir: old.isDirectory(), link: old.isSymbolicLink() ? readlinkSync(path.join(this.dest, rel)) : undefined };
    this.entries.set(rel, found);
    return found;
  }
}

/**
 * Refuses (invalid_argument, naming the member) a symlink of the extracted `tmp` (its
 * symlinks: `links`, from checkExtractedTree) that, merged into the existing `dest`, would be
 * absolute or lead outside `dest`.
 */
export function checkMergedLinks(tmp: string, dest: string, links: ReadonlyMap<string, string>): void {
  const view = new MergedView(tmp, dest, links);
  for (const [rel, target] of links) {
    const why = symlinkEscape(rel, target, view);
    if (why) throw refuseMember(rel, `symlink: ${why}`);
  }
}
