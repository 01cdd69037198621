/**
 * Terminals end to end (docs/terminals.md): through the SDK's WebSocket (size, tty, Ctrl-C,
 * resize, exit status, several at once, detach and attach again with replay), the refusals
 * before the upgrade, the plain HTTP routes, and `warren shell` driven under tmux.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Sandbox, type PtyHandle } from '@warren/sdk';
import { TERMINAL_BEARER_SUBPROTOCOL_PREFIX, TERMINAL_SUBPROTOCOL, type TerminalInfo, type TerminalOutputEvent } from '@warren/protocol';
import { REPO, eventually, sleep, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 90_000 };

let d: DaemonHandle;
let sbx: Sandbox;
before(async () => {
  d = await startDaemon();
  sbx = await d.create();
});
after(async () => {
  await stopAndCheckClean(d);
});

/** What a terminal wrote, and a wait for a pattern in it. */
class Screen {
  text = '';
  readonly onData = (data: Buffer) => {
    this.text += data.toString('utf8');
  };
  /** Markers are built by the shell ($((...)), $(...)), so the echoed command line never matches. */
  async until(pattern: RegExp, what: string): Promise<RegExpMatchArray> {
    return eventually(() => this.text.match(pattern), 30_000, `${what}; the terminal showed: ${JSON.stringify(this.text.slice(-600))}`, 50);
  }
}

async function open(opts: Parameters<Sandbox['pty']['create']>[0] = {}): Promise<{ term: PtyHandle; screen: Screen }> {
  const screen = new Screen();
  const term = await sbx.pty.create({ ...opts, onData: screen.onData });
  return { term, screen };
}

test('a login shell on a real terminal: its size, a /dev/pts tty, resize, and the exit status', T, async () => {
  const { term, screen } = await open({ cols: 100, rows: 30 });
  assert.match(term.id, /^term-[0-9a-f]{16}$/);
  term.write('echo "S-$(stty size)-$(tty)-$((6*7))"\r');
  const m = await screen.until(/S-(\d+ \d+)-(\S+)-42/, 'stty size and tty');
  assert.equal(m[1], '30 100');
  assert.match(m[2] ?? '', /^\/dev\/pts\/\d+$/);

  term.resize(120, 40);
  term.write('echo "R-$(stty size)-$((1+1))"\r');
  assert.equal((await screen.until(/R-(\d+ \d+)-2/, 'the size after resize'))[1], '40 120');

  term.write('exit 7\r');
  assert.equal(await term.wait(), 7);
  const listed = (await sbx.pty.list()).find((t) => t.id === term.id);
  assert.equal(listed?.running, false);
  assert.equal(listed?.exitCode, 7);
});

test('Ctrl-C stops the foreground command and the shell carries on; a signal message does the same', T, async () => {
  const { term, screen } = await open();
  term.write('echo "B-$((2+2))"; sleep 100\r');
  await screen.until(/B-4/, 'the shell to start sleep');
  await sleep(300);
  term.write('\x03');
  term.write('echo "A-$((2+3))"\r');
  await screen.until(/A-5/, 'the prompt back after Ctrl-C');

  term.write('echo "C-$((3+3))"; sleep 100; echo "after-$((1+6))"\r');
  await screen.until(/C-6/, 'the second sleep to start');
  await sleep(300);
  term.signal('SIGINT');
  term.write('echo "D-$((4+4))"\r');
  await screen.until(/D-8/, 'the prompt back after SIGINT');
  term.write('exit\r');
  assert.equal(await term.wait(), 0);
});

test('two terminals at once, as another user and in another directory, each its own', T, async () => {
  const a = await open({ cmd: 'echo "one-$(whoami)-$(pwd)-$((1*11))"; read line; echo "got-$line"; exit 3', user: 'root', cwd: '/tmp' });
  const b = await open({ cmd: ['/bin/bash', '-c', 'echo "two-$(tty)-$((2*11))"; read line; exit 4'] });
  await a.screen.until(/one-root-\/tmp-11/, 'the first terminal');
  const ttyB = (await b.screen.until(/two-(\S+)-22/, 'the second terminal'))[1];
  assert.ok(!a.screen.text.includes(ttyB ?? 'x'), 'the first terminal saw nothing of the second');
  const ids = (await sbx.pty.list()).map((t) => t.id);
  assert.ok(ids.includes(a.term.id) && ids.includes(b.term.id));
  a.term.write('hello\r');
  b.term.write('\r');
  assert.equal(await a.term.wait(), 3);
  assert.equal(await b.term.wait(), 4);
  assert.match(a.screen.text, /got-hello/);
});

