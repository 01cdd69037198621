/**
 * The egress proxy against real loopback servers. Every name goes through an injected lookup
 * that answers 127.0.0.1, so nothing here leaves 127.0.0.0/8.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import type { promises as dnsPromises } from 'node:dns';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Duplex } from 'node:stream';
import tls from 'node:tls';
import { pino } from 'pino';
import type { EgressRecord } from './audit.js';
import { parsePolicy, type EgressPolicy } from './policy.js';
import type { DatabaseConnector } from './database-rules.js';
import { EgressProxy } from './proxy.js';

const SANDBOX = 'sb-test';
let httpPort = 0;
let httpsPort = 0;
let httpServer: http.Server;
let httpsServer: https.Server;

before(async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-proxy-'));
  try {
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', `${dir}/k`, '-out', `${dir}/c`, '-days', '1'],
      {
        stdio: 'ignore',
      },
    );
    httpsServer = https.createServer({ key: readFileSync(`${dir}/k`), cert: readFileSync(`${dir}/c`) }, (req, res) => {
      res.end(`secure ${(req.socket as tls.TLSSocket).servername ?? '-'} ${req.url}`);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  httpServer = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      res.setHeader('Content-Type', 'application/json');
      res.setHeader('Connection', 'close, X-Hop');
      res.setHeader('X-Hop', 'should not reach the client');
      res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() }));
    });
  });
  httpPort = await listen(httpServer);
  httpsPort = await listen(httpsServer);
});

after(() => {
  httpServer.closeAllConnections();
  httpServer.close();
  httpsServer.closeAllConnections();
  httpsServer.close();
});

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

interface AuditEntry extends EgressRecord {
  finished: boolean;
}

/** A proxy fed by a loopback TCP server, with an in-memory audit and a recording lookup. */
async function startProxy(rules: string[], maxStreamsPerSandbox?: number, databases?: DatabaseConnector) {
  let policy: EgressPolicy = parsePolicy(rules);
  const audit: AuditEntry[] = [];
  const lookups: string[] = [];
  const names: Record<string, string> = { 'allowed.test': '127.0.0.1', 'rebind.test': '127.0.0.1', 'other.test': '127.0.0.1' };
  const lookup = (async (host: string) => {
    lookups.push(host);
    const address = names[host];
    if (!address) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return [{ address, family: 4 }];
  }) as unknown as typeof dnsPromises.lookup;
  const proxy = new EgressProxy({
    log: pino({ level: 'silent' }),
    audit: {
      start: (r) => audit.push({ ...r, finished: false }) - 1,
      finish: (id, up, down) => {
        const entry = audit[id];
        assert.ok(entry, `finish of unknown audit entry ${id}`);
        Object.assign(entry, { bytesUp: up, bytesDown: down, finished: true });
      },
    },
    lookup,
    connectTimeoutMs: 2000,
    maxStreamsPerSandbox,
    ...(databases ? { databases } : {}),
  });
  const front = net.createServer((socket) => proxy.serve(socket, SANDBOX, () => policy));
  const port = await listen(front);
  return {
    port,
    proxy,
    audit,
    lookups,
    setPolicy: (next: string[]) => (policy = parsePolicy(next)),
    close: () => {
      proxy.closeAll(SANDBOX);
      front.close();
    },
  };
}

const fullAccess = () => [`allowed.test:${httpPort}`, `allowed.test:${httpsPort}`, `127.0.0.1:${httpPort}`, `127.0.0.1:${httpsPort}`];

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One request through the proxy (absolute-form URL). */
function viaProxy(proxyPort: number, url: string, options: http.RequestOptions = {}, body?: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: proxyPort, path: url, agent: false, ...options }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Writes raw bytes to the proxy and collects everything until the proxy closes. */
function rawExchange(proxyPort: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(proxyPort, '127.0.0.1', () => socket.write(text));
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('close', () => resolve(Buffer.concat(chunks).toString()));
    socket.on('error', reject);
  });
}

