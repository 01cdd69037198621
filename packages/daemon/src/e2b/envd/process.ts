/**
 * envd's Process service (Connect RPC) on warren's processes and terminals. A command is a
 * warren exec (its output kept in the sandbox, so Connect can attach later); a command with a
 * PTY is a warren terminal, its pid the terminal's. See docs/e2b.md for what maps to what.
 */
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { Logger } from 'pino';
import { WarrenError, type ProcessInfo as WarrenProcess, type TerminalInfo } from '@warren/protocol';
import {
  type Process,
  type ProcessInput,
  type ProcessSelector,
  type ProcessEventSchema,
  Signal,
  type StartRequest,
  type StreamInputRequest,
  type UpdateRequest,
} from '@warren/protocol/e2b';
import type { ExecService } from '../../core/exec.js';
import type { TerminalService } from '../../core/terminals.js';
import { toConnectError } from '../errors.js';
import { callOf, resolvePath, streamCallOf, unaryHandler, type EnvdCall } from './call.js';
import { EventQueue, keepaliveMs, type OpenStreams } from './queue.js';

type Event = MessageInitShape<typeof ProcessEventSchema>;

export interface ProcessDeps {
  exec: ExecService;
  terminals: TerminalService;
  streams: OpenStreams;
  log: Logger;
}

/** Go's names for the signals a process ends by, as envd's `status` says them ("signal: killed"). */
const SIGNAL_WORDS: Record<string, string> = {
  SIGKILL: 'killed',
  SIGTERM: 'terminated',
  SIGINT: 'interrupt',
  SIGHUP: 'hangup',
  SIGQUIT: 'quit',
  SIGPIPE: 'broken pipe',
  SIGABRT: 'aborted',
  SIGSEGV: 'segmentation fault',
};

const SIGNAL_NAMES: Record<number, string> = {
  1: 'SIGHUP',
  2: 'SIGINT',
  3: 'SIGQUIT',
  6: 'SIGABRT',
  9: 'SIGKILL',
  11: 'SIGSEGV',
  13: 'SIGPIPE',
  15: 'SIGTERM',
};

const endEvent = (exitCode: number | null, signal?: string, error?: string): Event => ({
  event: {
    case: 'end',
    value:
      exitCode !== null && !signal
        ? { exitCode, exited: true, status: `exit status ${exitCode}`, ...(error ? { error } : {}) }
        : { exitCode: -1, exited: false, status: `signal: ${SIGNAL_WORDS[signal ?? ''] ?? signal ?? 'killed'}`, ...(error ? { error } : {}) },
  },
});

const KEEPALIVE: Event = { event: { case: 'keepalive', value: {} } };

