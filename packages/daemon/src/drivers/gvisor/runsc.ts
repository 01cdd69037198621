/** Thin, typed wrapper over the runsc command line. */
import { execFile, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { promisify } from 'node:util';
import { WarrenError } from '@warren/protocol';

const execFileP = promisify(execFile);

export interface RunscConfig {
  binary: string;
  /** runsc state directory; all of warren's containers live under this one root. */
  root: string;
  platform: string;
}

export interface RunscContainer {
  id: string;
  pid: number;
  status: string;
}

export class Runsc {
  constructor(readonly config: RunscConfig) {}

  globalFlags(extra: string[] = []): string[] {
    return ['--root', this.config.root, '--platform', this.config.platform, ...extra];
  }

  spawn(args: string[], extraGlobal: string[], options: SpawnOptions): ChildProcess {
    return spawn(this.config.binary, [...this.globalFlags(extraGlobal), ...args], options);
  }

  async run(args: string[], timeoutMs = 30_000, extraGlobal: string[] = []): Promise<string> {
    try {
      const { stdout } = await execFileP(this.config.binary, [...this.globalFlags(extraGlobal), ...args], {
        timeout: timeoutMs,
        killSignal: 'SIGKILL',
        maxBuffer: 16 * 1024 * 1024,
      });
      return stdout;
    } catch (err) {
      const e = err as { stderr?: string; message: string; killed?: boolean };
      const detail = lastLines(e.stderr || e.message);
      throw new WarrenError('internal', `runsc ${args[0]} failed${e.killed ? ' (timed out)' : ''}`, { cause: detail });
    }
  }

  async list(): Promise<RunscContainer[]> {
    const out = await this.run(['list', '--format', 'json']);
    const parsed = JSON.parse(out || '[]') as Array<{ id: string; pid: number; status: string }> | null;
    return (parsed ?? []).map((c) => ({ id: c.id, pid: c.pid, status: c.status }));
  }
}

/** The end of runsc's stderr, on one line: where its error message is. */
export function lastLines(text: string): string {
  return text.trim().split('\n').slice(-4).join(' | ') || 'no output';
}
