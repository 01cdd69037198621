/**
 * Security battery, the rest of the cases (docs/security.md, "The battery"): from inside a
 * sandbox, as `user` and as root, what a hostile command tries against the host, the daemon,
 * other sandboxes, the agent and init; from outside, hostile requests (a 50 MB body, CR/LF in
 * paths, duplicate and oversized headers, encoded path traversal, prototype keys in JSON).
 * Real daemon, real sandboxes; the only addresses used are on 127.0.0.0/8.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { ApiKeys, type NewApiKey, type Sandbox } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, eventually, type DaemonHandle } from './harness.js';

const T = { timeout: 180_000 };
let d: DaemonHandle | undefined;
let sbx: Sandbox;

before(async () => {
  d = await startDaemon();
  sbx = await d.create();
});

after(async () => {
  await stopAndCheckClean(d);
});

const AS = ['user', 'root'] as const;
/** The agent's command line inside every sandbox (warren-init's holds it too, after its own path). */
const AGENT = '/opt/warren/bin/node /opt/warren/lib/agent.cjs serve';

/** Runs `cmd` in the shared sandbox as `user`; its stdout, trimmed. */
async function inside(cmd: string, user: string): Promise<string> {
  return (await sbx.exec(cmd, { user })).stdout.trim();
}

/** A connect to 127.0.0.1:port from inside, by bash: 'open' or 'refused'. */
const CONNECT = (port: number | string) => `if bash -c 'exec 3<>/dev/tcp/127.0.0.1/${port}' 2>/dev/null; then echo open; else echo refused; fi`;

/**
 * One raw HTTP/1.1 exchange with the daemon (every request here says `Connection: close`, or
 * is refused with a close): the status, the head and the body it answered with.
 */
function raw(request: string | Buffer): Promise<{ status: number; head: string; body: string }> {
  const url = new URL(d!.url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname);
    let got = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (got += chunk));
    // A refusal may come while the request is still being written: a reset then is fine.
    socket.on('error', (err) => (got ? undefined : reject(err)));
    socket.on('close', () => {
      const end = got.indexOf('\r\n\r\n');
      resolve({ status: Number(got.split(' ')[1] ?? 0), head: end < 0 ? got : got.slice(0, end), body: end < 0 ? '' : got.slice(end + 4) });
    });
    socket.setTimeout(20_000, () => socket.destroy());
    socket.write(request);
  });
}

test("inside: the daemon's port on the host's loopback is out of reach, as user and as root", T, async () => {
  const port = new URL(d!.url).port;
  for (const user of AS) assert.equal(await inside(CONNECT(port), user), 'refused', user);
});

test("inside: another sandbox's forward on the host's loopback is out of reach, while the host reaches it", T, async () => {
  const other = await d!.create();
  try {
    await other.exec('nohup python3 -m http.server 8000 >/dev/null 2>&1 &', { check: true });
    const f = await other.forwardPort(8000);
    // The host reaches it, so a refusal inside is the sandbox's, not a dead server's.
    await eventually(
      () =>
        new Promise<boolean>((resolve) => {
          const s = net.connect(f.hostPort, '127.0.0.1', () => {
            s.destroy();
            resolve(true);
          });
          s.on('error', () => resolve(false));
        }),
      20_000,
      'the forward answering on the host',
    );
    for (const user of AS) assert.equal(await inside(CONNECT(f.hostPort), user), 'refused', user);
  } finally {
    await other.kill();
  }
});

test('inside: no network interface but loopback', T, async () => {
  assert.equal(await inside(`python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'`, 'root'), "['lo']");
});

for (const user of AS) {
  test(`files API: symlinks planted by ${user} lead to the sandbox's own files, never the host's`, T, async () => {
    const dir = `/tmp/planted-${user}`;
    // The admin key's host path, and the host's /etc: what a link would reach if it were followed on the host.
    await sbx.exec(`mkdir -p ${dir} && ln -sfn ${d!.home}/admin.key ${dir}/key && ln -sfn /etc ${dir}/etc`, { user, check: true });
    await assert.rejects(sbx.files.read(`${dir}/key`, { user }), /no such file|not found|ENOENT/i);
    assert.equal((await sbx.files.readText(`${dir}/etc/hostname`, { user })).trim(), 'sandbox');
    assert.notEqual((await sbx.files.readText(`${dir}/etc/hostname`, { user })).trim(), (await import('node:os')).hostname());
  });
}