test('detach and attach again: the recent output is replayed and the shell is the same', T, async () => {
  const { term, screen } = await open();
  term.write('X=kept; echo "first-$((40+2))"\r');
  await screen.until(/first-42/, 'output before detaching');
  term.disconnect();
  await assert.rejects(term.wait(), /disconnected/);
  await sleep(200);
  const info = (await sbx.pty.list()).find((t) => t.id === term.id);
  assert.equal(info?.running, true, 'the terminal outlives its connection');

  const again = new Screen();
  const attached = await sbx.pty.connect(term.id, { onData: again.onData });
  assert.equal(attached.offset, 0);
  await again.until(/first-42/, 'the replay of earlier output');
  attached.write('echo "second-$X-$((1+2))"\r');
  await again.until(/second-kept-3/, 'the same shell after attaching again');
  attached.write('exit 5\r');
  assert.equal(await attached.wait(), 5);

  // A finished terminal can still be attached: replay, then its exit.
  const late = new Screen();
  const finished = await sbx.pty.connect(term.id, { onData: late.onData });
  assert.equal(await finished.wait(), 5);
  assert.match(late.text, /second-kept-3/);
});

test('a fork has its own copy of each terminal, from the same instant; the attached client stays with the parent', T, async () => {
  const { term, screen } = await open();
  term.write('X=forked; echo "before-$((6*7))"\r');
  await screen.until(/before-42/, 'output before the fork');
  const child = await sbx.fork();
  try {
    // The parent's client is still attached and its shell carries on.
    term.write('echo "parent-$X-$((1+1))"\r');
    await screen.until(/parent-forked-2/, "the parent's shell after the fork");
    const copy = new Screen();
    const inChild = await child.pty.connect(term.id, { onData: copy.onData });
    await copy.until(/before-42/, "the child's replay of output from before the fork");
    inChild.write('echo "child-$X-$((2+1))"; X=changed\r');
    await copy.until(/child-forked-3/, "the child's copy of the shell, with the parent's variables");
    inChild.write('exit 4\r');
    assert.equal(await inChild.wait(), 4);
    assert.doesNotMatch(copy.text, /parent-forked-2/, "the parent's later output is not in the child");
    // The child's exit and change did not touch the parent's shell.
    term.write('echo "still-$X-$((3+1))"\r');
    await screen.until(/still-forked-4/, "the parent's shell after the child's exit");
    term.write('exit 0\r');
    assert.equal(await term.wait(), 0);
  } finally {
    await child.kill();
  }
});

test('an attached terminal keeps its sandbox awake; a detached one hibernates with it and carries on after', T, async () => {
  const watched = await d.create({ idleSeconds: 2 });
  const left = await d.create({ idleSeconds: 2 });
  try {
    const screenA = new Screen();
    const a = await watched.pty.create({ onData: screenA.onData });
    const screenB = new Screen();
    const b = await left.pty.create({ onData: screenB.onData });
    b.write('Z=asleep; echo "b-$((7*7))"\r');
    await screenB.until(/b-49/, 'the detached terminal to start');
    b.disconnect();
    await eventually(async () => (await left.refresh()).state === 'hibernated', 60_000, 'the sandbox without a client to hibernate');
    assert.equal((await watched.refresh()).state, 'running', 'a sandbox with an attached terminal must not hibernate');
    // Attaching resumes it; the shell is where it was.
    const again = new Screen();
    const b2 = await left.pty.connect(b.id, { onData: again.onData });
    b2.write('echo "woke-$Z-$((8*8))"\r');
    await again.until(/woke-asleep-64/, 'the same shell after the resume');
    a.write('exit 0\r');
    b2.write('exit 0\r');
    assert.equal(await a.wait(), 0);
    assert.equal(await b2.wait(), 0);
  } finally {
    await Promise.all([watched.kill(), left.kill()]);
  }
});

