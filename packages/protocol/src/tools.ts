/**
 * The agent tool set served by the daemon (`POST /v1/sandboxes/:id/tools/:name`): `bash` and
 * `str_replace_based_edit_tool`, the narrow run-and-edit actions coding agents are built on.
 * Inputs are what a model sends, so their schemas double as the tool definitions handed to
 * it (`GET /v1/tools?format=anthropic|openai`), and their descriptions are written for it.
 */
import { z } from 'zod';

export const BASH_TOOL = 'bash';
export const EDIT_TOOL = 'str_replace_based_edit_tool';
export const TOOL_NAMES = [BASH_TOOL, EDIT_TOOL] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

export const DEFAULT_TOOL_TIMEOUT_SECONDS = 300;
export const DEFAULT_MAX_OUTPUT_CHARS = 20_000;
/** Most characters a call may ask to keep per stream (the tail is held in the sandbox's memory). */
export const MAX_OUTPUT_CHARS_LIMIT = 1_000_000;
/** Largest file the editor reads or writes whole. */
export const MAX_EDIT_FILE_BYTES = 16 * 1024 * 1024;

export const BashInput = z
  .object({
    command: z.string().min(1).max(1_000_000).optional().describe('The bash command to run. Required unless restart is true.'),
    timeout: z
      .number()
      .positive()
      .max(24 * 3600)
      .optional()
      .describe(`Seconds before the command and everything it started are killed (default ${DEFAULT_TOOL_TIMEOUT_SECONDS}).`),
    restart: z.boolean().optional().describe('Start a fresh shell session: forget the working directory and exported variables of earlier calls.'),
  })
  .strict()
  .refine((v) => v.command !== undefined || v.restart === true, { message: 'give command (or restart: true)', path: ['command'] });
export type BashInput = z.input<typeof BashInput>;

const EDIT_COMMANDS = ['view', 'create', 'str_replace', 'insert', 'undo_edit'] as const;
export type EditCommand = (typeof EDIT_COMMANDS)[number];

export const EditInput = z
  .object({
    command: z.enum(EDIT_COMMANDS).describe('The command to run: view, create, str_replace, insert or undo_edit.'),
    path: z.string().min(1).max(4096).describe('Absolute path of the file or directory, e.g. /work/src/main.py.'),
    view_range: z.array(z.number().int()).length(2).optional().describe('For view of a file: [first, last] line numbers, 1-based; last -1 means to the end.'),
    file_text: z.string().optional().describe('For create: the content of the new file.'),
    old_str: z.string().optional().describe('For str_replace: the exact text to replace; it must occur exactly once in the file, whitespace included.'),
    new_str: z.string().optional().describe('For str_replace: the replacement (empty or left out deletes old_str). For insert: the text to insert.'),
    insert_line: z.number().int().min(0).optional().describe('For insert: the line after which new_str goes (0 puts it at the top).'),
    insert_text: z.string().optional().describe('For insert: another name for new_str.'),
  })
  .strict()
  .superRefine((v, ctx) => {
    const need = (field: keyof typeof v, ok: boolean) => {
      if (!ok) ctx.addIssue({ code: 'custom', path: [field], message: `${field} is required for ${v.command}` });
    };
    if (v.command === 'create') need('file_text', v.file_text !== undefined);
    if (v.command === 'str_replace') need('old_str', v.old_str !== undefined && v.old_str !== '');
    if (v.command === 'insert') {
      need('insert_line', v.insert_line !== undefined);
      need('new_str', v.new_str !== undefined || v.insert_text !== undefined);
    }
  });
export type EditInput = z.input<typeof EditInput>;

/** POST /v1/sandboxes/:id/tools/:name: the model's input, and how this caller runs tools. */
export const ToolCallRequest = z
  .object({
    input: z.record(z.string(), z.unknown()),
    /** Where commands start and relative paths resolve (default the sandbox user's home). */
    cwd: z.string().min(1).max(4096).optional(),
    /** Characters kept of each output stream (its tail) and of a viewed file. */
    maxOutputChars: z.number().int().min(100).max(MAX_OUTPUT_CHARS_LIMIT).optional(),
    /** bash: a named shell session whose working directory and exported variables carry over. */
    session: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, _ or -')
      .optional(),
    user: z
      .string()
      .regex(/^[a-z_][a-z0-9_-]*$/)
      .optional(),
  })
  .strict();
export type ToolCallRequest = z.input<typeof ToolCallRequest>;

export interface BashOutput {
  stdout: string;
  stderr: string;
  exit_code: number | null;
  timed_out: boolean;
  /** Some output was cut (a marker line at the top of the stream says how much). */
  truncated: boolean;
}

export interface EditOutput {
  output: string;
}

/** A failed action, returned as a result for the model to read (never raised). */
export interface ToolFailure {
  is_error: true;
  error: string;
}

export type ToolResult = BashOutput | EditOutput | ToolFailure;

export const TOOL_FORMATS = ['anthropic', 'openai'] as const;
export type ToolFormat = (typeof TOOL_FORMATS)[number];

export interface AnthropicToolSchema {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
}

export interface OpenAiToolSchema {
  type: 'function';
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

const DESCRIPTIONS: Record<ToolName, string> = {
  [BASH_TOOL]: [
    'Run a bash command in an isolated Linux sandbox and get its stdout, stderr and exit code.',
    'Commands run as an unprivileged user; the network is closed unless the sandbox allows a host.',
    'Long output is cut to its last part (errors are usually at the end), with a note of how much was dropped: filter or page output (grep, head, tail) rather than printing whole large files.',
    'A command that runs past its timeout is killed with everything it started.',
  ].join(' '),
  [EDIT_TOOL]: [
    'View, create and edit files in the sandbox.',
    'view: a file with line numbers (optionally view_range), or a directory two levels deep.',
    'create: a new file with file_text (refused if the path exists).',
    'str_replace: replace old_str, which must occur exactly once, with new_str.',
    'insert: insert new_str after line insert_line (0 for the top).',
    'undo_edit: revert the last edit of a file made with this tool.',
  ].join(' '),
};

const INPUTS: Record<ToolName, z.ZodType> = { [BASH_TOOL]: BashInput, [EDIT_TOOL]: EditInput };

function inputSchema(name: ToolName): Record<string, unknown> {
  // The refinements (which fields each command needs) are checked by the daemon; the model
  // gets the fields and their descriptions.
  const { $schema: _, ...schema } = z.toJSONSchema(INPUTS[name], { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  return schema;
}

export function toolSchemas(format: 'anthropic'): AnthropicToolSchema[];
export function toolSchemas(format: 'openai'): OpenAiToolSchema[];
export function toolSchemas(format: ToolFormat): AnthropicToolSchema[] | OpenAiToolSchema[];
export function toolSchemas(format: ToolFormat): AnthropicToolSchema[] | OpenAiToolSchema[] {
  if (format === 'openai') {
    return TOOL_NAMES.map((name) => ({ type: 'function' as const, function: { name, description: DESCRIPTIONS[name], parameters: inputSchema(name) } }));
  }
  return TOOL_NAMES.map((name) => ({ name, description: DESCRIPTIONS[name], input_schema: inputSchema(name) }));
}

export function isToolName(value: string): value is ToolName {
  return (TOOL_NAMES as readonly string[]).includes(value);
}
