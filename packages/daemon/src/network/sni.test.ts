import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import { parseSni, scanClientHello } from './sni.js';

/** The first TLS record a real node client sends, captured by a loopback server that answers nothing. */
async function captureClientHello(options: tls.ConnectionOptions): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let resolveCapture!: (b: Buffer) => void;
  const captured = new Promise<Buffer>((resolve) => (resolveCapture = resolve));
  const server = net.createServer((socket) => {
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      const all = Buffer.concat(chunks);
      if (all.length >= 5 && all.length >= 5 + all.readUInt16BE(3)) {
        resolveCapture(all);
        socket.destroy();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  const client = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ...options });
  client.on('error', () => undefined); // the capture server hangs up mid-handshake on purpose
  try {
    return await captured;
  } finally {
    client.destroy();
    server.close();
  }
}

/** Re-frames a single-record ClientHello into records of at most `size` payload bytes. */
function fragment(hello: Buffer, size: number): Buffer {
  const body = hello.subarray(5);
  const records: Buffer[] = [];
  for (let at = 0; at < body.length; at += size) {
    const piece = body.subarray(at, at + size);
    const header = Buffer.from([0x16, 0x03, 0x01, 0, 0]);
    header.writeUInt16BE(piece.length, 3);
    records.push(header, piece);
  }
  return Buffer.concat(records);
}

/** A minimal ClientHello built by hand, for shapes a real client never sends. */
function handmadeHello(extensions: Buffer[]): Buffer {
  const ext = Buffer.concat(extensions);
  const body = Buffer.concat([
    Buffer.from([0x03, 0x03]),
    Buffer.alloc(32, 7),
    Buffer.from([0]), // session id
    Buffer.from([0, 2, 0x13, 0x01]), // one cipher suite
    Buffer.from([1, 0]), // compression: null
    u16(ext.length),
    ext,
  ]);
  const handshake = Buffer.concat([Buffer.from([1, 0, 0, 0]), body]);
  handshake.writeUIntBE(body.length, 1, 3);
  return Buffer.concat([Buffer.from([0x16, 0x03, 0x01]), u16(handshake.length), handshake]);
}

function sniExtension(...names: Array<[number, string]>): Buffer {
  const entries = Buffer.concat(names.map(([type, name]) => Buffer.concat([Buffer.from([type]), u16(name.length), Buffer.from(name, 'latin1')])));
  const data = Buffer.concat([u16(entries.length), entries]);
  return Buffer.concat([u16(0), u16(data.length), data]);
}

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
}

test('reads the SNI from real ClientHellos (TLS 1.3 and 1.2 clients)', async () => {
  const modern = await captureClientHello({ servername: 'Allowed.Example.test' });
  assert.deepEqual(scanClientHello(modern), { kind: 'client-hello', serverName: 'Allowed.Example.test' });
  const old = await captureClientHello({ servername: 'legacy.test', maxVersion: 'TLSv1.2' });
  assert.equal(parseSni(old), 'legacy.test');
});

test('a ClientHello without SNI is a complete hello with no name', async () => {
  // Node sends no SNI when connecting to an IP literal without a servername.
  const hello = await captureClientHello({});
  assert.deepEqual(scanClientHello(hello), { kind: 'client-hello', serverName: undefined });
});

test('every truncation of a real ClientHello is incomplete, never a wrong answer', async () => {
  const hello = await captureClientHello({ servername: 'allowed.test' });
  for (let n = 0; n < hello.length; n++) {
    assert.deepEqual(scanClientHello(hello.subarray(0, n)), { kind: 'incomplete' }, `prefix of ${n} bytes`);
  }
  // Bytes after the hello (a client that pipelines) do not change the answer.
  assert.equal(parseSni(Buffer.concat([hello, Buffer.from('trailing')])), 'allowed.test');
});

test('a ClientHello split across several TLS records is reassembled', async () => {
  const hello = await captureClientHello({ servername: 'split.test' });
  for (const size of [1, 3, 50]) {
    const split = fragment(hello, size);
    assert.equal(parseSni(split), 'split.test', `records of ${size} bytes`);
    assert.equal(scanClientHello(split.subarray(0, split.length - 1)).kind, 'incomplete');
  }
});

test('non-TLS first bytes are not TLS', () => {
  assert.equal(scanClientHello(Buffer.from('GET / HTTP/1.1\r\n')).kind, 'not-tls');
  assert.equal(scanClientHello(Buffer.from('SSH-2.0-OpenSSH_9.6\r\n')).kind, 'not-tls');
  assert.equal(scanClientHello(Buffer.alloc(0)).kind, 'incomplete');
});

