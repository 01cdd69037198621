/**
 * The agent tool set served by the daemon (bash, str_replace_based_edit_tool), through the
 * SDK's Toolset and the raw HTTP API: output cut to its tail inside the sandbox, sessions,
 * every editor command and its refusals, bad input, and bestOf's fork-and-kill.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, Toolset, bestOf, type BashOutput, type EditOutput, type ToolFailure, type ToolResult } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 120_000 };

let d: DaemonHandle;
let sbx: Sandbox;
let tools: Toolset;

before(async () => {
  d = await startDaemon();
  sbx = await d.create();
  await sbx.exec('mkdir -p /work && chown user:user /work', { user: 'root', check: true });
  tools = new Toolset(sbx);
});
after(async () => {
  await stopAndCheckClean(d);
});

function bash(r: ToolResult): BashOutput {
  assert.ok('exit_code' in r, `not a bash result: ${JSON.stringify(r)}`);
  return r;
}
function edited(r: ToolResult): string {
  assert.ok('output' in r, `the edit failed: ${JSON.stringify(r)}`);
  return (r as EditOutput).output;
}
function failed(r: ToolResult): string {
  assert.ok('is_error' in r && r.is_error, `expected a tool error, got ${JSON.stringify(r)}`);
  return (r as ToolFailure).error;
}

async function post(path: string, body: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(`${d.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${d.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

test('tools: definitions for Anthropic and OpenAI, the same from the SDK and the daemon', T, async () => {
  const anthropic = tools.schemas('anthropic');
  assert.deepEqual(
    anthropic.map((t) => t.name),
    ['bash', 'str_replace_based_edit_tool'],
  );
  const editor = anthropic[1];
  assert.ok(editor && /str_replace/.test(editor.description));
  assert.deepEqual((editor.input_schema as { required?: string[] }).required, ['command', 'path']);
  const openai = tools.schemas('openai');
  assert.equal(openai[0]?.type, 'function');
  assert.deepEqual(openai[0]?.function.parameters, anthropic[0]?.input_schema);
  for (const format of ['anthropic', 'openai']) {
    const res = await fetch(`${d.url}/v1/tools?format=${format}`, { headers: { authorization: `Bearer ${d.apiKey}` } });
    assert.equal(res.status, 200);
    assert.deepEqual(((await res.json()) as { tools: unknown }).tools, tools.schemas(format as 'openai'));
  }
  const bad = await fetch(`${d.url}/v1/tools?format=gemini`, { headers: { authorization: `Bearer ${d.apiKey}` } });
  assert.equal(bad.status, 400);
  assert.match(await bad.text(), /format must be one of anthropic, openai/);
});

test('bash: stdout, stderr and exit code, starting in the tool set cwd as the sandbox user', T, async () => {
  const r = bash(await tools.call('bash', { command: 'pwd; id -un; echo oops >&2; exit 3' }));
  assert.deepEqual(r, { stdout: '/work\nuser\n', stderr: 'oops\n', exit_code: 3, timed_out: false, truncated: false });
});

test('bash: long output keeps its tail, cut inside the sandbox, with the number of characters dropped', T, async () => {
  // 5 MB of stdout ending in a known line; a little stderr that is not cut.
  const res = await post(`/v1/sandboxes/${sbx.id}/tools/bash`, {
    input: { command: 'head -c 5000000 /dev/zero | tr "\\0" x; echo; echo THE-END; echo err >&2' },
    maxOutputChars: 1000,
  });
  assert.equal(res.status, 200, res.text);
  assert.ok(res.text.length < 4000, `the response carries ${res.text.length} bytes`);
  const r = JSON.parse(res.text) as BashOutput;
  assert.equal(r.truncated, true);
  const [marker, kept] = [r.stdout.slice(0, r.stdout.indexOf('\n')), r.stdout.slice(r.stdout.indexOf('\n') + 1)];
  assert.equal(marker, '[warren: 4999009 earlier characters of stdout cut; the last 1000 follow]');
  assert.equal(kept.length, 1000);
  assert.ok(kept.endsWith('x\nTHE-END\n'));
  assert.equal(r.stderr, 'err\n');
  // Multi-byte characters are counted as characters and never split.
  const u = bash(await new Toolset(sbx, { maxOutputChars: 100 }).call('bash', { command: 'for i in $(seq 1000); do printf "é€😀"; done' }));
  const body = u.stdout.slice(u.stdout.indexOf('\n') + 1);
  assert.equal(Array.from(body).length, 100);
  assert.match(u.stdout, /^\[warren: 2900 earlier characters of stdout cut; the last 100 follow\]\n/);
  assert.ok(!body.includes('\uFFFD'));
});

test('bash: a command past its timeout is killed with what it started', T, async () => {
  const r = bash(await tools.call('bash', { command: 'sleep 60 & sleep 60; echo never', timeout: 1 }));
  assert.equal(r.timed_out, true);
  assert.equal(r.stdout, '');
  const left = await sbx.exec('pgrep -x sleep || true');
  assert.equal(left.stdout, '');
});

test('bash: a session keeps cd and exported variables between calls until restart; without one nothing carries', T, async () => {
  const s = new Toolset(sbx, { session: 'main' });
  bash(await s.call('bash', { command: 'mkdir -p /tmp/proj && cd /tmp/proj && export GREETING="hello there" && LOCAL=1' }));
  assert.equal(bash(await s.call('bash', { command: 'pwd; echo "$GREETING|${LOCAL:-unset}"' })).stdout, '/tmp/proj\nhello there|unset\n');
  // A failing command keeps its exit code and still saves the session.
  const fail = bash(await s.call('bash', { command: 'cd /; export N=2; false' }));
  assert.equal(fail.exit_code, 1);
  assert.equal(bash(await s.call('bash', { command: 'pwd; echo $N' })).stdout, '/\n2\n');
  // Another session and no session are separate.
  assert.equal(bash(await new Toolset(sbx, { session: 'other' }).call('bash', { command: 'pwd; echo "${N:-none}"' })).stdout, '/work\nnone\n');
  assert.equal(bash(await tools.call('bash', { command: 'pwd; echo "${N:-none}"' })).stdout, '/work\nnone\n');
  // Values with quotes and newlines come back as they were; a directory that is gone leaves the call where it started.
  bash(await s.call('bash', { command: `export ODD="a \\"b\\" 'c'\n\\$d" && mkdir -p /tmp/gone && cd /tmp/gone` }));
  assert.equal(bash(await s.call('bash', { command: 'printf "%s|" "$ODD"; pwd' })).stdout, `a "b" 'c'\n$d|/tmp/gone\n`);
  await sbx.exec('rm -rf /tmp/gone', { check: true });
  assert.equal(bash(await s.call('bash', { command: 'pwd; echo $N' })).stdout, '/work\n2\n');
  assert.equal(bash(await s.call('bash', { restart: true })).stdout, 'shell session restarted\n');
  assert.equal(bash(await s.call('bash', { command: 'pwd; echo "${N:-none}"' })).stdout, '/work\nnone\n');
});

test("bash: a session is the tool user's own: the sandbox user cannot plant commands in a root session", T, async () => {
  // Hostile code running as the sandbox user writes session files wherever it can reach.
  const plant = await sbx.exec(
    'for d in /tmp/.warren-bash/root/ops /tmp/.warren-bash/default/ops /root/.warren-bash/ops; do mkdir -p $d 2>/dev/null && echo "export PWNED=1; touch /tmp/pwned" >$d/env; done; ls -d /root/.warren-bash 2>&1; true',
  );
  assert.match(plant.stdout, /Permission denied|No such file/);
  const root = new Toolset(sbx, { session: 'ops', user: 'root' });
  const r = bash(await root.call('bash', { command: 'echo "${PWNED:-clean}"; export MINE=1' }));
  assert.equal(r.stdout, 'clean\n');
  assert.equal((await sbx.exec('test -e /tmp/pwned && echo planted || echo clean')).stdout, 'clean\n');
  assert.equal(bash(await root.call('bash', { command: 'echo $MINE; stat -c "%U %a" ~/.warren-bash/ops' })).stdout, '1\nroot 700\n');
  // The user cannot read or replace the root session's state either.
  assert.notEqual((await sbx.exec('cat /root/.warren-bash/ops/env')).exitCode, 0);
});

test('editor: create, view with line numbers and ranges, str_replace, insert and undo_edit', T, async () => {
  const path = '/work/app/main.py';
  assert.match(
    edited(await tools.call('str_replace_based_edit_tool', { command: 'create', path, file_text: 'def f():\n    return 1\n\nprint(f())\n' })),
    /created/,
  );
  assert.equal(
    edited(await tools.call('str_replace_based_edit_tool', { command: 'view', path })),
    '     1\tdef f():\n     2\t    return 1\n     3\t\n     4\tprint(f())\n     5\t\n',
  );
  assert.equal(edited(await tools.call('str_replace_based_edit_tool', { command: 'view', path, view_range: [2, 2] })), '     2\t    return 1\n');
  const replaced = edited(await tools.call('str_replace_based_edit_tool', { command: 'str_replace', path, old_str: 'return 1', new_str: 'return 2' }));
  assert.match(replaced, /2\t {4}return 2/);
  edited(await tools.call('str_replace_based_edit_tool', { command: 'insert', path, insert_line: 0, new_str: 'import sys' }));
  assert.equal((await sbx.files.readText(path)).split('\n')[0], 'import sys');
  assert.equal((await sbx.exec(['python3', path])).stdout, '2\n');
  // The file stays the user's, with its mode.
  assert.equal((await sbx.exec(['stat', '-c', '%U %a', path])).stdout, 'user 644\n');
  edited(await tools.call('str_replace_based_edit_tool', { command: 'undo_edit', path }));
  edited(await tools.call('str_replace_based_edit_tool', { command: 'undo_edit', path }));
  assert.equal(await sbx.files.readText(path), 'def f():\n    return 1\n\nprint(f())\n');
  assert.match(failed(await tools.call('str_replace_based_edit_tool', { command: 'undo_edit', path })), /no edit of \/work\/app\/main.py to undo/);
  // Relative paths resolve against the tool set's cwd; directories list two levels, hidden left out.
  await sbx.exec('mkdir -p /work/app/pkg/deep/deeper /work/.git && touch /work/app/pkg/deep/deeper/x /work/.git/config', { check: true });
  const listing = edited(await tools.call('str_replace_based_edit_tool', { command: 'view', path: 'app' }));
  assert.match(listing, /^\/work\/app\/main.py$/m);
  assert.match(listing, /^\/work\/app\/pkg\/deep\/$/m);
  assert.doesNotMatch(listing, /deeper|\.git/);
});

test("editor: undo history is each user's own; a refused undo leaves it as it was", T, async () => {
  const path = '/root/undo-owned.txt';
  const root = new Toolset(sbx, { user: 'root' });
  const edit = (t: Toolset, input: Record<string, unknown>) => t.call('str_replace_based_edit_tool', { path, ...input });
  edited(await edit(root, { command: 'create', file_text: 'one\n' }));
  await sbx.exec(['chmod', '600', path], { user: 'root', check: true });
  edited(await edit(root, { command: 'str_replace', old_str: 'one', new_str: 'two' }));
  // `user` has no edit of the file to undo (and could not write it): refused, nothing changes.
  assert.match(failed(await edit(tools, { command: 'undo_edit' })), /no edit of \/root\/undo-owned.txt to undo/);
  assert.equal((await sbx.exec(['cat', path], { user: 'root' })).stdout, 'two\n');
  // Root's own undo still has its entry.
  edited(await edit(root, { command: 'undo_edit' }));
  assert.equal((await sbx.exec(['cat', path], { user: 'root' })).stdout, 'one\n');

  // An undo the sandbox refuses (the file is now read-only for its editor) keeps its entry too.
  const shared = '/work/undo-refused.txt';
  edited(await tools.call('str_replace_based_edit_tool', { command: 'create', path: shared, file_text: 'a\n' }));
  edited(await tools.call('str_replace_based_edit_tool', { command: 'str_replace', path: shared, old_str: 'a', new_str: 'b' }));
  await sbx.exec(['chown', 'root:root', shared], { user: 'root', check: true });
  assert.match(failed(await tools.call('str_replace_based_edit_tool', { command: 'undo_edit', path: shared })), /may not write \/work\/undo-refused.txt/);
  await sbx.exec(['chown', 'user:user', shared], { user: 'root', check: true });
  edited(await tools.call('str_replace_based_edit_tool', { command: 'undo_edit', path: shared }));
  assert.equal(await sbx.files.readText(shared), 'a\n');
});

test('editor: refusals come back as tool errors that say what to fix', T, async () => {
  const path = '/work/refusals.txt';
  await sbx.files.write(path, 'a\nsame\nb\nsame\n');
  const call = (input: Record<string, unknown>) => tools.call('str_replace_based_edit_tool', { path, ...input });
  assert.match(failed(await call({ command: 'str_replace', old_str: 'missing', new_str: 'x' })), /old_str does not occur in \/work\/refusals.txt/);
  assert.match(failed(await call({ command: 'str_replace', old_str: 'same', new_str: 'x' })), /occurs 2 times .* at lines 2, 4/);
  assert.match(failed(await call({ command: 'create', file_text: 'x' })), /already exists/);
  assert.match(failed(await call({ command: 'view', view_range: [9, 10] })), /the file has lines 1 to 5/);
  assert.match(failed(await call({ command: 'insert', insert_line: 99, new_str: 'x' })), /past the end/);
  assert.match(failed(await tools.call('str_replace_based_edit_tool', { command: 'view', path: '/work/nope.txt' })), /\/work\/nope.txt does not exist/);
  await sbx.files.write('/work/blob.bin', Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0, 1, 2]));
  assert.match(failed(await tools.call('str_replace_based_edit_tool', { command: 'view', path: '/work/blob.bin' })), /binary file/);
  assert.match(failed(await tools.call('str_replace_based_edit_tool', { command: 'str_replace', path: '/etc/passwd', old_str: 'root', new_str: 'x' })), /.+/);
  assert.equal((await sbx.exec('grep -c ^root: /etc/passwd')).stdout, '1\n');
  // The model's malformed calls are tool errors through the Toolset...
  assert.match(failed(await call({ command: 'str_replace' })), /old_str is required for str_replace/);
  assert.match(failed(await tools.call('python', { code: '1' })), /no tool named "python"; the tools are bash, str_replace_based_edit_tool/);
  // ...and the HTTP API's 400 and 404 name the field and the known tools.
  const bad = await post(`/v1/sandboxes/${sbx.id}/tools/str_replace_based_edit_tool`, { input: { command: 'insert', path } });
  assert.equal(bad.status, 400);
  assert.match(bad.text, /insert_line is required for insert/);
  const unknown = await post(`/v1/sandboxes/${sbx.id}/tools/python`, { input: {} });
  assert.equal(unknown.status, 404);
  assert.match(unknown.text, /the tools are bash, str_replace_based_edit_tool/);
  const noSandbox = await post('/v1/sandboxes/sb-nosuchsandbox/tools/bash', { input: { command: 'true' } });
  assert.equal(noSandbox.status, 404);
  assert.match(noSandbox.text, /sb-nosuchsandbox/);
  const badOption = await post(`/v1/sandboxes/${sbx.id}/tools/bash`, { input: { command: 'true' }, session: '../x' });
  assert.equal(badOption.status, 400);
  assert.match(badOption.text, /session/);
});

test('bestOf: prepares once, runs attempts on forks in order, and kills every sandbox, also after a failing attempt', T, async () => {
  let prepared: Sandbox | undefined;
  const outcomes = await bestOf(
    3,
    async () => {
      prepared = await d.create();
      await prepared.exec('echo warm > /tmp/state', { check: true });
      return prepared;
    },
    async (child, i) => {
      if (i === 1) throw new Error('attempt 1 gave up');
      return (await child.exec(`cat /tmp/state; echo ${i}`)).stdout;
    },
    { metadata: { suite: 'tools-best-of' } },
  );
  assert.deepEqual(
    outcomes.map((o) => (o.ok ? o.value : (o.error as Error).message)),
    ['warm\n0\n', 'attempt 1 gave up', 'warm\n2\n'],
  );
  assert.equal(new Set(outcomes.map((o) => o.sandboxId)).size, 3);
  const alive = await Sandbox.list({ ...d.conn, metadata: { suite: 'tools-best-of' } });
  assert.deepEqual(
    alive.map((s) => s.id),
    [],
  );
  await assert.rejects(Sandbox.connect(prepared?.id ?? '', d.conn), /not found|no sandbox/i);
});
