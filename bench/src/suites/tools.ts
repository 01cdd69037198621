/**
 * The agent tool set: a `bash` tool call on a command that prints 50 MB, against the same
 * command's exec with output to /dev/null (the floor: the command's own cost), and the bytes
 * the tool call puts on the wire; plus a `bash` call of `true` against `exec(['true'])`.
 */
import { Toolset } from '@warren/sdk';
import type { Context } from '../context.js';

const SUITE = 'tools';
const PRINT_50MB = "head -c 50000000 /dev/zero | tr '\\0' x";

export async function runTools(ctx: Context): Promise<void> {
  const n = ctx.iters.tools;
  const { sbx, kill } = await ctx.sandbox();
  const tools = new Toolset(sbx, { cwd: '/tmp' });
  const { url, apiKey } = (await ctx.getDaemon()).conn;
  const devNull: number[] = [];
  const catPipe: number[] = [];
  const toolCall: number[] = [];
  const wireBytes: number[] = [];
  // Interleaved, so that drift on a busy machine hits both alike.
  for (let i = 0; i < n + 1; i++) {
    let t0 = performance.now();
    const r = await sbx.exec(`${PRINT_50MB} >/dev/null`);
    const floor = performance.now() - t0;
    if (r.exitCode !== 0) throw new Error(`the floor command failed: ${r.stderr}`);
    t0 = performance.now();
    await sbx.exec(`${PRINT_50MB} | cat >/dev/null`, { check: true });
    const piped = performance.now() - t0;
    t0 = performance.now();
    const res = await fetch(`${url}/v1/sandboxes/${sbx.id}/tools/bash`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: { command: PRINT_50MB }, cwd: '/tmp' }),
    });
    const body = Buffer.from(await res.arrayBuffer());
    const call = performance.now() - t0;
    if (res.status !== 200) throw new Error(`bash tool call answered ${res.status}: ${body.toString()}`);
    if (i === 0) continue; // warm-up
    devNull.push(floor);
    catPipe.push(piped);
    toolCall.push(call);
    // Body plus the response's status line and headers.
    let headerBytes = 17;
    res.headers.forEach((v, k) => {
      headerBytes += k.length + v.length + 4;
    });
    wireBytes.push(body.length + headerBytes);
  }
  const trueTool: number[] = [];
  const trueExec: number[] = [];
  for (let i = 0; i < Math.max(20, n * 5); i++) {
    let t0 = performance.now();
    await sbx.exec(['true']);
    trueExec.push(performance.now() - t0);
    t0 = performance.now();
    await tools.call('bash', { command: 'true' });
    trueTool.push(performance.now() - t0);
  }
  await kill();

  const r = ctx.report;
  r.add({ key: 'exec-50mb-devnull', suite: SUITE, label: 'exec: print 50 MB > /dev/null (floor)', unit: 'ms', values: devNull, isBaseline: true });
  r.add({
    key: 'exec-50mb-cat',
    suite: SUITE,
    label: 'exec: print 50 MB | cat > /dev/null',
    unit: 'ms',
    values: catPipe,
    baseline: 'exec-50mb-devnull',
    note: 'the cheapest reader there is: what moving 50 MB through any pipe in gVisor costs',
  });
  r.add({ key: 'tool-bash-50mb', suite: SUITE, label: 'bash tool: print 50 MB, keep the tail', unit: 'ms', values: toolCall, baseline: 'exec-50mb-devnull' });
  r.add({ key: 'tool-bash-50mb-bytes', suite: SUITE, label: '  bytes on the wire (response)', unit: 'bytes', values: wireBytes });
  r.add({ key: 'exec-true', suite: SUITE, label: "exec(['true']) round trip", unit: 'ms', values: trueExec, isBaseline: true });
  r.add({ key: 'tool-bash-true', suite: SUITE, label: "Toolset.call('bash', {command: 'true'})", unit: 'ms', values: trueTool, baseline: 'exec-true' });
  const ratio = r.p50('tool-bash-50mb') / r.p50('exec-50mb-devnull');
  r.target('bash tool on 50 MB of output ≤ 1.2x the command to /dev/null (p50)', ratio <= 1.2, `${ratio.toFixed(2)}x`);
  const bytes = Math.max(...wireBytes);
  r.target('bash tool on 50 MB of output puts < 64 KiB on the wire', bytes < 64 * 1024, `${bytes} bytes`);
}
