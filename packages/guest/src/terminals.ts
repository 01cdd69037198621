/**
 * Terminals: commands on pseudo-terminals (docs/terminals.md). Each runs under warren-pty
 * (native/pty.c), started by warren-init like any command, as the user, so the terminal and
 * everything on it belong to that user. The agent keeps each terminal, its recent output and
 * its exit status, so a client (and a daemon) can go away and attach again by id.
 */
import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import {
  MAX_TERMINALS,
  PTY_HELPER_PATH,
  TERMINAL_REPLAY_BYTES,
  WarrenError,
  type GuestOps,
  type TerminalInfo,
  type TerminalOpenParams,
} from '@warren/protocol/wire';
import type { Channel, OutgoingStream } from './channel.js';
import type { ExitStatus, Spawner } from './spawner.js';
import type { ProcessTable } from './processes.js';
import { OutputRing } from './output-ring.js';

/** After the command exits, how long to wait for the helper's last output before reporting it. */
const OUTPUT_GRACE_MS = 200;
/**
 * Output queued for one attached reader that has not granted credit for it. Past this the
 * reader is cut off (End): it can attach again from its offset and gets the replay.
 */
const MAX_QUEUED_BYTES = 4 * 1024 * 1024;

/** Record kinds on warren-pty's stdin (native/pty.c). */
const Record = { data: 0x64, resize: 0x72, signal: 0x73 } as const;

interface Reader {
  out: OutgoingStream;
  channel: Channel;
  stream: number;
  /** Writes wait in turn for the reader's credit. */
  chain: Promise<void>;
  queued: number;
}

interface Terminal {
  info: TerminalInfo;
  input: Socket;
  ring: OutputRing;
  readers: Set<Reader>;
  started: number;
}

export class Terminals {
  private terminals = new Map<string, Terminal>();

  constructor(
    private spawner: Spawner,
    private processes: ProcessTable,
  ) {}

  async open(params: TerminalOpenParams): Promise<TerminalInfo> {
    this.makeRoom();
    const { user, ...setup } = this.processes.commandSetup(params);
    const command = params.argv ?? [user.shell, '-l'];
    if (command.length === 0 || command[0] === '') throw new WarrenError('invalid_argument', 'argv must name a program');
    const child = await this.spawner.spawn({ ...setup, argv: [PTY_HELPER_PATH, String(params.cols), String(params.rows), ...command] });
    const id = `term-${randomBytes(8).toString('hex')}`;
    const t: Terminal = {
      info: {
        id,
        pid: child.pid,
        command,
        user: user.name,
        cwd: setup.cwd,
        cols: params.cols,
        rows: params.rows,
        running: true,
        exitCode: null,
        startedAt: new Date().toISOString(),
        outputBytes: 0,
        attached: 0,
      },
      input: child.stdin,
      ring: new OutputRing(TERMINAL_REPLAY_BYTES),
      readers: new Set(),
      started: Date.now(),
    };
    this.terminals.set(id, t);
    child.stdin.on('error', (err) => process.stderr.write(`warren-agent: terminal ${id} input: ${err.message}\n`));
    child.stdout.on('data', (chunk: Buffer) => this.onOutput(t, chunk));
    child.stderr.on('data', (chunk: Buffer) => process.stderr.write(`warren-agent: terminal ${id}: ${chunk.toString('utf8')}`));
    let closed = false;
    let status: ExitStatus | null = null;
    const finish = () => {
      if (status && closed && t.info.running) this.onExit(t, status);
    };
    child.stdout.on('close', () => {
      closed = true;
      finish();
    });
    void child.exited.then((exit) => {
      status = exit;
      // Background children of the command may hold the helper's stdout: wait only briefly.
      setTimeout(() => {
        closed = true;
        child.stdout.destroy();
        child.stderr.destroy();
        finish();
      }, OUTPUT_GRACE_MS).unref();
      finish();
    });
    return { ...t.info };
  }

  input(params: GuestOps['term.input']['params']): void {
    this.send(this.running(params.id), Record.data, Buffer.from(params.data, 'base64'));
  }

  resize(params: GuestOps['term.resize']['params']): void {
    const t = this.running(params.id);
    const size = Buffer.alloc(4);
    size.writeUInt16BE(params.cols, 0);
    size.writeUInt16BE(params.rows, 2);
    this.send(t, Record.resize, size);
    t.info.cols = params.cols;
    t.info.rows = params.rows;
  }

  signal(params: GuestOps['term.signal']['params']): void {
    const signo = (osConstants.signals as Record<string, number | undefined>)[params.signal];
    if (signo === undefined) throw new WarrenError('invalid_argument', `unknown signal ${params.signal}`);
    this.send(this.running(params.id), Record.signal, Buffer.from([signo]));
  }

