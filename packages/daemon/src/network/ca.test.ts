import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { SandboxCaStore } from './ca.js';

/** Serves one TLS handshake with the store's leaf for host and returns what a client verifying against the CA saw. */
async function handshake(store: SandboxCaStore, id: string, certHost: string, connectHost: string, ca: string): Promise<{ ok: boolean; error?: string }> {
  const context = await store.contextFor(id, certHost);
  // As the proxy does it: a server-side TLSSocket over a plain connection.
  const server = net.createServer((raw) => {
    const socket = new tls.TLSSocket(raw, { isServer: true, secureContext: context });
    socket.on('error', () => raw.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  try {
    return await new Promise((resolve) => {
      const socket = tls.connect({
        host: '127.0.0.1',
        port,
        ca,
        ...(connectHost === '127.0.0.1' ? {} : { servername: connectHost }),
        checkServerIdentity: (_h, cert) => tls.checkServerIdentity(connectHost, cert),
      });
      socket.once('secureConnect', () => {
        resolve({ ok: true });
        socket.destroy();
      });
      socket.once('error', (err) => resolve({ ok: false, error: err.message }));
    });
  } finally {
    server.close();
  }
}

test('a sandbox CA issues leaves that verify for their host only, and survives a reload from disk', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-ca-'));
  try {
    const store = new SandboxCaStore(dir);
    const [pem, again] = await Promise.all([store.ensure('sb-one'), store.ensure('sb-one')]);
    assert.equal(pem, again, 'concurrent callers share one CA');
    const cert = new X509Certificate(pem);
    assert.ok(cert.ca);
    assert.match(cert.subject, /sb-one/);
    assert.equal(statSync(path.join(dir, 'sb-one', 'ca.key')).mode & 0o777, 0o600);
    assert.ok(!pem.includes('PRIVATE KEY'));

    assert.deepEqual(await handshake(store, 'sb-one', 'api.example.com', 'api.example.com', pem), { ok: true });
    assert.deepEqual(await handshake(store, 'sb-one', '127.0.0.1', '127.0.0.1', pem), { ok: true });
    const wrongHost = await handshake(store, 'sb-one', 'api.example.com', 'other.example.com', pem);
    assert.equal(wrongHost.ok, false);

    // Another sandbox's CA is not this one's: its leaves fail against this CA.
    const otherPem = await store.ensure('sb-two');
    assert.notEqual(otherPem, pem);
    assert.equal((await handshake(store, 'sb-two', 'api.example.com', 'api.example.com', pem)).ok, false);

    // A new store (a daemon restart) loads the same CA.
    const reloaded = new SandboxCaStore(dir);
    assert.ok(await reloaded.has('sb-one'));
    assert.equal(await reloaded.ensure('sb-one'), pem);
    assert.deepEqual(await handshake(reloaded, 'sb-one', 'api.example.com', 'api.example.com', pem), { ok: true });
    assert.equal(readFileSync(path.join(dir, 'sb-one', 'ca.pem'), 'utf8'), pem);

    await reloaded.remove('sb-one');
    assert.equal(await reloaded.has('sb-one'), false);
    await assert.rejects(reloaded.contextFor('sb-one', 'api.example.com'), /no egress CA/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
