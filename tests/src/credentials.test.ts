/**
 * Credential brokering against real sandboxes: a policy rule attaches a header to requests to
 * one host, the daemon terminates TLS for that host with the sandbox's own CA, and the secret
 * never enters the sandbox. The upstream is an HTTPS server this test starts on 127.0.0.1
 * with its own CA (given to the daemon as WARREN_EGRESS_UPSTREAM_CA); it answers 401 unless
 * the exact header arrives, and serves a git repository over dumb HTTP behind the same check.
 * Nothing here leaves 127.0.0.0/8.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, rmSync, statSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { Sandbox, WarrenError } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 300_000 };
const SECRET = `warren-test-secret-${randomBytes(12).toString('hex')}`;
const HEADER = `Bearer ${SECRET}`;
let d: DaemonHandle | undefined;
let dir = '';
let server: https.Server;
let port = 0;
/** The same server on a second port that has no credential rule. */
let plainTls: https.Server;
let plainPort = 0;

before(async () => {
  dir = mkdtempSync('/tmp/warren-cred-test-');
  const openssl = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  openssl([
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-subj',
    '/CN=warren test upstream CA',
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-days',
    '1',
  ]);
  openssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=127.0.0.1', '-keyout', 'key.pem', '-out', 'csr.pem']);
  execFileSync(
    'sh',
    [
      '-c',
      "printf 'subjectAltName=IP:127.0.0.1\\n' > ext && openssl x509 -req -in csr.pem -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 1 -extfile ext",
    ],
    { cwd: dir, stdio: 'pipe' },
  );

  // A bare repository served as static files (git's dumb HTTP protocol).
  const git = (args: string[], cwd = dir) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'init.defaultBranch=main', ...args], { cwd, stdio: 'pipe' });
  git(['init', '-q', 'work']);
  execFileSync('sh', ['-c', 'echo "brokered clone works" > work/README'], { cwd: dir });
  git(['add', 'README'], path.join(dir, 'work'));
  git(['commit', '-qm', 'first'], path.join(dir, 'work'));
  git(['clone', '-q', '--bare', 'work', 'repo.git']);
  git(['--git-dir', 'repo.git', 'update-server-info']);

  const tlsOptions = { key: readFileSync(path.join(dir, 'key.pem')), cert: readFileSync(path.join(dir, 'cert.pem')) };
  const handler = (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => {
    if (req.headers.authorization !== HEADER) {
      res.writeHead(401, { 'content-type': 'text/plain' });
      res.end('unauthorized\n');
      return;
    }
    const url = new URL(req.url ?? '/', 'https://x');
    if (url.pathname === '/api') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify({ ok: true, path: url.pathname })}\n`);
      return;
    }
    const file = path.join(dir, path.normalize(url.pathname));
    if (!url.pathname.startsWith('/repo.git/') || !file.startsWith(path.join(dir, 'repo.git'))) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = readFileSync(file);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  };
  server = https.createServer(tlsOptions, handler);
  plainTls = https.createServer(tlsOptions, handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  await new Promise<void>((r) => plainTls.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
  plainPort = (plainTls.address() as AddressInfo).port;
  d = await startDaemon({ env: { WARREN_EGRESS_UPSTREAM_CA: path.join(dir, 'ca.pem') } });
});

after(async () => {
  server?.close();
  plainTls?.close();
  try {
    await stopAndCheckClean(d);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const policy = () => ({
  allow: [`127.0.0.1:${port}`, `127.0.0.1:${plainPort}`],
  credentials: [{ host: `127.0.0.1:${port}`, headers: { Authorization: HEADER } }],
});

/** 127.0.0.1 is in NO_PROXY inside; these tests reach the host's loopback through the proxy. */
const VIA_PROXY = { NO_PROXY: '', no_proxy: '' };

async function curl(sbx: Sandbox, url: string, extra: string[] = []): Promise<{ code: number; out: string }> {
  const r = await sbx.exec(['curl', '-sS', '--max-time', '20', '-w', '\n%{http_code}', ...extra, url], { env: VIA_PROXY });
  return { code: r.exitCode ?? -1, out: r.stdout + r.stderr };
}

test('curl, node, python and git inside get the header added by the daemon; other hosts are tunnelled untouched', T, async () => {
  const sbx = await d!.create({ network: policy() });
  try {
    const c = await curl(sbx, `https://127.0.0.1:${port}/api`);
    assert.equal(c.code, 0, c.out);
    assert.match(c.out, /"ok":true[\s\S]*\n200$/);

    // node: Node 20 clients do not read the proxy variables, so the script makes its CONNECT itself; trust comes from NODE_EXTRA_CA_CERTS.
    const node = await sbx.exec([
      'node',
      '-e',
      `
const http = require('node:http'), https = require('node:https'), tls = require('node:tls');
http.request({ host: '127.0.0.1', port: 3128, method: 'CONNECT', path: '127.0.0.1:${port}' }).on('connect', (res, socket) => {
  https.get({ host: '127.0.0.1', port: ${port}, path: '/api', createConnection: () => tls.connect({ socket, host: '127.0.0.1' }) }, (r) => {
    let body = ''; r.on('data', (c) => body += c); r.on('end', () => console.log(r.statusCode, body.trim()));
  }).on('error', (e) => { console.error(e.message); process.exit(1); });
}).end();`,
    ]);
    assert.equal(node.exitCode, 0, node.stderr);
    assert.match(node.stdout, /^200 \{"ok":true/);

    const py = await sbx.exec(
      ['python3', '-c', `import urllib.request; r = urllib.request.urlopen('https://127.0.0.1:${port}/api'); print(r.status, r.read().decode().strip())`],
      { env: VIA_PROXY },
    );
    assert.equal(py.exitCode, 0, py.stderr);
    assert.match(py.stdout, /^200 \{"ok": ?true/);

    const clone = await sbx.exec(['git', 'clone', '-q', `https://127.0.0.1:${port}/repo.git`, '/tmp/cloned'], { env: VIA_PROXY });
    assert.equal(clone.exitCode, 0, clone.stderr);
    assert.equal((await sbx.exec(['cat', '/tmp/cloned/README'])).stdout, 'brokered clone works\n');

    // No credential rule for plainPort: the client sees the upstream's own certificate, which
    // only the upstream's CA vouches for, and no header is added.
    const untouched = await curl(sbx, `https://127.0.0.1:${plainPort}/api`);
    assert.notEqual(untouched.code, 0, untouched.out);
    assert.match(untouched.out, /certificate/i);
    const insecure = await curl(sbx, `https://127.0.0.1:${plainPort}/api`, ['-k']);
    assert.match(insecure.out, /unauthorized\n\n401$/);

    // Terminated requests are audited with method and path, without the secret.
    const log = await sbx.egressLog({ limit: 1000 });
    assert.ok(
      log.some((e) => e.method === 'GET' && e.path === '/api' && /credential headers added/.test(e.reason ?? '')),
      JSON.stringify(log),
    );
    assert.ok(
      log.some((e) => e.method === 'GET' && e.path === '/repo.git/info/refs?service=git-upload-pack'),
      JSON.stringify(log),
    );
    assert.ok(!JSON.stringify(log).includes(SECRET));
  } finally {
    await sbx.kill();
  }
});