/** A raw upgrade request: the status it got, and whether the socket was upgraded. */
function upgrade(
  pathAndQuery: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string; upgraded: boolean; protocol?: string; firstFrame?: string }> {
  const url = new URL(d.url);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: url.hostname,
      port: url.port,
      path: pathAndQuery,
      headers: {
        connection: 'Upgrade',
        upgrade: 'websocket',
        'sec-websocket-version': '13',
        'sec-websocket-key': randomBytes(16).toString('base64'),
        ...headers,
      },
    });
    req.on('upgrade', (res, socket, head) => {
      const protocol = res.headers['sec-websocket-protocol'];
      // The server's first frame (ready): unmasked text, short enough for a one-byte length.
      let bytes = head;
      const done = () => {
        socket.destroy();
        const length = (bytes[1] ?? 0) & 0x7f;
        resolve({ status: 101, body: '', upgraded: true, protocol, firstFrame: bytes.subarray(2, 2 + length).toString('utf8') });
      };
      if (bytes.length >= 2 && bytes.length >= 2 + ((bytes[1] ?? 0) & 0x7f)) return done();
      socket.on('data', (chunk: Buffer) => {
        bytes = Buffer.concat([bytes, chunk]);
        if (bytes.length >= 2 && bytes.length >= 2 + ((bytes[1] ?? 0) & 0x7f)) done();
      });
      socket.on('error', reject);
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, upgraded: false }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('refused before the upgrade: no key, a wrong key, a bad size, an unknown sandbox or terminal', T, async () => {
  const count = (await sbx.pty.list()).length;
  const route = `/v1/sandboxes/${sbx.id}/pty`;
  const auth = { authorization: `Bearer ${d.apiKey}` };
  const noKey = await upgrade(`${route}?cols=80&rows=24`, {});
  assert.deepEqual([noKey.status, noKey.upgraded], [401, false]);
  assert.match(noKey.body, /API key/);
  assert.equal((await upgrade(route, { authorization: 'Bearer wk_wrong' })).status, 401);
  for (const query of ['cols=0&rows=24', 'cols=100000&rows=24', 'cols=80&rows=0', 'cols=abc']) {
    const r = await upgrade(`${route}?${query}`, auth);
    assert.deepEqual([r.status, r.upgraded], [400, false], query);
    assert.match(r.body, /cols|rows/, query);
  }
  assert.equal((await upgrade('/v1/sandboxes/sb-nosuch/pty', auth)).status, 404);
  assert.equal((await upgrade(`${route}/term-0000000000000000`, auth)).status, 404);
  assert.equal((await sbx.pty.list()).length, count, 'no terminal was opened by a refused request');
});

test("a browser's way in: a sandbox token offered as a subprotocol, never echoed back", T, async () => {
  const route = `/v1/sandboxes/${sbx.id}/pty?cols=80&rows=24`;
  const token = (await sbx.createToken({ scopes: ['exec'], ttlSeconds: 300 })).token;
  const offer = (secret: string) => ({ 'sec-websocket-protocol': `${TERMINAL_SUBPROTOCOL}, ${TERMINAL_BEARER_SUBPROTOCOL_PREFIX}${secret}` });
  const ok = await upgrade(route, offer(token));
  assert.deepEqual([ok.status, ok.protocol], [101, TERMINAL_SUBPROTOCOL]);
  const ready = JSON.parse(ok.firstFrame ?? '{}') as { type?: string; terminalId?: string };
  assert.equal(ready.type, 'ready', `first frame: ${ok.firstFrame}`);
  await sbx.pty.kill(ready.terminalId ?? '');

  const wrong = await upgrade(route, offer('wt_wrong'));
  assert.deepEqual([wrong.status, wrong.upgraded], [401, false]);
  const readOnly = (await sbx.createToken({ scopes: ['read'], ttlSeconds: 300 })).token;
  const noExec = await upgrade(route, offer(readOnly));
  assert.deepEqual([noExec.status, noExec.upgraded], [403, false]);
  assert.match(noExec.body, /sandboxes:exec/);
  const other = await d.create();
  try {
    const elsewhere = await upgrade(`/v1/sandboxes/${other.id}/pty`, offer(token));
    assert.deepEqual([elsewhere.status, elsewhere.upgraded], [404, false], 'a token reaches its own sandbox only');
  } finally {
    await other.kill();
  }
  // The query string is not a place for a credential: it is not read from there.
  const inQuery = await upgrade(`${route}&token=${token}`, {});
  assert.equal(inQuery.status, 401);
});

test('plain HTTP: create, input, output as NDJSON with offsets, resize, kill', T, async () => {
  const base = `/v1/sandboxes/${sbx.id}/terminals`;
  const t = await d.http.json<TerminalInfo>('POST', base, { json: { cols: 50, rows: 10, cmd: 'read a; echo "in-$a-$(stty size)"; sleep 100' } });
  assert.equal(t.running, true);
  await assert.rejects(d.http.json('POST', base, { json: { cols: 0 } }), /cols must be at least 1/);
  await d.http.request('POST', `${base}/${t.id}/input`, { json: { text: 'abc\r' } });
  const output = async (): Promise<string> => {
    const res = await d.http.request('GET', `${base}/${t.id}/output`);
    const lines = (await res.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as TerminalOutputEvent);
    return lines.map((l) => (l.type === 'output' ? Buffer.from(l.data, 'base64').toString('utf8') : '')).join('');
  };
  await eventually(async () => /in-abc-10 50/.test(await output()), 30_000, 'the echo of HTTP input');
  await d.http.request('POST', `${base}/${t.id}/resize`, { json: { cols: 60, rows: 20 } });
  await assert.rejects(d.http.request('POST', `${base}/${t.id}/resize`, { json: { cols: 100000, rows: 20 } }), /cols must be at most 1000/);
  const follow = d.http.request('GET', `${base}/${t.id}/output`, { query: { follow: 1, offset: 0 } });
  await d.http.request('POST', `${base}/${t.id}/kill`);
  const lines = (await (await follow).text())
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as TerminalOutputEvent);
  const exit = lines.at(-1);
  assert.equal(exit?.type, 'exit');
  assert.equal(exit?.type === 'exit' ? exit.exitCode : undefined, 128 + 9);
  await d.http.request('POST', `${base}/${t.id}/kill`); // a finished one is forgotten
  await assert.rejects(d.http.json('GET', `${base}/${t.id}`), /no terminal/);
});

