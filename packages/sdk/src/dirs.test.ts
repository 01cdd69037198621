/**
 * The host side of directory transfers without a daemon: the packer's output passes the
 * TarChecker and extracts back to the same tree (long and non-ASCII names through pax
 * records, symlinks, modes, times), and GNU tar reads it as well; exists policies on the host.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { extractDir, packDir } from './dirs.js';

function tree(root: string): void {
  const long = `${'d'.repeat(90)}/${'n'.repeat(120)}`;
  mkdirSync(path.join(root, long), { recursive: true });
  writeFileSync(path.join(root, long, 'ünïcødé-文件.txt'), 'long and unicode\n');
  writeFileSync(path.join(root, 'x.sh'), '#!/bin/sh\n');
  chmodSync(path.join(root, 'x.sh'), 0o750);
  utimesSync(path.join(root, 'x.sh'), 1_500_000_000, 1_500_000_000);
  symlinkSync(`${long}/ünïcødé-文件.txt`, path.join(root, 'long-link'));
  mkdirSync(path.join(root, 'empty'));
}

function listing(root: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const name of readdirSync(path.join(root, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(path.join(root, r));
      if (st.isSymbolicLink()) out.push(`${r} -> ${readlinkSync(path.join(root, r))}`);
      else if (st.isDirectory()) {
        out.push(`${r}/`);
        walk(r);
      } else out.push(`${r} ${(st.mode & 0o777).toString(8)} ${Math.floor(st.mtimeMs / 1000)} ${readFileSync(path.join(root, r), 'utf8').length}`);
    }
  };
  walk('');
  return out;
}

test('packDir output extracts back to the same tree, through the checker, and GNU tar reads it', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'warren-pack-'));
  try {
    const src = path.join(work, 'src');
    tree(src);
    await extractDir(packDir(src), path.join(work, 'out'));
    assert.deepEqual(listing(path.join(work, 'out')), listing(src));
    const chunks: Buffer[] = [];
    for await (const c of packDir(src)) chunks.push(c as Buffer);
    mkdirSync(path.join(work, 'gnu'));
    execFileSync('tar', ['-x', '-p', '-f', '-', '-C', path.join(work, 'gnu')], { input: Buffer.concat(chunks) });
    assert.deepEqual(listing(path.join(work, 'gnu')), listing(src));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test('extractDir: merge keeps what is there, replace drops it, error refuses', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'warren-pack-'));
  try {
    const src = path.join(work, 'src');
    mkdirSync(src);
    writeFileSync(path.join(src, 'a'), 'new');
    const out = path.join(work, 'out');
    mkdirSync(out);
    writeFileSync(path.join(out, 'old'), 'old');
    await extractDir(packDir(src), out);
    assert.deepEqual(readdirSync(out).sort(), ['a', 'old']);
    await assert.rejects(extractDir(packDir(src), out, 'error'), /already exists/);
    await extractDir(packDir(src), out, 'replace');
    assert.deepEqual(readdirSync(out), ['a']);
    assert.deepEqual(readdirSync(work).sort(), ['out', 'src'], 'no temporary directory left beside');
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test('extractDir merge: two downloads cannot make a link lead out through each other, in either order; nothing moved', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'warren-pack-'));
  try {
    const m1 = path.join(work, 'm1');
    const m2 = path.join(work, 'm2');
    mkdirSync(m1);
    mkdirSync(m2);
    symlinkSync('.', path.join(m1, 'd'));
    symlinkSync('d/d/d/../../..', path.join(m2, 'e'));
    writeFileSync(path.join(m2, 'f'), 'second');
    const out = path.join(work, 'out');
    await extractDir(packDir(m1), out);
    const before = listing(out);
    await assert.rejects(extractDir(packDir(m2), out), /refused tar member "e": symlink: its target "d\/d\/d\/\.\.\/\.\.\/\.\." has '\.\.' after a name/);
    assert.deepEqual(listing(out), before, 'the destination is unchanged');
    assert.deepEqual(readdirSync(work).sort(), ['m1', 'm2', 'out'], 'no temporary directory left beside');
    // The other order: e first, alone, would stay inside while d is no link; it is refused then,
    // before a later `d -> .` could make it lead two levels up.
    await assert.rejects(extractDir(packDir(m2), path.join(work, 'other')), /has '\.\.' after a name/);
    assert.deepEqual(readdirSync(work).sort(), ['m1', 'm2', 'out']);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test("extractDir merge: links through the destination's directories and links that stay inside are placed; its own links never fail a download", async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'warren-pack-'));
  try {
    const out = path.join(work, 'out');
    mkdirSync(path.join(out, 'lib/v1'), { recursive: true });
    writeFileSync(path.join(out, 'lib/v1/real'), 'r');
    symlinkSync('lib/v1', path.join(out, 'cur'));
    symlinkSync('/', path.join(out, 'root')); // the user's own link out
    const src = path.join(work, 'src');
    mkdirSync(path.join(src, 'lib/v2'), { recursive: true });
    symlinkSync('../../cur/real', path.join(src, 'lib/v2/real'));
    symlinkSync('lib/v2/real', path.join(src, 'x'));
    await extractDir(packDir(src), out);
    assert.equal(readFileSync(path.join(out, 'x'), 'utf8'), 'r');
    const via = path.join(work, 'via');
    mkdirSync(via);
    symlinkSync('root/etc', path.join(via, 'etc'));
    await assert.rejects(extractDir(packDir(via), out), /refused tar member "etc": symlink: its target "root\/etc" leads outside the destination/);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});
