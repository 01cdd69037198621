/**
 * Commands and processes. Every command is a process in the sandbox's agent; a foreground
 * exec subscribes to it. A caller that goes away only drops the subscription: the command
 * keeps running and its output stays readable through the process calls.
 */
import { WarrenError, type GuestOps, type ExecRequest, type ExecResult, type ProcessInfo, type ProcessOutput, type StdinStreamResult } from '@warren/protocol';
import { splitOutput, type ExitEvent, type GuestClient } from './guest-client.js';
import { upload } from './upload.js';
import type { SandboxService } from './sandboxes.js';

export interface ExecCallbacks {
  onStart?(pid: number): void;
  onStdout?(data: Buffer): void;
  onStderr?(data: Buffer): void;
}

/** An exec's result; with a tail kept in the sandbox, also how much each stream wrote. */
export interface CollectedExec extends ExecResult {
  outputChars?: { stdout: number; stderr: number };
}

export interface RunningExec {
  pid: number;
  /** Resolves at exit with everything collected. */
  done: Promise<CollectedExec>;
  /** Stop listening (the process keeps running). */
  detach(): void;
}

/**
 * Stdin longer than this (in UTF-16 units) is sent in several proc.stdin calls after the
 * start, since one guest message must stay under MAX_MESSAGE_PAYLOAD even when JSON escapes
 * every unit (at most 6 bytes each).
 */
const STDIN_CHUNK_UNITS = 128 * 1024;
/** Most output per stream that one `output` call returns; page with the offsets for more. */
const MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

export class ExecService {
  constructor(private sandboxes: SandboxService) {}

  async start(id: string, req: ExecRequest, callbacks: ExecCallbacks = {}, tailBytes?: number): Promise<RunningExec> {
    const client = await this.sandboxes.guest(id, 'exec');
    const bigStdin = req.stdin !== undefined && req.stdin.length > STDIN_CHUNK_UNITS ? req.stdin : undefined;
    const params = {
      argv: req.argv,
      cmd: req.cmd,
      cwd: req.cwd,
      env: req.env,
      user: req.user,
      stdin: bigStdin === undefined ? req.stdin : undefined,
      keepStdinOpen: req.keepStdinOpen || bigStdin !== undefined,
      tag: req.tag,
      timeoutMs: req.timeoutSeconds ? Math.round(req.timeoutSeconds * 1000) : undefined,
      tailBytes,
    };
    const feed = async (pid: number) => {
      if (bigStdin === undefined) return;
      await sendStdin(client, pid, bigStdin, !req.keepStdinOpen).catch((err: unknown) => {
        // Like a small stdin, a big one may go unread by a command that has already exited.
        if (!(err instanceof WarrenError && err.code === 'failed_precondition')) throw err;
      });
    };
    if (req.background) {
      const { pid } = await client.request('exec', params);
      await feed(pid);
      const done = Promise.reject(new WarrenError('invalid_argument', 'background exec has no result; read it through the process'));
      done.catch(() => undefined); // nobody awaits it; an unhandled rejection would end the daemon
      return { pid, done, detach: () => undefined };
    }
    const running = await this.subscribe(client, 'exec', { ...params, subscribe: true }, callbacks);
    try {
      await feed(running.pid);
    } catch (err) {
      running.detach();
      throw err;
    }
    callbacks.onStart?.(running.pid);
    return running;
  }

  async run(id: string, req: ExecRequest): Promise<ExecResult> {
    const running = await this.start(id, req);
    return running.done;
  }

  /**
   * Runs a command keeping only the last `tailBytes` of each stream, cut inside the sandbox;
   * `outputChars` says how many characters each stream wrote in all.
   */
  async runKeepingTail(id: string, req: ExecRequest, tailBytes: number): Promise<CollectedExec> {
    const running = await this.start(id, req, {}, tailBytes);
    return running.done;
  }

  async list(id: string): Promise<ProcessInfo[]> {
    return (await (await this.sandboxes.guest(id, 'processes')).request('proc.list', {})).processes;
  }