test("inside: /proc lists the sandbox's processes only; none is the daemon", T, async () => {
  const out = await inside(`for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done`, 'root');
  const cmdlines = out.split('\n').filter(Boolean);
  assert.ok(cmdlines.length < 20, `processes seen: ${cmdlines.length}`);
  assert.ok(cmdlines.some((c) => c.includes('warren-init')));
  assert.ok(!cmdlines.some((c) => /daemon\/dist|runsc/.test(c)), cmdlines.join('\n'));
});

test('inside: no process environment holds an API key or secret', T, async () => {
  const environ = await inside(`cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'`, 'root');
  assert.ok(environ.length > 0, 'read some environments');
  assert.ok(!environ.includes(d!.apiKey), 'the admin key is in a sandbox process environment');
  assert.doesNotMatch(environ, /^WARREN_(API_KEY|HOME)=/m);
});

test('inside: root cannot change the kernel through /proc/sys or /proc/sysrq-trigger', T, async () => {
  const out = await inside(
    `for f in /proc/sys/kernel/hostname /proc/sys/vm/drop_caches /proc/sysrq-trigger /proc/sys/kernel/core_pattern; do if (echo 1 > $f) 2>/dev/null; then echo "$f written"; fi; done; echo done`,
    'root',
  );
  assert.equal(out, 'done');
});

test("inside: /dev holds no host device (no disks, kvm, mem or ports) and /dev/mem can't be opened", T, async () => {
  const devs = (await inside('ls /dev', 'root')).split(/\s+/);
  // gVisor's /dev is its own: fuse and net/tun are devices of the Sentry, not the host's.
  for (const hostOnly of ['kvm', 'mem', 'kmem', 'port', 'sda', 'vda', 'nvme0', 'nvme0n1', 'loop0', 'dm-0', 'vhost-net', 'vsock']) {
    assert.ok(!devs.includes(hostOnly), `/dev/${hostOnly} exists inside: ${devs.join(' ')}`);
  }
  assert.equal(await inside('if (exec 3</dev/mem) 2>/dev/null; then echo opened; else echo refused; fi', 'root'), 'refused');
});

test('inside: user cannot ptrace the agent or warren-init', T, async () => {
  const probe = `python3 - <<'EOF'
import ctypes, os, subprocess
AGENT = '/opt/warren/bin/node /opt/warren/lib/agent.cjs serve'
libc = ctypes.CDLL(None, use_errno=True)
agent = int(subprocess.check_output(['pgrep', '-xf', AGENT]).split()[0])
for pid in (agent, 1):
    r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
    print(pid == 1 and 'init' or 'agent', r, os.strerror(ctypes.get_errno()))
EOF`;
  const out = await inside(probe, 'user');
  assert.match(out, /^agent -1 Operation not permitted$/m, out);
  assert.match(out, /^init -1 Operation not permitted$/m, out);
});

test('inside: user cannot signal warren-init or the agent', T, async () => {
  const out = await inside(`kill -9 1 2>&1; kill -9 $(pgrep -xf '${AGENT}') 2>&1; echo done`, 'user');
  assert.match(out, /kill: \(1\) - Operation not permitted/);
  assert.match(out, /Operation not permitted[\s\S]*done$/);
  assert.equal(await inside('echo still here', 'user'), 'still here');
});

test("inside: root's SIGKILL to warren-init ends its own sandbox only: the daemon records why, and the others answer", T, async () => {
  // gVisor does not shield init from its own root as Linux does (pid_namespaces(7)); root can
  // end its sandbox anyway by killing the agent. What matters is that nothing else is touched.
  const victim = await d!.create();
  await victim.exec('kill -KILL 1', { user: 'root' }).catch(() => undefined);
  const info = await eventually(
    async () => {
      const i = await victim.refresh();
      return i.state === 'dead' ? i : undefined;
    },
    30_000,
    'the sandbox recorded dead',
  );
  assert.match(info.error ?? '', /agent channel lost/);
  assert.equal(await inside('echo still here', 'root'), 'still here', 'another sandbox is untouched');
  await victim.kill();
});

