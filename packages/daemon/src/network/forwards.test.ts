/**
 * Forwarded connections through the real egress proxy, against a loopback server; names
 * resolve through an injected lookup to 127.0.0.1, so nothing leaves 127.0.0.0/8.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { promises as dnsPromises } from 'node:dns';
import net, { type AddressInfo } from 'node:net';
import { PassThrough, Duplex } from 'node:stream';
import { pino } from 'pino';
import type { EgressRecord } from './audit.js';
import { asConnect, connectHints, tcpForwards } from './forwards.js';
import { parsePolicy } from './policy.js';
import { EgressProxy } from './proxy.js';

let server: net.Server;
let port = 0;
const records: EgressRecord[] = [];
const looked: string[] = [];
const lookup = (async (host: string) => {
  looked.push(host);
  return [{ address: '127.0.0.1', family: 4 }];
}) as unknown as typeof dnsPromises.lookup;
const proxy = new EgressProxy({
  log: pino({ level: 'silent' }),
  audit: { start: (r) => records.push(r) - 1, finish: () => undefined },
  lookup,
});

before(async () => {
  // Speaks first, then echoes: a database-like protocol.
  server = net.createServer((s) => {
    s.write('greeting\n');
    s.pipe(s);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});

after(() => {
  proxy.closeAll('sb-f');
  server.close();
});

/** Both ends of an in-memory connection: what the sandbox's client sees, and what the daemon gets. */
function pipePair(): { client: Duplex; daemonSide: Duplex } {
  const up = new PassThrough();
  const down = new PassThrough();
  const client = Duplex.from({ readable: down, writable: up });
  // Destroying one end aborts the other (an AbortError), as a reset would.
  client.on('error', () => undefined);
  return { client, daemonSide: Duplex.from({ readable: up, writable: down }) };
}

function readUntil(s: Duplex, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    const onData = (d: Buffer) => {
      got += d.toString();
      if (got.includes(text)) {
        s.off('data', onData);
        resolve(got);
      }
    };
    s.on('data', onData);
    s.once('close', () => reject(new Error(`closed after '${got}'`)));
  });
}

test('only exact names with a port get a forward', () => {
  const policy = parsePolicy(['db.example.com:5432', 'DB.example.com:5432', 'api.example.com', '*.example.org:22', '10.0.0.0/8:5432', 'git.example.com:22']);
  assert.deepEqual(tcpForwards(policy), [
    { host: 'db.example.com', port: 5432 },
    { host: 'git.example.com', port: 22 },
  ]);
});

test('CONNECT hints: every name rule, and IPv4 rules of one address', () => {
  const policy = parsePolicy(['api.example.com:443', '*.example.org', '127.0.0.1:8443', '10.0.0.0/8:5432', '[::1]:443', 'db.example.net']);
  assert.deepEqual(connectHints(policy), [
    { host: 'api.example.com', port: 443 },
    { host: 'example.org', suffix: true },
    { host: '127.0.0.1', port: 8443 },
    { host: 'db.example.net' },
  ]);
  assert.deepEqual(connectHints(parsePolicy([])), []);
});

test('a forwarded connection is a CONNECT to its target: the server speaks first, bytes pass both ways', async () => {
  const { client, daemonSide } = pipePair();
  proxy.serve(asConnect(daemonSide, { host: 'db.example.com', port }), 'sb-f', () => parsePolicy([`db.example.com:${port}`, `127.0.0.1:${port}`]));
  const greeting = await readUntil(client, 'greeting\n');
  assert.equal(greeting, 'greeting\n', 'the proxy’s 200 never reaches the client');
  client.write('ping');
  assert.equal(await readUntil(client, 'ping'), 'ping');
  client.destroy();
  const rec = records.find((r) => r.host === 'db.example.com' && r.port === port);
  assert.equal(rec?.decision, 'allowed');
  assert.equal(rec?.method, 'CONNECT');
});

test('a refused target ends the client’s connection, is audited, and is not looked up', async () => {
  const { client, daemonSide } = pipePair();
  let got = '';
  client.on('data', (d: Buffer) => (got += d.toString()));
  const closed = new Promise<void>((r) => client.once('close', () => r()));
  proxy.serve(asConnect(daemonSide, { host: 'other.example.com', port }), 'sb-f', () => parsePolicy([`db.example.com:${port}`]));
  await closed;
  assert.equal(got, '', 'the refusal is not written to a client that cannot read it');
  assert.ok(records.some((r) => r.host === 'other.example.com' && r.decision === 'denied'));
  assert.equal(looked.includes('other.example.com'), false);
});

test('a target that could inject into the CONNECT line is refused', () => {
  const { daemonSide } = pipePair();
  daemonSide.on('error', () => undefined); // destroyed below, which aborts it
  assert.throws(() => asConnect(daemonSide, { host: 'a.example.com:1 HTTP/1.1\r\nX: y', port: 1 }), /invalid forward target/);
  assert.ok(daemonSide.destroyed);
});

test('db:NAME gives a forwarder for NAME.db.warren:5432 and no connect hint; bad names are refused', () => {
  const policy = parsePolicy(['db:app', 'api.example.com:443']);
  assert.deepEqual(tcpForwards(policy), [
    { host: 'app.db.warren', port: 5432 },
    { host: 'api.example.com', port: 443 },
  ]);
  assert.deepEqual(connectHints(policy), [{ host: 'api.example.com', port: 443 }]);
  for (const bad of ['db:', 'db:App', 'db:1x', 'db:a.b', 'db:app:5432']) assert.throws(() => parsePolicy([bad]), /database rule is db:NAME/, bad);
});
