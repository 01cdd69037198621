import { test } from 'node:test';
import assert from 'node:assert/strict';
import { OutputTail, countChars } from './tail.js';

test('countChars: ASCII fast path and UTF-8 sequences', () => {
  assert.equal(countChars(Buffer.from('hello')), 5);
  assert.equal(countChars(Buffer.from('é€😀x')), 4);
  assert.equal(countChars(Buffer.alloc(0)), 0);
});

test('OutputTail: keeps the last bytes over many chunks and counts every character', () => {
  const t = new OutputTail(10);
  for (let i = 0; i < 100; i++) t.push(Buffer.from(`${i % 10}`.repeat(3)));
  assert.equal(t.bytes().toString(), '6777888999');
  assert.equal(t.chars, 300);
});

test('OutputTail: the kept bytes start at a character boundary', () => {
  const t = new OutputTail(5);
  t.push(Buffer.from('aaa€€')); // € is 3 bytes: the last 5 bytes start inside the first €
  assert.equal(t.bytes().toString(), '€');
  assert.equal(t.chars, 5);
});
