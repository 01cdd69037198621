/** Forwarders on the host's own loopback (any 127/8 address binds on Linux), with a temporary hosts file. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TcpForward } from '@warren/protocol/wire';
import { Forwards } from './forwards.js';

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

function connect(host: string, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port }, () => resolve(s));
    s.once('error', reject);
  });
}

test('listeners and the hosts block follow the list; each connection names its forward', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-forwards-'));
  const hosts = path.join(dir, 'hosts');
  const seen: TcpForward[] = [];
  const forwards = new Forwards((socket, target) => {
    seen.push(target);
    socket.destroy();
  }, hosts);
  try {
    const port = await freePort();
    const r = await forwards.apply([
      { host: 'DB.example.com', port },
      { host: 'cache.example.com', port },
    ]);
    assert.deepEqual(r.forwards, [
      { host: 'db.example.com', port, address: '127.77.0.1' },
      { host: 'cache.example.com', port, address: '127.77.0.2' },
    ]);
    assert.match(readFileSync(hosts, 'utf8'), /^127\.77\.0\.1\tdb\.example\.com\n127\.77\.0\.2\tcache\.example\.com$/m);
    (await connect('127.77.0.2', port)).destroy();
    await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(seen, [{ host: 'cache.example.com', port }]);

    // db goes away: its listener closes; cache keeps its address.
    await forwards.apply([{ host: 'cache.example.com', port }]);
    await assert.rejects(connect('127.77.0.1', port), /ECONNREFUSED/);
    assert.doesNotMatch(readFileSync(hosts, 'utf8'), /db\.example\.com/);
    // A name that comes back gets its old address.
    const back = await forwards.apply([{ host: 'db.example.com', port }]);
    assert.equal(back.forwards[0]?.address, '127.77.0.1');
    await forwards.apply([]);
    assert.equal(readFileSync(hosts, 'utf8'), '');
  } finally {
    await forwards.apply([]);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a port taken on every address is reported and its name not mapped; bad names are refused', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-forwards-'));
  const hosts = path.join(dir, 'hosts');
  const taken = net.createServer();
  await new Promise<void>((r) => taken.listen(0, '0.0.0.0', r));
  const port = (taken.address() as AddressInfo).port;
  const forwards = new Forwards((socket) => socket.destroy(), hosts);
  try {
    const r = await forwards.apply([{ host: 'db.example.com', port }]);
    assert.match(r.forwards[0]?.error ?? '', new RegExp(`already listens on port ${port}`));
    assert.throws(() => readFileSync(hosts), /ENOENT/);
    assert.throws(() => forwards.apply([{ host: 'evil.example.com\n10.0.0.1 x', port: 1 }]), /not a host name and port/);
    assert.throws(() => forwards.apply([{ host: 'a.example.com', port: 70000 }]), /not a host name and port/);
  } finally {
    taken.close();
    await forwards.apply([]);
    rmSync(dir, { recursive: true, force: true });
  }
});
