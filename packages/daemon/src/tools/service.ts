/**
 * The agent tool set: one implementation of `bash` and `str_replace_based_edit_tool` that
 * every client (both SDKs, the MCP server) calls through `POST /v1/sandboxes/:id/tools/:name`.
 * The caller's mistakes in the request (an unknown tool, a missing field) are 4xx errors; a
 * failed action (no match, a binary file) is a result with `is_error`, for the model to read.
 */
import {
  BASH_TOOL,
  BashInput,
  DEFAULT_MAX_OUTPUT_CHARS,
  EditInput,
  TOOL_NAMES,
  WarrenError,
  isToolName,
  parse,
  type ToolCallRequest,
  type ToolResult,
} from '@warren/protocol';
import type { ExecService } from '../core/exec.js';
import type { FileService } from '../core/files.js';
import { runBash } from './bash.js';
import { EditFailure, Editor, UndoHistory } from './editor.js';

export class ToolService {
  private history = new UndoHistory();
  private editor: Editor;

  constructor(
    private exec: ExecService,
    files: FileService,
  ) {
    this.editor = new Editor(files, this.history);
  }

  async call(sandboxId: string, name: string, req: ToolCallRequest): Promise<ToolResult> {
    if (!isToolName(name)) throw new WarrenError('not_found', `no tool named ${JSON.stringify(name.slice(0, 100))}; the tools are ${TOOL_NAMES.join(', ')}`);
    const maxOutputChars = req.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
    const common = { maxOutputChars, ...(req.cwd ? { cwd: req.cwd } : {}), ...(req.user ? { user: req.user } : {}) };
    if (name === BASH_TOOL) {
      return runBash(this.exec, sandboxId, parse(BashInput, req.input), { ...common, ...(req.session ? { session: req.session } : {}) });
    }
    const input = parse(EditInput, req.input);
    try {
      return { output: await this.editor.run(sandboxId, input, common) };
    } catch (err) {
      if (err instanceof EditFailure) return { is_error: true, error: err.message };
      // What the sandbox refused (a permission, a directory where a file goes) is the model's to fix too.
      if (err instanceof WarrenError && ['permission_denied', 'invalid_argument', 'not_found', 'conflict'].includes(err.code)) {
        return { is_error: true, error: err.message };
      }
      throw err;
    }
  }
}
