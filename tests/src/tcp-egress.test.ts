/**
 * Plain TCP egress for ordinary clients (TCP forwarders, docs/network.md) against real
 * sandboxes, and proof that the daemon resolves no name the policy refuses; and TLS hellos
 * with Encrypted Client Hello, refused on a name's tunnel unless an ech: rule allows them.
 *
 * The daemon resolves egress names only through a recording DNS server this test runs on
 * 127.0.0.1 (WARREN_EGRESS_DNS_SERVER), which answers 127.0.0.1 for NAME. The upstream is a
 * line server on 127.0.0.1, opened by `NAME:PORT` (which gives the forwarder) plus
 * `127.0.0.1:PORT` (the proxy refuses local addresses unless an IP rule names them). Nothing
 * here reaches beyond 127.0.0.0/8.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net, { type AddressInfo } from 'node:net';
import { Snapshots, type Sandbox } from '@warren/sdk';
import { eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';
import { startDnsRecorder, type DnsRecorder } from './dns-recorder.js';

const T = { timeout: 240_000 };
const NAME = 'echo.warren.test';
const DENIED = 'denied.warren.test';
/** Sends a banner and closes at once, like a server refusing politely or an HTTP/1.0 answer. */
const BANNER = 'banner.warren.test';
const BANNER_TEXT = `${'x'.repeat(100_000)} the end\n`;
let d: DaemonHandle | undefined;
let dns: DnsRecorder;
let lines: net.Server;
let other: net.Server;
let port = 0;
let otherPort = 0;
let banner: net.Server;
let bannerPort = 0;
/** A front end's name (ECH's outer name): its server counts the bytes it receives. */
const FRONT = 'front.warren.test';
let front: net.Server;
let frontPort = 0;
let frontReceived = 0;

/** Speaks first (`ready`), then answers each line with `echo LINE`. */
function lineServer(): net.Server {
  return net.createServer((sock) => {
    sock.write('ready\n');
    let buf = '';
    sock.on('data', (d: Buffer) => {
      buf += d.toString();
      for (let at = buf.indexOf('\n'); at >= 0; at = buf.indexOf('\n')) {
        sock.write(`echo ${buf.slice(0, at)}\n`);
        buf = buf.slice(at + 1);
      }
    });
    sock.on('error', () => sock.destroy());
  });
}

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as AddressInfo).port;
}

before(async () => {
  dns = await startDnsRecorder({ [NAME]: '127.0.0.1', [BANNER]: '127.0.0.1', [FRONT]: '127.0.0.1' });
  front = net.createServer((sock) => {
    sock.on('data', (b: Buffer) => {
      frontReceived += b.length;
      sock.end();
    });
    sock.on('error', () => sock.destroy());
  });
  frontPort = await listen(front);
  banner = net.createServer((sock) => sock.end(BANNER_TEXT));
  bannerPort = await listen(banner);
  lines = lineServer();
  other = lineServer();
  port = await listen(lines);
  otherPort = await listen(other);
  d = await startDaemon({ env: { WARREN_EGRESS_DNS_SERVER: dns.server } });
});

after(async () => {
  lines?.close();
  other?.close();
  banner?.close();
  front?.close();
  await dns?.close();
  await stopAndCheckClean(d);
});

const rules = () => [`${NAME}:${port}`, `127.0.0.1:${port}`];

/** A python client that knows nothing of proxies: connect, read the greeting, send a line. */
const PY_CLIENT = `
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=15)
f = s.makefile('rwb')
greeting = f.readline().decode().strip()
f.write(b'hello from python\\n'); f.flush()
print(greeting + '|' + f.readline().decode().strip())
`;

async function pyConnect(sbx: Sandbox, host: string, p: number, user?: string): Promise<{ code: number; out: string; err: string }> {
  const r = await sbx.exec(['python3', '-c', PY_CLIENT, host, String(p)], user ? { user } : {});
  return { code: r.exitCode ?? -1, out: r.stdout.trim(), err: r.stderr };
}

/** What the agent writes into every sandbox's /etc/hosts (packages/guest/src/hosts.ts). */
function loopbackNames(id: string): string {
  return `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t${id}\t# warren: the sandbox hostname\n`;
}

async function hostsFile(sbx: Sandbox): Promise<string> {
  return (await sbx.exec(['cat', '/etc/hosts'])).stdout;
}