  async kill(params: GuestOps['term.kill']['params']): Promise<void> {
    const t = this.get(params.id);
    if (!t.info.running) {
      this.terminals.delete(t.info.id);
      return;
    }
    // The helper, the command and everything it started, also what left its session.
    await this.spawner.killTree(t.info.pid, 'SIGKILL');
  }

  /** Replays kept output from the offset, then streams live output until exit (or cancel). */
  attach(params: GuestOps['term.attach']['params'], channel: Channel, stream: number): GuestOps['term.attach']['result'] {
    const t = this.get(params.id);
    const replay = t.ring.since(params.offset ?? 0);
    const reader: Reader = { out: channel.openOutgoing(stream), channel, stream, chain: Promise.resolve(), queued: 0 };
    // A reader belongs to one conversation: a restored sandbox's new daemon never asked for it.
    // The conversation's end aborts its streams, so one hook covers both that and a cancel.
    reader.out.onAbort(() => this.dropReader(t, reader));
    this.enqueue(t, reader, replay.data);
    if (t.info.running && params.follow !== false) {
      t.readers.add(reader);
      t.info.attached = t.readers.size;
    } else this.finishReader(t, reader);
    return { terminal: { ...t.info }, offset: replay.offset };
  }

  list(): TerminalInfo[] {
    return [...this.terminals.values()].map((t) => ({ ...t.info }));
  }

  /** Running terminals with a client attached: work in progress, which keeps the sandbox awake. */
  busyCount(): number {
    let n = 0;
    for (const t of this.terminals.values()) if (t.info.running && t.readers.size > 0) n++;
    return n;
  }

  private get(id: string): Terminal {
    const t = this.terminals.get(id);
    if (!t) throw new WarrenError('not_found', `no terminal ${id} in this sandbox`);
    return t;
  }

  private running(id: string): Terminal {
    const t = this.get(id);
    if (!t.info.running) throw new WarrenError('failed_precondition', `terminal ${id} has exited (exit code ${t.info.exitCode})`);
    return t;
  }

  /** Finished terminals give way to new ones, oldest first; running ones never do. */
  private makeRoom(): void {
    if (this.terminals.size < MAX_TERMINALS) return;
    for (const t of this.terminals.values()) {
      if (!t.info.running) {
        this.terminals.delete(t.info.id);
        return;
      }
    }
    throw new WarrenError('resource_exhausted', `this sandbox already has ${MAX_TERMINALS} running terminals; kill one first`);
  }

  private send(t: Terminal, kind: number, payload: Buffer): void {
    const head = Buffer.alloc(5);
    head.writeUInt8(kind, 0);
    head.writeUInt32BE(payload.length, 1);
    t.input.write(Buffer.concat([head, payload]));
  }

  private onOutput(t: Terminal, chunk: Buffer): void {
    if (!t.info.running) return;
    t.ring.push(chunk);
    t.info.outputBytes = t.ring.total;
    for (const r of t.readers) this.enqueue(t, r, chunk);
  }

  private enqueue(t: Terminal, r: Reader, chunk: Buffer): void {
    if (chunk.length === 0) return;
    if (r.queued + chunk.length > MAX_QUEUED_BYTES) {
      process.stderr.write(`warren-agent: terminal ${t.info.id}: reader on stream ${r.stream} is too slow, detaching it\n`);
      this.dropReader(t, r);
      r.out.end();
      return;
    }
    r.queued += chunk.length;
    r.chain = r.chain
      .then(() => r.out.write(chunk))
      .then(
        () => {
          r.queued -= chunk.length;
        },
        () => {
          // Aborted by the reader (cancel) or its conversation ended: nothing left to send to.
          this.dropReader(t, r);
        },
      );
  }

  private dropReader(t: Terminal, r: Reader): void {
    if (!t.readers.delete(r)) return;
    t.info.attached = t.readers.size;
  }

  /** After what was queued: the exit event (once exited), then End. */
  private finishReader(t: Terminal, r: Reader): void {
    void r.chain.then(() => {
      if (r.out.aborted) return;
      if (t.info.running) {
        r.out.end(); // a look at what is kept (follow: false): no exit to report
        return;
      }
      r.channel.sendMessage({
        event: 'exit',
        stream: r.stream,
        pid: t.info.pid,
        exitCode: t.info.exitCode,
        timedOut: false,
        durationMs: (t.info.endedAt ? Date.parse(t.info.endedAt) : Date.now()) - t.started,
      });
      r.out.end();
    });
  }

  private onExit(t: Terminal, { code, signal }: ExitStatus): void {
    t.info.running = false;
    // warren-pty reports a command killed by signal N as 128+N; the helper killed itself likewise.
    t.info.exitCode = code ?? (signal ? 128 + (osConstants.signals[signal] ?? 0) : null);
    t.info.endedAt = new Date().toISOString();
    for (const r of t.readers) this.finishReader(t, r);
    t.readers.clear();
    t.info.attached = 0;
    t.input.destroy();
  }
}
