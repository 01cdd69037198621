/**
 * Terminals (docs/terminals.md): a command on a pseudo-terminal inside a sandbox, kept by the
 * sandbox's agent, so it outlives the client and the daemon that opened it. The zod-free part,
 * shared with the guest agent; request schemas are in terminal-requests.ts.
 */

/**
 * Bounds of a terminal's size. The kernel takes up to 65535; a screen wider or taller than
 * 1000 cells is a caller's mistake (a pixel count passed as cells), refused with a 400.
 */
export const TERMINAL_LIMITS = { maxCols: 1000, maxRows: 1000, defaultCols: 80, defaultRows: 24 } as const;

/**
 * Recent output each terminal keeps in the agent and replays to a client that attaches
 * (like tmux's scrollback, but bytes: enough to redraw a screen and its last few commands).
 */
export const TERMINAL_REPLAY_BYTES = 64 * 1024;

/** Terminals one sandbox may have open at once; finished ones count until they are forgotten. */
export const MAX_TERMINALS = 32;

/** Where the agent finds the terminal helper (packages/guest/native/pty.c). */
export const PTY_HELPER_PATH = '/opt/warren/lib/warren-pty';

export interface TerminalInfo {
  /** `term-` and 16 hex digits; stable for the terminal's life, across daemon restarts. */
  id: string;
  /** The helper's pid inside the sandbox (the command runs as its child, in its own session). */
  pid: number;
  command: string[];
  user: string;
  cwd: string;
  cols: number;
  rows: number;
  running: boolean;
  /** 128+N when the command was killed by signal N; null while it runs. */
  exitCode: number | null;
  startedAt: string;
  endedAt?: string;
  /** Bytes of output so far: an offset to attach from. */
  outputBytes: number;
  /** Clients attached now. */
  attached: number;
}

/** Options of a new terminal, as the daemon passes them to the agent ('term.open'). */
export interface TerminalOpenParams {
  cols: number;
  rows: number;
  /** Default: the user's login shell, as a login shell (`-l`). */
  argv?: string[];
  cwd?: string;
  env?: Record<string, string>;
  user?: string;
}

/**
 * WebSocket subprotocols of the terminal socket. A browser cannot set headers on a WebSocket,
 * so it offers its credential as a second subprotocol: `new WebSocket(url,
 * [TERMINAL_SUBPROTOCOL, TERMINAL_BEARER_SUBPROTOCOL_PREFIX + token])`. The daemon answers
 * with TERMINAL_SUBPROTOCOL only, so the secret is never echoed back.
 */
export const TERMINAL_SUBPROTOCOL = 'warren.terminal.v1';
export const TERMINAL_BEARER_SUBPROTOCOL_PREFIX = 'warren.bearer.';