test('an ordinary client reaches an allowed NAME:PORT through its forwarder, audited like a CONNECT', T, async () => {
  const sbx = await d!.create({ network: { allow: rules() } });
  try {
    assert.match(await hostsFile(sbx), new RegExp(`^127\\.77\\.0\\.1\\t${NAME.replace(/\./g, '\\.')}$`, 'm'));
    const py = await pyConnect(sbx, NAME, port);
    assert.equal(py.code, 0, py.err);
    assert.equal(py.out, 'ready|echo hello from python');
    // bash's /dev/tcp: getaddrinfo and connect, no proxy anywhere.
    const sh = await sbx.exec(['bash', '-c', `exec 3<>/dev/tcp/${NAME}/${port}; read -r g <&3; echo 'from bash' >&3; read -r r <&3; echo "$g|$r"`]);
    assert.equal(sh.exitCode, 0, sh.stderr);
    assert.equal(sh.stdout.trim(), 'ready|echo from bash');

    await eventually(
      async () => (await sbx.egressLog()).filter((e) => e.host === NAME && e.port === port && e.decision === 'allowed' && e.bytesUp > 0).length >= 2,
      10_000,
      'two allowed records',
    );
    // A server that answers and closes at once: the whole answer arrives before the EOF,
    // also when the client has already shut its sending side.
    await sbx.setNetwork({ allow: [...rules(), `${BANNER}:${bannerPort}`, `127.0.0.1:${bannerPort}`] });
    const read = await sbx.exec([
      'python3',
      '-c',
      `
import socket
s = socket.create_connection(('${BANNER}', ${bannerPort}), timeout=15)
s.shutdown(socket.SHUT_WR)
got = b''
while True:
    c = s.recv(65536)
    if not c: break
    got += c
print(len(got), got[-8:].decode().strip())`,
    ]);
    assert.equal(read.exitCode, 0, read.stderr);
    assert.equal(read.stdout.trim(), `${BANNER_TEXT.length} the end`);
    const rec = (await sbx.egressLog()).find((e) => e.host === NAME && e.port === port)!;
    assert.equal(rec.method, 'CONNECT');
    assert.ok(dns.asked(NAME), 'the daemon resolved the allowed name through the recorder');
  } finally {
    await sbx.kill();
  }
});

test('names the policy refuses are never resolved for the sandbox; refused ports are audited', T, async () => {
  const sbx = await d!.create({ network: { allow: rules() } });
  try {
    // Through the proxy (curl, the connect helper): refused by name, before any lookup.
    const curl = await sbx.exec(['curl', '-sS', '--max-time', '20', `https://${DENIED}:${port}/`]);
    assert.notEqual(curl.exitCode, 0);
    const helper = await sbx.exec(`printf 'x\\n' | /opt/warren/lib/connect ${DENIED} ${port}`);
    assert.equal(helper.exitCode, 1);
    assert.match(helper.stderr, /not allowed/);
    // An allowed name on a port no rule names: refused, audited, and not looked up either.
    const wrongPort = await sbx.exec(`printf 'x\\n' | /opt/warren/lib/connect ${NAME} ${otherPort}`);
    assert.equal(wrongPort.exitCode, 1);
    // Ordinary clients: the denied name resolves nowhere inside (no forwarder, no DNS)...
    const byName = await pyConnect(sbx, DENIED, port);
    assert.notEqual(byName.code, 0);
    assert.match(byName.err, /gaierror|Name or service not known/);
    // ...and no forwarder listens on a port no rule names.
    const otherForward = await pyConnect(sbx, NAME, otherPort);
    assert.notEqual(otherForward.code, 0);
    assert.match(otherForward.err, /refused/i);
    // Root pointing the denied name at the forwarder reaches only the forwarder's own target:
    // the name a client looked up never leaves the sandbox.
    const hijack = await sbx.exec(['bash', '-c', `echo '127.77.0.1 ${DENIED}' >> /etc/hosts`], { user: 'root' });
    assert.equal(hijack.exitCode, 0, hijack.stderr);
    const via = await pyConnect(sbx, DENIED, port, 'root');
    assert.equal(via.code, 0, via.err);
    assert.equal(via.out, 'ready|echo hello from python');

    await eventually(
      async () => (await sbx.egressLog()).some((e) => e.decision === 'allowed' && e.host === NAME && e.port === port),
      10_000,
      'the forwarded connection in the audit log',
    );
    const log = await sbx.egressLog();
    assert.ok(
      log.some((e) => e.host === DENIED && e.port === port && e.method === 'CONNECT' && e.decision === 'denied'),
      JSON.stringify(log),
    );
    assert.ok(
      log.some((e) => e.host === NAME && e.port === otherPort && e.decision === 'denied'),
      JSON.stringify(log),
    );
    assert.equal(
      log.some((e) => e.host === DENIED && e.decision === 'allowed'),
      false,
      JSON.stringify(log),
    );

    assert.ok(dns.asked(NAME), 'the recorder saw the allowed name (it works)');
    assert.equal(dns.asked(DENIED), false, `the daemon looked up a denied name: ${JSON.stringify(dns.queries)}`);
  } finally {
    await sbx.kill();
  }
});