/** A CONNECT through the proxy; resolves with the proxy's answer and the raw tunnel. */
function connectVia(proxyPort: number, authority: string): Promise<{ status: number; socket: net.Socket; head: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: proxyPort, method: 'CONNECT', path: authority, agent: false });
    req.on('connect', (res: http.IncomingMessage, socket: net.Socket, head: Buffer) => resolve({ status: res.statusCode!, socket, head }));
    req.on('error', reject);
    req.end();
  });
}

/** TLS over an established tunnel, then one HTTP/1.1 GET; resolves with the response text. */
function tlsGet(tunnel: net.Socket, servername: string, path = '/'): Promise<string> {
  return new Promise((resolve, reject) => {
    const secure = tls.connect({ socket: tunnel, servername, rejectUnauthorized: false }, () => {
      secure.write(`GET ${path} HTTP/1.1\r\nHost: ${servername}\r\nConnection: close\r\n\r\n`);
    });
    const chunks: Buffer[] = [];
    secure.on('data', (c: Buffer) => chunks.push(c));
    secure.on('end', () => resolve(Buffer.concat(chunks).toString()));
    secure.on('error', reject);
  });
}

async function eventually(check: () => boolean, what: string, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('an allowed plain GET returns the upstream body, without hop-by-hop headers, and is audited', async () => {
  const p = await startProxy(fullAccess());
  try {
    const reply = await viaProxy(
      p.port,
      `http://allowed.test:${httpPort}/some/path?q=1`,
      {
        method: 'POST',
        headers: { host: `allowed.test:${httpPort}`, 'Proxy-Authorization': 'Basic c2VjcmV0', Connection: 'X-Private', 'X-Private': 'hop', 'X-Kept': 'yes' },
      },
      'request body',
    );
    assert.equal(reply.status, 200);
    const seen = JSON.parse(reply.body);
    assert.equal(seen.method, 'POST');
    assert.equal(seen.url, '/some/path?q=1');
    assert.equal(seen.headers.host, `allowed.test:${httpPort}`);
    assert.equal(seen.headers['x-kept'], 'yes');
    assert.equal(seen.headers['proxy-authorization'], undefined);
    assert.equal(seen.headers['x-private'], undefined);
    assert.equal(seen.body, 'request body');
    assert.equal(reply.headers['x-hop'], undefined, 'a header the upstream listed in Connection is hop-by-hop');

    await eventually(() => p.audit.length === 1 && p.audit[0]?.finished === true, 'audit finished');
    const [entry] = p.audit;
    assert.ok(entry);
    assert.equal(entry.decision, 'allowed');
    assert.equal(entry.sandboxId, SANDBOX);
    assert.equal(entry.host, 'allowed.test');
    assert.equal(entry.port, httpPort);
    assert.equal(entry.method, 'POST');
    assert.equal(entry.path, '/some/path?q=1');
    assert.ok(entry.bytesUp > 'request body'.length && entry.bytesDown > reply.body.length, JSON.stringify(entry));
    assert.deepEqual(p.lookups, ['allowed.test']);
  } finally {
    p.close();
  }
});

test('a denied name gets 403, is audited, and is never looked up', async () => {
  const p = await startProxy(fullAccess());
  try {
    const reply = await viaProxy(p.port, 'http://denied.test/x', { headers: { host: 'denied.test' } });
    assert.equal(reply.status, 403);
    assert.match(reply.body, /denied\.test.*not allowed by the sandbox's network policy/);
    const tunnel = await connectVia(p.port, 'denied.test:443');
    assert.equal(tunnel.status, 403);
    tunnel.socket.destroy();
    // An allowed name on a port the rule does not cover is denied the same way.
    assert.equal((await viaProxy(p.port, 'http://allowed.test:1/', { headers: { host: 'allowed.test:1' } })).status, 403);

    assert.deepEqual(p.lookups, []);
    assert.deepEqual(
      p.audit.map((e) => [e.decision, e.host, e.port, e.method, e.finished]),
      [
        ['denied', 'denied.test', 80, 'GET', true],
        ['denied', 'denied.test', 443, 'CONNECT', true],
        ['denied', 'allowed.test', 1, 'GET', true],
      ],
    );
    assert.match(p.audit[0]?.reason ?? '', /no rule allows denied\.test:80/);
  } finally {
    p.close();
  }
});

test('a forged Host header and an origin-form request get 400 and are audited as denied', async () => {
  const p = await startProxy(fullAccess());
  try {
    const forged = await rawExchange(p.port, `GET http://allowed.test:${httpPort}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n`);
    assert.match(forged, /^HTTP\/1\.1 400 /);
    assert.match(forged, /does not match the request URL/);
    const twoHosts = await rawExchange(p.port, `GET http://allowed.test:${httpPort}/ HTTP/1.1\r\nHost: allowed.test:${httpPort}\r\nHost: evil.test\r\n\r\n`);
    assert.match(twoHosts, /^HTTP\/1\.1 400 /);
    const originForm = await rawExchange(p.port, `GET /admin HTTP/1.1\r\nHost: 127.0.0.1:${httpPort}\r\n\r\n`);
    assert.match(originForm, /^HTTP\/1\.1 400 /);
    assert.match(originForm, /absolute URL/);
    assert.deepEqual(
      p.audit.map((e) => e.decision),
      ['denied', 'denied', 'denied'],
    );
    assert.equal(p.audit[0]?.host, 'evil.test');
    assert.deepEqual(p.lookups, []);
  } finally {
    p.close();
  }
});

test('a chunked body stays framed upstream, even on GET (no request smuggling past the Host check)', async () => {
  const p = await startProxy(fullAccess());
  try {
    const smuggled = `GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n`;
    const body = `${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`;
    const response = await rawExchange(
      p.port,
      `GET http://allowed.test:${httpPort}/first HTTP/1.1\r\nHost: allowed.test:${httpPort}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${body}`,
    );
    assert.match(response, /^HTTP\/1\.1 200 /);
    const seen = JSON.parse(response.slice(response.indexOf('{'), response.lastIndexOf('}') + 1));
    assert.equal(seen.url, '/first');
    assert.equal(seen.body, smuggled, 'the inner request arrived as body, not as a second request');
  } finally {
    p.close();
  }
});

test('CONNECT with a matching SNI carries TLS end to end', async () => {
  const p = await startProxy(fullAccess());
  try {
    const tunnel = await connectVia(p.port, `allowed.test:${httpsPort}`);
    assert.equal(tunnel.status, 200);
    const response = await tlsGet(tunnel.socket, 'allowed.test', '/over-tls');
    assert.match(response, /^HTTP\/1\.1 200 /);
    assert.match(response, /secure allowed\.test \/over-tls$/);
    await eventually(() => p.audit.length === 1 && p.audit[0]?.finished === true, 'tunnel audited');
    const [entry] = p.audit;
    assert.ok(entry);
    assert.equal(entry.decision, 'allowed');
    assert.equal(entry.method, 'CONNECT');
    assert.equal(entry.host, 'allowed.test');
    assert.ok(entry.bytesUp > 200 && entry.bytesDown > 500, JSON.stringify(entry));
  } finally {
    p.close();
  }
});

test('CONNECT whose SNI differs from the CONNECT host is closed and audited as denied', async () => {
  const p = await startProxy([...fullAccess(), `other.test:${httpsPort}`]);
  try {
    const tunnel = await connectVia(p.port, `allowed.test:${httpsPort}`);
    assert.equal(tunnel.status, 200);
    // other.test is allowed too: the SNI must still name the host the CONNECT asked for.
    const secure = tls.connect({ socket: tunnel.socket, servername: 'other.test', rejectUnauthorized: false });
    let handshake = false;
    secure.on('secureConnect', () => (handshake = true));
    secure.on('error', () => undefined); // a reset or "socket disconnected before TLS" is the expected outcome
    await new Promise((resolve) => secure.once('close', resolve));
    assert.equal(handshake, false, 'the TLS handshake never completed');
    await eventually(() => p.audit.length === 1 && p.audit[0]?.finished === true, 'tunnel audited');
    assert.equal(p.audit[0]?.decision, 'denied');
    assert.equal(p.audit[0]?.reason, `SNI other.test differs from CONNECT host allowed.test`);
    assert.equal(p.audit[0]?.bytesUp, 0, 'nothing reached the upstream');
  } finally {
    p.close();
  }
});

/** A ClientHello naming `name` in SNI and carrying an Encrypted Client Hello extension (opaque, as it is to the proxy). */
function echClientHello(name: string): Buffer {
  const u16 = (n: number) => Buffer.from([n >> 8, n & 0xff]);
  const sni = Buffer.concat([u16(name.length + 3), Buffer.from([0]), u16(name.length), Buffer.from(name)]);
  const extensions = Buffer.concat([u16(0), u16(sni.length), sni, u16(0xfe0d), u16(64), Buffer.alloc(64, 0xab)]);
  const body = Buffer.concat([Buffer.from([3, 3]), Buffer.alloc(32, 7), Buffer.from([0, 0, 2, 0x13, 0x01, 1, 0]), u16(extensions.length), extensions]);
  const handshake = Buffer.concat([Buffer.from([1, 0]), u16(body.length), body]);
  return Buffer.concat([Buffer.from([0x16, 3, 1]), u16(handshake.length), handshake]);
}

test('CONNECT whose ClientHello carries Encrypted Client Hello is closed before a byte goes upstream, unless an ech: rule allows its host', async () => {
  const p = await startProxy(fullAccess());
  try {
    const tunnel = await connectVia(p.port, `allowed.test:${httpsPort}`);
    assert.equal(tunnel.status, 200);
    tunnel.socket.on('error', () => undefined); // the proxy's reset is the expected outcome
    tunnel.socket.resume(); // read, or its end is never seen
    tunnel.socket.write(echClientHello('allowed.test'));
    await new Promise((resolve) => tunnel.socket.once('close', resolve));
    await eventually(() => p.audit.length === 1 && p.audit[0]?.finished === true, 'tunnel audited');
    assert.equal(p.audit[0]?.decision, 'denied');
    assert.match(p.audit[0]?.reason ?? '', /^TLS ClientHello with Encrypted Client Hello \(extension 0xfe0d\).*an ech: rule for allowed\.test allows it$/);
    assert.equal(p.audit[0]?.bytesUp, 0, 'nothing reached the upstream');

    p.setPolicy([...fullAccess(), `ech:allowed.test:${httpsPort}`]);
    const allowed = await connectVia(p.port, `allowed.test:${httpsPort}`);
    allowed.socket.on('error', () => undefined);
    allowed.socket.resume();
    allowed.socket.write(echClientHello('allowed.test'));
    // The upstream answers the hand-made hello with an alert and closes: it got it.
    await new Promise((resolve) => allowed.socket.once('close', resolve));
    await eventually(() => p.audit.length === 2 && p.audit[1]?.finished === true, 'second tunnel audited');
    assert.equal(p.audit[1]?.decision, 'allowed');
    assert.match(p.audit[1]?.reason ?? '', /Encrypted Client Hello \(extension 0xfe0d\), allowed by an ech: rule/);
    assert.ok((p.audit[1]?.bytesUp ?? 0) > 0, JSON.stringify(p.audit[1]));
  } finally {
    p.close();
  }
});

test('CONNECT carrying a non-TLS protocol to an allowed host:port is tunnelled', async () => {
  const p = await startProxy(fullAccess());
  try {
    const tunnel = await connectVia(p.port, `127.0.0.1:${httpPort}`);
    assert.equal(tunnel.status, 200);
    const response = await new Promise<string>((resolve, reject) => {
      const chunks: Buffer[] = [];
      tunnel.socket.on('data', (c: Buffer) => chunks.push(c));
      tunnel.socket.on('end', () => resolve(Buffer.concat(chunks).toString()));
      tunnel.socket.on('error', reject);
      tunnel.socket.write('GET /plain HTTP/1.1\r\nHost: whatever\r\nConnection: close\r\n\r\n');
    });
    assert.match(response, /"url":"\/plain"/);
    await eventually(() => p.audit.length === 1 && p.audit[0]?.finished === true, 'tunnel audited');
    assert.equal(p.audit[0]?.decision, 'allowed');
    assert.deepEqual(p.lookups, [], 'an IP literal needs no lookup');
  } finally {
    p.close();
  }
});

test('an allowed name resolving to loopback without an IP rule is refused (DNS rebinding)', async () => {
  const p = await startProxy([`rebind.test:${httpPort}`, `rebind.test:${httpsPort}`]);
  try {
    const reply = await viaProxy(p.port, `http://rebind.test:${httpPort}/`, { headers: { host: `rebind.test:${httpPort}` } });
    assert.equal(reply.status, 403);
    assert.match(reply.body, /resolves to 127\.0\.0\.1.*loopback/);
    const tunnel = await connectVia(p.port, `rebind.test:${httpsPort}`);
    assert.equal(tunnel.status, 403);
    tunnel.socket.destroy();
    // A loopback IP literal without a rule is refused before anything happens, too.
    assert.equal((await connectVia(p.port, `127.0.0.1:${httpsPort}`)).status, 403);
    assert.deepEqual(
      p.audit.map((e) => e.decision),
      ['denied', 'denied', 'denied'],
    );
  } finally {
    p.close();
  }
});

test('a policy change applies to the next request, even on the same connection', async () => {
  const p = await startProxy(fullAccess());
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const url = `http://allowed.test:${httpPort}/`;
    const options = { agent, headers: { host: `allowed.test:${httpPort}` } };
    assert.equal((await viaProxy(p.port, url, options)).status, 200);
    p.setPolicy([]);
    const second = await new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: p.port, path: url, ...options }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode!, reused: req.reusedSocket }));
      });
      req.on('error', reject);
      req.end();
    });
    assert.deepEqual(second, { status: 403, reused: true });
    p.setPolicy(fullAccess());
    assert.equal((await viaProxy(p.port, url, options)).status, 200);
  } finally {
    agent.destroy();
    p.close();
  }
});

