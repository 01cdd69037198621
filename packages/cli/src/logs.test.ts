import { test } from 'node:test';
import assert from 'node:assert/strict';
import { logLine } from './logs.js';

test('logs: a line shows time, level, message and fields, with stacks indented and controls escaped', () => {
  const text = logLine({
    time: Date.UTC(2026, 0, 2, 3, 4, 5),
    level: 50,
    msg: 'request failed',
    name: 'warrend',
    pid: 1,
    hostname: 'h',
    requestId: 'r1',
    path: '/v1/sandboxes',
    code: 'internal',
    err: 'runsc said \u001b]0;owned\u0007',
    stack: 'Error: x\n    at y',
    details: { n: 1 },
  });
  assert.equal(
    text,
    [
      '2026-01-02T03:04:05.000Z ERROR request failed requestId=r1 path=/v1/sandboxes code=internal err=runsc said \\x1b]0;owned\\x07 details={"n":1}',
      '  stack:',
      '    Error: x',
      '        at y',
    ].join('\n'),
  );
});
