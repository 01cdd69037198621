import { test } from 'node:test';
import assert from 'node:assert/strict';
import { collect, jsonText, keyValues, metadataText, nonNegativeInt, positiveInt, positiveNumber, safe, sandboxRows, table } from './output.js';
import type { SandboxInfo } from '@warren/sdk';

test('safe shows C0, DEL, C1, bidi controls and line separators as visible escapes', () => {
  assert.equal(safe('a\x1b]0;pwned\x07b'), 'a\\x1b]0;pwned\\x07b');
  assert.equal(safe('\x1b[2J\x1b[H'), '\\x1b[2J\\x1b[H');
  assert.equal(safe('\u009b2J \u009d0;t\u009c'), '\\u009b2J \\u009d0;t\\u009c');
  assert.equal(safe('x\x00y\x7fz\u0080\u009f'), 'x\\x00y\\x7fz\\u0080\\u009f');
  assert.equal(safe('line1\nline2\r\tend'), 'line1\\nline2\\r\\tend');
  assert.equal(safe('abc\u202edcba\u202c \u2066i\u2069 \u200e\u200f\u061c'), 'abc\\u202edcba\\u202c \\u2066i\\u2069 \\u200e\\u200f\\u061c');
  assert.equal(safe('a\u2028b\u2029c'), 'a\\u2028b\\u2029c');
});

test('safe leaves printable text alone, other scripts and emoji included', () => {
  const text = 'task=fix-123 owner="A. B." path=/home/user ünïcödé 日本語 العربية 🙂 back\\slash ~';
  assert.equal(safe(text), text);
  assert.equal(safe(''), '');
  // U+00A0 (no-break space) and later Latin-1 are printable, just past the C1 range.
  assert.equal(safe('\u00a0\u00e9'), '\u00a0\u00e9');
});

test('safe keeps tabs only when asked (program output lines)', () => {
  assert.equal(safe('a\tb\x1b[31m', { keepTabs: true }), 'a\tb\\x1b[31m');
  assert.equal(safe('a\nb', { keepTabs: true }), 'a\\nb');
});

test('nothing safe returns can drive a terminal', () => {
  let all = '';
  for (let c = 0; c < 0x3000; c++) all += String.fromCharCode(c);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: looking for control characters is the point
  assert.doesNotMatch(safe(all), /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/);
});

test('tables escape every cell, so a cell never holds a raw newline or escape', () => {
  const out = table([
    ['KEY', 'VALUE'],
    ['a\nb', '\u009b2J'],
  ]);
  assert.equal(out, 'KEY   VALUE\na\\nb  \\u009b2J\n');
  const info = {
    id: 'sb-1',
    state: 'running',
    template: 'base',
    createdAt: '2024-05-01T00:00:00.000Z',
    expiresAt: '2024-05-01T01:00:00.000Z',
    metadata: { t: '\x1b]0;owned\x07' },
  } as unknown as SandboxInfo;
  assert.match(sandboxRows([info]), /t=\\x1b\]0;owned\\x07$/m);
});

test('jsonText is exact JSON with DEL, C1 and bidi controls as \\u escapes', () => {
  const value = { m: { k: '\x1b[2J\u009b2J\u009d0;x\u009c\u202e\x7f\n', plain: 'ü 日本' } };
  const text = jsonText(value, 2);
  assert.deepEqual(JSON.parse(text), value, 'parses back to the same value');
  // biome-ignore lint/suspicious/noControlCharactersInRegex: looking for control characters is the point
  assert.doesNotMatch(text.replace(/\n/g, ''), /[\u0000-\u001f\u007f-\u009f\u202a-\u202e]/);
  assert.match(text, /\\u009b2J\\u009d0;x\\u009c\\u202e\\u007f\\n/);
  assert.equal(jsonText({ a: 1 }), '{"a":1}');
});

test('tables pad every column to its widest cell, two spaces apart, with no trailing blanks', () => {
  assert.equal(
    table([
      ['A', 'LONGER', 'C'],
      ['wide cell', 'x', ''],
      ['', '', 'last'],
    ]),
    'A          LONGER  C\nwide cell  x\n                   last\n',
  );
  assert.equal(table([['ONLY']]), 'ONLY\n');
});

test('sandbox rows: times as "YYYY-MM-DD HH:MM:SS", metadata as k=v joined by commas', () => {
  const info = {
    id: 'sb-1',
    state: 'hibernated',
    template: 'node-dev',
    createdAt: '2024-05-01T09:08:07.654Z',
    expiresAt: '2024-05-02T09:08:07.654Z',
    metadata: { task: 'fix-1', owner: 'a b' },
  } as unknown as SandboxInfo;
  assert.equal(
    sandboxRows([info]),
    'ID    STATE       TEMPLATE  CREATED              EXPIRES              METADATA\nsb-1  hibernated  node-dev  2024-05-01 09:08:07  2024-05-02 09:08:07  task=fix-1,owner=a b\n',
  );
  assert.equal(sandboxRows([]), 'ID  STATE  TEMPLATE  CREATED  EXPIRES  METADATA\n');
  assert.equal(metadataText({ a: '1', b: '' }, ', '), 'a=1, b=');
  assert.equal(metadataText({}, ','), '');
});

test('keyValues splits at the first =, keeps empty values, refuses a missing key or =', () => {
  assert.deepEqual(keyValues(['A=B', 'URL=http://x/?a=b', 'EMPTY=', 'A=again'], '--env'), { A: 'again', URL: 'http://x/?a=b', EMPTY: '' });
  assert.deepEqual(keyValues([], '--env'), {});
  assert.throws(() => keyValues(['NOEQ'], '--env'), { message: "--env must be KEY=VALUE, got 'NOEQ'" });
  assert.throws(() => keyValues(['=v'], '--metadata'), { message: "--metadata must be KEY=VALUE, got '=v'" });
  assert.deepEqual(collect('b', collect('a', [])), ['a', 'b']);
});

test('option parsers: positive integers, integers from 0, numbers above 0; the message names the option and the value', () => {
  const int = positiveInt('--ttl');
  assert.equal(int('60'), 60);
  for (const bad of ['0', '-1', '1.5', 'abc', '']) assert.throws(() => int(bad), { message: `--ttl must be a positive integer, got '${bad}'` });
  const size = nonNegativeInt('--size');
  assert.equal(size('0'), 0);
  assert.equal(size('64'), 64);
  for (const bad of ['-1', '2.5', 'x', '', ' ']) assert.throws(() => size(bad), { message: `--size must be an integer of at least 0, got '${bad}'` });
  const num = positiveNumber('--cpus');
  assert.equal(num('0.5'), 0.5);
  assert.equal(num('2'), 2);
  for (const bad of ['0', '-0.5', 'NaN', 'Infinity', '', ' ', 'two']) {
    assert.throws(() => num(bad), { message: `--cpus must be a number above 0, got '${bad}'` });
  }
});
