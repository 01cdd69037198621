/**
 * Egress through the daemon's HTTP proxy vs direct, all on loopback (issue 5's benchmark):
 * added latency per HTTPS request, bulk download throughput, and 200 concurrent connections
 * from one sandbox.
 *
 * Servers: one HTTPS server (node, an ECDSA P-256 self-signed cert made with openssl) runs as
 * a child process on the host on 127.0.0.1; the same script runs inside the sandbox on its own
 * loopback as the in-sandbox baseline. Every response says `Connection: close`, so each request
 * is a new TCP connection and TLS handshake (and through the proxy a new CONNECT).
 *
 * - Proxy alone (host): the daemon's EgressProxy class (packages/daemon/dist/network/proxy.js),
 *   served on a loopback TCP port by a child process of its own, as the daemon serves it in its
 *   own process: pino at level silent, the audit in a SQLite file (WAL, as the daemon's), a
 *   policy of the single rule 127.0.0.1:PORT, a lookup that refuses every name (none is asked
 *   for). A node client in this process times a TLS GET directly and through CONNECT; curl on
 *   the host does the same.
 * - End to end (sandbox): curl inside the sandbox with HTTPS_PROXY (the agent's listener on
 *   127.0.0.1:3128, its channel, the daemon's proxy, the host server), against two baselines:
 *   the same curl under gVisor in a raw `runsc run --network=host` (hostinet: the Sentry's
 *   sockets are host sockets) straight to the host server, the "direct" of a client in
 *   gVisor; and curl inside the sandbox to the in-sandbox server with no proxy.
 *
 * Nothing here contacts an address outside 127.0.0.0/8.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import type { Sandbox } from '@warren/sdk';
import { REPO } from '@warren/tests/harness';
import type { Context } from '../context.js';
import { GUEST_NODE, RawRunsc } from '../raw.js';
import { fmt, percentile } from '../stats.js';

const LATENCY = 'egress (latency)';
const THROUGHPUT = 'egress (throughput)';
const CONCURRENCY = 'egress (concurrency)';

/** Bulk download size (the issue's 256 MiB). */
const BULK_BYTES = 256 * 2 ** 20;
/** Connections held open at once from one sandbox. */
const CONCURRENT = 200;
/** Port of the baseline server inside the sandbox (its own loopback). */
const SBX_PORT = 8443;
const SBX_DIR = '/tmp/warren-bench-egress';
/** URLs per curl invocation in the latency loops (direct and proxied batches alternate). */
const CURL_BATCH = 20;
const MiB = 2 ** 20;

/** The HTTPS server, on the host and inside the sandbox: `node server.cjs PORT CERT KEY`. */
const SERVER_CJS = String.raw`'use strict';
const https = require('node:https');
const fs = require('node:fs');
const [port, cert, key] = process.argv.slice(2);
const block = Buffer.alloc(1 << 20, 0x78);
const server = https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, (req, res) => {
  const url = new URL(req.url, 'https://bench');
  if (url.pathname === '/bulk') {
    const total = Number(url.searchParams.get('bytes'));
    res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': total, Connection: 'close' });
    let left = total;
    const pump = () => {
      while (left > 0) {
        const n = Math.min(left, block.length);
        left -= n;
        if (!res.write(n === block.length ? block : block.subarray(0, n))) return void res.once('drain', pump);
      }
      res.end();
    };
    pump();
  } else {
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': 3, Connection: 'close' });
    res.end('ok\n');
  }
});
server.listen(Number(port), '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })));
`;

/**
 * The daemon's EgressProxy on a loopback port, in a process of its own:
 * `node proxy.mjs DAEMON_DIR RULE AUDIT_DB`.
 */
