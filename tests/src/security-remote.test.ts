/**
 * Remote access (docs/security.md): the daemon serves HTTPS with a certificate it makes once
 * and keeps, prints its fingerprint, and refuses plain HTTP beyond loopback unless asked; the
 * SDK, the CLI and terminals connect with WARREN_CA_FILE, and without it refuse the
 * certificate. Everything on 127.0.0.0/8.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, X509Certificate } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { NetworkError, Sandbox } from '@warren/sdk';
import { CLI, eventually, startDaemon, stopAndCheckClean } from './harness.js';

const T = { timeout: 180_000 };

test(
  'HTTPS with a self-signed certificate: SDK, CLI and a terminal through it with the CA file; refused without it; the same certificate after a restart',
  T,
  async () => {
    let d = await startDaemon({ args: ['--tls-self-signed'] });
    try {
      assert.match(d.url, /^https:\/\/127\.0\.0\.1:\d+$/);
      const certFile = path.join(d.home, 'tls', 'self-signed.pem');
      const cert = readFileSync(certFile, 'utf8');
      const fingerprint = createHash('sha256').update(new X509Certificate(cert).raw).digest('hex').toUpperCase().match(/../g)!.join(':');
      assert.ok(d.log().includes(`SHA-256 fingerprint ${fingerprint}`), 'the daemon prints the fingerprint of the certificate it serves');

      const sbx = await Sandbox.create({ ...d.conn });
      assert.equal((await sbx.exec('echo over tls')).stdout, 'over tls\n');
      await sbx.files.write('/tmp/x', 'through fetch and node:https');
      assert.equal(await sbx.files.readText('/tmp/x'), 'through fetch and node:https');
      const screen: Buffer[] = [];
      const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (b) => screen.push(b) });
      term.write('echo pty-$((6*7))\n');
      const deadline = Date.now() + 20_000;
      while (!Buffer.concat(screen).toString().includes('pty-42') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      assert.match(Buffer.concat(screen).toString(), /pty-42/, 'a terminal WebSocket over wss');
      await term.kill();

      // Without the CA: the certificate is refused, nothing is sent.
      await assert.rejects(Sandbox.list({ url: d.url, apiKey: d.apiKey }), (e: Error) => e instanceof NetworkError && /certificate/i.test(e.message));
      // Plain HTTP to the TLS port gets no API.
      const plain = await fetch(`${d.url.replace('https:', 'http:')}/v1/health`).then(
        (r) => r.status,
        () => 'refused',
      );
      assert.notEqual(plain, 200);

      // The CLI with WARREN_CA_FILE.
      const ls = spawnSync(process.execPath, [CLI, 'ls', '--json'], {
        encoding: 'utf8',
        env: { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey, WARREN_CA_FILE: certFile },
      });
      assert.equal(ls.status, 0, ls.stderr);
      assert.ok((JSON.parse(ls.stdout) as Array<{ id: string }>).some((s) => s.id === sbx.id));

      // A restart serves the certificate clients already trust.
      await d.stop();
      d = await startDaemon({ home: d.home, args: ['--tls-self-signed'] });
      assert.equal(readFileSync(certFile, 'utf8'), cert);
      assert.ok((await Sandbox.list(d.conn)).some((s) => s.id === sbx.id));
      await (await Sandbox.connect(sbx.id, d.conn)).kill();
    } finally {
      await stopAndCheckClean(d);
    }
  },
);

test('port URLs for remote browsers: under WARREN_PORT_DOMAIN, over HTTPS, covered by the self-signed certificate, opened by their token', T, async () => {
  const d = await startDaemon({ args: ['--tls-self-signed'], env: { WARREN_PORT_DOMAIN: 'warren.test' } });
  try {
    const sbx = await Sandbox.create({ ...d.conn });
    await sbx.exec('mkdir -p /tmp/site && echo served-remotely > /tmp/site/index.html && cd /tmp/site && nohup python3 -m http.server 8000 >/dev/null 2>&1 &', {
      check: true,
    });
    const signed = new URL(await sbx.getUrl(8000));
    const daemonPort = new URL(d.url).port;
    assert.equal(`${signed.protocol}//${signed.host}`, `https://8000-${sbx.id}.warren.test:${daemonPort}`);
    // No DNS for warren.test here: connect to the daemon's address, name the host as a browser would.
    const get = () =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = https.request(
          {
            host: '127.0.0.1',
            port: Number(daemonPort),
            path: `${signed.pathname}${signed.search}`,
            servername: signed.hostname,
            headers: { host: signed.host },
            ca: d.conn.ca,
          },
          (res) => {
            let body = '';
            res.setEncoding('utf8');
            res.on('data', (c: string) => (body += c));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          },
        );
        req.on('error', reject);
        req.end();
      });
    const page = await eventually(
      async () => {
        const r = await get();
        return r.status === 200 ? r : undefined;
      },
      20_000,
      'the port URL answering',
    );
    assert.match(page.body, /served-remotely/);
    // The same host without the token is refused.
    const bare = await new Promise<number>((resolve, reject) => {
      https
        .get({ host: '127.0.0.1', port: Number(daemonPort), path: '/', servername: signed.hostname, headers: { host: signed.host }, ca: d.conn.ca }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
        .on('error', reject);
    });
    assert.equal(bare, 401);
    await sbx.kill();
  } finally {
    await stopAndCheckClean(d);
  }
});

test('WARREN_PORT_DOMAIN that is not a DNS name stops the daemon before it starts, naming the variable', T, () => {
  const refused = spawnSync(process.execPath, [CLI, 'daemon', '--home', '/nonexistent/never-made'], {
    encoding: 'utf8',
    timeout: 30_000,
    env: { ...process.env, WARREN_PORT_DOMAIN: 'bad domain/x' },
  });
  assert.notEqual(refused.status, 0);
  assert.match(refused.stderr, /WARREN_PORT_DOMAIN must be a DNS name/);
});

test('listening beyond loopback without TLS is refused before anything starts, naming the flags that allow it', T, () => {
  const refused = spawnSync(process.execPath, [CLI, 'daemon', '--listen', '0.0.0.0:0', '--home', '/nonexistent/never-made'], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  assert.notEqual(refused.status, 0);
  assert.match(refused.stderr, /refusing to listen on 0\.0\.0\.0 without TLS/);
  assert.match(refused.stderr, /--tls-self-signed/);
});