test('closeAll ends an open tunnel and leaves no sockets behind', async () => {
  const p = await startProxy(fullAccess());
  try {
    const tunnel = await connectVia(p.port, `allowed.test:${httpsPort}`);
    const secure = await new Promise<tls.TLSSocket>((resolve, reject) => {
      const s = tls.connect({ socket: tunnel.socket, servername: 'allowed.test', rejectUnauthorized: false }, () => resolve(s));
      s.on('error', reject);
    });
    secure.on('error', () => undefined); // the reset below is the point of the test
    assert.equal(p.proxy.openCount(SANDBOX), 2, 'the client connection and its upstream');
    const closed = new Promise<void>((resolve) => secure.once('close', () => resolve()));
    p.proxy.closeAll(SANDBOX);
    await closed;
    assert.equal(p.proxy.openCount(SANDBOX), 0);
    await eventually(() => p.audit.length === 1 && p.audit[0]?.finished === true, 'tunnel audited');
  } finally {
    p.close();
  }
});

test('a sandbox at its connection limit gets 429 until one closes', async () => {
  const p = await startProxy(fullAccess(), 4);
  try {
    const first = await connectVia(p.port, `allowed.test:${httpsPort}`);
    const second = await connectVia(p.port, `allowed.test:${httpsPort}`);
    assert.equal(p.proxy.openCount(SANDBOX), 4, 'two clients and their upstreams');
    const refused = await rawExchange(p.port, `CONNECT allowed.test:${httpsPort} HTTP/1.1\r\nHost: allowed.test:${httpsPort}\r\n\r\n`);
    assert.match(refused, /^HTTP\/1\.1 429 /);
    assert.match(refused, /too many egress connections/);
    first.socket.destroy();
    await eventually(() => p.proxy.openCount(SANDBOX) === 2, 'the closed tunnel released');
    const again = await connectVia(p.port, `allowed.test:${httpsPort}`);
    assert.equal(again.status, 200);
    again.socket.destroy();
    second.socket.destroy();
  } finally {
    p.close();
  }
});