const PROXY_MJS = `import net from 'node:net';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
const [daemonDir, rule, dbFile] = process.argv.slice(2);
const require = createRequire(path.join(daemonDir, 'package.json'));
const { pino } = require('pino');
const Database = require('better-sqlite3');
const load = (f) => import(pathToFileURL(path.join(daemonDir, 'dist/network', f)).href);
const { EgressProxy } = await load('proxy.js');
const { parsePolicy } = await load('policy.js');
const { EgressLog } = await load('audit.js');
const db = new Database(dbFile);
db.pragma('journal_mode = WAL');
db.pragma('synchronous = NORMAL');
const audit = new EgressLog(db);
const policy = parsePolicy([rule]);
const proxy = new EgressProxy({
  log: pino({ level: 'silent' }),
  audit: { start: (r) => audit.record(r), finish: (id, up, down) => audit.finish(id, up, down) },
  lookup: async (host) => { throw Object.assign(new Error('the bench resolves no names: ' + host), { code: 'ENOTFOUND' }); },
});
// noDelay: this socket stands in for the agent's tunnel, which reaches the daemon's proxy as a
// Duplex with no Nagle; the proxy's own upstream socket is left as the proxy makes it.
const front = net.createServer({ noDelay: true }, (socket) => proxy.serve(socket, 'bench', () => policy));
front.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: front.address().port })));
`;

/**
 * Inside the sandbox: N TLS connections opened at once (through CONNECT on the proxy port, or
 * directly), all held open until every one is up (a barrier), then one GET on each.
 * `python3 conc.py PORT N proxy|direct`; prints one JSON line.
 */
const CONC_PY = String.raw`import json, socket, ssl, sys, threading, time
port, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
threading.stack_size(512 * 1024)
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
lock = threading.Lock()
errors = []
opened = [0]
established = [None]
def all_arrived():
    established[0] = time.monotonic()
barrier = threading.Barrier(n, action=all_arrived, timeout=180)
def fail(stage, e):
    with lock:
        errors.append('%s: %s: %s' % (stage, type(e).__name__, e))
def worker():
    t = None
    try:
        s = socket.create_connection(('127.0.0.1', 3128 if mode == 'proxy' else port), timeout=60)
        if mode == 'proxy':
            s.sendall(('CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n' % (port, port)).encode())
            head = b''
            while b'\r\n\r\n' not in head:
                c = s.recv(4096)
                if not c:
                    raise ConnectionError('connection closed before the CONNECT answer')
                head += c
            if not head.startswith(b'HTTP/1.1 200'):
                raise ConnectionError('CONNECT answered ' + head.split(b'\r\n')[0].decode(errors='replace'))
        t = ctx.wrap_socket(s)
        with lock:
            opened[0] += 1
    except Exception as e:
        fail('open', e)
    try:
        barrier.wait()
    except threading.BrokenBarrierError as e:
        fail('barrier', e)
    if t is None:
        return
    try:
        t.sendall(('GET /tiny HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n' % port).encode())
        data = b''
        while True:
            try:
                c = t.recv(65536)
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            if not c:
                break
            data += c
        if not (data.startswith(b'HTTP/1.1 200') and data.endswith(b'ok\n')):
            raise ValueError('bad response: %r' % data[:80])
    except Exception as e:
        fail('request', e)
    finally:
        t.close()
t0 = time.monotonic()
threads = [threading.Thread(target=worker) for _ in range(n)]
for th in threads:
    th.start()
for th in threads:
    th.join()
end = time.monotonic()
print(json.dumps({
    'opened': opened[0],
    'errorCount': len(errors),
    'errors': errors[:5],
    'establishedMs': None if established[0] is None else (established[0] - t0) * 1000,
    'totalMs': (end - t0) * 1000,
}))
`;

interface ConcResult {
  opened: number;
  errorCount: number;
  errors: string[];
  establishedMs: number | null;
  totalMs: number;
}

/** Starts `node SCRIPT ...args` on the host; resolves with the port from its first stdout line. */
function startChild(ctx: Context, what: string, args: string[]): Promise<{ child: ChildProcess; port: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    ctx.defer(`stop ${what} (pid ${child.pid})`, () => stopChild(child));
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`${what} did not start in 15 s: ${err.slice(-500)}`)), 15_000);
    child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const nl = out.indexOf('\n');
      if (nl < 0) return;
      clearTimeout(timer);
      try {
        resolve({ child, port: (JSON.parse(out.slice(0, nl)) as { port: number }).port });
      } catch {
        reject(new Error(`${what} printed ${out.slice(0, 200)}`));
      }
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${signal ?? code}): ${err.slice(-500)}`));
    });
  });
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

function run(cmd: string, args: string[], timeoutMs = 600_000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 16 * MiB }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} failed: ${err.message}; ${stderr.slice(-500)}`));
      else resolve(stdout);
    });
  });
}