test('the secret is nowhere in the sandbox: env, files, memory (its hibernation image)', T, async () => {
  // A canary that is in the sandbox on purpose proves the searches would find such bytes.
  const canary = `warren-canary-${randomBytes(12).toString('hex')}`;
  const sbx = await d!.create({ network: policy(), env: { CANARY: canary } });
  try {
    assert.equal((await curl(sbx, `https://127.0.0.1:${port}/api`)).code, 0);
    const environ = await sbx.exec(['sh', '-c', 'cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"'], { user: 'root' });
    assert.ok(environ.stdout.includes(canary), 'the canary is in the environment');
    assert.ok(!environ.stdout.includes(SECRET), 'the secret is not in any environment');
    assert.match(environ.stdout, /^SSL_CERT_FILE=\/etc\/ssl\/certs\/ca-certificates\.crt$/m);

    await sbx.exec(['sh', '-c', `echo ${canary} > /tmp/canary-file`]);
    const grepAll = async (args: string[]) =>
      (
        await sbx.exec(['grep', '-rl', '-D', 'skip', '--exclude-dir=proc', '--exclude-dir=sys', '--exclude-dir=dev', ...args, '/'], {
          user: 'root',
          timeoutSeconds: 240,
        })
      ).stdout;
    assert.match(await grepAll(['-F', '-e', canary]), /^\/tmp\/canary-file$/m, 'the file search finds the canary');
    // The secret itself must not be handed to the sandbox, not even as a search pattern: the
    // pattern splits it with a class that also admits a non-hex character.
    assert.equal(await grepAll(['-E', '-e', secretPattern()]), '', 'no file holds the secret');

    // Memory: the hibernation image holds every page of the sandbox.
    await sbx.hibernate();
    const images = path.join(d!.home, 'images');
    const found = searchTree(images, [Buffer.from(canary), Buffer.from(SECRET)]);
    assert.ok(found.get(canary)!.length > 0, `the canary is in the image under ${images} (the search works)`);
    assert.deepEqual(found.get(SECRET), [], 'the secret is not in the sandbox memory image');

    // Resumed, it still gets the header.
    const after = await curl(sbx, `https://127.0.0.1:${port}/api`);
    assert.equal(after.code, 0, after.out);
    assert.match(after.out, /\n200$/);
  } finally {
    await sbx.kill();
  }
});

