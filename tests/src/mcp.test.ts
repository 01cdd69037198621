/**
 * The MCP server through the official SDK's client, over both transports: stdio (`warren mcp`
 * spawned with the test daemon's URL and key) and streamable HTTP (the daemon's `/mcp`). Each
 * walks a sandbox's life: create, bash, edit, write and read, fork, hibernate, list, kill;
 * the daemon's refusals come back as tool errors carrying its message; `/mcp` wants a key.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { REPO, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 240_000 };
const TOOLS = [
  'bash',
  'create_sandbox',
  'fork_sandbox',
  'hibernate_sandbox',
  'kill_sandbox',
  'list_sandboxes',
  'read_file',
  'str_replace_based_edit_tool',
  'write_file',
];

let d: DaemonHandle;

before(async () => {
  d = await startDaemon();
});
after(async () => {
  await stopAndCheckClean(d);
});

interface Result {
  isError?: boolean;
  content: Array<{ type: string; text?: string }>;
  structuredContent?: Record<string, unknown>;
}

function sandboxesOf(r: Result): Array<{ id: string; state: string }> {
  const list = r.structuredContent?.sandboxes;
  assert.ok(Array.isArray(list), `no sandboxes in ${JSON.stringify(r)}`);
  return list as Array<{ id: string; state: string }>;
}

/** A client of one transport, with calls that assert success or failure and return the text. */
async function connect(kind: 'stdio' | 'http', headers?: Record<string, string>) {
  const transport: Transport =
    kind === 'stdio'
      ? new StdioClientTransport({
          command: path.join(REPO, 'bin/warren'),
          args: ['mcp'],
          env: { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey } as Record<string, string>,
          stderr: 'pipe',
        })
      : new StreamableHTTPClientTransport(new URL(`${d.url}/mcp`), { requestInit: { headers: headers ?? { authorization: `Bearer ${d.apiKey}` } } });
  const client = new Client({ name: `warren-test-${kind}`, version: '0.0.0' });
  await client.connect(transport);
  const call = async (name: string, args: Record<string, unknown>) => (await client.callTool({ name, arguments: args })) as Result;
  const textOf = (r: Result) =>
    r.content
      .filter((c) => c.type === 'text')
      .map((c) => c.text)
      .join('');
  return {
    client,
    call,
    async ok(name: string, args: Record<string, unknown>): Promise<Result & { text: string }> {
      const r = await call(name, args);
      assert.ok(!r.isError, `${name} failed: ${textOf(r)}`);
      return { ...r, text: textOf(r) };
    },
    async fails(name: string, args: Record<string, unknown>): Promise<string> {
      const r = await call(name, args);
      assert.equal(r.isError, true, `${name} should have failed: ${JSON.stringify(r)}`);
      return textOf(r);
    },
  };
}

