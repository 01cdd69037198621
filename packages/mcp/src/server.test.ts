/**
 * The MCP server against a stand-in daemon on loopback (the e2e tests in tests/src/mcp.test.ts
 * use a real one): what each tool sends, how results and refusals come back, the read cut.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { bashText, createMcpServer, MCP_BASH_SESSION } from './server.js';
import { handleMcpRequest } from './index.js';

const requests: Array<{ method: string; url: string; auth?: string; body: string }> = [];
let daemon: http.Server;
let url: string;

before(async () => {
  daemon = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      requests.push({ method: req.method ?? '', url: req.url ?? '', auth: req.headers.authorization, body });
      const u = new URL(req.url ?? '/', 'http://x');
      const json = (status: number, value: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
      if (u.pathname === '/v1/sandboxes/sb-slow/tools/bash') {
        setTimeout(() => json(200, { stdout: 'late\n', stderr: '', exit_code: 0, timed_out: false, truncated: false }), 300);
        return;
      }
      if (u.pathname === '/v1/sandboxes/sb-1/tools/bash') return json(200, { stdout: 'hi\n', stderr: '', exit_code: 0, timed_out: false, truncated: false });
      if (u.pathname === '/v1/sandboxes/sb-1/tools/str_replace_based_edit_tool') return json(200, { is_error: true, error: 'old_str does not occur in /a' });
      if (u.pathname === '/v1/sandboxes/sb-1/files' && req.method === 'GET') {
        // 'é' is two bytes: a cut after byte 3 splits the second one.
        return res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(Buffer.from('aéé'.repeat(1000)));
      }
      json(404, { error: { code: 'not_found', message: `no sandbox with id ${u.pathname.split('/')[3]}` } });
    });
  });
  await new Promise<void>((resolve) => daemon.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(daemon.address() as AddressInfo).port}`;
});
after(() => {
  daemon.closeAllConnections();
  daemon.close();
});

async function client(progressIntervalMs?: number): Promise<Client> {
  const [a, b] = InMemoryTransport.createLinkedPair();
  await createMcpServer({ url, apiKey: 'wk_test' }, progressIntervalMs ? { progressIntervalMs } : {}).connect(a);
  const c = new Client({ name: 'unit', version: '0' });
  await c.connect(b);
  return c;
}

type Text = { content: Array<{ type: string; text: string }>; isError?: boolean; structuredContent?: unknown };

test('bash: runs in the MCP session with the key, the result as text and as structured content', async () => {
  const c = await client();
  requests.length = 0;
  const r = (await c.callTool({ name: 'bash', arguments: { sandbox_id: 'sb-1', command: 'echo hi' } })) as Text;
  assert.deepEqual(r.structuredContent, { stdout: 'hi\n', stderr: '', exit_code: 0, timed_out: false, truncated: false });
  assert.equal(r.content[0]?.text, 'exit code 0\nstdout:\nhi\n');
  assert.equal(requests[0]?.auth, 'Bearer wk_test');
  assert.deepEqual(JSON.parse(requests[0]?.body ?? ''), { input: { command: 'echo hi' }, session: MCP_BASH_SESSION });
  await c.close();
});

test('a long call sends progress to a client that asked for it, and a client that did not gets its result as usual', async () => {
  const c = await client(50);
  const seen: Array<{ progress: number; message?: string }> = [];
  const r = (await c.callTool({ name: 'bash', arguments: { sandbox_id: 'sb-slow', command: 'sleep 1' } }, undefined, {
    onprogress: (p) => seen.push(p),
    resetTimeoutOnProgress: true,
  })) as Text;
  assert.equal(r.content[0]?.text, 'exit code 0\nstdout:\nlate\n');
  assert.ok(seen.length >= 2, `progress: ${JSON.stringify(seen)}`);
  assert.deepEqual(
    seen.map((p) => p.progress),
    seen.map((_, i) => i + 1),
  );
  assert.match(seen[0]?.message ?? '', /^still running after \d+ s$/);
  const quiet = (await c.callTool({ name: 'bash', arguments: { sandbox_id: 'sb-slow', command: 'sleep 1' } })) as Text;
  assert.equal(quiet.isError, undefined);
  await c.close();
});

test('a failed action and a daemon refusal are tool errors with the message', async () => {
  const c = await client();
  const edit = (await c.callTool({ name: 'str_replace_based_edit_tool', arguments: { sandbox_id: 'sb-1', command: 'view', path: '/a' } })) as Text;
  assert.deepEqual(edit, { isError: true, content: [{ type: 'text', text: 'old_str does not occur in /a' }] });
  const bad = (await c.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: 'sb-nope' } })) as Text;
  assert.equal(bad.isError, true);
  assert.match(bad.content[0]?.text ?? '', /no sandbox with id sb-nope/);
  await c.close();
});

test('read_file: a cut never splits a character, and says so', async () => {
  const c = await client();
  const r = (await c.callTool({ name: 'read_file', arguments: { sandbox_id: 'sb-1', path: 'f', max_bytes: 4 } })) as Text;
  assert.equal(r.content[0]?.text, 'aé\n[warren: the file is longer than 4 bytes; only the first 4 are shown]');
  await c.close();
});

test('an unreachable daemon is a tool error, not a crashed server', async () => {
  const [a, b] = InMemoryTransport.createLinkedPair();
  await createMcpServer({ url: 'http://127.0.0.1:9', apiKey: 'k' }).connect(a);
  const c = new Client({ name: 'unit', version: '0' });
  await c.connect(b);
  const r = (await c.callTool({ name: 'list_sandboxes', arguments: {} })) as Text;
  assert.equal(r.isError, true);
  assert.match(r.content[0]?.text ?? '', /cannot reach warren daemon at http:\/\/127\.0\.0\.1:9/);
  assert.equal((await c.listTools()).tools.length, 9);
  await c.close();
});

test('bashText: the exit status, then the streams that have output', () => {
  assert.equal(bashText({ stdout: '', stderr: '', exit_code: 0, timed_out: false, truncated: false }), 'exit code 0\n(no output)');
  assert.equal(
    bashText({ stdout: '', stderr: 'e\n', exit_code: null, timed_out: true, truncated: false }),
    'timed out: the command and everything it started were killed\nstderr:\ne\n',
  );
});

test('handleMcpRequest: GET and DELETE are 405 (stateless: no sessions, no server stream)', async () => {
  for (const method of ['GET', 'DELETE']) {
    const res = await handleMcpRequest(new Request('http://127.0.0.1/mcp', { method }), { url, apiKey: 'k' });
    assert.equal(res.status, 405);
    assert.equal(res.headers.get('allow'), 'POST');
  }
});
