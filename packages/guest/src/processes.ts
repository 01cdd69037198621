/**
 * Every command the agent runs is a tracked process: foreground exec is a process whose
 * caller subscribed to it. Output goes to files under OUTPUT_DIR so that nothing is lost
 * when no one is listening and memory stays flat; exit status stays until the sandbox dies.
 */
import { closeSync, mkdirSync, openSync, readSync, rmSync, statSync, writeSync, type Stats } from 'node:fs';
import type { Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import { MAX_FRAME_PAYLOAD, MAX_MESSAGE_PAYLOAD, OutputStream, WarrenError, type GuestOps, type ProcessInfo, type ProcessOutput } from '@warren/protocol/wire';
import { lookupUser, requireAccess, requireTraversable, resolvePath, type UserIdentity } from './users.js';
import type { Channel } from './channel.js';
import { OutputTail } from './tail.js';
import type { ExitStatus, SpawnRequest, Spawner } from './spawner.js';
import { DEFAULT_COMMAND_ENV } from './default-env.js';

const OUTPUT_DIR = '/run/warren/procs';
/** After the main process exits, how long to wait for children that still hold its pipes. */
const PIPE_GRACE_MS = 200;
/** Most bytes of each stream in one proc.output answer. */
const OUTPUT_PAGE_BYTES = 256 * 1024;
/** Room left in a message for the rest of the response around the output. */
const OUTPUT_MESSAGE_BUDGET = MAX_MESSAGE_PAYLOAD - 64 * 1024;
const BASE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

interface Subscriber {
  channel: Channel;
  stream: number;
  /** Drops its conversation-end handler once the process has exited. */
  forget: () => void;
}

interface OutputFile {
  path: string;
  /** Open while the process runs; closed at exit so finished processes hold no descriptors. */
  fd: number | null;
  size: number;
}

interface Tracked {
  info: ProcessInfo;
  stdin: Socket;
  started: number;
  out: OutputFile;
  err: OutputFile;
  subscribers: Set<Subscriber>;
  /** A long-running service (the template's start command): not work in progress. */
  service: boolean;
  /** With `tailBytes`: the output kept until exit, instead of written and streamed as it comes. */
  tails?: { stdout: OutputTail; stderr: OutputTail };
}

export class ProcessTable {
  private procs = new Map<number, Tracked>();
  private sandboxEnv: Record<string, string> = {};
  private pidsLimit = 0;
  private defaults: { user?: string; cwd?: string } = {};

  constructor(private spawner: Spawner) {
    mkdirSync(OUTPUT_DIR, { recursive: true, mode: 0o700 });
  }

  configure(env: Record<string, string>, pidsLimit?: number, defaults: { user?: string; cwd?: string } = {}): void {
    this.sandboxEnv = { ...env };
    if (pidsLimit) this.pidsLimit = pidsLimit;
    this.defaults = defaults;
  }

  async start(params: GuestOps['exec']['params'], channel: Channel, stream: number): Promise<number> {
    if (!params.argv && !params.cmd) throw new WarrenError('invalid_argument', 'give cmd or argv');
    const command = params.argv ?? ['/bin/bash', '-c', params.cmd ?? ''];
    if (command.length === 0 || command[0] === '') throw new WarrenError('invalid_argument', 'argv must name a program');
    const { user, ...setup } = this.commandSetup(params);
    const child = await this.spawner.spawn({ argv: command, ...setup });
    const pid = child.pid;
    const tracked: Tracked = {
      info: {
        pid,
        tag: params.tag,
        command,
        running: true,
        exitCode: null,
        timedOut: false,
        startedAt: new Date().toISOString(),
      },
      stdin: child.stdin,
      started: Date.now(),
      out: this.openOutput(pid, 'out'),
      err: this.openOutput(pid, 'err'),
      subscribers: new Set(),
      service: params.service === true,
      ...(params.tailBytes ? { tails: { stdout: new OutputTail(params.tailBytes), stderr: new OutputTail(params.tailBytes) } } : {}),
    };
    this.procs.set(pid, tracked);
    if (params.subscribe) this.addSubscriber(tracked, channel, stream);

    child.stdout.on('data', (chunk: Buffer) => this.onOutput(tracked, 'stdout', chunk));
    child.stderr.on('data', (chunk: Buffer) => this.onOutput(tracked, 'stderr', chunk));
    // Nobody watches a kept tail until exit: read it in batches, letting the pipe (1 MiB,
    // see warren-init) fill in between, so the command is not woken up per small write.
    const batching = tracked.tails ? [batchReads(child.stdout), batchReads(child.stderr)] : [];
    child.stdin.on('error', () => undefined); // the command may exit without reading stdin
    if (params.stdin !== undefined) child.stdin.write(params.stdin);
    if (!params.keepStdinOpen) child.stdin.end();

    let timer: NodeJS.Timeout | undefined;
    if (params.timeoutMs) {
      timer = setTimeout(() => {
        tracked.info.timedOut = true;
        void this.killAll(pid);
      }, params.timeoutMs);
    }
    // Done when the process has exited and its output is drained; background children of
    // the command may keep its pipes open, so after exit wait for them only briefly.
    let openPipes = 2;
    let drained = false;
    let status: ExitStatus | null = null;
    const finish = () => {
      if (!status || !tracked.info.running || (openPipes > 0 && !drained)) return;
      if (timer) clearTimeout(timer);
      this.onExit(tracked, status);
    };
    for (const pipe of [child.stdout, child.stderr]) {
      pipe.on('error', () => undefined); // a destroyed pipe after the grace period
      pipe.on('close', () => {
        openPipes--;
        finish();
      });
    }
    void child.exited.then((exit) => {
      status = exit;
      // Drain what is left at once: the grace period below does not wait for batches.
      for (const stop of batching) stop();
      setTimeout(() => {
        drained = true;
        child.stdout.destroy();
        child.stderr.destroy();
        finish();
      }, PIPE_GRACE_MS).unref();
      finish();
    });
    return pid;
  }

  /**
   * Who runs a command, where, with which environment and process cap: the same for exec and
   * terminals (terminals.ts), from the call's options, the template's defaults and configure.
   */
  commandSetup(params: { user?: string; cwd?: string; env?: Record<string, string> }): Omit<SpawnRequest, 'argv'> & { user: UserIdentity } {
    const user = lookupUser(params.user ?? this.defaults.user);
    const cwd = checkCwd(resolvePath(params.cwd ?? this.defaults.cwd ?? user.home, user), user);
    const env: Record<string, string> = {
      PATH: BASE_PATH,
      HOME: user.home,
      USER: user.name,
      LOGNAME: user.name,
      SHELL: user.shell,
      LANG: 'C.UTF-8',
      TERM: 'xterm-256color',
      ...DEFAULT_COMMAND_ENV,
      ...this.sandboxEnv,
      ...(params.env ?? {}),
    };
    // RLIMIT_NPROC is the per-user process cap gVisor enforces inside the sandbox; set on the
    // command only, a fork bomb fails its own forks with EAGAIN instead of exhausting the
    // sandbox. warren-init sets it in the child, with no shell in between.
    return { user, env, cwd, uid: user.uid, gid: user.gid, nproc: this.pidsLimit };
  }

  list(): ProcessInfo[] {
    return [...this.procs.values()].map((t) => ({ ...t.info }));
  }

  /**
   * One page of output from the offsets. The answer is a single message, which must stay
   * under MAX_MESSAGE_PAYLOAD or the daemon drops the channel, so callers page through
   * larger output with the returned offsets until a page comes back empty.
   */
  output(params: GuestOps['proc.output']['params']): ProcessOutput {
    const t = this.get(params.pid);
    let max = Math.min(params.maxBytes ?? OUTPUT_PAGE_BYTES, OUTPUT_PAGE_BYTES);
    for (;;) {
      const { running, exitCode } = t.info;
      const stdout = readText(t.out, params.stdoutOffset ?? 0, max, running);
      const stderr = readText(t.err, params.stderrOffset ?? 0, max, running);
      const result: ProcessOutput = {
        pid: t.info.pid,
        stdout: stdout.toString('utf8'),
        stderr: stderr.toString('utf8'),
        stdoutOffset: (params.stdoutOffset ?? 0) + stdout.length,
        stderrOffset: (params.stderrOffset ?? 0) + stderr.length,
        running,
        exitCode,
      };
      // JSON escaping can grow control characters sixfold; shrink the page until it fits.
      if (max <= 1024 || Buffer.byteLength(JSON.stringify(result)) <= OUTPUT_MESSAGE_BUDGET) return result;
      max = Math.floor(max / 2);
    }
  }

  /** Replays output from the offsets, then streams live output and the exit event. */
  subscribe(params: GuestOps['proc.subscribe']['params'], channel: Channel, stream: number): void {
    const t = this.get(params.pid);
    const replayOut = readRange(t.out, params.stdoutOffset ?? 0, Number.MAX_SAFE_INTEGER);
    const replayErr = readRange(t.err, params.stderrOffset ?? 0, Number.MAX_SAFE_INTEGER);
    // Replay and registration happen in one microtask, before the event loop can deliver
    // another output chunk, so nothing is sent twice or lost in between. (The daemon
    // registers the stream before it sends the call, so replay may precede the response.)
    queueMicrotask(() => {
      for (const frame of tagged(OutputStream.stdout, replayOut)) channel.sendData(stream, frame);
      for (const frame of tagged(OutputStream.stderr, replayErr)) channel.sendData(stream, frame);
      if (t.info.running) this.addSubscriber(t, channel, stream);
      else sendExit(t, channel, stream);
    });
  }

  writeStdin(params: GuestOps['proc.stdin']['params']): void {
    const stdin = this.openStdin(params.pid);
    if (params.data) stdin.write(params.encoding === 'base64' ? Buffer.from(params.data, 'base64') : params.data);
    if (params.close) stdin.end();
  }

  /** The stdin pipe of a running process, still open for writing. */
  openStdin(pid: number): Socket {
    const t = this.get(pid);
    const stdin = t.stdin;
    // Writes after exit would vanish without an error (stdin is destroyed then); say so.
    if (!t.info.running) throw new WarrenError('failed_precondition', `process ${pid} has already exited`);
    if (stdin.writableEnded || stdin.destroyed) throw new WarrenError('failed_precondition', `stdin of process ${pid} is closed`);
    return stdin;
  }

  /**
   * SIGKILL ends everything the command started (see killAll); other signals go to its
   * process group, as a terminal's Ctrl-C does, so a command can handle them for its children.
   */
  async signal(params: GuestOps['proc.signal']['params']): Promise<void> {
    const t = this.get(params.pid);
    if (!(params.signal in osConstants.signals)) throw new WarrenError('invalid_argument', `unknown signal ${params.signal}`);
    if (!t.info.running) throw new WarrenError('failed_precondition', `process ${params.pid} has already exited`);
    if (params.signal === 'SIGKILL') await this.killAll(t.info.pid);
    else killGroup(t.info.pid, params.signal as NodeJS.Signals);
  }

  /**
   * Kills the command and every process it started, also those that called setsid or were
   * reparented by a double fork (warren-init kills its cgroup's members until none is left),
   * so a timed-out fork bomb leaves the sandbox's process budget free again.
   */
  private async killAll(pid: number): Promise<void> {
    try {
      await this.spawner.killTree(pid, 'SIGKILL');
    } catch (err) {
      process.stderr.write(`warren-agent: could not kill everything process ${pid} started: ${(err as Error).message}\n`);
      killGroup(pid, 'SIGKILL');
    }
  }

  forget(params: GuestOps['proc.forget']['params']): void {
    const t = this.get(params.pid);
    if (t.info.running) throw new WarrenError('failed_precondition', `process ${params.pid} is still running`);
    this.procs.delete(params.pid);
    for (const file of [t.out, t.err]) rmSync(file.path, { force: true });
  }

  /** Running processes that are work in progress: they keep the sandbox from hibernating. */
  busyCount(): number {
    let n = 0;
    for (const t of this.procs.values()) if (t.info.running && !t.service) n++;
    return n;
  }

  private get(pid: number): Tracked {
    const t = this.procs.get(pid);
    if (!t) throw new WarrenError('not_found', `no process with pid ${pid} in this sandbox`);
    return t;
  }

  private addSubscriber(t: Tracked, channel: Channel, stream: number): void {
    // A subscription belongs to one conversation: a restored sandbox's new daemon never asked for it.
    const sub: Subscriber = { channel, stream, forget: () => undefined };
    sub.forget = channel.onConversationEnd(() => t.subscribers.delete(sub));
    t.subscribers.add(sub);
  }

  private openOutput(pid: number, name: string): OutputFile {
    const path = `${OUTPUT_DIR}/${pid}.${name}`;
    return { path, fd: openSync(path, 'w+', 0o600), size: 0 };
  }

  private onOutput(t: Tracked, which: 'stdout' | 'stderr', chunk: Buffer): void {
    const file = which === 'stdout' ? t.out : t.err;
    if (file.fd === null) return; // late bytes after exit was recorded
    if (t.tails) {
      t.tails[which].push(chunk);
      return;
    }
    this.record(t, which, chunk);
  }

  /** Output into the process's file (what proc.output reads later) and to its subscribers. */
  private record(t: Tracked, which: 'stdout' | 'stderr', chunk: Buffer): void {
    const file = which === 'stdout' ? t.out : t.err;
    if (file.fd === null || chunk.length === 0) return;
    writeSync(file.fd, chunk, 0, chunk.length, file.size);
    file.size += chunk.length;
    const frames = tagged(OutputStream[which], chunk);
    for (const s of t.subscribers) for (const frame of frames) s.channel.sendData(s.stream, frame);
  }

  private onExit(t: Tracked, { code, signal }: ExitStatus): void {
    t.info.running = false;
    t.info.exitCode = code ?? (signal ? 128 + (osConstants.signals[signal] ?? 0) : null);
    if (signal) t.info.signal = signal;
    t.info.endedAt = new Date().toISOString();
    if (t.tails) for (const which of ['stdout', 'stderr'] as const) this.record(t, which, t.tails[which].bytes());
    for (const s of t.subscribers) sendExit(t, s.channel, s.stream);
    for (const s of t.subscribers) s.forget();
    t.subscribers.clear();
    t.stdin.destroy();
    for (const file of [t.out, t.err]) {
      if (file.fd !== null) closeSync(file.fd);
      file.fd = null;
    }
  }
}

/** A bad cwd is the caller's mistake; say so clearly instead of failing the spawn. */
function checkCwd(cwd: string, user: UserIdentity): string {
  let st: Stats;
  try {
    st = statSync(cwd);
  } catch {
    throw new WarrenError('invalid_argument', `cwd ${cwd} does not exist`);
  }
  if (!st.isDirectory()) throw new WarrenError('invalid_argument', `cwd ${cwd} is not a directory`);
  requireTraversable(cwd, user);
  requireAccess(cwd, user, 1, st);
  return cwd;
}

function sendExit(t: Tracked, channel: Channel, stream: number): void {
  channel.sendMessage({
    event: 'exit',
    stream,
    pid: t.info.pid,
    exitCode: t.info.exitCode,
    ...(t.info.signal ? { signal: t.info.signal } : {}),
    timedOut: t.info.timedOut,
    durationMs: (t.info.endedAt ? Date.parse(t.info.endedAt) : Date.now()) - t.started,
    ...(t.tails ? { outputChars: { stdout: t.tails.stdout.chars, stderr: t.tails.stderr.chars } } : {}),
  });
}

/**
 * Output as Data frame payloads, each led by its stream byte. The daemon reads that byte from
 * every frame, so a chunk longer than one frame is cut here rather than by sendData, which
 * would leave the later frames untagged.
 */
function tagged(which: number, chunk: Buffer): Buffer[] {
  const frames: Buffer[] = [];
  for (let at = 0; at < chunk.length; at += MAX_FRAME_PAYLOAD - 1) {
    const part = chunk.subarray(at, at + MAX_FRAME_PAYLOAD - 1);
    const out = Buffer.allocUnsafe(part.length + 1);
    out[0] = which;
    part.copy(out, 1);
    frames.push(out);
  }
  return frames;
}

/**
 * Like readRange, but never ends inside a UTF-8 sequence whose rest is still to come (later
 * in the file, or from a running process): decoded on its own, each half would become U+FFFD.
 */
function readText(file: OutputFile, offset: number, max: number, running: boolean): Buffer {
  const buf = readRange(file, offset, max);
  if (!running && offset + buf.length >= file.size) return buf;
  // Find the start of the last character and check that all its bytes are here.
  for (let back = 1; back <= Math.min(4, buf.length); back++) {
    const b = buf.readUInt8(buf.length - back);
    if ((b & 0xc0) === 0x80) continue; // continuation byte
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > back ? buf.subarray(0, buf.length - back) : buf;
  }
  return buf;
}

function readRange(file: OutputFile, offset: number, max: number): Buffer {
  const length = Math.max(0, Math.min(file.size - offset, max));
  if (length === 0) return Buffer.alloc(0);
  const buf = Buffer.allocUnsafe(length);
  const fd = file.fd ?? openSync(file.path, 'r');
  try {
    return buf.subarray(0, readSync(fd, buf, 0, length, offset));
  } finally {
    if (fd !== file.fd) closeSync(fd);
  }
}

/** Interval between batched reads of a pipe whose output is only kept, not streamed. */
const BATCH_READ_MS = 10;

/** What libuv asks for in one read of a pipe: a shorter chunk means the pipe is drained. */
const PIPE_READ_BYTES = 64 * 1024;

/**
 * Pauses `pipe` for BATCH_READ_MS each time it has been drained; the returned function
 * reads eagerly again.
 */
function batchReads(pipe: Socket): () => void {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const onData = (chunk: Buffer) => {
    // A full chunk means more is waiting: keep reading until the pipe is empty.
    if (stopped || timer || chunk.length >= PIPE_READ_BYTES) return;
    pipe.pause();
    timer = setTimeout(() => {
      timer = undefined;
      pipe.resume();
    }, BATCH_READ_MS);
  };
  pipe.on('data', onData);
  return () => {
    stopped = true;
    pipe.off('data', onData);
    if (timer) clearTimeout(timer);
    timer = undefined;
    pipe.resume();
  };
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // already gone
    }
  }
}