export function processService(deps: ProcessDeps): ServiceImpl<typeof Process> {
  const { exec, terminals, streams, log } = deps;

  /** The running terminal with this pid, if the pid is a PTY's. */
  const terminalOf = async (call: EnvdCall, pid: number): Promise<TerminalInfo | undefined> =>
    (await terminals.list(call.sandboxId)).find((t) => t.pid === pid && t.running);

  const pidOf = async (call: EnvdCall, selector: ProcessSelector | undefined): Promise<number> => {
    const s = selector?.selector;
    if (s?.case === 'pid') return s.value;
    if (s?.case === 'tag') {
      const found = (await exec.list(call.sandboxId)).find((p) => p.tag === s.value && p.running);
      if (!found) throw new WarrenError('not_found', `no running process with tag ${JSON.stringify(s.value)}`);
      return found.pid;
    }
    throw new WarrenError('invalid_argument', 'process selector needs a pid or a tag');
  };

  const sendInput = async (call: EnvdCall, pid: number, input: ProcessInput | undefined): Promise<void> => {
    const which = input?.input;
    if (!which?.case) throw new WarrenError('invalid_argument', 'input needs stdin or pty bytes');
    if (which.case === 'pty') {
      const t = await terminalOf(call, pid);
      if (!t) throw new WarrenError('not_found', `no running PTY process with pid ${pid}`);
      await (await terminals.control(call.sandboxId, t.id)).input(Buffer.from(which.value));
      return;
    }
    await exec.writeStdin(call.sandboxId, pid, Buffer.from(which.value).toString('base64'), false, 'base64');
  };

  const unary = unaryHandler(log);

  /** Output of a process as events, until it exits or the client goes (the process stays). */
  async function* streamExec(
    call: EnvdCall,
    ctx: HandlerContext,
    begin: (q: EventQueue<Event>) => Promise<{ detach(): void }>,
  ): AsyncGenerator<{ event: Event }> {
    const q = new EventQueue<Event>();
    let running: { detach(): void } | undefined;
    let untrack: (() => void) | undefined;
    try {
      running = await begin(q);
      untrack = streams.track(call.sandboxId, () => {
        running?.detach();
        q.end();
      });
      for await (const event of q.drain(ctx.signal, { everyMs: keepaliveMs(ctx.requestHeader), item: () => KEEPALIVE })) yield { event };
    } catch (err) {
      throw toConnectError(err, log, `process stream in ${call.sandboxId}`);
    } finally {
      untrack?.();
      running?.detach();
    }
  }

  const dataTo = (push: (ev: Event) => void, which: 'stdout' | 'stderr' | 'pty') => (chunk: Buffer) =>
    push({ event: { case: 'data', value: { output: { case: which, value: new Uint8Array(chunk) } } } });
  const data = (q: EventQueue<Event>, which: 'stdout' | 'stderr' | 'pty') => dataTo((ev) => q.push(ev), which);

  const startCommand = async (call: EnvdCall, req: StartRequest, ctx: HandlerContext, q: EventQueue<Event>) => {
    const config = req.process;
    if (!config?.cmd) throw new WarrenError('invalid_argument', 'process.cmd must not be empty');
    const cwd = config.cwd ? resolvePath(call, config.cwd) : call.home;
    const env = { ...config.envs };
    if (req.pty) {
      const size = req.pty.size;
      const t = await terminals.create(call.sandboxId, {
        argv: [config.cmd, ...config.args],
        cols: size?.cols || 80,
        rows: size?.rows || 24,
        cwd,
        env,
        user: call.user,
      });
      q.push({ event: { case: 'start', value: { pid: t.pid } } });
      return attachTerminal(call, t, q);
    }
    // Data may arrive before the pid is known: it waits, so that start comes first.
    let started = false;
    const early: Event[] = [];
    const emit = (ev: Event) => (started ? q.push(ev) : early.push(ev));
    // Connect-Timeout-Ms bounds the command itself, as in envd: the agent kills it then.
    const deadline = ctx.timeoutMs();
    const running = await exec.start(
      call.sandboxId,
      {
        argv: [config.cmd, ...config.args],
        cwd,
        env,
        user: call.user,
        keepStdinOpen: req.stdin === true,
        ...(req.tag ? { tag: req.tag } : {}),
        ...(deadline !== undefined && deadline > 0 ? { timeoutSeconds: deadline / 1000 } : {}),
      },
      { onStdout: dataTo(emit, 'stdout'), onStderr: dataTo(emit, 'stderr') },
    );
    q.push({ event: { case: 'start', value: { pid: running.pid } } });
    started = true;
    for (const ev of early) q.push(ev);
    running.done.then(
      (r) => {
        q.push(endEvent(r.exitCode, r.signal, r.timedOut ? 'the command reached its timeout' : undefined));
        q.end();
      },
      (err: unknown) => q.end(err),
    );
    return running;
  };

  const attachTerminal = async (call: EnvdCall, t: TerminalInfo, q: EventQueue<Event>) => {
    const onPty = data(q, 'pty');
    return terminals.attach(
      call.sandboxId,
      t.id,
      { offset: t.outputBytes },
      {
        onData: (chunk, handedOn) => {
          onPty(chunk);
          handedOn();
        },
        onExit: (exitCode) => {
          // A terminal reports death by signal N as 128+N.
          q.push(exitCode !== null && exitCode > 128 ? endEvent(null, SIGNAL_NAMES[exitCode - 128] ?? `signal ${exitCode - 128}`) : endEvent(exitCode));
          q.end();
        },
        onClose: (reason) => q.end(new WarrenError('unavailable', reason)),
      },
    );
  };

  return {
    list: unary('process list', async (call) => {
      const [processes, ttys] = await Promise.all([exec.list(call.sandboxId), terminals.list(call.sandboxId)]);
      const config = (command: string[], cwd?: string) => ({ cmd: command[0] ?? '', args: command.slice(1), envs: {}, ...(cwd ? { cwd } : {}) });
      return {
        processes: [
          ...processes.filter((p: WarrenProcess) => p.running).map((p) => ({ pid: p.pid, config: config(p.command), ...(p.tag ? { tag: p.tag } : {}) })),
          ...ttys.filter((t) => t.running).map((t) => ({ pid: t.pid, config: config(t.command, t.cwd) })),
        ],
      };
    }),

    async *start(req, ctx) {
      const call = streamCallOf(ctx, log, 'process start');
      yield* streamExec(call, ctx, (q) => startCommand(call, req, ctx, q));
    },

    async *connect(req, ctx) {
      const call = streamCallOf(ctx, log, 'process connect');
      yield* streamExec(call, ctx, async (q) => {
        const pid = await pidOf(call, req.process);
        const t = await terminalOf(call, pid);
        q.push({ event: { case: 'start', value: { pid } } });
        if (t) return attachTerminal(call, t, q);
        // From the start of what the sandbox kept: a late Connect still sees the whole output.
        const running = await exec.follow(call.sandboxId, pid, {}, { onStdout: data(q, 'stdout'), onStderr: data(q, 'stderr') });
        running.done.then(
          (r) => {
            q.push(endEvent(r.exitCode, r.signal));
            q.end();
          },
          (err: unknown) => q.end(err),
        );
        return running;
      });
    },

    update: unary('process update', async (call, req: UpdateRequest) => {
      const pid = await pidOf(call, req.process);
      const size = req.pty?.size;
      if (!size) return {};
      const t = await terminalOf(call, pid);
      if (!t) throw new WarrenError('not_found', `no running PTY process with pid ${pid}`);
      await (await terminals.control(call.sandboxId, t.id)).resize(size.cols ?? 80, size.rows ?? 24);
      return {};
    }),

    sendInput: unary('process input', async (call, req) => {
      await sendInput(call, await pidOf(call, req.process), req.input);
      return {};
    }),

    async streamInput(reqs: AsyncIterable<StreamInputRequest>, ctx) {
      try {
        const call = callOf(ctx.requestHeader);
        let pid: number | undefined;
        for await (const r of reqs) {
          if (r.event.case === 'start') pid = await pidOf(call, r.event.value.process);
          else if (r.event.case === 'data') {
            if (pid === undefined) throw new WarrenError('invalid_argument', 'stream input sent data before its start event');
            await sendInput(call, pid, r.event.value.input);
          }
        }
        return {};
      } catch (err) {
        throw toConnectError(err, log, 'process stream input');
      }
    },

    sendSignal: unary('process signal', async (call, req) => {
      const pid = await pidOf(call, req.process);
      const name = req.signal === Signal.SIGKILL ? 'SIGKILL' : req.signal === Signal.SIGTERM ? 'SIGTERM' : undefined;
      if (!name) throw new WarrenError('invalid_argument', 'signal must be SIGKILL or SIGTERM');
      const t = await terminalOf(call, pid);
      if (t) await (await terminals.control(call.sandboxId, t.id)).signal(name);
      else {
        await exec.signal(call.sandboxId, pid, name).catch((err: unknown) => {
          // envd knows only running processes: one that has exited is not found (the SDK's kill() is then false).
          if (err instanceof WarrenError && err.code === 'failed_precondition') throw new WarrenError('not_found', `process ${pid} is not running`);
          throw err;
        });
      }
      return {};
    }),

    closeStdin: unary('process close stdin', async (call, req) => {
      await exec.writeStdin(call.sandboxId, await pidOf(call, req.process), '', true);
      return {};
    }),
  };
}
