/**
 * The last check of a download, after node-tar wrote it into a temporary directory and before
 * that directory is moved into place: a walk of what is actually on the disk, never following a
 * link (lstat), whatever the checks of the archive concluded. It refuses anything but regular
 * files, directories and symlinks; a symlink whose target, resolved through the tree's own
 * symlinks, is absolute or leads outside the tree; and a regular file that has links outside the
 * tree (a hard link the extractor made to a file elsewhere). Returns the tree's symlinks
 * (relative path -> target) for the check of a merge against its destination (merge-check.ts).
 */
import { lstatSync, readdirSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import { refuseMember, symlinkEscape } from '@warren/protocol';

export function checkExtractedTree(root: string): Map<string, string> {
  const links = new Map<string, string>();
  /** Files with more than one link: how many of their links the walk met. */
  const linked = new Map<string, { name: string; nlink: number; met: number }>();
  const walk = (rel: string): void => {
    for (const name of readdirSync(path.join(root, rel))) {
      const r = rel ? `${rel}/${name}` : name;
      const full = path.join(root, r);
      const st = lstatSync(full);
      if (st.isDirectory()) walk(r);
      else if (st.isSymbolicLink()) links.set(r, readlinkSync(full));
      else if (!st.isFile()) throw refuseMember(r, 'extracted as something other than a file, directory or symlink');
      else if (st.nlink > 1) {
        const key = `${st.dev}:${st.ino}`;
        const seen = linked.get(key) ?? { name: r, nlink: st.nlink, met: 0 };
        seen.met++;
        linked.set(key, seen);
      }
    }
  };
  walk('');
  for (const [r, target] of links) {
    const why = symlinkEscape(r, target, links);
    if (why) throw refuseMember(r, `symlink: ${why}`);
  }
  for (const f of linked.values()) {
    if (f.met !== f.nlink) throw refuseMember(f.name, `a file with ${f.nlink - f.met} hard link(s) outside the destination`);
  }
  return links;
}