test('API: a 50 MB JSON body is a 413 naming the limit, and the daemon stays small', T, async () => {
  const before = d!.rss();
  const body = Buffer.alloc(50 * 1024 * 1024, 0x20);
  body.write('{"metadata":{"a":"');
  body.write('"}}', body.length - 3);
  const res = await fetch(`${d!.url}/v1/sandboxes`, {
    method: 'POST',
    headers: { authorization: `Bearer ${d!.apiKey}`, 'content-type': 'application/json' },
    body,
  });
  assert.equal(res.status, 413);
  assert.match(await res.text(), /exceeds 16777216 bytes/);
  assert.ok(d!.rss() - before < 40 * 1024 * 1024, `daemon rss grew by ${Math.round((d!.rss() - before) / 1048576)} MB`);
  assert.equal((await fetch(`${d!.url}/v1/health`, { headers: { authorization: `Bearer ${d!.apiKey}` } })).status, 200);
});

test('API: CR/LF in a path never becomes a response header', T, async () => {
  const r = await raw(
    `GET /v1/sandboxes/sb-x%0d%0aSet-Cookie:%20owned=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${d!.apiKey}\r\nConnection: close\r\n\r\n`,
  );
  assert.equal(r.status, 404);
  assert.doesNotMatch(r.head, /set-cookie/i);
  // Raw CR/LF in the request line is not HTTP at all.
  const bad = await raw(`GET /v1/sandboxes/x\rSet-Cookie: owned=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  assert.equal(bad.status, 400);
});

test('API: a second Authorization header does not replace the first (a bad key stays a 401)', T, async () => {
  const r = await raw(
    `GET /v1/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer wk_wrong\r\nAuthorization: Bearer ${d!.apiKey}\r\nConnection: close\r\n\r\n`,
  );
  assert.notEqual(r.status, 200, r.head);
});

test("API: an oversized header is refused by the HTTP parser, in the API's error shape, before any key is looked at", T, async () => {
  const r = await raw(`GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ${'a'.repeat(64 * 1024)}\r\nConnection: close\r\n\r\n`);
  assert.equal(r.status, 400);
  assert.match(r.body, /request headers are too large/);
});

let limited: NewApiKey | undefined;
const asLimited = async (method: string, path: string, body?: string) => {
  limited ??= await ApiKeys.create({ name: 'battery', scopes: ['sandboxes:create', 'sandboxes:read'] }, d!.conn);
  const res = await fetch(`${d!.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${limited.key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body } : {}),
  });
  return { status: res.status, text: await res.text() };
};

test("API: encoded path traversal (..%2F) does not reach another route's handler or scope", T, async () => {
  for (const path of ['/v1/sandboxes/..%2F..%2Fv1%2Fkeys', '/v1/sandboxes/%2e%2e/%2e%2e/v1/keys', '/v1/sandboxes/..%5c..%5ckeys']) {
    const r = await asLimited('GET', path);
    assert.ok(r.status === 404 || r.status === 403, `${path}: ${r.status} ${r.text}`);
    assert.doesNotMatch(r.text, /"keys"\s*:/, path);
  }
});

test('API: __proto__ and constructor keys in JSON grant nothing and are refused by the schema', T, async () => {
  const r = await asLimited('POST', '/v1/sandboxes', '{"__proto__":{"admin":true,"scopes":["admin"]},"constructor":{"prototype":{"admin":true}}}');
  assert.equal(r.status, 400, r.text);
  assert.equal(({} as Record<string, unknown>).admin, undefined);
  const keys = await asLimited('GET', '/v1/keys');
  assert.equal(keys.status, 403, 'still not an admin key');
});

test('API: a metadata value with CR/LF and control characters is kept as data and returned escaped in JSON', T, async () => {
  const evil = 'a\r\nSet-Cookie: x=1\u001b[2J';
  const r = await asLimited('POST', '/v1/sandboxes', JSON.stringify({ metadata: { note: evil } }));
  assert.equal(r.status, 201, r.text);
  const made = JSON.parse(r.text) as { id: string; metadata: Record<string, string> };
  try {
    assert.equal(made.metadata.note, evil);
    assert.ok(!r.text.includes('\r') && !r.text.includes('\u001b'), 'raw control characters in the JSON answer');
  } finally {
    await fetch(`${d!.url}/v1/sandboxes/${made.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${d!.apiKey}` } });
  }
});
