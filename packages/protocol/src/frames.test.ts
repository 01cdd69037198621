import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FrameDecoder, FrameDecodeError, FrameKind, encodeFrame } from './frames.js';

test('frames survive arbitrary splitting of the byte stream', () => {
  const frames = [
    encodeFrame(FrameKind.Message, 0, JSON.stringify({ id: 1, op: 'hello' })),
    encodeFrame(FrameKind.Data, 7, Buffer.from([0, 1, 2, 255])),
    encodeFrame(FrameKind.End, 7),
    encodeFrame(FrameKind.Data, 9, Buffer.alloc(100_000, 0xab)),
  ];
  const wire = Buffer.concat(frames);
  for (const step of [1, 3, 9, 64, 4096, wire.length]) {
    const decoder = new FrameDecoder();
    const out = [];
    for (let at = 0; at < wire.length; at += step) out.push(...decoder.push(wire.subarray(at, at + step)));
    assert.equal(out.length, 4, `step ${step}`);
    assert.deepEqual(JSON.parse(out[0].payload.toString()), { id: 1, op: 'hello' });
    assert.deepEqual([...out[1].payload], [0, 1, 2, 255]);
    assert.equal(out[1].stream, 7);
    assert.equal(out[2].kind, FrameKind.End);
    assert.equal(out[2].payload.length, 0);
    assert.equal(out[3].payload.length, 100_000);
  }
});

test('a corrupt length is rejected instead of buffering forever', () => {
  const decoder = new FrameDecoder();
  const bad = Buffer.alloc(9);
  bad.writeUInt32BE(0xffffffff, 0);
  assert.throws(() => decoder.push(bad), FrameDecodeError);
});