async function sbxRun(sbx: Sandbox, argv: string[], what: string, user?: string): Promise<string> {
  const r = await sbx.exec(argv, { timeoutSeconds: 600, ...(user ? { user } : {}) });
  if (r.exitCode !== 0) throw new Error(`${what} in the sandbox exited ${r.exitCode}: ${(r.stderr + r.stdout).slice(-1000)}`);
  return r.stdout;
}

// -----------------------------------------------------------------------------------------
// Host node client: one TLS GET on a fresh connection, directly or through CONNECT

/**
 * CONNECT on a raw socket, the way curl does it: one write, then the answer's head. (node's
 * `http.request` CONNECT client costs about 0.8 ms of its own per tunnel, which is the client's
 * and not the proxy's.)
 */
function connectTunnel(proxyPort: number, authority: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port: proxyPort, noDelay: true }, () => {
      socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
    });
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      socket.off('error', reject);
      if (!/^HTTP\/1\.[01] 200/.test(head) || end + 4 !== head.length) {
        socket.destroy();
        reject(new Error(`CONNECT ${authority} answered ${JSON.stringify(head.slice(0, 100))}`));
      } else {
        // tls.connect reads the socket from here on.
        socket.pause();
        resolve(socket);
      }
    };
    socket.on('data', onData);
    socket.on('error', reject);
  });
}

/** ms for one `GET /tiny` over a new TLS connection (through the proxy if proxyPort is given). */
async function tinyGet(port: number, proxyPort?: number): Promise<number> {
  const t0 = performance.now();
  const tunnel = proxyPort === undefined ? undefined : await connectTunnel(proxyPort, `127.0.0.1:${port}`);
  const text = await new Promise<string>((resolve, reject) => {
    const opts = tunnel ? { socket: tunnel, rejectUnauthorized: false } : { host: '127.0.0.1', port, rejectUnauthorized: false };
    const secure = tls.connect(opts, () => secure.write(`GET /tiny HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\n\r\n`));
    if (!tunnel) secure.setNoDelay(true); // as curl does (TCP_NODELAY by default)
    const chunks: Buffer[] = [];
    secure.on('data', (c: Buffer) => chunks.push(c));
    secure.on('end', () => resolve(Buffer.concat(chunks).toString()));
    secure.on('error', reject);
  });
  const t = performance.now() - t0;
  if (!text.startsWith('HTTP/1.1 200') || !text.endsWith('ok\n')) throw new Error(`unexpected response: ${text.slice(0, 200)}`);
  return t;
}

// -----------------------------------------------------------------------------------------
// curl, on the host and inside the sandbox

/** Arguments for one curl invocation of `count` GETs, printing time_total and the status per transfer. */
function curlTinyArgs(url: string, count: number, proxy: string[]): string[] {
  const args = ['-sk', ...proxy, '--max-time', '60', '-w', '%{time_total} %{http_code}\\n'];
  for (let i = 0; i < count; i++) args.push('-o', '/dev/null', url);
  return args;
}

function parseCurlTimes(out: string, count: number, what: string): number[] {
  const lines = out.trim().split('\n').filter(Boolean);
  const times = lines.map((l) => {
    const [t, code] = l.trim().split(/\s+/);
    if (code !== '200') throw new Error(`${what}: HTTP ${code} (${out.slice(0, 300)})`);
    return Number(t) * 1000;
  });
  if (times.length !== count || times.some((t) => !Number.isFinite(t))) throw new Error(`${what}: expected ${count} timings, got: ${out.slice(0, 300)}`);
  return times;
}

function curlBulkArgs(url: string, proxy: string[]): string[] {
  return ['-sk', ...proxy, '--max-time', '600', '-o', '/dev/null', '-w', '%{speed_download} %{size_download} %{http_code}', url];
}

function parseCurlSpeed(out: string, what: string): number {
  const [speed, size, code] = out.trim().split(/\s+/);
  if (code !== '200' || Number(size) !== BULK_BYTES) throw new Error(`${what}: HTTP ${code}, ${size} bytes of ${BULK_BYTES}`);
  return Number(speed) / MiB;
}

/** Every audit record of the sandbox, paged: how many, how many denied. */
async function auditCounts(sbx: Sandbox): Promise<{ total: number; denied: number; firstDenied?: string }> {
  let after: number | undefined;
  let total = 0;
  let denied = 0;
  let firstDenied: string | undefined;
  for (;;) {
    const page = await sbx.egressLog({ after, limit: 1000 });
    for (const e of page) {
      total++;
      if (e.decision === 'denied') {
        denied++;
        firstDenied ??= `${e.host}:${e.port} ${e.reason ?? ''}`;
      }
    }
    const last = page.at(-1);
    if (page.length < 1000 || !last) return { total, denied, firstDenied };
    after = last.id;
  }
}