test('PUT network opens and closes forwarders and keeps the sandbox’s own /etc/hosts lines', T, async () => {
  const sbx = await d!.create();
  try {
    // No rules, no block: only the loopback names every system has, and the sandbox's own.
    const loopback = loopbackNames(sbx.id);
    assert.equal(await hostsFile(sbx), loopback);
    const names = await sbx.exec(['python3', '-c', 'import socket; print(socket.gethostbyname("localhost"), socket.gethostbyname(socket.gethostname()))']);
    assert.equal(names.stdout, '127.0.0.1 127.0.1.1\n', names.stderr);
    // IPv4-only lookups (AF_INET with AI_ADDRCONFIG: curl -4, getent ahostsv4) need an IPv4
    // address other than 127.0.0.1 for glibc to count IPv4 as configured: warren-init gives
    // loopback 127.0.1.1, and keeps the NET_ADMIN it needs for that from every process inside.
    const v4 = await sbx.exec(['bash', '-c', 'getent ahostsv4 localhost | head -1; getent ahostsv4 "$(hostname)" | head -1']);
    assert.match(v4.stdout, /^127\.0\.0\.1\s+STREAM localhost\n127\.0\.1\.1\s+STREAM \S+\n$/, v4.stderr);
    const caps = await sbx.exec(['grep', 'CapBnd', '/proc/self/status'], { user: 'root' });
    const bounding = BigInt(`0x${caps.stdout.trim().split(/\s+/)[1]}`);
    assert.equal(bounding & ((1n << 12n) | (1n << 21n)), 0n, `root inside holds no CAP_NET_ADMIN or CAP_SYS_ADMIN: ${caps.stdout}`);
    const mine = await sbx.exec(['bash', '-c', "echo '10.11.12.13 mine.example' >> /etc/hosts"], { user: 'root' });
    assert.equal(mine.exitCode, 0, mine.stderr);

    await sbx.setNetwork({ allow: rules() });
    assert.match(await hostsFile(sbx), new RegExp(`\\t${NAME.replace(/\./g, '\\.')}$`, 'm'));
    assert.equal((await pyConnect(sbx, NAME, port)).out, 'ready|echo hello from python');
    const forwardV4 = await sbx.exec(['getent', 'ahostsv4', NAME]);
    assert.match(forwardV4.stdout, /^127\.77\.0\.1\s+STREAM /, `an IPv4-only lookup of a forwarded name: ${forwardV4.stderr}`);

    await sbx.setNetwork({ allow: [`127.0.0.1:${port}`] });
    const hosts = await hostsFile(sbx);
    assert.equal(hosts, `${loopback}10.11.12.13 mine.example\n`, 'the managed block is gone, the sandbox’s line kept');
    const gone = await pyConnect(sbx, '127.77.0.1', port);
    assert.notEqual(gone.code, 0);
    assert.match(gone.err, /refused/i, 'the listener is closed');

    // The name comes back with the same address.
    await sbx.setNetwork({ allow: rules() });
    assert.match(await hostsFile(sbx), /^127\.77\.0\.1\t/m);
    assert.equal((await pyConnect(sbx, NAME, port)).out, 'ready|echo hello from python');
  } finally {
    await sbx.kill();
  }
});

test('forwarders work in forks and after hibernate and resume', T, async () => {
  const sbx = await d!.create({ network: { allow: rules() } });
  try {
    assert.equal((await pyConnect(sbx, NAME, port)).out, 'ready|echo hello from python');
    const [child] = await sbx.forkTree(1);
    assert.ok(child);
    try {
      const c = await pyConnect(child, NAME, port);
      assert.equal(c.code, 0, c.err);
      assert.equal(c.out, 'ready|echo hello from python');
      await eventually(
        async () => (await child.egressLog()).some((e) => e.host === NAME && e.port === port && e.decision === 'allowed'),
        10_000,
        'the child’s audit record',
      );
      // The child's policy is its own: closing it there leaves the parent's forwarder open.
      await child.setNetwork({ allow: [] });
      assert.notEqual((await pyConnect(child, NAME, port)).code, 0);
    } finally {
      await child.kill();
    }
    assert.equal((await pyConnect(sbx, NAME, port)).out, 'ready|echo hello from python');

    // A sandbox restored from a snapshot gets the request's policy (none here): the
    // forwarders and the block it carried in its memory and files are taken away.
    const snap = await sbx.snapshot();
    const restored = await d!.create({ snapshot: snap.id });
    try {
      assert.equal(await hostsFile(restored), loopbackNames(restored.id));
      const none = await pyConnect(restored, '127.77.0.1', port);
      assert.notEqual(none.code, 0);
      assert.match(none.err, /refused/i);
    } finally {
      await restored.kill();
      await Snapshots.delete(snap.id, d!.conn);
    }

    await sbx.hibernate();
    assert.equal((await sbx.refresh()).state, 'hibernated');
    const after = await pyConnect(sbx, NAME, port); // the call resumes it
    assert.equal(after.code, 0, after.err);
    assert.equal(after.out, 'ready|echo hello from python');

    // A policy changed while hibernated applies to the forwarders at resume.
    await sbx.hibernate();
    await sbx.setNetwork({ allow: [`127.0.0.1:${port}`] });
    assert.equal((await sbx.refresh()).state, 'hibernated', 'setting the policy does not wake it');
    const closed = await pyConnect(sbx, '127.77.0.1', port);
    assert.notEqual(closed.code, 0);
    assert.match(closed.err, /refused/i);
  } finally {
    await sbx.kill();
  }
});

