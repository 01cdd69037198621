/**
 * An MCP tool call (`bash` running `true`) through the official SDK's client, over stdio
 * (`warren mcp`) and over streamable HTTP (the daemon's `/mcp`), against the same call made
 * directly with the SDK (`Toolset.call`) on the same sandbox, interleaved. The MCP server runs
 * every bash call in the session `mcp`, so the direct call does too; the direct call without
 * a session is shown for what the session itself costs.
 */
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Toolset } from '@warren/sdk';
import { REPO } from '@warren/tests/harness';
import type { Context } from '../context.js';

const SUITE = 'mcp';
/** The session the MCP server's bash calls run in (MCP_BASH_SESSION in packages/mcp). */
const MCP_SESSION = 'mcp';

type Call = () => Promise<void>;

function mcpCall(client: Client, sandboxId: string): Call {
  return async () => {
    const r = (await client.callTool({ name: 'bash', arguments: { sandbox_id: sandboxId, command: 'true' } })) as {
      isError?: boolean;
      structuredContent?: { exit_code?: number };
    };
    if (r.isError || r.structuredContent?.exit_code !== 0) throw new Error(`MCP bash true failed: ${JSON.stringify(r)}`);
  };
}

function toolsetCall(tools: Toolset): Call {
  return async () => {
    const r = await tools.call('bash', { command: 'true' });
    if (!('exit_code' in r) || r.exit_code !== 0) throw new Error(`Toolset bash true failed: ${JSON.stringify(r)}`);
  };
}

export async function runMcp(ctx: Context): Promise<void> {
  const n = ctx.iters.mcp;
  const d = await ctx.getDaemon();
  const { sbx, kill } = await ctx.sandbox();

  const stdio = new Client({ name: 'warren-bench', version: '0' });
  const http = new Client({ name: 'warren-bench', version: '0' });
  const closeClients = ctx.defer('close the MCP clients', async () => {
    await stdio.close();
    await http.close();
  });
  await stdio.connect(
    new StdioClientTransport({
      command: path.join(REPO, 'bin/warren'),
      args: ['mcp'],
      env: { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey } as Record<string, string>,
      stderr: 'inherit',
    }),
  );
  await http.connect(new StreamableHTTPClientTransport(new URL(`${d.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${d.apiKey}` } } }));

  // The MCP server runs in the user's home (no cwd); so does the direct call.
  const calls: Record<string, Call> = {
    direct: toolsetCall(new Toolset(sbx, { session: MCP_SESSION, cwd: '/home/user' })),
    stdio: mcpCall(stdio, sbx.id),
    http: mcpCall(http, sbx.id),
    'direct, no session': toolsetCall(new Toolset(sbx, { cwd: '/home/user' })),
  };
  const samples: Record<string, number[]> = Object.fromEntries(Object.keys(calls).map((k) => [k, []]));
  const order = Object.keys(calls);
  for (let i = 0; i < 10; i++) for (const k of order) await calls[k]!(); // warm-up
  for (let i = 0; i < n; i++) {
    // Rotated every round, so no path always runs right after another.
    for (let j = 0; j < order.length; j++) {
      const k = order[(i + j) % order.length]!;
      const t0 = performance.now();
      await calls[k]!();
      samples[k]!.push(performance.now() - t0);
    }
  }
  await closeClients();
  await kill();

  const r = ctx.report;
  r.add({ key: 'mcp-direct', suite: SUITE, label: "Toolset.call('bash', {command: 'true'}) (session)", unit: 'ms', values: samples.direct!, isBaseline: true });
  r.add({ key: 'mcp-stdio', suite: SUITE, label: 'MCP bash true over stdio (warren mcp)', unit: 'ms', values: samples.stdio!, baseline: 'mcp-direct' });
  r.add({ key: 'mcp-http', suite: SUITE, label: 'MCP bash true over HTTP (/mcp)', unit: 'ms', values: samples.http!, baseline: 'mcp-direct' });
  r.add({
    key: 'mcp-direct-nosession',
    suite: SUITE,
    label: 'Toolset.call bash true, no session',
    unit: 'ms',
    values: samples['direct, no session']!,
    baseline: 'mcp-direct',
    note: 'what saving and restoring the session costs inside the sandbox',
  });
  // A bash call's own spread (tens of ms on a busy machine) swamps a few ms between two
  // p50s; the difference of each round's two calls, made back to back, cancels the drift.
  for (const [kind, key] of [
    ['stdio', 'mcp-stdio'],
    ['HTTP', 'mcp-http'],
  ] as const) {
    const mine = samples[kind === 'stdio' ? 'stdio' : 'http']!;
    r.add({
      key: `${key}-paired`,
      suite: SUITE,
      label: `  ${kind} minus direct, same round`,
      unit: 'ms',
      values: mine.map((v, i) => v - samples.direct![i]!),
    });
  }
  for (const [kind, key] of [
    ['stdio', 'mcp-stdio'],
    ['HTTP', 'mcp-http'],
  ] as const) {
    const over = r.p50(key) - r.p50('mcp-direct');
    const paired = r.p50(`${key}-paired`);
    r.target(
      `MCP bash over ${kind} p50 ≤ direct Toolset.call p50 + 5 ms`,
      over <= 5,
      `${r.p50(key).toFixed(1)} ms vs ${r.p50('mcp-direct').toFixed(1)} ms (${sign(over)} ms; p50 of the same-round differences ${sign(paired)} ms)`,
    );
  }
}

function sign(ms: number): string {
  return `${ms >= 0 ? '+' : ''}${ms.toFixed(1)}`;
}
