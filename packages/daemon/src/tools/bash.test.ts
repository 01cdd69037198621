import { test } from 'node:test';
import assert from 'node:assert/strict';
import { keepTail } from './bash.js';

test('keepTail: short output is returned as is', () => {
  assert.deepEqual(keepTail('abc\n', 10, 4, 'stdout'), { text: 'abc\n', cut: false });
  assert.deepEqual(keepTail('abc\n', 10, undefined, 'stdout'), { text: 'abc\n', cut: false });
});

test('keepTail: keeps the last characters and says how many of all were dropped', () => {
  // The sandbox kept 8 characters of 1000 and counted all 1000.
  assert.deepEqual(keepTail('abcdefgh', 5, 1000, 'stderr'), { text: '[warren: 995 earlier characters of stderr cut; the last 5 follow]\ndefgh', cut: true });
});

test('keepTail: counts characters, not UTF-16 units, and never splits one', () => {
  const r = keepTail('a😀b😀c', 3, 5, 'stdout');
  assert.deepEqual(r, { text: '[warren: 2 earlier characters of stdout cut; the last 3 follow]\nb😀c', cut: true });
});