/** A ClientHello naming `name` in SNI, with an Encrypted Client Hello extension (opaque to the proxy, as a real one is). */
function echClientHello(name: string): Buffer {
  const u16 = (n: number) => Buffer.from([n >> 8, n & 0xff]);
  const sni = Buffer.concat([u16(name.length + 3), Buffer.from([0]), u16(name.length), Buffer.from(name)]);
  const extensions = Buffer.concat([u16(0), u16(sni.length), sni, u16(0xfe0d), u16(64), Buffer.alloc(64, 0xab)]);
  const body = Buffer.concat([Buffer.from([3, 3]), Buffer.alloc(32, 7), Buffer.from([0, 0, 2, 0x13, 0x01, 1, 0]), u16(extensions.length), extensions]);
  const handshake = Buffer.concat([Buffer.from([1, 0]), u16(body.length), body]);
  return Buffer.concat([Buffer.from([0x16, 3, 1]), u16(handshake.length), handshake]);
}

/** From inside: CONNECT through the proxy variables' proxy, send the hello, wait for the close. */
const PY_HELLO = `
import socket, sys
s = socket.create_connection(('127.0.0.1', 3128), timeout=15)
s.sendall(('CONNECT %s:%s HTTP/1.1\\r\\nHost: %s:%s\\r\\n\\r\\n' % (sys.argv[1], sys.argv[2], sys.argv[1], sys.argv[2])).encode())
head = b''
while b'\\r\\n\\r\\n' not in head:
    chunk = s.recv(4096)
    if not chunk: break
    head += chunk
print(head.split(b'\\r\\n')[0].decode())
s.sendall(bytes.fromhex(sys.argv[3]))
try:
    while s.recv(4096): pass
except ConnectionResetError:
    pass
print('closed')
`;

test('a ClientHello with Encrypted Client Hello to an allowed name is refused before a byte goes upstream, unless an ech: rule allows it', T, async () => {
  const allow = [`${FRONT}:${frontPort}`, `127.0.0.1:${frontPort}`];
  const sbx = await d!.create({ network: { allow } });
  try {
    // Browsers' GREASE ECH would be refused on every HTTPS page: the agent turns ECH off for them.
    for (const dir of ['/etc/chromium/policies/managed', '/etc/opt/chrome/policies/managed']) {
      const policy = await sbx.files.readText(`${dir}/warren-egress.json`);
      assert.deepEqual(JSON.parse(policy), { EncryptedClientHelloEnabled: false }, dir);
    }
    const hello = echClientHello(FRONT).toString('hex');
    const refused = await sbx.exec(['python3', '-c', PY_HELLO, FRONT, String(frontPort), hello], { user: 'root' });
    assert.equal(refused.exitCode, 0, refused.stderr);
    assert.match(refused.stdout, / 200 /);
    const denied = await eventually(
      async () => (await sbx.egressLog()).find((e) => e.host === FRONT && e.decision === 'denied'),
      10_000,
      'the ECH refusal in the egress log',
    );
    assert.match(denied.reason ?? '', /Encrypted Client Hello \(extension 0xfe0d\).*an ech: rule for front\.warren\.test allows it/);
    assert.equal(denied.bytesUp, 0);
    assert.equal(frontReceived, 0, 'the front end received a byte');

    // An ech: rule opens it: the hello reaches the front end.
    await sbx.setNetwork({ allow: [`ech:${FRONT}:${frontPort}`, `127.0.0.1:${frontPort}`] });
    const passed = await sbx.exec(['python3', '-c', PY_HELLO, FRONT, String(frontPort), hello], { user: 'root' });
    assert.equal(passed.exitCode, 0, passed.stderr);
    await eventually(() => frontReceived > 0 || undefined, 10_000, 'the hello at the front end');
    const allowed = await eventually(
      async () => (await sbx.egressLog()).find((e) => e.host === FRONT && e.decision === 'allowed'),
      10_000,
      'the allowed tunnel in the egress log',
    );
    assert.match(allowed.reason ?? '', /allowed by an ech: rule/);
  } finally {
    await sbx.kill();
  }
});
