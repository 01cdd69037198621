/**
 * TLS termination for credential hosts, through the real proxy against loopback servers: an
 * upstream HTTPS server with its own CA (passed as the upstream CA), a per-sandbox CA the
 * "sandbox" (this test's client) trusts. Names resolve to 127.0.0.1 through an injected lookup.
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
import tls from 'node:tls';
import { pino } from 'pino';
import type { EgressRecord } from './audit.js';
import { SandboxCaStore } from './ca.js';
import { parseCredentials } from './credentials.js';
import { parsePolicy, type EgressPolicy } from './policy.js';
import { EgressProxy } from './proxy.js';

const SANDBOX = 'sb-tls';
const SECRET = 'Bearer unit-test-secret';
let dir = '';
let upstreamCa = '';
let upstream: https.Server;
let upstreamPort = 0;
let plain: http.Server;
let plainPort = 0;
const seen: http.IncomingHttpHeaders[] = [];

function answer(req: http.IncomingMessage, res: http.ServerResponse, scheme: string): void {
  seen.push(req.headers);
  const ok = req.headers.authorization === SECRET;
  res.writeHead(ok ? 200 : 401, { 'content-type': 'text/plain' });
  res.end(`${scheme} ${ok ? 'authorized' : 'unauthorized'} ${req.method} ${req.url} host=${req.headers.host}`);
}

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'warren-terminate-'));
  const sh = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  sh([
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-subj',
    '/CN=test upstream CA',
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-days',
    '1',
  ]);
  sh(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=upstream', '-keyout', 'k.pem', '-out', 'csr.pem']);
  execFileSync(
    'sh',
    [
      '-c',
      "printf 'subjectAltName=IP:127.0.0.1,DNS:api.test,DNS:plain.test\\n' > ext && openssl x509 -req -in csr.pem -CA ca.pem -CAkey ca.key -CAcreateserial -out c.pem -days 1 -extfile ext",
    ],
    { cwd: dir, stdio: 'pipe' },
  );
  upstreamCa = readFileSync(path.join(dir, 'ca.pem'), 'utf8');
  upstream = https.createServer({ key: readFileSync(path.join(dir, 'k.pem')), cert: readFileSync(path.join(dir, 'c.pem')) }, (req, res) =>
    answer(req, res, 'https'),
  );
  plain = http.createServer((req, res) => answer(req, res, 'http'));
  upstreamPort = await listen(upstream);
  plainPort = await listen(plain);
});

after(() => {
  for (const s of [upstream, plain]) {
    s.closeAllConnections();
    s.close();
  }
  rmSync(dir, { recursive: true, force: true });
});

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

async function startProxy(trustUpstream = true) {
  const rules = [`api.test:${upstreamPort}`, `other.test:${upstreamPort}`, `127.0.0.1:${upstreamPort}`, `plain.test:${plainPort}`, `127.0.0.1:${plainPort}`];
  const policy: EgressPolicy = parsePolicy(rules);
  policy.credentials = parseCredentials(
    [
      { host: `api.test:${upstreamPort}`, headers: { Authorization: SECRET } },
      { host: `plain.test:${plainPort}`, headers: { Authorization: SECRET } },
    ],
    policy,
  );
  const audit: EgressRecord[] = [];
  const lookup = (async (host: string) => {
    if (!host.endsWith('.test')) throw Object.assign(new Error(`ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return [{ address: '127.0.0.1', family: 4 }];
  }) as unknown as typeof dnsPromises.lookup;
  const cas = new SandboxCaStore(path.join(dir, `cas-${Math.random()}`));
  const sandboxCa = await cas.ensure(SANDBOX);
  const proxy = new EgressProxy({
    log: pino({ level: 'silent' }),
    audit: {
      start: (r) => audit.push({ ...r }) - 1,
      finish: (id, up, down) => {
        const entry = audit[id];
        assert.ok(entry, `finish of unknown audit entry ${id}`);
        Object.assign(entry, { bytesUp: up, bytesDown: down });
      },
    },
    lookup,
    localAddresses: () => [],
    credentialTls: { contextFor: (id, host) => cas.contextFor(id, host), upstreamCa: trustUpstream ? [upstreamCa] : [] },
  });
  const front = net.createServer((socket) => proxy.serve(socket, SANDBOX, () => policy));
  const port = await listen(front);
  return {
    port,
    audit,
    sandboxCa,
    close: () => {
      proxy.closeAll(SANDBOX);
      front.close();
    },
  };
}

/** An HTTPS agent that tunnels through the proxy with CONNECT, like curl or git would. */
function tunnellingAgent(proxyPort: number, ca: string): https.Agent {
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca });
  (agent as unknown as { createConnection: unknown }).createConnection = (
    opts: tls.ConnectionOptions & { host: string; port: number },
    cb: (e: Error | null, s?: net.Socket) => void,
  ) => {
    const raw = net.connect(proxyPort, '127.0.0.1', () => raw.write(`CONNECT ${opts.host}:${opts.port} HTTP/1.1\r\nHost: ${opts.host}:${opts.port}\r\n\r\n`));
    raw.once('data', (chunk: Buffer) => {
      if (!/^HTTP\/1\.1 200/.test(chunk.toString())) return cb(new Error(`CONNECT refused: ${chunk.toString()}`));
      cb(null, tls.connect({ ...opts, socket: raw, ...(net.isIP(opts.host) ? {} : { servername: opts.host }) }));
    });
    raw.once('error', (e) => cb(e));
  };
  return agent;
}

