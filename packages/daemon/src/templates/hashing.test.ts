import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, lstatSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { hashSource } from './hashing.js';

/** The definition, one entry after the other: what the cache keys of built layers were made with. */
function reference(src: string): string {
  const h = createHash('sha256');
  const entry = (abs: string, rel: string) => {
    const st = lstatSync(abs);
    const mode = (st.mode & 0o7777).toString(8);
    if (st.isSymbolicLink()) h.update(`L ${rel} ${readlinkSync(abs)}\0`);
    else if (st.isDirectory()) {
      h.update(`D ${rel} ${mode}\0`);
      for (const name of readdirSync(abs).sort()) entry(path.join(abs, name), `${rel}/${name}`);
    } else if (st.isFile()) {
      h.update(`F ${rel} ${mode} ${st.size}\0`);
      h.update(readFileSync(abs));
    } else h.update(`O ${rel} ${mode} ${st.rdev}\0`);
  };
  entry(src, '.');
  return h.digest('hex');
}

test('hashSource reads small files ahead in parallel and still hashes in tree order, as before', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-hash-'));
  try {
    mkdirSync(path.join(dir, 'many'));
    // More small files than the read-ahead window, with big ones (streamed) among them.
    for (let i = 0; i < 100; i++) writeFileSync(path.join(dir, 'many', `f${String(i).padStart(3, '0')}`), `file ${i}\n`.repeat(i + 1));
    writeFileSync(path.join(dir, 'many', 'f050-big'), Buffer.alloc(3 << 20, 7));
    writeFileSync(path.join(dir, 'big'), Buffer.alloc((1 << 20) + 1, 1));
    writeFileSync(path.join(dir, 'empty'), '');
    symlinkSync('many/f001', path.join(dir, 'link'));
    const expected = reference(dir);
    assert.equal(await hashSource(dir), expected);
    assert.equal(await hashSource(path.join(dir, 'big')), reference(path.join(dir, 'big')));
    // Any change of a byte, a name or a mode changes it.
    writeFileSync(path.join(dir, 'many', 'f099'), 'changed');
    assert.notEqual(await hashSource(dir), expected);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