for (const kind of ['stdio', 'http'] as const) {
  test(`mcp over ${kind}: a sandbox's life through the tools`, T, async () => {
    const { client, ok, fails } = await connect(kind);
    try {
      const { tools } = await client.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
      for (const t of tools) {
        assert.ok((t.description ?? '').length > 80, `${t.name} needs a description a model can act on`);
        if (t.name !== 'create_sandbox' && t.name !== 'list_sandboxes') assert.ok(t.inputSchema.required?.includes('sandbox_id'), t.name);
      }

      const created = await ok('create_sandbox', { template: 'base', ttl_seconds: 600, metadata: { mcp: kind } });
      const id = created.structuredContent?.id as string;
      assert.match(id, /^sb-/);
      assert.equal(created.structuredContent?.state, 'running');
      assert.deepEqual(created.structuredContent?.metadata, { mcp: kind });
      assert.match(created.text, new RegExp(`created sandbox ${id}`));

      // bash: streams and exit code (a non-zero exit is a result, not a tool error).
      const r = await ok('bash', { sandbox_id: id, command: 'echo hi; echo oops >&2; exit 3' });
      assert.deepEqual(r.structuredContent, { stdout: 'hi\n', stderr: 'oops\n', exit_code: 3, timed_out: false, truncated: false });
      assert.equal(r.text, 'exit code 3\nstdout:\nhi\n\nstderr:\noops\n');
      // One shell session per sandbox: the directory and exported variables carry over.
      await ok('bash', { sandbox_id: id, command: 'mkdir -p /tmp/proj && cd /tmp/proj && export GREETING=hello' });
      assert.equal((await ok('bash', { sandbox_id: id, command: 'pwd; echo $GREETING; id -un' })).structuredContent?.stdout, '/tmp/proj\nhello\nuser\n');
      await ok('bash', { sandbox_id: id, restart: true });
      assert.equal((await ok('bash', { sandbox_id: id, command: 'pwd; echo "[$GREETING]"' })).structuredContent?.stdout, '/home/user\n[]\n');

      // The editor: create, str_replace, view; a miss is a tool error with the daemon's words.
      const file = '/home/user/app.py';
      await ok('str_replace_based_edit_tool', { sandbox_id: id, command: 'create', path: file, file_text: 'def f():\n    return 1\n' });
      const replaced = await ok('str_replace_based_edit_tool', {
        sandbox_id: id,
        command: 'str_replace',
        path: file,
        old_str: 'return 1',
        new_str: 'return 2',
      });
      assert.match(replaced.text, /return 2/);
      const viewed = await ok('str_replace_based_edit_tool', { sandbox_id: id, command: 'view', path: file });
      assert.match(viewed.text, /^\s*1\tdef f\(\):\n\s*2\t {4}return 2\n/);
      const miss = await fails('str_replace_based_edit_tool', { sandbox_id: id, command: 'str_replace', path: file, old_str: 'return 42', new_str: 'x' });
      assert.match(miss, /old_str does not occur in \/home\/user\/app\.py/);
      // A field the command needs, checked by the daemon: its 400 message is the tool error.
      assert.match(
        await fails('str_replace_based_edit_tool', { sandbox_id: id, command: 'insert', path: file, new_str: 'x' }),
        /insert_line is required for insert/,
      );

      // Whole files, text and bytes.
      assert.match((await ok('write_file', { sandbox_id: id, path: 'notes.txt', content: 'héllo\nwörld\n' })).text, /wrote 14 bytes to/);
      assert.equal((await ok('read_file', { sandbox_id: id, path: '/home/user/notes.txt' })).text, 'héllo\nwörld\n');
      const bytes = Buffer.from([0, 1, 2, 0xff, 0xfe, 0x80]);
      await ok('write_file', { sandbox_id: id, path: '/home/user/blob.bin', content: bytes.toString('base64'), encoding: 'base64', mode: '600' });
      assert.equal((await ok('read_file', { sandbox_id: id, path: '/home/user/blob.bin', encoding: 'base64' })).text, bytes.toString('base64'));
      assert.match(await fails('read_file', { sandbox_id: id, path: '/home/user/blob.bin' }), /is not UTF-8 text; read it with encoding: "base64"/);
      assert.equal((await ok('bash', { sandbox_id: id, command: 'stat -c %a blob.bin' })).structuredContent?.stdout, '600\n');
      assert.equal(
        (await ok('read_file', { sandbox_id: id, path: 'notes.txt', max_bytes: 2 })).text,
        'h\n[warren: the file is longer than 2 bytes; only the first 2 are shown]',
      );
      assert.match(await fails('read_file', { sandbox_id: id, path: '/home/user/missing.txt' }), /missing\.txt/);

      // Fork: copies that see the parent's files and session.
      const forked = await ok('fork_sandbox', { sandbox_id: id, count: 2 });
      const children = sandboxesOf(forked).map((c) => c.id);
      assert.equal(children.length, 2);
      assert.match(forked.text, new RegExp(`forked ${id} into 2 sandboxes`));
      for (const child of children) {
        assert.notEqual(child, id);
        assert.equal((await ok('read_file', { sandbox_id: child, path: 'notes.txt' })).text, 'héllo\nwörld\n');
      }

      // Hibernate, seen in the list; a call resumes it.
      assert.match((await ok('hibernate_sandbox', { sandbox_id: id })).text, new RegExp(`sandbox ${id} is hibernated`));
      const listed = await ok('list_sandboxes', { metadata: { mcp: kind } });
      const states = Object.fromEntries(sandboxesOf(listed).map((s) => [s.id, s.state]));
      assert.deepEqual(states, { [id]: 'hibernated', [children[0]!]: 'running', [children[1]!]: 'running' });
      assert.match(listed.text, new RegExp(`${id}  hibernated  base  expires .*  mcp=${kind}`));
      const hibernated = sandboxesOf(await ok('list_sandboxes', { state: 'hibernated', metadata: { mcp: kind } }));
      assert.deepEqual(
        hibernated.map((s) => s.id),
        [id],
      );
      assert.equal((await ok('bash', { sandbox_id: id, command: 'cat notes.txt' })).structuredContent?.stdout, 'héllo\nwörld\n');

      // Kill all three; then the list is empty and a dead id is a tool error naming it.
      for (const s of [id, ...children]) assert.equal((await ok('kill_sandbox', { sandbox_id: s })).text, `killed sandbox ${s}`);
      assert.equal((await ok('list_sandboxes', { metadata: { mcp: kind } })).text, 'no sandboxes');
      assert.match(await fails('bash', { sandbox_id: id, command: 'true' }), new RegExp(`no sandbox with id ${id}`));
    } finally {
      await client.close();
    }
  });

  test(`mcp over ${kind}: a bad sandbox id or a refused argument is a tool error with the daemon's message`, T, async () => {
    const { client, call, fails } = await connect(kind);
    try {
      for (const tool of ['bash', 'str_replace_based_edit_tool', 'read_file', 'write_file', 'fork_sandbox', 'hibernate_sandbox', 'kill_sandbox']) {
        const args = { sandbox_id: 'sb-nosuchsandbox', command: tool === 'bash' ? 'true' : 'view', path: '/home/user/x', content: 'x' };
        assert.match(await fails(tool, args), /no sandbox with id sb-nosuchsandbox/, tool);
      }
      assert.match(await fails('create_sandbox', { template: 'no-such-template' }), /no-such-template/);
      assert.match(await fails('create_sandbox', { metadata: { k: 'x'.repeat(100_000) } }), /metadata/);
      // The server's own schema check (a missing sandbox_id) is a tool error too, and the server goes on.
      assert.match(await fails('bash', { command: 'true' }), /sandbox_id/);
      assert.equal((await call('list_sandboxes', {})).isError, undefined);
    } finally {
      await client.close();
    }
  });
}