function get(
  agent: https.Agent,
  host: string,
  port: number,
  pathname: string,
  headers: http.OutgoingHttpHeaders = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host, port, path: pathname, agent, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('HTTPS to a credential host gets the header on every keep-alive request; the client trusts only the sandbox CA', async () => {
  const p = await startProxy();
  const agent = tunnellingAgent(p.port, p.sandboxCa);
  try {
    seen.length = 0;
    for (const n of [1, 2, 3]) {
      const r = await get(agent, 'api.test', upstreamPort, `/item/${n}`, n === 2 ? { Authorization: 'Bearer forged-by-the-sandbox' } : {});
      assert.equal(r.status, 200, r.body);
      assert.equal(r.body, `https authorized GET /item/${n} host=api.test:${upstreamPort}`);
    }
    // One CONNECT carried all three: the agent kept the connection.
    assert.equal(p.audit.filter((e) => e.method === 'CONNECT').length, 1);
    const requests = p.audit.filter((e) => e.method === 'GET');
    assert.deepEqual(
      requests.map((e) => e.path),
      ['/item/1', '/item/2', '/item/3'],
    );
    assert.ok(requests.every((e) => e.decision === 'allowed' && /credential headers added \(authorization\)/.test(e.reason ?? '')));
    assert.ok(!JSON.stringify(p.audit).includes('unit-test-secret'), 'the secret is not in the audit log');
  } finally {
    agent.destroy();
    p.close();
  }
});

test('a host without a credential is tunnelled untouched: the client sees the upstream certificate', async () => {
  const p = await startProxy();
  const sandboxOnly = tunnellingAgent(p.port, p.sandboxCa);
  const upstreamTrusting = tunnellingAgent(p.port, upstreamCa);
  try {
    await assert.rejects(get(sandboxOnly, '127.0.0.1', upstreamPort, '/'), /self-signed|unable to verify|certificate/i);
    const r = await get(upstreamTrusting, '127.0.0.1', upstreamPort, '/');
    assert.equal(r.status, 401, 'no header was added');
  } finally {
    sandboxOnly.destroy();
    upstreamTrusting.destroy();
    p.close();
  }
});

test('plain HTTP to a credential host gets the header too', async () => {
  const p = await startProxy();
  try {
    const r = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(
        { host: '127.0.0.1', port: p.port, path: `http://plain.test:${plainPort}/x`, headers: { host: `plain.test:${plainPort}` }, agent: false },
        (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        },
      );
      req.on('error', reject);
      req.end();
    });
    assert.equal(r.status, 200, r.body);
  } finally {
    p.close();
  }
});

test('a forged Host inside the terminated TLS is refused; an untrusted upstream certificate gives 502', async () => {
  const p = await startProxy();
  const agent = tunnellingAgent(p.port, p.sandboxCa);
  try {
    const forged = await get(agent, 'api.test', upstreamPort, '/', { Host: 'other.test' });
    assert.equal(forged.status, 400);
    assert.match(forged.body, /Host header/);
  } finally {
    agent.destroy();
    p.close();
  }
  const q = await startProxy(false);
  const agent2 = tunnellingAgent(q.port, q.sandboxCa);
  try {
    const r = await get(agent2, 'api.test', upstreamPort, '/');
    assert.equal(r.status, 502);
    assert.match(r.body, /upstream api\.test:\d+ failed/);
  } finally {
    agent2.destroy();
    q.close();
  }
});