  /** Output from the offsets, up to MAX_OUTPUT_BYTES per stream, gathered from the agent's pages. */
  async output(id: string, pid: number, stdoutOffset?: number, stderrOffset?: number): Promise<ProcessOutput> {
    const client = await this.sandboxes.guest(id, 'processes');
    const first = await client.request('proc.output', { pid, stdoutOffset, stderrOffset });
    const stdout = [first.stdout];
    const stderr = [first.stderr];
    let last = first;
    let prev = { stdout: stdoutOffset ?? 0, stderr: stderrOffset ?? 0 };
    while (
      (last.stdoutOffset > prev.stdout || last.stderrOffset > prev.stderr) &&
      last.stdoutOffset - (stdoutOffset ?? 0) < MAX_OUTPUT_BYTES &&
      last.stderrOffset - (stderrOffset ?? 0) < MAX_OUTPUT_BYTES
    ) {
      prev = { stdout: last.stdoutOffset, stderr: last.stderrOffset };
      last = await client.request('proc.output', { pid, stdoutOffset: last.stdoutOffset, stderrOffset: last.stderrOffset });
      stdout.push(last.stdout);
      stderr.push(last.stderr);
    }
    // running and exitCode from the last page, which was read after all of the output.
    return { ...last, stdout: stdout.join(''), stderr: stderr.join('') };
  }

  /** `encoding: 'base64'`: `data` is base64 of the bytes (checked here: the agent's decoder would skip bad characters). */
  async writeStdin(id: string, pid: number, data: string, close?: boolean, encoding?: 'utf8' | 'base64'): Promise<void> {
    if (encoding === 'base64' && !isBase64(data)) {
      throw new WarrenError('invalid_argument', 'data is not valid base64 (standard alphabet, padded to a multiple of 4 characters)');
    }
    await sendStdin(await this.sandboxes.guest(id, 'processes'), pid, data, close, encoding === 'base64' ? 'base64' : undefined);
  }

  /**
   * Streams `source` into the stdin of a running process as it arrives (binary-safe, paced by
   * the command's reading); `close`: stdin is closed at the end, or if the source breaks off.
   * failed_precondition when the process has exited or closed its stdin.
   */
  async streamStdin(id: string, pid: number, source: AsyncIterable<Uint8Array>, close: boolean): Promise<StdinStreamResult> {
    return upload(await this.sandboxes.guest(id, 'processes'), 'proc.stdinStream', { pid, close }, source, { eager: true });
  }

  async signal(id: string, pid: number, signal: string): Promise<void> {
    await (await this.sandboxes.guest(id, 'processes')).request('proc.signal', { pid, signal });
  }

  /** Waits for a process to exit, streaming output from the given offsets. */
  async follow(id: string, pid: number, offsets: { stdout?: number; stderr?: number }, callbacks: ExecCallbacks): Promise<RunningExec> {
    const client = await this.sandboxes.guest(id, 'processes');
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
    let settle!: { resolve(r: CollectedExec): void; reject(e: Error): void };
    const done = new Promise<CollectedExec>((resolve, reject) => (settle = { resolve, reject }));
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

/**
 * Writes stdin in pieces that each fit in one guest message; `close` goes with the last.
 * Base64 is cut at multiples of 4 characters (STDIN_CHUNK_UNITS is one), so each piece decodes alone.
 */
async function sendStdin(client: GuestClient, pid: number, data: string, close?: boolean, encoding?: 'base64'): Promise<void> {
  let at = 0;
  do {
    let end = Math.min(data.length, at + STDIN_CHUNK_UNITS);
    // Never split a surrogate pair: each half alone would be encoded as U+FFFD.
    const last = data.charCodeAt(end - 1);
    if (end < data.length && last >= 0xd800 && last <= 0xdbff) end--;
    await client.request('proc.stdin', { pid, data: data.slice(at, end), close: end >= data.length ? close : undefined, encoding });
    at = end;
  } while (at < data.length);
}

function isBase64(text: string): boolean {
  return text.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(text);
}

function toResult(ev: ExitEvent, stdout: Buffer[], stderr: Buffer[]): CollectedExec {
  return {
    ...(ev.outputChars ? { outputChars: ev.outputChars } : {}),
    pid: ev.pid,
    exitCode: ev.exitCode,
    ...(ev.signal ? { signal: ev.signal } : {}),
    stdout: Buffer.concat(stdout).toString('utf8'),
    stderr: Buffer.concat(stderr).toString('utf8'),
    timedOut: ev.timedOut,
    durationMs: ev.durationMs,
  };
}
