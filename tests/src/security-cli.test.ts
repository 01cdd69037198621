/**
 * Terminal injection through the CLI (docs/security.md, "terminal"): text a caller or a
 * sandbox controls (metadata, the Host header of a refused egress request, ids in error
 * messages) reaches the operator's terminal only as visible escapes in human-readable output,
 * while `--json` stays exact. Against a real daemon and real sandboxes; the only upstream is
 * 127.0.0.1, which the refused request never reaches.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import type { Sandbox, SandboxInfo } from '@warren/sdk';
import { eventually, startDaemon, stopAndCheckClean, REPO, type DaemonHandle } from './harness.js';

const T = { timeout: 180_000 };
let d: DaemonHandle | undefined;
before(async () => {
  d = await startDaemon();
});
after(async () => {
  await stopAndCheckClean(d);
});

function warren(...args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(path.join(REPO, 'bin/warren'), args, {
    encoding: 'utf8',
    env: { ...process.env, WARREN_URL: d!.url, WARREN_API_KEY: d!.apiKey },
    timeout: 120_000,
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/**
 * Characters a terminal may act on: C0 other than the newlines that end lines, DEL, C1, and
 * the bidi controls. None may appear in human-readable output.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: looking for control characters is the point
const TERMINAL_CONTROLS = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/u;

function assertInert(text: string, what: string): void {
  const m = TERMINAL_CONTROLS.exec(text);
  assert.equal(m, null, `${what} holds U+${m?.[0].codePointAt(0)?.toString(16).padStart(4, '0')} raw at ${m?.index}: ${JSON.stringify(text)}`);
}

/** Metadata as a hostile caller would set it: a retitle, a screen clear, C1 CSI and OSC, a bidi override, a fake line. */
const HOSTILE: Record<string, string> = {
  title: '\x1b]0;pwned\x07',
  clear: '\x1b[2J\x1b[H',
  c1: '\u009b2J\u009d0;owned\u009c',
  bidi: 'safe\u202eexe.sh',
  line: 'x\nsb-fake000000 running base',
  '\x1b[31mkey': 'red',
};

test('ls and info show hostile metadata as visible escapes; --json is exact', T, async () => {
  const sbx = await d!.create({ metadata: { ...HOSTILE, suite: 'security-cli' } });
  try {
    const ls = warren('ls', '--metadata', 'suite=security-cli');
    assert.equal(ls.code, 0, ls.stderr);
    assertInert(ls.stdout.replace(/\n$/, '').split('\n').join(''), 'warren ls');
    const lines = ls.stdout.trimEnd().split('\n');
    assert.equal(lines.length, 2, `a header and one row, no fake line:\n${ls.stdout}`);
    for (const shown of [
      'title=\\x1b]0;pwned\\x07',
      'clear=\\x1b[2J\\x1b[H',
      'c1=\\u009b2J\\u009d0;owned\\u009c',
      'bidi=safe\\u202eexe.sh',
      'line=x\\nsb-fake000000 running base',
      '\\x1b[31mkey=red',
    ]) {
      assert.ok(lines[1]?.includes(shown), `ls shows ${shown}: ${lines[1]}`);
    }

    const info = warren('info', sbx.id);
    assert.equal(info.code, 0, info.stderr);
    assertInert(info.stdout.split('\n').join(''), 'warren info');
    assert.match(info.stdout, /^metadata +.*c1=\\u009b2J\\u009d0;owned\\u009c/m);
    assert.ok(!info.stdout.includes('\nsb-fake000000'), 'no fake line in info');

    const lsJson = warren('ls', '--json', '--metadata', 'suite=security-cli');
    assertInert(lsJson.stdout.split('\n').join(''), 'warren ls --json');
    assert.deepEqual(
      (JSON.parse(lsJson.stdout) as SandboxInfo[]).map((s) => s.metadata),
      [{ ...HOSTILE, suite: 'security-cli' }],
    );
    const infoJson = warren('info', sbx.id, '--json');
    assertInert(infoJson.stdout.split('\n').join(''), 'warren info --json');
    assert.deepEqual((JSON.parse(infoJson.stdout) as SandboxInfo).metadata, { ...HOSTILE, suite: 'security-cli' });
  } finally {
    await sbx.kill();
  }
});

/**
 * A raw request through the egress proxy whose Host header carries C1 CSI and OSC (bytes
 * 0x9b, 0x9d, 0x9c: HTTP allows them as obs-text, and the daemon reads them as U+009B...).
 * It disagrees with the URL, so the proxy refuses it before connecting anywhere.
 */
async function refusedRequestWithHostileHost(sbx: Sandbox): Promise<void> {
  const r = await sbx.exec([
    'python3',
    '-c',
    `
import socket
s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
s.sendall(b'GET http://127.0.0.1:9/x HTTP/1.1\\r\\nHost: 127.0.0.1\\x9b2J\\x9d0;owned\\x9c:9\\r\\nConnection: close\\r\\n\\r\\n')
print(s.recv(4096).split(b'\\r\\n')[0].decode())
`,
  ]);
  assert.equal(r.exitCode, 0, r.stderr);
  assert.match(r.stdout, /^HTTP\/1\.1 4\d\d /, 'the proxy refused it');
}

test('egress shows a hostile Host header escaped; --json is exact', T, async () => {
  const sbx = await d!.create();
  try {
    await refusedRequestWithHostileHost(sbx);
    const hostile = '127.0.0.1\u009b2J\u009d0;owned\u009c:9';
    const entry = await eventually(async () => (await sbx.egressLog()).find((e) => e.host === hostile), 10_000, 'the refused request in the audit log');
    assert.equal(entry.decision, 'denied');

    const egress = warren('egress', sbx.id);
    assert.equal(egress.code, 0, egress.stderr);
    assertInert(egress.stdout.split('\n').join(''), 'warren egress');
    assert.ok(egress.stdout.includes('127.0.0.1\\u009b2J\\u009d0;owned\\u009c:9'), egress.stdout);
    assert.equal(egress.stdout.trimEnd().split('\n').length, 2, `a header and one row:\n${egress.stdout}`);

    const json = warren('egress', sbx.id, '--json');
    assert.equal(json.code, 0, json.stderr);
    assertInert(json.stdout.split('\n').join(''), 'warren egress --json');
    const entries = json.stdout
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as { host: string; reason?: string });
    assert.deepEqual(
      entries.map((e) => e.host),
      [hostile],
    );
    assert.equal(entries[0]?.reason, entry.reason, 'the reason comes back exactly too');
  } finally {
    await sbx.kill();
  }
});

test('error messages from the daemon are escaped too', () => {
  const r = warren('info', 'sb-\x1b]0;pwned\x07\u009b2J');
  assert.equal(r.code, 2, r.stderr);
  assertInert(r.stderr.replace(/\n$/, ''), 'the error message');
  assert.ok(r.stderr.includes('sb-\\x1b]0;pwned\\x07\\u009b2J'), r.stderr);
});
