/**
 * The agent's side of warren-init (packages/guest/native/init.c), the sandbox's first
 * process, which starts commands for the agent with vfork: from node itself every spawn
 * would copy node's whole address space through the gVisor Sentry, three to four times the
 * cost. The protocol is described in init.c.
 */
import net from 'node:net';
import { constants as fsConstants, openSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { WarrenError } from '@warren/protocol/wire';

/** The control socket warren-init hands the agent. */
const INIT_CONTROL_FD = 3;
const INIT_PID = 1;

export interface SpawnRequest {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  uid: number;
  gid: number;
  /** RLIMIT_NPROC for the command; 0 leaves it unset. */
  nproc: number;
}

export interface ExitStatus {
  /** null when killed by a signal, or when the exit was lost with warren-init. */
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface SpawnedProcess {
  pid: number;
  stdin: net.Socket;
  stdout: net.Socket;
  stderr: net.Socket;
  /** Resolves when warren-init has reaped the process. */
  exited: Promise<ExitStatus>;
}

interface Pending {
  resolve(p: SpawnedProcess): void;
  reject(err: Error): void;
}

interface PendingDone {
  resolve(): void;
  reject(err: Error): void;
}

export class Spawner {
  private socket: net.Socket;
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private pendingDone = new Map<number, PendingDone>();
  private running = new Map<number, (status: ExitStatus) => void>();
  private buffered = '';
  private lost: Error | null = null;

  constructor() {
    this.socket = new net.Socket({ fd: INIT_CONTROL_FD, readable: true, writable: true });
    this.socket.setEncoding('utf8');
    this.socket.on('data', (text: string) => this.onText(text));
    this.socket.on('error', (err) => this.onLost(err));
    this.socket.on('close', () => this.onLost(new Error('warren-init closed the control socket')));
  }

  spawn(req: SpawnRequest): Promise<SpawnedProcess> {
    if (this.lost) return Promise.reject(new WarrenError('unavailable', `cannot start commands: ${this.lost.message}`));
    const id = this.nextId++;
    const env = Object.entries(req.env).map(([k, v]) => `${k}=${v}`);
    const fields = ['spawn', id, req.uid, req.gid, req.nproc, req.cwd, req.argv.length, ...req.argv, ...env].map(String);
    for (const f of fields) {
      // A NUL would shift every later field; the kernel could not take it in argv or env anyway.
      if (f.includes('\0')) throw new WarrenError('invalid_argument', 'command, cwd and env must not contain NUL characters');
    }
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.send(fields);
    });
  }

  /** Sets the sandbox's hostname (node has no sethostname). */
  setHostname(name: string): Promise<void> {
    if (this.lost) return Promise.reject(new WarrenError('unavailable', `cannot set the hostname: ${this.lost.message}`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pendingDone.set(id, { resolve, reject });
      this.send(['hostname', String(id), name]);
    });
  }

  /**
   * Sends signal to every process the command `pid` started, also those that left its
   * process group or were reparented (its cgroup's members; see native/init.c). With SIGKILL
   * it resolves once none is left.
   */
  killTree(pid: number, signal: NodeJS.Signals): Promise<void> {
    if (this.lost) return Promise.reject(new WarrenError('unavailable', `cannot signal commands: ${this.lost.message}`));
    const signo = osConstants.signals[signal];
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pendingDone.set(id, { resolve, reject });
      this.send(['killtree', String(id), String(pid), String(signo)]);
    });
  }

  private onText(text: string): void {
    this.buffered += text;
    let nl: number;
    while ((nl = this.buffered.indexOf('\n')) >= 0) {
      const line = this.buffered.slice(0, nl);
      this.buffered = this.buffered.slice(nl + 1);
      this.onReply(line.split(' '));
    }
  }

  private onReply([kind, ...args]: string[]): void {
    if (kind === 'spawned') {
      const nums = replyNumbers(kind, args, 5);
      if (!nums) return;
      const [id, pid, inFd, outFd, errFd] = nums;
      const waiter = this.pending.get(id);
      this.pending.delete(id);
      let spawned: SpawnedProcess;
      try {
        spawned = {
          pid,
          stdin: openPipe(inFd, 'write'),
          stdout: openPipe(outFd, 'read'),
          stderr: openPipe(errFd, 'read'),
          // Registered before this line's processing ends, so the exit line cannot beat it.
          exited: new Promise((resolve) => this.running.set(pid, resolve)),
        };
      } catch (err) {
        // Nobody could read or wait for it: stop it rather than leave it running untracked.
        try {
          process.kill(-pid, 'SIGKILL');
        } catch (killErr) {
          process.stderr.write(`warren-agent: cannot kill untracked process ${pid}: ${(killErr as Error).message}\n`);
        }
        waiter?.reject(new WarrenError('internal', `cannot open the pipes of process ${pid}: ${(err as Error).message}`));
        return;
      } finally {
        this.send(['release', String(id)]);
      }
      waiter?.resolve(spawned);
    } else if (kind === 'failed') {
      const nums = replyNumbers(kind, args, 2);
      if (!nums) return;
      const [id, errno] = nums;
      const waiter = this.pending.get(id);
      this.pending.delete(id);
      const name = errnoName(errno);
      waiter?.reject(
        name === 'EAGAIN'
          ? new WarrenError('resource_exhausted', 'cannot start command: the sandbox has too many processes (EAGAIN)')
          : new WarrenError('internal', `cannot start command: ${name}`),
      );
    } else if (kind === 'done') {
      const nums = replyNumbers(kind, args, 2);
      if (!nums) return;
      const [id, errno] = nums;
      const waiter = this.pendingDone.get(id);
      this.pendingDone.delete(id);
      if (errno === 0) waiter?.resolve();
      else waiter?.reject(new WarrenError('internal', `warren-init: ${errnoName(errno)}`));
    } else if (kind === 'exit') {
      const nums = replyNumbers(kind, args, 3);
      if (!nums) return;
      const [pid, code, signal] = nums;
      const done = this.running.get(pid);
      this.running.delete(pid); // an orphan reaped by init is not ours: nothing to do
      done?.({ code: code >= 0 ? code : null, signal: code >= 0 ? null : signalName(signal) });
    }
  }

  private send(fields: string[]): void {
    const body = Buffer.from(`${fields.join('\0')}\0`);
    const header = Buffer.alloc(4);
    header.writeUInt32LE(body.length);
    this.socket.write(Buffer.concat([header, body]));
  }

  /** Without init nothing can be started or reaped; running commands are reported as lost. */
  private onLost(err: Error): void {
    if (this.lost) return;
    this.lost = err;
    process.stderr.write(`warren-agent: lost warren-init: ${err.message}\n`);
    for (const p of this.pending.values()) p.reject(new WarrenError('unavailable', `cannot start command: ${err.message}`));
    this.pending.clear();
    for (const p of this.pendingDone.values()) p.reject(new WarrenError('unavailable', err.message));
    this.pendingDone.clear();
    for (const done of this.running.values()) done({ code: null, signal: null });
    this.running.clear();
  }
}

