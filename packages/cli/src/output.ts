/**
 * Printing helpers shared by CLI commands. Whatever a command prints for people goes through
 * `safe` (tables do it for every cell): metadata, egress hosts, paths, error messages and
 * build output come from callers, sandboxes and the daemon, and raw control characters in
 * them would reach the operator's terminal, which obeys them (retitle it, clear it, move the
 * cursor to draw fake lines). What a command exists to pass on stays raw: `warren exec`
 * output and `warren cp ... -` are the user's data.
 */
import type { SandboxInfo } from '@warren/sdk';

/**
 * C0 controls (newline and tab too: a table cell or a one-line message holds neither), DEL,
 * C1 controls (U+0080-U+009F: xterm and others take U+009B as CSI and U+009D as OSC even in
 * UTF-8), bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) and marks
 * (U+200E, U+200F, U+061C), which reorder what follows on screen, and the line and paragraph
 * separators U+2028, U+2029.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const UNSAFE_BUT_TABS = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
/** What JSON.stringify leaves raw of UNSAFE (it escapes C0 in strings; C0 outside them is layout). */
const UNSAFE_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const NAMED: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

function escapeChar(c: string): string {
  const code = c.charCodeAt(0);
  return NAMED[c] ?? (code < 0x80 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`);
}

/**
 * `text` with every character that could steer a terminal shown as a visible escape: `\n`,
 * `\r`, `\t`, `\x1b` for C0 and DEL, `\u009b` for C1 and the bidi controls. Printable
 * text, other languages and emoji are untouched. `keepTabs` for lines of program output,
 * where a tab only moves the cursor right.
 */
export function safe(text: string, opts: { keepTabs?: boolean } = {}): string {
  return text.replace(opts.keepTabs ? UNSAFE_BUT_TABS : UNSAFE, escapeChar);
}

/**
 * JSON for `--json`: exact (it parses back to the same values), with the characters `safe`
 * escapes written as \u escapes. JSON.stringify escapes C0 itself but leaves DEL, C1 and the
 * bidi controls raw, and those can appear only inside strings, where \uXXXX means the same.
 */
export function jsonText(value: unknown, indent?: number): string {
  return JSON.stringify(value, null, indent).replace(UNSAFE_IN_JSON, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function printJson(value: unknown): void {
  process.stdout.write(`${jsonText(value, 2)}\n`);
}

/** Columns padded to the widest cell; every cell is made safe first. */
export function table(rows: string[][]): string {
  const cells = rows.map((r) => r.map((c) => safe(c ?? '')));
  const widths = (cells[0] ?? []).map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return `${cells
    .map((r) =>
      r
        .map((cell, i) => cell.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')}\n`;
}

/** `k=v` pairs for one line (tables and `warren info`). */
export function metadataText(metadata: Record<string, string>, separator: string): string {
  return Object.entries(metadata)
    .map(([k, v]) => `${k}=${v}`)
    .join(separator);
}

export function sandboxRows(list: SandboxInfo[]): string {
  const rows = [['ID', 'STATE', 'TEMPLATE', 'CREATED', 'EXPIRES', 'METADATA']];
  for (const s of list) {
    rows.push([
      s.id,
      s.state,
      s.template,
      s.createdAt.replace('T', ' ').slice(0, 19),
      s.expiresAt.replace('T', ' ').slice(0, 19),
      metadataText(s.metadata, ','),
    ]);
  }
  return table(rows);
}

/** An option parser for integers of at least 1; `name` is the option, for the message. */
export function positiveInt(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got '${v}'`);
    return n;
  };
}

/** An option parser for integers of at least 0 (`--size 0` turns a pool off). */
export function nonNegativeInt(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (v.trim() === '' || !Number.isInteger(n) || n < 0) throw new Error(`${name} must be an integer of at least 0, got '${v}'`);
    return n;
  };
}

/** An option parser for numbers above 0 (`--cpus 0.5`); the daemon checks the bounds. */
export function positiveNumber(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (v.trim() === '' || !Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a number above 0, got '${v}'`);
    return n;
  };
}

/** Parses repeated k=v options. */
export function keyValues(pairs: string[], what: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const eq = p.indexOf('=');
    if (eq < 1) throw new Error(`${what} must be KEY=VALUE, got '${p}'`);
    out[p.slice(0, eq)] = p.slice(eq + 1);
  }
  return out;
}

export function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}