test('garbage that starts like TLS is malformed, not "no SNI"', async () => {
  const hello = await captureClientHello({ servername: 'allowed.test' });
  const malformed = (b: Buffer) => assert.equal(scanClientHello(b).kind, 'malformed', b.subarray(0, 16).toString('hex'));
  malformed(Buffer.from([0x16, 0x02, 0x00, 0x00, 0x10])); // not version 3
  malformed(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x00])); // empty record
  malformed(Buffer.from([0x16, 0x03, 0x01, 0x50, 0x00])); // record longer than TLS allows
  malformed(Buffer.concat([Buffer.from([0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00])])); // ServerHello, not ClientHello
  // Handshake length claims more than the record holds, and the next record is not a handshake.
  const lying = Buffer.from(hello);
  lying.writeUIntBE(hello.readUIntBE(6, 3) + 100, 6, 3);
  malformed(Buffer.concat([lying, Buffer.from([0x17, 0x03, 0x03, 0x00, 0x01, 0x00])]));
  // An inner length (extensions) that overruns its enclosing handshake message.
  const bad = handmadeHello([sniExtension([0, 'a.test'])]);
  bad.writeUInt16BE(0xffff, bad.length - sniExtension([0, 'a.test']).length - 2);
  malformed(bad);
  // Random bytes behind a plausible record header never throw.
  for (let i = 0; i < 500; i++) {
    const junk = Buffer.from(Array.from({ length: 5 + Math.floor(Math.random() * 200) }, () => Math.floor(Math.random() * 256)));
    junk[0] = 0x16;
    junk[1] = 0x03;
    junk.writeUInt16BE(junk.length - 5, 3);
    assert.ok(['malformed', 'incomplete', 'client-hello'].includes(scanClientHello(junk).kind));
  }
});

test('ambiguous server_name shapes are malformed; hand-built good ones parse', () => {
  assert.equal(parseSni(handmadeHello([sniExtension([0, 'one.test'])])), 'one.test');
  assert.deepEqual(scanClientHello(handmadeHello([])), { kind: 'client-hello', serverName: undefined });
  assert.equal(scanClientHello(handmadeHello([sniExtension([0, 'a.test']), sniExtension([0, 'b.test'])])).kind, 'malformed');
  assert.equal(scanClientHello(handmadeHello([sniExtension([0, 'a.test'], [0, 'b.test'])])).kind, 'malformed');
  assert.equal(scanClientHello(handmadeHello([sniExtension([0, 'a.test\0evil.test'])])).kind, 'malformed');
  assert.equal(scanClientHello(handmadeHello([sniExtension([0, ''])])).kind, 'malformed');
  // An unknown name type is skipped, as TLS stacks do.
  assert.equal(parseSni(handmadeHello([sniExtension([9, 'x'], [0, 'real.test'])])), 'real.test');
});

/** An extension of `type` with an opaque body, as ECH's is to anyone but the front end. */
function opaqueExtension(type: number, length = 90): Buffer {
  return Buffer.concat([u16(type), u16(length), Buffer.alloc(length, 0xab)]);
}

test('a ClientHello with Encrypted Client Hello (or its drafts, or ESNI) is reported, with the outer SNI as sent', async () => {
  const ech = scanClientHello(handmadeHello([sniExtension([0, 'front.test']), opaqueExtension(0xfe0d)]));
  assert.deepEqual(ech, { kind: 'client-hello', serverName: 'front.test', encryptedName: 'Encrypted Client Hello (extension 0xfe0d)' });
  // Without SNI too: the hidden name is what a front end routes by.
  assert.match(String((scanClientHello(handmadeHello([opaqueExtension(0xfe0d)])) as { encryptedName?: string }).encryptedName), /Encrypted Client Hello/);
  for (const type of [0xfe08, 0xfe0c, 0xffce]) {
    const scan = scanClientHello(handmadeHello([opaqueExtension(type), sniExtension([0, 'front.test'])]));
    assert.match(String((scan as { encryptedName?: string }).encryptedName), new RegExp(`0x${type.toString(16)}`), type.toString(16));
  }
  // Split across records, the same answer.
  assert.deepEqual(scanClientHello(fragment(handmadeHello([sniExtension([0, 'front.test']), opaqueExtension(0xfe0d)]), 7)), ech);
  // A real client's hello carries none.
  assert.equal((scanClientHello(await captureClientHello({ servername: 'plain.test' })) as { encryptedName?: string }).encryptedName, undefined);
  assert.equal((scanClientHello(handmadeHello([opaqueExtension(0xfe0e)])) as { encryptedName?: string }).encryptedName, undefined);
});
