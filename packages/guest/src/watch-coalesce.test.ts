import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Coalescer } from './watch-coalesce.js';

test('Coalescer: a burst on one path is one change, the last that says how it ends', () => {
  const c = new Coalescer(100);
  c.add({ type: 'create', path: '/a', isDir: false });
  for (let i = 0; i < 50; i++) c.add({ type: 'write', path: '/a', isDir: false });
  assert.deepEqual(c.take(), { changes: [{ type: 'create', path: '/a', isDir: false }], overflow: false });
  c.add({ type: 'write', path: '/a' });
  c.add({ type: 'remove', path: '/a' });
  assert.deepEqual(c.take().changes, [{ type: 'remove', path: '/a' }]);
  assert.deepEqual(c.take(), { changes: [], overflow: false });
});

test("Coalescer: order follows each path's last change", () => {
  const c = new Coalescer(100);
  c.add({ type: 'create', path: '/a' });
  c.add({ type: 'create', path: '/b' });
  c.add({ type: 'remove', path: '/a' });
  assert.deepEqual(
    c.take().changes.map((x) => x.path),
    ['/b', '/a'],
  );
});

test("Coalescer: a renamed path that changes again still reports the old name's removal", () => {
  const c = new Coalescer(100);
  c.add({ type: 'rename', path: '/new', oldPath: '/old', isDir: false });
  c.add({ type: 'write', path: '/new' });
  assert.deepEqual(c.take().changes, [{ type: 'rename', path: '/new', oldPath: '/old', isDir: false }]);
  c.add({ type: 'rename', path: '/new', oldPath: '/old', isDir: false });
  c.add({ type: 'remove', path: '/new', isDir: false });
  assert.deepEqual(c.take().changes, [
    { type: 'remove', path: '/old', isDir: false },
    { type: 'remove', path: '/new', isDir: false },
  ]);
});

test('Coalescer: past the cap it reports an overflow once and keeps nothing', () => {
  const c = new Coalescer(3);
  for (let i = 0; i < 10; i++) c.add({ type: 'create', path: `/f${i}` });
  assert.equal(c.size, 1);
  assert.deepEqual(c.take(), { changes: [], overflow: true });
  c.add({ type: 'create', path: '/x' });
  assert.deepEqual(c.take(), { changes: [{ type: 'create', path: '/x' }], overflow: false });
});