function openPipe(fd: number, mode: 'read' | 'write'): net.Socket {
  const flags = (mode === 'read' ? fsConstants.O_RDONLY : fsConstants.O_WRONLY) | fsConstants.O_NONBLOCK;
  const own = openSync(`/proc/${INIT_PID}/fd/${fd}`, flags);
  return new net.Socket({ fd: own, readable: mode === 'read', writable: mode === 'write' });
}

type Numbers<N extends number, T extends number[] = []> = T['length'] extends N ? T : Numbers<N, [...T, number]>;

/**
 * The first `count` fields of a reply as numbers. A shorter line means init and the agent
 * disagree on the protocol: it is reported and dropped, as an unknown kind is.
 */
function replyNumbers<N extends number>(kind: string, args: string[], count: N): Numbers<N> | undefined {
  if (args.length < count) {
    process.stderr.write(`warren-agent: warren-init sent '${kind}' with ${args.length} fields, expected ${count}\n`);
    return undefined;
  }
  return args.slice(0, count).map(Number) as Numbers<N>;
}

function errnoName(errno: number): string {
  const entry = Object.entries(osConstants.errno).find(([, n]) => n === errno);
  return entry ? entry[0] : `errno ${errno}`;
}

function signalName(signal: number): NodeJS.Signals | null {
  const entry = Object.entries(osConstants.signals).find(([, n]) => n === signal);
  return entry ? (entry[0] as NodeJS.Signals) : null;
}