test('50 concurrent CONNECT tunnels all work', async () => {
  const p = await startProxy(fullAccess());
  try {
    const responses = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const tunnel = await connectVia(p.port, `allowed.test:${httpsPort}`);
        assert.equal(tunnel.status, 200);
        return tlsGet(tunnel.socket, 'allowed.test', `/n${i}`);
      }),
    );
    for (const [i, r] of responses.entries()) assert.match(r, new RegExp(`secure allowed\\.test /n${i}$`));
    await eventually(() => p.audit.length === 50 && p.audit.every((e) => e.finished && e.decision === 'allowed'), 'all tunnels audited');
    await eventually(() => p.proxy.openCount(SANDBOX) === 0, 'every socket closed');
  } finally {
    p.close();
  }
});

test('an upstream that refuses the connection gives 502, audited with the reason', async () => {
  // A port that was free a moment ago: nothing listens there now.
  const probe = net.createServer();
  const closedPort = await listen(probe);
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  const p = await startProxy([`127.0.0.1:${closedPort}`]);
  try {
    const reply = await viaProxy(p.port, `http://127.0.0.1:${closedPort}/`, { headers: { host: `127.0.0.1:${closedPort}` } });
    assert.equal(reply.status, 502);
    assert.match(reply.body, new RegExp(`cannot connect to 127\\.0\\.0\\.1:${closedPort}`));
    assert.equal(p.audit[0]?.decision, 'allowed');
    assert.match(p.audit[0]?.reason ?? '', /ECONNREFUSED/);
  } finally {
    p.close();
  }
});