/** Direct (no proxy, whatever the environment says) and through a given proxy. */
const NO_PROXY = ['--noproxy', '*'];
/** Inside the sandbox: HTTPS_PROXY from the environment; 127.0.0.1 is in NO_PROXY, so clear that. */
const SBX_PROXY = ['--noproxy', ''];

export async function runEgress(ctx: Context): Promise<void> {
  const nLat = ctx.iters.egress;
  const nBulk = ctx.iters.egressbulk;
  const nConc = ctx.iters.egressconc;
  const dir = ctx.tmp('egress');
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  await run('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-subj',
    '/CN=localhost',
    '-keyout',
    key,
    '-out',
    cert,
    '-days',
    '1',
  ]);
  writeFileSync(path.join(dir, 'server.cjs'), SERVER_CJS);
  writeFileSync(path.join(dir, 'proxy.mjs'), PROXY_MJS);

  const server = await startChild(ctx, 'host HTTPS server', [path.join(dir, 'server.cjs'), '0', cert, key]);
  const hostPort = server.port;
  const rule = `127.0.0.1:${hostPort}`;
  const proxy = await startChild(ctx, 'host EgressProxy', [path.join(dir, 'proxy.mjs'), path.join(REPO, 'packages/daemon'), rule, path.join(dir, 'audit.db')]);
  const proxyPort = proxy.port;
  const hostUrl = (p: string) => `https://127.0.0.1:${hostPort}${p}`;
  const hostProxy = ['--proxy', `http://127.0.0.1:${proxyPort}`, '--noproxy', ''];
  console.log(`  (host server on 127.0.0.1:${hostPort}, EgressProxy on 127.0.0.1:${proxyPort})`);

  const { sbx, kill } = await ctx.sandbox({ network: { allow: [rule] } });
  await sbxRun(sbx, ['mkdir', '-p', SBX_DIR], 'mkdir', 'root');
  for (const [name, data] of [
    ['server.cjs', SERVER_CJS],
    ['conc.py', CONC_PY],
    ['cert.pem', readFileSync(cert, 'utf8')],
    ['key.pem', readFileSync(key, 'utf8')],
  ] as const) {
    await sbx.files.write(`${SBX_DIR}/${name}`, data, { user: 'root' });
  }
  await sbx.exec(['sh', '-c', `exec ${GUEST_NODE} ${SBX_DIR}/server.cjs ${SBX_PORT} ${SBX_DIR}/cert.pem ${SBX_DIR}/key.pem >${SBX_DIR}/server.log 2>&1`], {
    user: 'root',
    background: true,
  });
  const sbxUrl = (p: string) => `https://127.0.0.1:${SBX_PORT}${p}`;
  const ready = await sbx.exec([
    'sh',
    '-c',
    `for i in $(seq 100); do curl -sk --noproxy '*' -o /dev/null ${sbxUrl('/tiny')} && exit 0; sleep 0.1; done; cat ${SBX_DIR}/server.log; exit 1`,
  ]);
  if (ready.exitCode !== 0) throw new Error(`the server inside the sandbox did not come up: ${ready.stdout}${ready.stderr}`);

  // 1. Latency, host node client: the proxy alone. Warm-up, then interleaved.
  const hostDirect: number[] = [];
  const hostProxied: number[] = [];
  for (let i = 0; i < 5; i++) {
    await tinyGet(hostPort);
    await tinyGet(hostPort, proxyPort);
  }
  for (let i = 0; i < nLat; i++) {
    hostDirect.push(await tinyGet(hostPort));
    hostProxied.push(await tinyGet(hostPort, proxyPort));
  }

  // 1b and 2. Latency with curl, on the host and inside the sandbox, in alternating batches.
  const hostCurlDirect: number[] = [];
  const hostCurlProxied: number[] = [];
  const sbxCurlDirect: number[] = [];
  const sbxCurlProxied: number[] = [];
  const gvisorCurlDirect: number[] = [];
  const raw = new RawRunsc(ctx);
  const rawCurl = (count: number) => raw.runCapture(['curl', ...curlTinyArgs(hostUrl('/tiny'), count, NO_PROXY)], 'host');
  await run('curl', curlTinyArgs(hostUrl('/tiny'), 3, hostProxy));
  await rawCurl(3);
  await sbxRun(sbx, ['curl', ...curlTinyArgs(hostUrl('/tiny'), 3, SBX_PROXY)], 'curl warm-up');
  await sbxRun(sbx, ['curl', ...curlTinyArgs(sbxUrl('/tiny'), 3, NO_PROXY)], 'curl warm-up');
  for (let done = 0; done < nLat; done += CURL_BATCH) {
    const k = Math.min(CURL_BATCH, nLat - done);
    hostCurlDirect.push(...parseCurlTimes(await run('curl', curlTinyArgs(hostUrl('/tiny'), k, NO_PROXY)), k, 'host curl direct'));
    hostCurlProxied.push(...parseCurlTimes(await run('curl', curlTinyArgs(hostUrl('/tiny'), k, hostProxy)), k, 'host curl via proxy'));
    sbxCurlDirect.push(...parseCurlTimes(await sbxRun(sbx, ['curl', ...curlTinyArgs(sbxUrl('/tiny'), k, NO_PROXY)], 'curl direct'), k, 'sandbox curl direct'));
    sbxCurlProxied.push(
      ...parseCurlTimes(await sbxRun(sbx, ['curl', ...curlTinyArgs(hostUrl('/tiny'), k, SBX_PROXY)], 'curl via proxy'), k, 'sandbox curl via proxy'),
    );
    gvisorCurlDirect.push(...parseCurlTimes(await rawCurl(k), k, 'raw gVisor (hostinet) curl direct'));
  }

  // 3. Bulk, 256 MiB into /dev/null, the four paths interleaved.
  const bulk = `/bulk?bytes=${BULK_BYTES}`;
  const hostBulkDirect: number[] = [];
  const hostBulkProxied: number[] = [];
  const sbxBulkDirect: number[] = [];
  const sbxBulkProxied: number[] = [];
  for (let i = 0; i < nBulk; i++) {
    hostBulkDirect.push(parseCurlSpeed(await run('curl', curlBulkArgs(hostUrl(bulk), NO_PROXY)), 'host bulk direct'));
    hostBulkProxied.push(parseCurlSpeed(await run('curl', curlBulkArgs(hostUrl(bulk), hostProxy)), 'host bulk via proxy'));
    sbxBulkDirect.push(parseCurlSpeed(await sbxRun(sbx, ['curl', ...curlBulkArgs(sbxUrl(bulk), NO_PROXY)], 'bulk direct'), 'sandbox bulk direct'));
    sbxBulkProxied.push(parseCurlSpeed(await sbxRun(sbx, ['curl', ...curlBulkArgs(hostUrl(bulk), SBX_PROXY)], 'bulk via proxy'), 'sandbox bulk via proxy'));
  }

  // 4. 200 connections at once from the sandbox, through the proxy and (baseline) directly.
  const conc: Record<'proxy' | 'direct', ConcResult[]> = { proxy: [], direct: [] };
  for (let i = 0; i < nConc; i++) {
    for (const mode of ['proxy', 'direct'] as const) {
      const port = mode === 'proxy' ? hostPort : SBX_PORT;
      const out = await sbxRun(sbx, ['python3', `${SBX_DIR}/conc.py`, String(port), String(CONCURRENT), mode], `conc.py ${mode}`);
      const line = out.trim().split('\n').pop() ?? '';
      let res: ConcResult;
      try {
        res = JSON.parse(line) as ConcResult;
      } catch {
        throw new Error(`conc.py ${mode} printed no result: ${out.slice(-500)}`);
      }
      conc[mode].push(res);
    }
  }
  const audit = await auditCounts(sbx);
  await kill();

  const r = ctx.report;
  r.add({ key: 'egress-host-node-direct', suite: LATENCY, label: 'host: node TLS GET, direct', unit: 'ms', values: hostDirect, isBaseline: true });
  r.add({
    key: 'egress-host-node-proxy',
    suite: LATENCY,
    label: 'host: node TLS GET via EgressProxy (CONNECT)',
    unit: 'ms',
    values: hostProxied,
    baseline: 'egress-host-node-direct',
    note: "the proxy alone: the daemon's EgressProxy class in a process of its own on a loopback port (CONNECT, policy check, upstream connect, SNI check, audit in SQLite); new TCP + TLS per request",
  });
  r.add({ key: 'egress-host-curl-direct', suite: LATENCY, label: 'host: curl GET, direct', unit: 'ms', values: hostCurlDirect, isBaseline: true });
  r.add({
    key: 'egress-host-curl-proxy',
    suite: LATENCY,
    label: 'host: curl GET via EgressProxy',
    unit: 'ms',
    values: hostCurlProxied,
    baseline: 'egress-host-curl-direct',
    note: "curl's time_total, one curl for a batch of URLs (connections not reused: the server closes them)",
  });
  r.add({
    key: 'egress-gvisor-curl-direct',
    suite: LATENCY,
    label: 'raw gVisor, --network=host: curl GET, direct',
    unit: 'ms',
    values: gvisorCurlDirect,
    isBaseline: true,
    note: "curl in a raw `runsc run --network=host` on base's rootfs, no warren: a client under gVisor whose sockets are the host's, straight to the host server",
  });
  r.add({
    key: 'egress-sbx-curl-direct',
    suite: LATENCY,
    label: 'in sandbox: curl GET, server in the sandbox',
    unit: 'ms',
    values: sbxCurlDirect,
    isBaseline: true,
  });
  r.add({
    key: 'egress-sbx-curl-proxy',
    suite: LATENCY,
    label: "in sandbox: curl GET via the daemon's proxy",
    unit: 'ms',
    values: sbxCurlProxied,
    baseline: 'egress-gvisor-curl-direct',
    note: "end to end: the agent on 127.0.0.1:3128, its channel to the daemon (runsc stdio), the daemon's EgressProxy, the host server. Its baseline is the same curl under gVisor with the host network (hostinet), straight to the same server",
  });

  r.add({
    key: 'egress-host-bulk-direct',
    suite: THROUGHPUT,
    label: 'host: curl 256 MiB, direct',
    unit: 'MiB/s',
    values: hostBulkDirect,
    isBaseline: true,
    higherIsBetter: true,
  });
  r.add({
    key: 'egress-host-bulk-proxy',
    suite: THROUGHPUT,
    label: 'host: curl 256 MiB via EgressProxy',
    unit: 'MiB/s',
    values: hostBulkProxied,
    baseline: 'egress-host-bulk-direct',
    higherIsBetter: true,
  });
  r.add({
    key: 'egress-sbx-bulk-direct',
    suite: THROUGHPUT,
    label: 'in sandbox: curl 256 MiB, server in the sandbox',
    unit: 'MiB/s',
    values: sbxBulkDirect,
    isBaseline: true,
    higherIsBetter: true,
  });
  r.add({
    key: 'egress-sbx-bulk-proxy',
    suite: THROUGHPUT,
    label: "in sandbox: curl 256 MiB via the daemon's proxy",
    unit: 'MiB/s',
    values: sbxBulkProxied,
    baseline: 'egress-sbx-bulk-direct',
    higherIsBetter: true,
    note: "HTTPS into /dev/null, curl's speed_download; the TLS is end to end (host server to curl in the sandbox), the proxy and the agent only move bytes",
  });

  const pick = (mode: 'proxy' | 'direct', f: (c: ConcResult) => number | null) => conc[mode].map(f).filter((v): v is number => v !== null);
  r.add({
    key: 'egress-conc-direct-open',
    suite: CONCURRENCY,
    label: `in sandbox: ${CONCURRENT} TLS connections to a server in the sandbox, all open`,
    unit: 'ms',
    values: pick('direct', (c) => c.establishedMs),
    isBaseline: true,
  });
  r.add({
    key: 'egress-conc-direct-total',
    suite: CONCURRENCY,
    label: '  and a GET on each, all done',
    unit: 'ms',
    values: pick('direct', (c) => c.totalMs),
    isBaseline: true,
  });
  r.add({
    key: 'egress-conc-proxy-open',
    suite: CONCURRENCY,
    label: `in sandbox: ${CONCURRENT} CONNECT tunnels + TLS via the proxy, all open`,
    unit: 'ms',
    values: pick('proxy', (c) => c.establishedMs),
    baseline: 'egress-conc-direct-open',
    note: `python3 threads inside the sandbox; each connects (CONNECT through 127.0.0.1:3128, or directly), does the TLS handshake and waits at a barrier, so all ${CONCURRENT} are open at the same time; then each sends one GET`,
  });
  r.add({
    key: 'egress-conc-proxy-total',
    suite: CONCURRENCY,
    label: '  and a GET on each, all done',
    unit: 'ms',
    values: pick('proxy', (c) => c.totalMs),
    baseline: 'egress-conc-direct-total',
  });

  // Targets.
  const added = r.p50('egress-host-node-proxy') - r.p50('egress-host-node-direct');
  const addedCurl = r.p50('egress-host-curl-proxy') - r.p50('egress-host-curl-direct');
  r.target(
    'added latency per HTTPS request p50 ≤ 2 ms, the proxy alone (host node client)',
    added <= 2,
    `${fmt(r.p50('egress-host-node-proxy'))} vs ${fmt(r.p50('egress-host-node-direct'))} ms direct: +${fmt(added)} ms (host curl: +${fmt(addedCurl)} ms)`,
  );
  // The issue's target is the proxy against direct on loopback (above). From inside a sandbox
  // there is no direct path to compare with; the nearest is the same curl under gVisor with
  // the host's network, reported here with what the tunnel adds.
  const addedSbx = r.p50('egress-sbx-curl-proxy') - r.p50('egress-gvisor-curl-direct');
  const addedSbxLoop = r.p50('egress-sbx-curl-proxy') - r.p50('egress-sbx-curl-direct');
  r.note(
    `egress: end to end from the sandbox, curl through the agent and the proxy ${fmt(r.p50('egress-sbx-curl-proxy'))} ms p50 vs the same curl under gVisor with the host network, direct, ${fmt(r.p50('egress-gvisor-curl-direct'))} ms: ` +
      `${addedSbx >= 0 ? '+' : ''}${fmt(addedSbx)} ms (vs a server inside the sandbox ${fmt(r.p50('egress-sbx-curl-direct'))} ms: ${addedSbxLoop >= 0 ? '+' : ''}${fmt(addedSbxLoop)} ms)`,
  );
  const bulkProxy = r.p50('egress-host-bulk-proxy');
  r.target(
    'bulk download through the proxy ≥ 100 MiB/s (host curl via EgressProxy, loopback)',
    bulkProxy >= 100,
    `${fmt(bulkProxy)} MiB/s p50 (worst ${fmt(Math.min(...hostBulkProxied))}) vs direct ${fmt(r.p50('egress-host-bulk-direct'))}`,
  );
  // Into a sandbox the agent and the Sentry move every byte once more; reported, as the latency.
  const bulkSbx = r.p50('egress-sbx-bulk-proxy');
  r.note(
    `egress: bulk end to end into the sandbox through the agent and the proxy ${fmt(bulkSbx)} MiB/s p50 (worst ${fmt(Math.min(...sbxBulkProxied))}); from a server inside the sandbox ${fmt(r.p50('egress-sbx-bulk-direct'))} MiB/s`,
  );
  const errs = conc.proxy.reduce((a, c) => a + c.errorCount + (CONCURRENT - c.opened), 0);
  const directErrs = conc.direct.reduce((a, c) => a + c.errorCount, 0);
  r.target(
    `${CONCURRENT} concurrent connections from one sandbox without errors`,
    errs === 0 && conc.proxy.every((c) => c.errorCount === 0),
    `${conc.proxy.length} rounds, errors ${conc.proxy.map((c) => c.errorCount).join(', ')} (opened ${conc.proxy.map((c) => c.opened).join(', ')} of ${CONCURRENT}); direct baseline errors ${directErrs}` +
      (conc.proxy.some((c) => c.errors.length)
        ? `; first: ${conc.proxy
            .flatMap((c) => c.errors)
            .slice(0, 3)
            .join(' | ')}`
        : ''),
  );
  r.note(
    `egress: the sandbox's audit log had ${audit.total} records: ${audit.total - audit.denied} allowed, ${audit.denied} denied${audit.denied ? ` (first reason: ${audit.firstDenied})` : ''}`,
  );
  r.note(
    `egress: latency rows are ${nLat} requests each (p50 ${fmt(percentile(hostDirect, 50))} ms host direct); the in-sandbox baseline server runs under gVisor, so its handshake costs ` +
      'the server side too: the end-to-end difference is not the proxy alone (see the host rows for that)',
  );
}
