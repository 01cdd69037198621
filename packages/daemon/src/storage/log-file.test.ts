import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { LogFile, levelNumber } from './log-file.js';

function withDir(fn: (dir: string) => Promise<void>): () => Promise<void> {
  return async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'logfile-'));
    try {
      await fn(dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
}

const line = (fields: Record<string, unknown>) => `${JSON.stringify({ level: 30, time: 1000, msg: 'm', ...fields })}\n`;

test(
  'log file: finds the lines of one request by exact id, oldest first',
  withDir(async (dir) => {
    const f = new LogFile(path.join(dir, 'w.log'));
    f.write(line({ requestId: 'abc', msg: 'first' }));
    f.write(line({ requestId: 'abcd', msg: 'other request with a longer id' }));
    f.write(line({ msg: 'mentions abc in the message only' }));
    f.write(line({ requestId: 'abc', msg: 'second', level: 50 }));
    const found = await f.search({ requestId: 'abc', limit: 10 });
    assert.deepEqual(
      found.entries.map((e) => e.msg),
      ['first', 'second'],
    );
    assert.equal(found.truncated, false);
    f.close();
  }),
);

test(
  'log file: level, since and limit keep the newest matching lines and say when older ones were left out',
  withDir(async (dir) => {
    const f = new LogFile(path.join(dir, 'w.log'));
    for (let i = 0; i < 25; i++) f.write(line({ msg: `n${i}`, time: 1000 + i, level: i % 2 ? 50 : 30 }));
    const errors = await f.search({ level: 'error', limit: 100 });
    assert.equal(errors.entries.length, 12);
    assert.ok(errors.entries.every((e) => e.level >= levelNumber('error')));
    const recent = await f.search({ since: 1020, limit: 100 });
    assert.deepEqual(
      recent.entries.map((e) => e.msg),
      ['n20', 'n21', 'n22', 'n23', 'n24'],
    );
    const newest = await f.search({ limit: 3 });
    assert.deepEqual(
      newest.entries.map((e) => e.msg),
      ['n22', 'n23', 'n24'],
    );
    assert.equal(newest.truncated, true);
    f.close();
  }),
);

test(
  'log file: rotates past its size into .1 and searches both; torn or foreign lines are ignored',
  withDir(async (dir) => {
    const file = path.join(dir, 'w.log');
    const f = new LogFile(file, 200);
    for (let i = 0; i < 6; i++) f.write(line({ msg: `r${i}`, requestId: 'rq' }));
    assert.ok(existsSync(`${file}.1`), 'no rotated file');
    assert.ok(readFileSync(file).length <= 200);
    appendFileSync(file, 'not json\n{"level":30,"time":5,"msg":"torn');
    const found = await f.search({ requestId: 'rq', limit: 100 });
    // Rotation keeps one previous file, so the oldest lines beyond it are gone by design.
    const msgs = found.entries.map((e) => e.msg);
    assert.deepEqual(msgs, [...msgs].sort());
    assert.equal(msgs.at(-1), 'r5');
    assert.ok(msgs.length >= 2, `too few lines survived rotation: ${msgs.join(',')}`);
    f.close();
    f.write(line({ msg: 'after close' }));
  }),
);

test('log file: levelNumber follows pino', () => {
  assert.equal(levelNumber('trace'), 10);
  assert.equal(levelNumber('info'), 30);
  assert.equal(levelNumber('fatal'), 60);
});