test('serves a plain Duplex (as the guest tunnel delivers), not only TCP sockets', async () => {
  const p = await startProxy(fullAccess());
  try {
    let inside!: Duplex;
    const outside: Duplex = new Duplex({
      read() {},
      write(chunk, _enc, done) {
        inside.push(chunk);
        done();
      },
      final(done) {
        inside.push(null);
        done();
      },
    });
    inside = new Duplex({
      read() {},
      write(chunk, _enc, done) {
        outside.push(chunk);
        done();
      },
      final(done) {
        outside.push(null);
        done();
      },
    });
    p.proxy.serve(outside, SANDBOX, () => parsePolicy(fullAccess()));
    const chunks: Buffer[] = [];
    inside.on('data', (c: Buffer) => chunks.push(c));
    inside.write(`GET http://allowed.test:${httpPort}/duplex HTTP/1.1\r\nHost: allowed.test:${httpPort}\r\nConnection: close\r\n\r\n`);
    await eventually(() => Buffer.concat(chunks).toString().includes('"url":"/duplex"'), 'response over the Duplex');
    inside.destroy();
    outside.destroy();
  } finally {
    p.close();
  }
});

test('db:NAME: a CONNECT to NAME.db.warren:5432 reaches that database through the connector, never DNS; others are refused', async () => {
  // Stands in for a database's postgres: an echo server.
  const echo = net.createServer((s) => s.pipe(s));
  const echoPort = await listen(echo);
  const asked: string[] = [];
  const databases: DatabaseConnector = {
    connect: (sandboxId, name) => {
      asked.push(`${sandboxId}/${name}`);
      return Promise.resolve(net.connect({ host: '127.0.0.1', port: echoPort }));
    },
  };
  const p = await startProxy(['db:app'], undefined, databases);
  try {
    const tunnel = await connectVia(p.port, 'app.db.warren:5432');
    assert.equal(tunnel.status, 200);
    const back = await new Promise<string>((resolve, reject) => {
      tunnel.socket.once('data', (c: Buffer) => resolve(c.toString()));
      tunnel.socket.on('error', reject);
      tunnel.socket.write('startup');
    });
    assert.equal(back, 'startup');
    tunnel.socket.end();
    await eventually(() => p.audit[0]?.finished === true, 'the database connection audited');
    assert.equal(p.audit[0]?.decision, 'allowed');
    assert.equal(p.audit[0]?.host, 'app.db.warren');
    assert.equal(p.audit[0]?.bytesUp, 7);
    assert.equal(p.audit[0]?.bytesDown, 7);
    assert.deepEqual(asked, [`${SANDBOX}/app`]);

    for (const authority of ['other.db.warren:5432', 'app.db.warren:80']) {
      const refused = await connectVia(p.port, authority);
      assert.equal(refused.status, 403, authority);
      refused.socket.destroy();
    }
    assert.deepEqual(asked, [`${SANDBOX}/app`], 'refused targets never reach the connector');
    assert.deepEqual(p.lookups, [], 'database names are never looked up');
    assert.equal(p.audit.filter((a) => a.decision === 'denied').length, 2);
  } finally {
    p.close();
    echo.close();
  }
});
