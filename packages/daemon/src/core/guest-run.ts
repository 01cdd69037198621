/**
 * Commands the daemon itself runs inside a sandbox (not the user's): started through the
 * agent, polled to exit and forgotten, so they never show up among the user's processes.
 */
import type { GuestOps } from '@warren/protocol';
import type { GuestClient } from './guest-client.js';

const CALL_TIMEOUT_MS = 30_000;
const POLL_MS = 20;

export interface GuestRunResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `params` (argv, user, cwd, stdin, timeoutMs, tag) to its end and returns its output. */
export async function runInGuest(client: GuestClient, params: GuestOps['exec']['params']): Promise<GuestRunResult> {
  const { pid } = await client.request('exec', params, CALL_TIMEOUT_MS);
  for (;;) {
    const out = await client.request('proc.output', { pid }, CALL_TIMEOUT_MS);
    if (!out.running) {
      await client.request('proc.forget', { pid }, CALL_TIMEOUT_MS);
      return { exitCode: out.exitCode ?? null, stdout: out.stdout, stderr: out.stderr };
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
