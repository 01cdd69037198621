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
    const [hello, data, end, big] = out;
    assert.ok(hello && data && end && big);
    assert.deepEqual(JSON.parse(hello.payload.toString()), { id: 1, op: 'hello' });
    assert.deepEqual([...data.payload], [0, 1, 2, 255]);
    assert.equal(data.stream, 7);
    assert.equal(end.kind, FrameKind.End);
    assert.equal(end.payload.length, 0);
    assert.equal(big.payload.length, 100_000);
  }
});

test('a corrupt length is rejected instead of buffering forever', () => {
  const decoder = new FrameDecoder();
  const bad = Buffer.alloc(9);
  bad.writeUInt32BE(0xffffffff, 0);
  assert.throws(() => decoder.push(bad), FrameDecodeError);
});

test('payloads stay intact after later pushes, and small ones do not pin their chunk', () => {
  const big = Buffer.alloc(300_000);
  for (let i = 0; i < big.length; i++) big[i] = i % 251;
  const wire = Buffer.concat([
    encodeFrame(FrameKind.Data, 1, Buffer.from('tiny')),
    encodeFrame(FrameKind.Data, 2, big),
    encodeFrame(FrameKind.Data, 3, Buffer.from('tail')),
  ]);
  for (const step of [2, 5, 65_536, 100_000]) {
    const decoder = new FrameDecoder();
    const out = [];
    for (let at = 0; at < wire.length; at += step) out.push(...decoder.push(Buffer.from(wire.subarray(at, at + step))));
    assert.deepEqual(
      out.map((f) => f.stream),
      [1, 2, 3],
      `step ${step}`,
    );
    const [tiny, spanning, tail] = out;
    assert.ok(tiny && spanning && tail);
    assert.equal(tiny.payload.toString(), 'tiny');
    assert.ok(spanning.payload.equals(big), `step ${step}`);
    assert.equal(tail.payload.toString(), 'tail');
    if (step >= 65_536) assert.ok(tiny.payload.buffer.byteLength <= 8192, 'small payload copied out of its chunk');
  }
});

test('a corrupt length split across pushes is rejected', () => {
  const decoder = new FrameDecoder();
  assert.deepEqual(decoder.push(Buffer.from([0xff, 0xff])), []);
  assert.throws(() => decoder.push(Buffer.from([0xff, 0xff, 0, 0, 0, 0, 0])), FrameDecodeError);
});

test('with reuse, spanning frames are assembled in one buffer and still decode right', () => {
  const a = Buffer.alloc(200_000, 1);
  const b = Buffer.alloc(150_000, 2);
  const wire = Buffer.concat([encodeFrame(FrameKind.Data, 1, a), encodeFrame(FrameKind.Data, 2, b)]);
  const decoder = new FrameDecoder({ reuse: true });
  const seen: Array<[number, number, number | undefined]> = [];
  for (let at = 0; at < wire.length; at += 65_536) {
    // Consumed during the push, as the agent does.
    for (const f of decoder.push(wire.subarray(at, at + 65_536))) seen.push([f.stream, f.payload.length, f.payload.at(-1)]);
  }
  assert.deepEqual(seen, [
    [1, 200_000, 1],
    [2, 150_000, 2],
  ]);
});

test('with pieces, Data frames of accepted streams come out as views of each chunk, others whole', () => {
  const big = Buffer.alloc(300_000);
  for (let i = 0; i < big.length; i++) big[i] = i % 251;
  const wire = Buffer.concat([
    encodeFrame(FrameKind.Data, 1, big),
    encodeFrame(FrameKind.Message, 0, '{"event":"x"}'),
    encodeFrame(FrameKind.Data, 2, big),
    encodeFrame(FrameKind.Data, 1, Buffer.alloc(0)),
    encodeFrame(FrameKind.Data, 1, Buffer.from('tail')),
    encodeFrame(FrameKind.End, 1),
  ]);
  for (const step of [1, 7, 9, 10, 4096, 65_536, 100_000, wire.length]) {
    const decoder = new FrameDecoder({ pieces: (stream) => stream === 1 });
    const out = [];
    for (let at = 0; at < wire.length; at += step) out.push(...decoder.push(Buffer.from(wire.subarray(at, at + step))));
    const of1 = out.filter((f) => f.stream === 1 && f.kind === FrameKind.Data);
    assert.ok(Buffer.concat(of1.map((f) => f.payload)).equals(Buffer.concat([big, Buffer.from('tail')])), `step ${step}`);
    if (step < 300_000) assert.ok(of1.length > 2, `step ${step}: stream 1 came in pieces`);
    // Stream 2 takes no pieces: its frame comes out whole, in order with the rest.
    const kinds = out.filter((f) => f.stream !== 1 || f.kind !== FrameKind.Data).map((f) => [f.kind, f.stream, f.payload.length]);
    assert.deepEqual(kinds, [
      [FrameKind.Message, 0, 13],
      [FrameKind.Data, 2, 300_000],
      [FrameKind.End, 1, 0],
    ]);
    const whole = out.find((f) => f.stream === 2);
    assert.ok(whole?.payload.equals(big), `step ${step}`);
  }
});

test('with pieces, a Data frame that claims more than a frame may hold is refused, whole or split', () => {
  // A hostile guest's header: Data kind on a stream that takes pieces, length 4 GiB.
  const header = Buffer.alloc(9);
  header.writeUInt32BE(0xffffffff, 0);
  header.writeUInt8(FrameKind.Data, 4);
  header.writeUInt32BE(1, 5);
  assert.throws(() => new FrameDecoder({ pieces: () => true }).push(Buffer.concat([header, Buffer.alloc(64)])), FrameDecodeError);
  const split = new FrameDecoder({ pieces: () => true });
  assert.deepEqual(split.push(header.subarray(0, 3)), []);
  assert.throws(() => split.push(header.subarray(3)), FrameDecodeError);
});
