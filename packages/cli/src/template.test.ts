import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { progressPrinter } from './template.js';

test('build progress shows step descriptions and step output escaped, tabs kept', () => {
  let out = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      out += chunk.toString();
      done();
    },
  });
  const print = progressPrinter(sink);
  print({ type: 'step', step: 2, total: 3, kind: 'run', description: 'run \x1b]0;pwned\x07', cached: false });
  print({ type: 'log', step: 2, stream: 'stdout', line: 'col1\tcol2 \u009b2J\x1b[H\r' });
  assert.equal(out, '[2/3] run \\x1b]0;pwned\\x07\n    col1\tcol2 \\u009b2J\\x1b[H\\r\n');
});