test('GET shows credentials redacted; forks inherit them; PUT adds them to a running sandbox; bad input is 400', T, async () => {
  for (const [credentials, pattern] of [
    [[{ host: `127.0.0.1:${port}`, headers: { Authorization: 'Bearer x\r\nInjected: 1' } }], /credentials\[0\]\.headers\.Authorization: the value contains CR/],
    [[{ host: `127.0.0.1:${port}`, headers: { 'Bad Header': 'x' } }], /not a valid header name/],
    [[{ host: '*.example.com', headers: { Authorization: 'x' } }], /wildcards are not allowed/],
    [[{ host: '127.0.0.1:1', headers: { Authorization: 'x' } }], /credentials\[0\]\.host: '127\.0\.0\.1:1' is not allowed by any allow rule/],
  ] as const) {
    await assert.rejects(
      d!.create({ network: { allow: [`127.0.0.1:${port}`], credentials: credentials as never } }),
      (e: WarrenError) => e.status === 400 && pattern.test(e.message) && !e.message.includes('Bearer'),
    );
  }

  const sbx = await d!.create({ network: { allow: [`127.0.0.1:${port}`] } });
  try {
    // Added at runtime: the sandbox is made to trust its CA first.
    assert.match((await curl(sbx, `https://127.0.0.1:${port}/api`, ['-k'])).out, /\n401$/);
    const shown = await sbx.setNetwork(policy());
    assert.deepEqual(shown.credentials, [{ host: `127.0.0.1:${port}`, headers: { authorization: '[redacted]' } }]);
    const got = await sbx.getNetwork();
    assert.deepEqual(got, shown);
    const raw = await d!.http.json('GET', `/v1/sandboxes/${sbx.id}/network`);
    assert.ok(!JSON.stringify(raw).includes(SECRET));
    const c = await curl(sbx, `https://127.0.0.1:${port}/api`);
    assert.match(c.out, /\n200$/, c.out);

    const [child] = await sbx.forkTree(1);
    assert.ok(child);
    try {
      assert.deepEqual(await child.getNetwork(), shown);
      const viaChild = await curl(child, `https://127.0.0.1:${port}/api`);
      assert.match(viaChild.out, /\n200$/, viaChild.out);
      // The child trusts its own CA, not its parent's.
      const parentCa = (await sbx.exec(['cat', '/etc/warren/egress-ca.pem'])).stdout;
      const childCa = (await child.exec(['cat', '/etc/warren/egress-ca.pem'])).stdout;
      assert.match(childCa, /BEGIN CERTIFICATE/);
      assert.notEqual(childCa, parentCa);
      const bundle = (await child.exec(['grep', '-c', 'warren egress CA: begin', '/etc/ssl/certs/ca-certificates.crt'])).stdout.trim();
      assert.equal(bundle, '1', "the bundle holds one warren CA, not the parent's too");
    } finally {
      await child.kill();
    }
    assert.ok(!d!.log().includes(SECRET), 'the secret is not in the daemon log');
  } finally {
    await sbx.kill();
  }
});

/** A regex matching SECRET whose text does not contain SECRET. */
function secretPattern(): string {
  const cut = SECRET.length - 6;
  return `${SECRET.slice(0, cut)}[${SECRET[cut]}G]${SECRET.slice(cut + 1)}`;
}

/**
 * For each needle, the files under root that contain it (read in chunks, overlaps kept). A
 * zstd-packed file (a hibernated image's memory, docs/snapshots.md) is searched unpacked.
 */
function searchTree(root: string, needles: Buffer[]): Map<string, string[]> {
  const found = new Map(needles.map((n) => [n.toString(), [] as string[]]));
  const longest = Math.max(...needles.map((n) => n.length));
  const scratch = mkdtempSync(path.join(root, '..', 'search-'));
  const walk = (p: string) => {
    const st = statSync(p);
    if (st.isDirectory()) {
      for (const name of readdirSync(p)) walk(path.join(p, name));
      return;
    }
    if (!st.isFile()) return;
    let read = p;
    if (p.endsWith('.zst')) {
      read = path.join(scratch, 'unpacked');
      execFileSync('zstd', ['-d', '-q', '-f', '-o', read, p]);
    }
    const fd = openSync(read, 'r');
    try {
      const chunk = Buffer.alloc(8 * 1024 * 1024);
      let carry = Buffer.alloc(0);
      let offset = 0;
      for (;;) {
        const n = readSync(fd, chunk, 0, chunk.length, offset);
        if (n === 0) break;
        offset += n;
        const window = Buffer.concat([carry, chunk.subarray(0, n)]);
        for (const needle of needles) {
          const list = found.get(needle.toString())!;
          if (!list.includes(p) && window.includes(needle)) list.push(p);
        }
        carry = window.subarray(Math.max(0, window.length - longest));
      }
    } finally {
      closeSync(fd);
    }
  };
  try {
    walk(root);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  return found;
}
