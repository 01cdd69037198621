import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Logger } from 'pino';
import { ShellStock, type Shell } from './shells.js';

const quietLog = { warn: () => undefined, debug: () => undefined } as unknown as Logger;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function stock(opts: { perShape?: number; maxShapes?: number; usable?: (shape: string) => boolean } = {}) {
  let n = 0;
  const made: Shell[] = [];
  const discarded: Array<{ id: string; why: string }> = [];
  const s = new ShellStock<Shell>({
    perShape: opts.perShape ?? 2,
    idleMs: 60_000,
    ...(opts.maxShapes ? { maxShapes: opts.maxShapes } : {}),
    make: async (shape) => {
      await sleep(5);
      const shell = { id: `shell-${++n}`, shape };
      made.push(shell);
      return shell;
    },
    discard: async (shell, why) => {
      discarded.push({ id: shell.id, why });
    },
    usable: opts.usable ?? (() => true),
    log: quietLog,
  });
  return { s, made, discarded };
}

test('shells: made for wanted shapes once restores are quiet, taken one by one, refilled', async () => {
  const { s, made } = stock();
  try {
    assert.equal(s.take('A'), undefined, 'nothing ready at first; asking makes some');
    await sleep(400);
    assert.equal(s.count(), 2);
    assert.ok(made.every((m) => m.shape === 'A'));
    const first = s.take('A');
    assert.equal(first?.shape, 'A');
    assert.equal(s.take('B'), undefined, 'another shape has its own');
    await sleep(400);
    assert.equal(s.count(), 4, 'A refilled to 2, B made 2');
  } finally {
    await s.close();
  }
});

test('shells: none are made while a restore is in flight', async () => {
  const { s, made } = stock();
  try {
    const done = s.hold();
    s.want('A');
    await sleep(400);
    assert.equal(made.length, 0, 'held back by the restore in flight');
    done();
    await sleep(400);
    assert.equal(made.length, 2);
  } finally {
    await s.close();
  }
});

test('shells: beyond maxShapes the least recently wanted shape loses its shells; close discards the rest', async () => {
  const { s, discarded } = stock({ perShape: 1, maxShapes: 2 });
  s.want('A');
  await sleep(300);
  s.want('B');
  await sleep(300);
  s.want('A'); // A is now the more recent one
  s.want('C');
  await sleep(300);
  assert.deepEqual(
    discarded.map((d) => d.id),
    ['shell-2'],
    'B was the least recently wanted',
  );
  assert.match(discarded[0]?.why ?? '', /more recently restored/);
  assert.equal(s.count(), 2);
  await s.close();
  assert.equal(discarded.length, 3);
  assert.equal(s.take('A'), undefined, 'a closed stock gives nothing');
});

test('shells: perShape 0 turns them off', async () => {
  const { s, made } = stock({ perShape: 0 });
  assert.equal(s.take('A'), undefined);
  s.want('A');
  await sleep(300);
  assert.equal(made.length, 0);
  await s.close();
});
