/** Runs the spawn-cost scripts (bench/scripts) inside a sandbox or on the host. */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Sandbox } from '@warren/sdk';
import { GUEST_NODE } from './raw.js';

const execFileP = promisify(execFile);
const SCRIPTS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../scripts');
const IN_SANDBOX = '/tmp/warren-bench';

export interface ScriptResult {
  results: Record<string, number[]>;
  errors?: Record<string, string>;
}

export interface SpawnConfig {
  n: number;
  warmup?: number;
  methods?: string[];
  uid?: number;
  gid?: number;
  pidsLimit?: number;
}

function parse(stdout: string, what: string): ScriptResult {
  const line = stdout.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line) as ScriptResult;
  } catch {
    throw new Error(`${what} printed no result: ${stdout.slice(-500)}`);
  }
}

/** The values of the first measurement whose name matches; a script that did not make it is an error. */
export function valuesOf(result: ScriptResult, matches: (name: string) => boolean, what: string): number[] {
  const found = Object.entries(result.results).find(([name]) => matches(name));
  if (!found) throw new Error(`${what} made no such measurement (errors: ${JSON.stringify(result.errors ?? {})})`);
  return found[1];
}

export class InSandbox {
  private uploaded = false;

  constructor(private sbx: Sandbox) {}

  private async upload(): Promise<void> {
    if (this.uploaded) return;
    await this.sbx.exec(['mkdir', '-p', IN_SANDBOX], { user: 'root', check: true });
    for (const f of ['spawn.cjs', 'spawn.py', 'spawn.sh']) {
      await this.sbx.files.write(`${IN_SANDBOX}/${f}`, readFileSync(path.join(SCRIPTS, f)), { user: 'root' });
    }
    this.uploaded = true;
  }

  /** Runs as root, like the agent, so that per-command uid/gid can be set. */
  private async run(argv: string[], what: string): Promise<ScriptResult> {
    await this.upload();
    const r = await this.sbx.exec(argv, { user: 'root', timeoutSeconds: 600 });
    if (r.exitCode !== 0) throw new Error(`${what} in sandbox exited ${r.exitCode}: ${r.stderr.slice(-1000)}`);
    return parse(r.stdout, what);
  }

  node(cfg: SpawnConfig): Promise<ScriptResult> {
    return this.run([GUEST_NODE, `${IN_SANDBOX}/spawn.cjs`, JSON.stringify(cfg)], 'spawn.cjs');
  }

  python(cfg: SpawnConfig): Promise<ScriptResult> {
    return this.run(['python3', `${IN_SANDBOX}/spawn.py`, JSON.stringify(cfg)], 'spawn.py');
  }

  /** Uploads a host-built static binary (see buildNative) and runs it with `args`. */
  async native(binary: string, args: string[]): Promise<ScriptResult> {
    await this.upload();
    const target = `${IN_SANDBOX}/${path.basename(binary)}`;
    await this.sbx.files.write(target, readFileSync(binary), { user: 'root', mode: 0o755 });
    return this.run([target, ...args], path.basename(binary));
  }

  shell(n: number, repeats: number, mode: 'all' | 'time' = 'all'): Promise<ScriptResult> {
    return this.run(['/bin/bash', `${IN_SANDBOX}/spawn.sh`, String(n), String(repeats), mode], 'spawn.sh');
  }
}

/**
 * Builds scripts/spawn.c into a static binary in `dir` with the host's gcc, or explains why
 * not (no compiler, no static libc): the rows are then left out.
 */
export async function buildNative(dir: string): Promise<{ binary?: string; why?: string }> {
  const binary = path.join(dir, 'spawn-c');
  try {
    await execFileP('gcc', ['-O2', '-static', '-o', binary, path.join(SCRIPTS, 'spawn.c')]);
    return { binary };
  } catch (err) {
    return { why: `cannot build scripts/spawn.c with gcc -static: ${(err as Error).message.split('\n')[0]}` };
  }
}

/** The same scripts on the host, for comparison. */
export const onHost = {
  async node(cfg: SpawnConfig): Promise<ScriptResult> {
    const { stdout } = await execFileP(process.execPath, [path.join(SCRIPTS, 'spawn.cjs'), JSON.stringify(cfg)], { maxBuffer: 64 << 20 });
    return parse(stdout, 'host spawn.cjs');
  },
  async python(cfg: SpawnConfig): Promise<ScriptResult> {
    const { stdout } = await execFileP('python3', [path.join(SCRIPTS, 'spawn.py'), JSON.stringify(cfg)], { maxBuffer: 64 << 20 });
    return parse(stdout, 'host spawn.py');
  },
  async native(binary: string, args: string[]): Promise<ScriptResult> {
    const { stdout } = await execFileP(binary, args, { maxBuffer: 64 << 20 });
    return parse(stdout, 'host spawn-c');
  },
  async shell(n: number, repeats: number): Promise<ScriptResult> {
    const { stdout } = await execFileP('bash', [path.join(SCRIPTS, 'spawn.sh'), String(n), String(repeats)], { maxBuffer: 64 << 20 });
    return parse(stdout, 'host spawn.sh');
  },
};
