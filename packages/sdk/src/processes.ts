/** Processes inside a sandbox: background handles, output by offset, stdin and signals. */
import { ErrorCodes, isErrorCode, type ExecResult, type ExecStreamEvent, type ProcessInfo, type ProcessOutput } from '@warren/protocol';
import { ndjson, type HttpClient } from './client.js';
import { UnavailableError, errorFromBody } from './errors.js';
import { putStdin, type StdinData } from './stdin.js';

export interface OutputCallbacks {
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
}

/** Reads an exec/follow NDJSON stream to the end, calling back on output. */
export async function consumeExecStream(res: Response, cb: OutputCallbacks, onStart?: (pid: number) => void): Promise<ExecResult> {
  let stdout = '';
  let stderr = '';
  for await (const ev of ndjson<ExecStreamEvent | { type: 'error'; code: string; message: string }>(res)) {
    switch (ev.type) {
      case 'start':
        onStart?.(ev.pid);
        break;
      case 'keepalive':
        break;
      case 'stdout':
        stdout += ev.data;
        cb.onStdout?.(ev.data);
        break;
      case 'stderr':
        stderr += ev.data;
        cb.onStderr?.(ev.data);
        break;
      case 'exit': {
        const { type: _t, ...exit } = ev;
        return { ...exit, stdout, stderr };
      }
      case 'error':
        // Failed after the 200 was sent: the status is the one the code stands for.
        throw errorFromBody(isErrorCode(ev.code) ? ErrorCodes[ev.code] : 500, { error: { code: ev.code, message: ev.message } });
    }
  }
  throw new UnavailableError('unavailable', 'the exec stream ended without an exit event (daemon restarted?)');
}

/** A process started with `exec(cmd, { background: true })`. */
export class ProcessHandle {
  constructor(
    private http: HttpClient,
    readonly sandboxId: string,
    readonly pid: number,
  ) {}

  private get base(): string {
    return `/v1/sandboxes/${this.sandboxId}/processes/${this.pid}`;
  }

  /**
   * Output from the given offsets (from the start by default; at most 16 MiB of each stream
   * per call, so pass the returned offsets again for more) and whether it is still running.
   */
  output(offsets: { stdoutOffset?: number; stderrOffset?: number } = {}): Promise<ProcessOutput> {
    return this.http.json('GET', `${this.base}/output`, { query: offsets });
  }

  /** Waits for exit, streaming output (from the start unless offsets are given). */
  async wait(cb: OutputCallbacks & { stdoutOffset?: number; stderrOffset?: number } = {}): Promise<ExecResult> {
    const res = await this.http.request('GET', `${this.base}/output`, {
      query: { follow: 1, stdoutOffset: cb.stdoutOffset, stderrOffset: cb.stderrOffset },
    });
    return consumeExecStream(res, cb);
  }

  /**
   * Writes a little to stdin (of a process started with keepStdinOpen): text, or bytes (sent
   * as base64, so any bytes arrive intact). For large or streamed input use `writeStdin`.
   */
  async sendStdin(data: string | Uint8Array): Promise<void> {
    const json =
      typeof data === 'string' ? { data } : { data: Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64'), encoding: 'base64' };
    await this.http.json('POST', `${this.base}/stdin`, { json });
  }

  /**
   * Streams `data` (text, bytes, or a Node, web or async-iterable stream of bytes) into stdin
   * as the command reads it, then closes stdin unless `close: false`. Returns the bytes
   * written. A FailedPreconditionError if the process has exited or closed its stdin.
   * @example await proc.writeStdin(createReadStream('data.tar'))
   */
  writeStdin(data: StdinData, opts: { close?: boolean } = {}): Promise<number> {
    return putStdin(this.http, this.base, data, opts.close ?? true);
  }

  async closeStdin(): Promise<void> {
    await this.http.json('POST', `${this.base}/stdin`, { json: { data: '', close: true } });
  }

  async signal(signal = 'SIGTERM'): Promise<void> {
    await this.http.json('POST', `${this.base}/signal`, { json: { signal } });
  }

  kill(): Promise<void> {
    return this.signal('SIGKILL');
  }
}

export class Processes {
  constructor(
    private http: HttpClient,
    private sandboxId: string,
  ) {}

  async list(): Promise<ProcessInfo[]> {
    return (await this.http.json<{ processes: ProcessInfo[] }>('GET', `/v1/sandboxes/${this.sandboxId}/processes`)).processes;
  }

  /** A handle to a process by pid (for example one listed by `list()`). */
  get(pid: number): ProcessHandle {
    return new ProcessHandle(this.http, this.sandboxId, pid);
  }
}
