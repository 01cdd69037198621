import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { createHmac } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CREDENTIAL_HEADERS, WarrenError } from '@warren/protocol';
import { PortHosts, PortTokens, forwardHttp, forwardUpgrade } from './ports.js';

test('port URLs: localhost by default; under a configured domain with its scheme; other hosts are not port URLs', () => {
  const local = new PortHosts();
  assert.deepEqual(local.parse('3000-sb-abc123.localhost:7070'), { sandboxId: 'sb-abc123', port: 3000 });
  assert.equal(local.url('sb-abc123', 3000, 7070, 'tok'), 'http://3000-sb-abc123.localhost:7070/?warren_token=tok');
  assert.equal(local.parse('3000-sb-abc123.warren.test:7070'), undefined);

  const remote = new PortHosts('warren.test', 'https');
  assert.deepEqual(remote.parse('8080-SB-ABC.warren.test'), { sandboxId: 'sb-abc', port: 8080 });
  assert.equal(remote.url('sb-abc', 8080, 443), 'https://8080-sb-abc.warren.test:443/');
  for (const host of [
    '3000-sb-abc.localhost',
    '3000-sb-abc.warrenXtest',
    '3000-sb-abc.evil.warren.test.attacker.net',
    '70000-sb-abc.warren.test',
    '127.0.0.1:7070',
    undefined,
  ]) {
    assert.equal(remote.parse(host), undefined, String(host));
  }
});

test('port tokens name their maker; tokens of the old shape (no maker) are refused, saying to make a new one', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-port-tokens-'));
  try {
    const secretFile = path.join(dir, 'port.secret');
    const tokens = new PortTokens(secretFile);
    const hour = Date.now() + 3600_000;
    assert.deepEqual(tokens.check(tokens.sign('sb-a', 3000, hour, { keyId: 'key-1' }), 'sb-a', 3000), { keyId: 'key-1' });
    const byToken = tokens.sign('sb-a', 3000, hour, { keyId: 'key-1', tokenId: 'tok-1' });
    assert.deepEqual(tokens.check(byToken, 'sb-a', 3000), { keyId: 'key-1', tokenId: 'tok-1' });
    // The secret stays in the daemon's home: a restarted daemon reads the same one.
    assert.deepEqual(new PortTokens(secretFile).check(byToken, 'sb-a', 3000), { keyId: 'key-1', tokenId: 'tok-1' });
    const refused = (token: string, port: number, why: RegExp) =>
      assert.throws(
        () => tokens.check(token, 'sb-a', port),
        (e: Error) => e instanceof WarrenError && e.code === 'unauthenticated' && why.test(e.message),
      );
    refused(byToken, 3001, /another sandbox or port/);
    refused(tokens.sign('sb-a', 3000, Date.now() - 2000, { keyId: 'key-1' }), 3000, /expired/);
    refused(`${byToken.split('.')[0]}.AAAA`, 3000, /invalid token/);
    // Signed under the same secret as before this change, with the claims it had then.
    const secret = Buffer.from(readFileSync(secretFile, 'utf8').trim(), 'base64url');
    const payload = Buffer.from(JSON.stringify({ s: 'sb-a', p: 3000, e: Math.floor(hour / 1000) })).toString('base64url');
    refused(`${payload}.${createHmac('sha256', secret).update(payload).digest('base64url')}`, 3000, /older warren .* make a new one \(warren url sb-a 3000\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A loopback server that answers every request with the headers it got, as JSON. */
async function headerEcho(): Promise<{ port: number; close(): void }> {
  const server = http.createServer((req, res) => res.end(JSON.stringify(req.headers)));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, close: () => server.close() };
}

const SENT: Record<string, string> = {
  authorization: 'Bearer wk_secret',
  'x-api-key': 'wk_secret',
  'x-access-token': 'wt_secret',
  'e2b-traffic-access-token': 'wt_secret',
  'x-warren-csrf': 'csrf_secret',
  cookie: 'app=1; warren_session=s1; warren_port_token=t1; theme=dark',
  'x-app': 'mine',
};

test('forwardHttp: no credential warren reads reaches the app; its own headers and cookies do', async () => {
  const echo = await headerEcho();
  try {
    const conn = net.connect(echo.port, '127.0.0.1');
    const res = await forwardHttp(conn, new Request('http://3000-sb-abc.localhost/', { headers: SENT }), '/');
    const seen = (await res.json()) as Record<string, string>;
    for (const name of CREDENTIAL_HEADERS) assert.equal(seen[name], undefined, name);
    assert.equal(seen.cookie, 'app=1; theme=dark');
    assert.equal(seen['x-app'], 'mine');
  } finally {
    echo.close();
  }
});

test('forwardUpgrade: the same for a WebSocket upgrade, and a terminal bearer subprotocol is taken out', async () => {
  let head = '';
  const upstream = net.createServer((s) => s.on('data', (b: Buffer) => (head += b.toString('latin1'))));
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const front = http.createServer();
  front.on('upgrade', (req: http.IncomingMessage, socket: Duplex, rest: Buffer) => {
    forwardUpgrade(net.connect((upstream.address() as AddressInfo).port, '127.0.0.1'), req, socket, rest, '/ws');
  });
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
  const client = net.connect((front.address() as AddressInfo).port, '127.0.0.1');
  try {
    const lines = Object.entries({ ...SENT, 'sec-websocket-protocol': 'chat, warren.bearer.wk_secret' }).map(([k, v]) => `${k}: ${v}`);
    client.write(`GET /ws HTTP/1.1\r\nHost: 3000-sb-abc.localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n${lines.join('\r\n')}\r\n\r\n`);
    const got = await eventuallyText(() => (head.includes('\r\n\r\n') ? head.toLowerCase() : undefined));
    assert.doesNotMatch(got, /secret|warren_session|warren_port_token|warren\.bearer/);
    assert.match(got, /^cookie: app=1; theme=dark$/m);
    assert.match(got, /^sec-websocket-protocol: chat$/m);
    assert.match(got, /^x-app: mine$/m);
    assert.match(got, /^upgrade: websocket$/m);
  } finally {
    client.destroy();
    front.close();
    upstream.close();
  }
});

async function eventuallyText(read: () => string | undefined): Promise<string> {
  for (let i = 0; i < 200; i++) {
    const v = read();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('the upstream received no request head in 2 s');
}