/** tmux on a private socket file, so the test never touches anyone's own tmux server. */
function tmux(socket: string, ...args: string[]): string {
  return execFileSync('tmux', ['-S', socket, ...args], { encoding: 'utf8' });
}

test('warren shell under tmux: raw keys in, output on the pane, the remote exit status out, the terminal restored', T, async () => {
  try {
    execFileSync('tmux', ['-V'], { stdio: 'pipe' });
  } catch {
    throw new Error('tmux is not installed: run `bash scripts/setup.sh` (it installs tmux for this test)');
  }
  // tmux leaves its socket file behind after kill-server: it goes with this directory.
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-tmux-'));
  const socket = path.join(dir, 'socket');
  const warren = path.join(REPO, 'bin/warren');
  try {
    tmux(socket, 'new-session', '-d', '-x', '100', '-y', '30', 'bash --norc --noprofile');
    const pane = () => tmux(socket, 'capture-pane', '-p', '-J', '-S', '-200');
    const keys = (...k: string[]) => tmux(socket, 'send-keys', ...k);
    keys(`export WARREN_URL=${d.url} WARREN_API_KEY=${d.apiKey}; S0=$(stty -g)`, 'Enter');
    keys(`${warren} shell ${sbx.id}; echo "CLI-EXIT=$? SAME=$([ "$(stty -g)" = "$S0" ] && echo yes || echo no)"`, 'Enter');
    keys('echo "hi-$((40+2)) $(stty size)"', 'Enter');
    await eventually(() => /hi-42 30 100/.test(pane()), 30_000, `the sandbox's echo on the pane:\n${pane()}`);
    keys('sleep 100', 'Enter');
    await sleep(500);
    keys('C-c');
    keys('echo "back-$((1+2))"', 'Enter');
    await eventually(() => /back-3/.test(pane()), 30_000, `the prompt back after C-c:\n${pane()}`);
    keys('exit 3', 'Enter');
    const m = await eventually(() => pane().match(/CLI-EXIT=(\d+) SAME=(\w+)/), 30_000, `warren shell to exit:\n${pane()}`);
    assert.equal(m[1], '3');
    assert.equal(m[2], 'yes', 'the local terminal settings are restored');
  } finally {
    try {
      tmux(socket, 'kill-server');
    } catch {
      // the server ended with its last session
    }
    rmSync(dir, { recursive: true, force: true });
  }
});

test('warren shell without a TTY: piped keystrokes, a command after --, the exit status; a bad terminal id exits 2', T, () => {
  const env = { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey };
  const warren = (args: string[], input: string) => spawnSync(path.join(REPO, 'bin/warren'), args, { input, env, encoding: 'utf8', timeout: 60_000 });
  const piped = warren(['shell', sbx.id], 'echo "hi-$((1+1))"\nexit 4\n');
  assert.equal(piped.status, 4, piped.stderr);
  assert.match(piped.stdout, /hi-2/);
  const argv = warren(['shell', sbx.id, '--', 'bash', '-c', 'echo "argv-$((2+3))-$(tty)"; exit 6'], '');
  assert.equal(argv.status, 6, argv.stderr);
  assert.match(argv.stdout, /argv-5-\/dev\/pts\/\d+/);
  const missing = warren(['shell', sbx.id, '--attach', 'term-0000000000000000'], '');
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /no terminal term-0000000000000000/);
});

test('a terminal outlives a daemon restart: the new daemon attaches to it by id, with replay', T, async () => {
  const { term, screen } = await open();
  term.write('Y=still-here; echo "pre-$((5*5))"\r');
  await screen.until(/pre-25/, 'output before the restart');
  await d.stop();
  d = await startDaemon({ home: d.home });
  sbx = await Sandbox.connect(sbx.id, d.conn);
  const again = new Screen();
  const attached = await sbx.pty.connect(term.id, { onData: again.onData });
  await again.until(/pre-25/, 'the replay through the new daemon');
  attached.write('echo "post-$Y-$((6*6))"\r');
  await again.until(/post-still-here-36/, 'the same shell through the new daemon');
  attached.write('exit 9\r');
  assert.equal(await attached.wait(), 9);
});
