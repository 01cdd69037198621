import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { resolveConfig } from '../config.js';
import { defaultPoolSize } from './default-pool.js';

function meminfo(availableMB: number): { file: string; done: () => void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'meminfo-'));
  const file = path.join(dir, 'meminfo');
  writeFileSync(file, `MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   ${availableMB * 1024} kB\n`);
  return { file, done: () => rmSync(dir, { recursive: true, force: true }) };
}

test('unset, the default pool is 2 with room for two default sandboxes above the reclaim level, else 0', () => {
  const big = meminfo(5120);
  const small = meminfo(5119);
  try {
    assert.equal(defaultPoolSize(undefined, 1024, big.file).size, 2);
    const none = defaultPoolSize(undefined, 1024, small.file);
    assert.equal(none.size, 0);
    assert.match(none.why, /MemAvailable 5119 MB < 5120 MB/);
  } finally {
    big.done();
    small.done();
  }
});

test('WARREN_DEFAULT_POOL wins over the memory rule; bad values name the variable', () => {
  assert.deepEqual(defaultPoolSize(0, 1024, '/nonexistent'), { size: 0, why: 'WARREN_DEFAULT_POOL' });
  const saved = process.env.WARREN_DEFAULT_POOL;
  try {
    for (const [text, size] of [
      ['0', 0],
      ['3', 3],
      [' 64 ', 64],
      ['', undefined],
    ] as const) {
      process.env.WARREN_DEFAULT_POOL = text;
      assert.equal(resolveConfig().defaultPool, size, `'${text}'`);
    }
    for (const bad of ['two', '-1', '1.5', '65', '0x2', '1e1']) {
      process.env.WARREN_DEFAULT_POOL = bad;
      assert.throws(() => resolveConfig(), /WARREN_DEFAULT_POOL must be a whole number from 0 to 64/, bad);
    }
  } finally {
    if (saved === undefined) delete process.env.WARREN_DEFAULT_POOL;
    else process.env.WARREN_DEFAULT_POOL = saved;
  }
});

test('WARREN_BAKE: all by default, start, 0; anything else is refused', () => {
  const saved = process.env.WARREN_BAKE;
  try {
    for (const [text, mode] of [
      ['', 'all'],
      ['1', 'all'],
      ['all', 'all'],
      ['start', 'start'],
      ['0', 'off'],
    ] as const) {
      process.env.WARREN_BAKE = text;
      assert.equal(resolveConfig().bake, mode, `'${text}'`);
    }
    process.env.WARREN_BAKE = 'yes';
    assert.throws(() => resolveConfig(), /WARREN_BAKE must be all \(the default\), start or 0/);
  } finally {
    if (saved === undefined) delete process.env.WARREN_BAKE;
    else process.env.WARREN_BAKE = saved;
  }
});
