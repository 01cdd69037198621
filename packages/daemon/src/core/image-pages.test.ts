import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DamagedImageError, isPacked, packPages, unpackImage } from './image-pages.js';

/** An image directory as runsc writes it: compressible pages with some random ones. */
function fakeImage(root: string): { image: string; pages: Buffer } {
  const image = path.join(root, 'hibernated', 'sb-x', 'image');
  mkdirSync(image, { recursive: true });
  const pages = Buffer.concat([Buffer.alloc(4 << 20, 7), randomBytes(64 << 10), Buffer.alloc(1 << 20, 3)]);
  writeFileSync(path.join(image, 'pages.img'), pages);
  writeFileSync(path.join(image, 'checkpoint.img'), 'state');
  writeFileSync(path.join(image, 'pages_meta.img'), 'meta');
  return { image, pages };
}

function withRoot(fn: (root: string) => Promise<void>): () => Promise<void> {
  return async () => {
    const root = mkdtempSync(path.join(tmpdir(), 'image-pages-'));
    try {
      await fn(root);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  };
}

test(
  'pack replaces pages.img by a smaller .zst, unpack gives it back in a scratch copy and leaves the image alone',
  withRoot(async (root) => {
    const { image, pages } = fakeImage(root);
    await packPages(image);
    assert.ok(isPacked(image));
    assert.deepEqual(readdirSync(image).sort(), ['checkpoint.img', 'pages.img.zst', 'pages_meta.img']);
    await packPages(image); // idempotent
    const scratch = path.join(root, 'restores');
    const a = await unpackImage(image, scratch);
    const b = await unpackImage(image, scratch); // two restores of one image at once
    assert.notEqual(a.path, b.path);
    for (const u of [a, b]) {
      assert.ok(readFileSync(path.join(u.path, 'pages.img')).equals(pages));
      assert.equal(readFileSync(path.join(u.path, 'checkpoint.img'), 'utf8'), 'state');
    }
    assert.deepEqual(readdirSync(image).sort(), ['checkpoint.img', 'pages.img.zst', 'pages_meta.img'], 'unpacking writes nothing into the image');
    await a.release();
    await b.release();
    assert.deepEqual(readdirSync(scratch), []);
  }),
);

test(
  'what a crash while packing leaves is a valid image, and the next pack finishes the job',
  withRoot(async (root) => {
    const { image, pages } = fakeImage(root);
    // Killed while zstd wrote: a partial .tmp beside the unpacked file.
    writeFileSync(path.join(image, 'pages.img.zst.tmp'), 'partial');
    const asIs = await unpackImage(image, path.join(root, 'restores'));
    assert.equal(asIs.path, image, 'an unpacked image restores as it is');
    await asIs.release();
    assert.ok(existsSync(path.join(image, 'pages.img')), 'release of an unpacked image removes nothing');
    await packPages(image);
    // Killed between the rename and the unlink: both files; the packed one is used.
    writeFileSync(path.join(image, 'pages.img'), 'stale');
    const u = await unpackImage(image, path.join(root, 'restores'));
    assert.ok(readFileSync(path.join(u.path, 'pages.img')).equals(pages));
    assert.equal(existsSync(path.join(u.path, 'pages.img.zst.tmp')), false, 'a .tmp is not part of the image');
    await u.release();
    await packPages(image);
    assert.equal(existsSync(path.join(image, 'pages.img')), false);
  }),
);

test(
  'a truncated, corrupt or foreign packed file is a DamagedImageError that says why, and leaves no scratch',
  withRoot(async (root) => {
    const { image } = fakeImage(root);
    await packPages(image);
    const packed = path.join(image, 'pages.img.zst');
    const good = readFileSync(packed);
    const bad: [string, () => void][] = [
      ['truncated', () => truncateSync(packed, Math.floor(good.length / 2))],
      [
        'corrupt',
        () => {
          const b = Buffer.from(good);
          b.fill(0xa5, Math.floor(b.length / 2), Math.floor(b.length / 2) + 16);
          writeFileSync(packed, b);
        },
      ],
      ['foreign', () => writeFileSync(packed, randomBytes(1000))],
      ['empty', () => writeFileSync(packed, '')],
    ];
    for (const [what, damage] of bad) {
      damage();
      await assert.rejects(
        unpackImage(image, path.join(root, 'restores')),
        (e: unknown) => e instanceof DamagedImageError && e.code === 'failed_precondition' && /damaged/.test(e.message) && e.why.length > 0,
        what,
      );
      assert.deepEqual(readdirSync(path.join(root, 'restores')), [], `${what}: scratch left`);
      writeFileSync(packed, good);
    }
  }),
);
