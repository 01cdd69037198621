/**
 * The walk of an extracted download before it is placed: what is on the disk decides, whatever
 * the archive checks concluded (the differential test covers the archives themselves).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { linkSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { checkExtractedTree } from './tree-check.js';

function withTree(build: (root: string, outside: string) => void, check: (root: string) => void): void {
  const work = mkdtempSync(path.join(tmpdir(), 'warren-tree-'));
  try {
    const root = path.join(work, 'root');
    mkdirSync(path.join(root, 'x'), { recursive: true });
    writeFileSync(path.join(work, 'outside'), 'not ours');
    build(root, path.join(work, 'outside'));
    check(root);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

test('a tree of files, directories, hard links and symlinks that stay inside passes', () => {
  withTree(
    (root) => {
      writeFileSync(path.join(root, 'x/f'), 'f');
      linkSync(path.join(root, 'x/f'), path.join(root, 'h'));
      symlinkSync('..', path.join(root, 'x/up'));
      symlinkSync('x/up/x/f', path.join(root, 's'));
      symlinkSync('nothere', path.join(root, 'dangling'));
    },
    (root) => checkExtractedTree(root),
  );
});

test('a symlink leading out through another symlink of the tree is refused', () => {
  withTree(
    (root) => {
      symlinkSync('..', path.join(root, 'x/up'));
      symlinkSync('x/up/..', path.join(root, 's1'));
    },
    (root) => assert.throws(() => checkExtractedTree(root), /"s1": symlink: its target "x\/up\/\.\." has '\.\.' after a name/),
  );
});

test('an absolute symlink, a FIFO and a hard link to a file outside the tree are refused', () => {
  withTree(
    (root) => symlinkSync('/etc', path.join(root, 'x/abs')),
    (root) => assert.throws(() => checkExtractedTree(root), /"x\/abs": symlink: points to the absolute path/),
  );
  withTree(
    (root) => execFileSync('mkfifo', [path.join(root, 'x/fifo')]),
    (root) => assert.throws(() => checkExtractedTree(root), /"x\/fifo": extracted as something other/),
  );
  withTree(
    (root, outside) => linkSync(outside, path.join(root, 'x/h')),
    (root) => assert.throws(() => checkExtractedTree(root), /"x\/h": a file with 1 hard link\(s\) outside/),
  );
});
