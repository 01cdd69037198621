/**
 * Terminals (docs/terminals.md). The agent owns each terminal; the daemon only passes calls
 * and streams attached output, so a terminal outlives the client and the daemon: after a
 * restart a client attaches again by id and gets the recent output replayed.
 */
import { ReceiveCredit, TERMINAL_LIMITS, WarrenError, type TerminalCreateRequest, type TerminalInfo, type TerminalOpenParams } from '@warren/protocol';
import type { SandboxService } from './sandboxes.js';
import type { GuestClient } from './guest-client.js';

export interface TerminalOutputHandlers {
  /**
   * Output bytes; call `handedOn` once they have left the daemon (the agent gets credit for
   * them). May come before attach() resolves: the replay follows the call at once.
   */
  onData(chunk: Buffer, handedOn: () => void): void;
  /** The command exited; nothing follows. */
  onExit(exitCode: number | null): void;
  /** The stream ended without an exit: the agent cut off a slow reader, or the sandbox went away. */
  onClose(reason: string): void;
}

export interface AttachedTerminal extends TerminalControl {
  terminal: TerminalInfo;
  /** Offset of the first byte that onData gets (the replay's start). */
  offset: number;
  /** Stop streaming; the terminal keeps running. */
  detach(): void;
}

/**
 * Keystrokes, resizes and signals on one sandbox's channel: each call is written at once, so
 * they reach the agent in call order without waiting for each other's answers.
 */
export interface TerminalControl {
  input(data: Buffer): Promise<void>;
  resize(cols: number, rows: number): Promise<void>;
  signal(signal: string): Promise<void>;
}

function controlOf(client: GuestClient, terminalId: string): TerminalControl {
  return {
    input: async (data) => {
      await client.request('term.input', { id: terminalId, data: data.toString('base64') });
    },
    resize: async (cols, rows) => {
      await client.request('term.resize', { id: terminalId, cols, rows });
    },
    signal: async (signal) => {
      await client.request('term.signal', { id: terminalId, signal });
    },
  };
}

/**
 * Credit goes back to the agent in steps of this many handed-on bytes (its window is
 * STREAM_WINDOW_BYTES): a grant per keystroke echo would double the messages into the
 * sandbox, and a half-window step would let a stuck reader pile up megabytes here.
 */
const CREDIT_STEP_BYTES = 64 * 1024;

export class TerminalService {
  constructor(private sandboxes: SandboxService) {}

  async create(id: string, req: TerminalCreateRequest): Promise<TerminalInfo> {
    const params: TerminalOpenParams = {
      cols: req.cols ?? TERMINAL_LIMITS.defaultCols,
      rows: req.rows ?? TERMINAL_LIMITS.defaultRows,
      // A command line runs in a login shell, so PATH and friends are what `warren shell` gives.
      argv: req.argv ?? (req.cmd !== undefined ? ['/bin/bash', '-lc', req.cmd] : undefined),
      cwd: req.cwd,
      env: req.env,
      user: req.user,
    };
    return (await this.client(id)).request('term.open', params);
  }

  async list(id: string): Promise<TerminalInfo[]> {
    return (await (await this.client(id)).request('term.list', {})).terminals;
  }

  async get(id: string, terminalId: string): Promise<TerminalInfo> {
    const found = (await this.list(id)).find((t) => t.id === terminalId);
    if (!found) throw new WarrenError('not_found', `no terminal ${terminalId} in sandbox ${id}`);
    return found;
  }

  /** Keystrokes, resize and signals of one terminal, for a caller that is not attached. */
  async control(id: string, terminalId: string): Promise<TerminalControl> {
    return controlOf(await this.client(id), terminalId);
  }

  async kill(id: string, terminalId: string): Promise<void> {
    await (await this.client(id)).request('term.kill', { id: terminalId });
  }

  /**
   * Streams output from `offset` (default: everything kept) until exit or detach; with
   * `follow: false` only what is kept now (onClose follows it, or onExit once exited).
   */
  async attach(id: string, terminalId: string, opts: { offset?: number; follow?: boolean }, handlers: TerminalOutputHandlers): Promise<AttachedTerminal> {
    const client = await this.client(id);
    const credit = new ReceiveCredit((bytes) => client.notify('credit', { stream, bytes }));
    const handedOn = (bytes: number) => {
      credit.owe(bytes);
      credit.pay(CREDIT_STEP_BYTES);
    };
    let open = true;
    const end = (fn: () => void) => {
      if (!open) return;
      open = false;
      client.endStream(stream);
      fn();
    };
    const { id: stream, result } = client.call(
      'term.attach',
      { id: terminalId, offset: opts.offset, follow: opts.follow },
      {
        onData: (chunk) => {
          if (open) handlers.onData(chunk, () => handedOn(chunk.length));
        },
        // A lost channel comes as a stream-error too (GuestClient.close).
        onEvent: (ev) => {
          if (ev.event === 'exit') end(() => handlers.onExit(ev.exitCode));
          else if (ev.event === 'stream-error') end(() => handlers.onClose(ev.message));
        },
        onEnd: () => end(() => handlers.onClose('the sandbox agent ended the output stream')),
      },
    );
    let attached: Awaited<typeof result>;
    try {
      attached = await result;
    } catch (err) {
      open = false;
      throw err;
    }
    return {
      ...attached,
      detach: () => end(() => client.notify('cancel', { stream })),
      ...controlOf(client, terminalId),
    };
  }

  private client(id: string) {
    return this.sandboxes.guest(id, 'processes');
  }
}
