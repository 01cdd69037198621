import { test } from 'node:test';
import assert from 'node:assert/strict';
import { OutputRing } from './output-ring.js';

test('keeps everything while it fits, from any offset', () => {
  const r = new OutputRing(8);
  r.push(Buffer.from('abc'));
  r.push(Buffer.from('de'));
  assert.deepEqual(r.since(0), { offset: 0, data: Buffer.from('abcde') });
  assert.deepEqual(r.since(3), { offset: 3, data: Buffer.from('de') });
  assert.deepEqual(r.since(99), { offset: 5, data: Buffer.alloc(0) });
});

test('wraps around and starts a replay at the oldest byte kept', () => {
  const r = new OutputRing(4);
  r.push(Buffer.from('abc'));
  r.push(Buffer.from('def'));
  assert.deepEqual(r.since(0), { offset: 2, data: Buffer.from('cdef') });
  assert.deepEqual(r.since(4), { offset: 4, data: Buffer.from('ef') });
  r.push(Buffer.from('0123456789'));
  assert.equal(r.total, 16);
  assert.deepEqual(r.since(0), { offset: 12, data: Buffer.from('6789') });
});
