/**
 * Commands and processes. Every command is a process in the sandbox's agent; a foreground
 * exec subscribes to it. A caller that goes away only drops the subscription: the command
 * keeps running and its output stays readable through the process calls.
 */
import { WarrenError, type GuestOps, type ExecRequest, type ExecResult, type ProcessInfo, type ProcessOutput } from '@warren/protocol';
import { splitOutput, type ExitEvent, type GuestClient } from './guest-client.js';
import type { SandboxService } from './sandboxes.js';

export interface ExecCallbacks {
  onStart?(pid: number): void;
  onStdout?(data: Buffer): void;
  onStderr?(data: Buffer): void;
}

export interface RunningExec {
  pid: number;
  /** Resolves at exit with everything collected. */
  done: Promise<ExecResult>;
  /** Stop listening (the process keeps running). */
  detach(): void;
}

export class ExecService {
  constructor(private sandboxes: SandboxService) {}

  async start(id: string, req: ExecRequest, callbacks: ExecCallbacks = {}): Promise<RunningExec> {
    const client = this.sandboxes.guest(id, 'exec');
    const params = {
      argv: req.argv,
      cmd: req.cmd,
      cwd: req.cwd,
      env: req.env,
      user: req.user,
      stdin: req.stdin,
      keepStdinOpen: req.keepStdinOpen,
      tag: req.tag,
      timeoutMs: req.timeoutSeconds ? Math.round(req.timeoutSeconds * 1000) : undefined,
    };
    if (req.background) {
      const { pid } = await client.request('exec', params);
      return { pid, done: Promise.reject(new WarrenError('invalid_argument', 'background exec has no result')), detach: () => undefined };
    }
    const running = await this.subscribe(client, 'exec', { ...params, subscribe: true }, callbacks);
    callbacks.onStart?.(running.pid);
    return running;
  }

  async run(id: string, req: ExecRequest): Promise<ExecResult> {
    const running = await this.start(id, req);
    return running.done;
  }

  async list(id: string): Promise<ProcessInfo[]> {
    return (await this.sandboxes.guest(id, 'processes').request('proc.list', {})).processes;
  }

  async output(id: string, pid: number, stdoutOffset?: number, stderrOffset?: number): Promise<ProcessOutput> {
    return this.sandboxes.guest(id, 'processes').request('proc.output', { pid, stdoutOffset, stderrOffset });
  }

  async writeStdin(id: string, pid: number, data: string, close?: boolean): Promise<void> {
    await this.sandboxes.guest(id, 'processes').request('proc.stdin', { pid, data, close });
  }

  async signal(id: string, pid: number, signal: string): Promise<void> {
    await this.sandboxes.guest(id, 'processes').request('proc.signal', { pid, signal });
  }

  /** Waits for a process to exit, streaming output from the given offsets. */
  async follow(id: string, pid: number, offsets: { stdout?: number; stderr?: number }, callbacks: ExecCallbacks): Promise<RunningExec> {
    const client = this.sandboxes.guest(id, 'processes');
    return this.subscribe(client, 'proc.subscribe', { pid, stdoutOffset: offsets.stdout, stderrOffset: offsets.stderr }, callbacks);
  }

  /** Collects a process's output and exit from a subscription (exec or proc.subscribe). */
  private async subscribe<K extends 'exec' | 'proc.subscribe'>(
    client: GuestClient,
    op: K,
    params: GuestOps[K]['params'],
    callbacks: ExecCallbacks,
  ): Promise<RunningExec> {
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    let settle!: { resolve(r: ExecResult): void; reject(e: Error): void };
    const done = new Promise<ExecResult>((resolve, reject) => (settle = { resolve, reject }));
    done.catch(() => undefined); // a caller may only want the pid
    const { id: stream, result } = client.call(op, params, {
      onData: (chunk) => {
        const { stream: which, data } = splitOutput(chunk);
        (which === 'stdout' ? stdout : stderr).push(data);
        (which === 'stdout' ? callbacks.onStdout : callbacks.onStderr)?.(data);
      },
      onEvent: (ev) => {
        if (ev.event === 'exit') {
          client.endStream(stream);
          settle.resolve(toResult(ev, stdout, stderr));
        } else if (ev.event === 'stream-error') settle.reject(new WarrenError(ev.code, ev.message));
      },
    });
    const { pid } = await result;
    return { pid, done, detach: () => client.endStream(stream) };
  }
}

function toResult(ev: ExitEvent, stdout: Buffer[], stderr: Buffer[]): ExecResult {
  return {
    pid: ev.pid,
    exitCode: ev.exitCode,
    ...(ev.signal ? { signal: ev.signal } : {}),
    stdout: Buffer.concat(stdout).toString('utf8'),
    stderr: Buffer.concat(stderr).toString('utf8'),
    timedOut: ev.timedOut,
    durationMs: ev.durationMs,
  };
}
