/** Request schemas of the terminal routes (docs/terminals.md); types in terminals.ts. */
import { z } from 'zod';
import { ExecRequest } from './api.js';
import { TERMINAL_LIMITS } from './terminals.js';

const cols = z.number().int().min(1).max(TERMINAL_LIMITS.maxCols);
const rows = z.number().int().min(1).max(TERMINAL_LIMITS.maxRows);

/** `POST /v1/sandboxes/:id/terminals`; the WebSocket's query string carries the same fields. */
export const TerminalCreateRequest = z
  .object({
    cols: cols.default(TERMINAL_LIMITS.defaultCols),
    rows: rows.default(TERMINAL_LIMITS.defaultRows),
    /** The command as argv; default: the user's login shell. */
    argv: z.array(z.string()).min(1).optional(),
    /** A command line for `/bin/bash -c` (give argv or cmd, not both). */
    cmd: z.string().min(1).optional(),
    // As for exec: the same user names, cwd and environment bounds.
    cwd: ExecRequest.shape.cwd,
    env: ExecRequest.shape.env,
    user: ExecRequest.shape.user,
  })
  .strict()
  .refine((r) => r.cmd === undefined || r.argv === undefined, { message: 'give cmd or argv, not both' });
export type TerminalCreateRequest = z.input<typeof TerminalCreateRequest>;

export const TerminalResizeRequest = z.object({ cols, rows }).strict();
export type TerminalResizeRequest = z.input<typeof TerminalResizeRequest>;

/** Bytes for the terminal: base64 (any bytes) or text (sent as UTF-8). */
export const TerminalInputRequest = z
  .object({ data: z.string().optional(), text: z.string().optional() })
  .strict()
  .refine((r) => (r.data === undefined) !== (r.text === undefined), { message: 'give exactly one of data (base64) or text' });
export type TerminalInputRequest = z.input<typeof TerminalInputRequest>;

export const TerminalSignalRequest = z.object({ signal: z.string().regex(/^SIG[A-Z0-9]+$/, 'a signal name like SIGINT') }).strict();
export type TerminalSignalRequest = z.input<typeof TerminalSignalRequest>;

/** Control messages a WebSocket client sends as text frames (binary frames are keystrokes). */
export const TerminalClientMessage = z.discriminatedUnion('type', [
  z.object({ type: z.literal('resize'), cols, rows }),
  z.object({ type: z.literal('signal'), signal: z.string().regex(/^SIG[A-Z0-9]+$/, 'a signal name like SIGINT') }),
]);
export type TerminalClientMessage = z.infer<typeof TerminalClientMessage>;

/** Text frames the daemon sends on a terminal WebSocket. */
export type TerminalServerMessage =
  | { type: 'ready'; terminalId: string; pid: number; offset: number }
  | { type: 'exit'; exitCode: number | null }
  | { type: 'error'; code: string; message: string };

/** One line of `GET .../terminals/:tid/output` (NDJSON). */
export type TerminalOutputEvent =
  | { type: 'output'; data: string; offset: number }
  | { type: 'keepalive' }
  | { type: 'exit'; exitCode: number | null; offset: number };