test('mcp over http: the API key is required (Bearer or X-Api-Key), and there are no sessions to GET or DELETE', T, async () => {
  const init = {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '0' } },
  };
  const post = (headers: Record<string, string>) =>
    fetch(`${d.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify(init),
    });
  const none = await post({});
  assert.equal(none.status, 401);
  assert.match(await none.text(), /missing API key/);
  const wrong = await post({ authorization: 'Bearer wk_not-a-key' });
  assert.equal(wrong.status, 401);
  assert.match(await wrong.text(), /invalid API key/);
  const good = await post({ 'x-api-key': d.apiKey });
  assert.equal(good.status, 200);
  assert.match(await good.text(), /"serverInfo":\{"name":"warren"/);
  for (const method of ['GET', 'DELETE']) {
    assert.equal((await fetch(`${d.url}/mcp`, { method })).status, 401, method);
    const res = await fetch(`${d.url}/mcp`, { method, headers: { authorization: `Bearer ${d.apiKey}`, accept: 'text/event-stream' } });
    assert.equal(res.status, 405, method);
    assert.equal(res.headers.get('allow'), 'POST');
    await res.body?.cancel();
  }

  // The official client with X-Api-Key works the same as with Bearer.
  const { client, ok } = await connect('http', { 'x-api-key': d.apiKey });
  try {
    assert.equal((await ok('list_sandboxes', {})).text, 'no sandboxes');
  } finally {
    await client.close();
  }
});
