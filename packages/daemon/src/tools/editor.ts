/**
 * `str_replace_based_edit_tool`: the commands of Anthropic's text editor tool (view, create,
 * str_replace, insert, undo_edit), so a model's built-in editor can be executed as is. Files
 * are read and written through the files service, as the sandbox user; a failed action is an
 * EditFailure, which the tool service returns to the model as a result, never raises.
 */
import { Readable } from 'node:stream';
import { posix } from 'node:path';
import { MAX_EDIT_FILE_BYTES, WarrenError, type EditInput, type FileStat } from '@warren/protocol';
import type { FileService } from '../core/files.js';

/** A mistake the model can fix (no match, a binary file): its message goes back to it. */
export class EditFailure extends Error {}

/** Edits kept for undo_edit, per file. */
const UNDO_DEPTH = 10;
/** All undo history together, oldest dropped first: it lives in the daemon's memory. */
const UNDO_BUDGET_BYTES = 64 * 1024 * 1024;
/** Lines of context shown around an edit. */
const SNIPPET_LINES = 4;

export interface EditOptions {
  cwd?: string;
  user?: string;
  maxOutputChars: number;
}

/**
 * Earlier contents of edited files, for undo_edit, per sandbox, user and path: one user's
 * undo never writes back what another user's edit replaced (root's file, say, through a
 * `user` call that the sandbox then refuses). `user` is as the call named it (undefined: the
 * sandbox's default user). In the daemon's memory: history is lost on a daemon restart and
 * is not copied to forks (the files themselves are).
 */
export class UndoHistory {
  private entries = new Map<string, string[]>();
  private bytes = 0;

  push(sandboxId: string, user: string | undefined, path: string, content: string): void {
    const key = historyKey(sandboxId, user, path);
    const list = this.entries.get(key) ?? [];
    list.push(content);
    this.bytes += content.length;
    if (list.length > UNDO_DEPTH) this.bytes -= list.shift()?.length ?? 0;
    // Re-inserted so that Map order is least recently edited first.
    this.entries.delete(key);
    this.entries.set(key, list);
    for (const [oldest, versions] of this.entries) {
      if (this.bytes <= UNDO_BUDGET_BYTES) break;
      for (const v of versions) this.bytes -= v.length;
      this.entries.delete(oldest);
    }
  }

  pop(sandboxId: string, user: string | undefined, path: string): string | undefined {
    const key = historyKey(sandboxId, user, path);
    const list = this.entries.get(key);
    const last = list?.pop();
    if (last !== undefined) this.bytes -= last.length;
    if (list && list.length === 0) this.entries.delete(key);
    return last;
  }
}

function historyKey(sandboxId: string, user: string | undefined, path: string): string {
  return `${sandboxId}\0${user ?? ''}\0${path}`;
}

export class Editor {
  constructor(
    private files: FileService,
    private history: UndoHistory,
  ) {}

  async run(sandboxId: string, input: EditInput, opts: EditOptions): Promise<string> {
    const path = resolve(input.path, opts.cwd);
    switch (input.command) {
      case 'view':
        return this.view(sandboxId, path, input.view_range, opts);
      case 'create':
        return this.create(sandboxId, path, input.file_text ?? '', opts);
      case 'str_replace':
        return this.replace(sandboxId, path, input.old_str ?? '', input.new_str ?? '', opts);
      case 'insert':
        return this.insert(sandboxId, path, input.insert_line ?? 0, input.new_str ?? input.insert_text ?? '', opts);
      case 'undo_edit':
        return this.undo(sandboxId, path, opts);
    }
  }

  private async view(sandboxId: string, path: string, range: number[] | undefined, opts: EditOptions): Promise<string> {
    const st = await this.stat(sandboxId, path, opts);
    if (st.type === 'directory') {
      if (range) throw new EditFailure('view_range applies to files, not directories');
      const entries = await this.files.list(sandboxId, path, 2, opts.user);
      const shown = entries.filter(
        (e) =>
          !posix
            .relative(path, e.path)
            .split('/')
            .some((part) => part.startsWith('.')),
      );
      const lines = shown.map((e) => `${e.path}${e.type === 'directory' ? '/' : ''}`).sort();
      const text = `Files and directories up to 2 levels deep in ${path}, hidden items left out:\n${[`${path}/`, ...lines].join('\n')}\n`;
      return clip(text, opts.maxOutputChars);
    }
    const lines = (await this.readText(sandboxId, path, st, opts)).split('\n');
    let first = 1;
    let last = lines.length;
    if (range) {
      const [from = 1, to = -1] = range;
      if (from < 1 || from > lines.length) throw new EditFailure(`view_range starts at line ${from}, but the file has lines 1 to ${lines.length}`);
      if (to !== -1 && (to < from || to > lines.length)) {
        throw new EditFailure(`view_range ends at line ${to}: it must be -1 or a line from ${from} to ${lines.length}`);
      }
      first = from;
      last = to === -1 ? lines.length : to;
    }
    return clip(numbered(lines.slice(first - 1, last), first), opts.maxOutputChars);
  }

  private async create(sandboxId: string, path: string, text: string, opts: EditOptions): Promise<string> {
    if (await this.exists(sandboxId, path, opts)) {
      throw new EditFailure(`${path} already exists; create makes new files only: change it with str_replace or insert`);
    }
    await this.files.mkdir(sandboxId, posix.dirname(path), opts.user);
    await this.write(sandboxId, path, text, opts);
    // A last line ending in a newline is one line, not two.
    const lines = text === '' ? 0 : text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
    return `created ${path} (${lines} line${lines === 1 ? '' : 's'})`;
  }

  private async replace(sandboxId: string, path: string, oldStr: string, newStr: string, opts: EditOptions): Promise<string> {
    const st = await this.stat(sandboxId, path, opts);
    const text = await this.readText(sandboxId, path, st, opts);
    const at = occurrences(text, oldStr);
    const first = at[0];
    if (first === undefined)
      throw new EditFailure(`old_str does not occur in ${path} (it must match exactly, whitespace and indentation included); nothing was replaced`);
    if (at.length > 1) {
      const lines = at.map((i) => lineOf(text, i));
      throw new EditFailure(
        `old_str occurs ${at.length} times in ${path}, at lines ${lines.join(', ')}; include more context so that it occurs once. Nothing was replaced`,
      );
    }
    const updated = text.slice(0, first) + newStr + text.slice(first + oldStr.length);
    await this.save(sandboxId, path, text, updated, st, opts);
    const startLine = lineOf(text, first);
    return `edited ${path}; lines around the change:\n${snippet(updated, startLine, newStr.split('\n').length)}`;
  }

  private async insert(sandboxId: string, path: string, after: number, newStr: string, opts: EditOptions): Promise<string> {
    const st = await this.stat(sandboxId, path, opts);
    const text = await this.readText(sandboxId, path, st, opts);
    const lines = text.split('\n');
    if (after > lines.length) throw new EditFailure(`insert_line ${after} is past the end: the file has ${lines.length} lines (0 inserts at the top)`);
    const updated = [...lines.slice(0, after), ...newStr.split('\n'), ...lines.slice(after)].join('\n');
    await this.save(sandboxId, path, text, updated, st, opts);
    return `inserted after line ${after} of ${path}; lines around the change:\n${snippet(updated, after + 1, newStr.split('\n').length)}`;
  }

  private async undo(sandboxId: string, path: string, opts: EditOptions): Promise<string> {
    const previous = this.history.pop(sandboxId, opts.user, path);
    if (previous === undefined)
      throw new EditFailure(`no edit of ${path} to undo (history covers the edits this user made with this tool since the daemon started)`);
    try {
      const st = await this.stat(sandboxId, path, opts);
      await this.write(sandboxId, path, previous, opts, st.mode & 0o7777);
    } catch (err) {
      // A refused undo changes nothing: the edit stays undoable once the cause is fixed.
      this.history.push(sandboxId, opts.user, path, previous);
      throw err;
    }
    return `undid the last edit of ${path}`;
  }

  private async save(sandboxId: string, path: string, before: string, after: string, st: FileStat, opts: EditOptions): Promise<void> {
    await this.write(sandboxId, path, after, opts, st.mode & 0o7777);
    this.history.push(sandboxId, opts.user, path, before);
  }

  private async write(sandboxId: string, path: string, text: string, opts: EditOptions, mode?: number): Promise<void> {
    const bytes = Buffer.from(text, 'utf8');
    if (bytes.length > MAX_EDIT_FILE_BYTES)
      throw new EditFailure(`the result would be ${bytes.length} bytes; the editor writes files up to ${MAX_EDIT_FILE_BYTES}`);
    await this.files.write(sandboxId, path, Readable.from([bytes]), opts.user, mode);
  }

  private async stat(sandboxId: string, path: string, opts: EditOptions): Promise<FileStat> {
    try {
      return await this.files.stat(sandboxId, path, opts.user);
    } catch (err) {
      if (err instanceof WarrenError && err.code === 'not_found') throw new EditFailure(`${path} does not exist`);
      throw err;
    }
  }

  private async exists(sandboxId: string, path: string, opts: EditOptions): Promise<boolean> {
    try {
      await this.files.stat(sandboxId, path, opts.user);
      return true;
    } catch (err) {
      if (err instanceof WarrenError && err.code === 'not_found') return false;
      throw err;
    }
  }

  private async readText(sandboxId: string, path: string, st: FileStat, opts: EditOptions): Promise<string> {
    if (st.type !== 'file') throw new EditFailure(`${path} is a ${st.type}, not a file`);
    if (st.size > MAX_EDIT_FILE_BYTES)
      throw new EditFailure(`${path} is ${st.size} bytes; the editor reads files up to ${MAX_EDIT_FILE_BYTES} (use bash: grep, sed -n, head)`);
    const { body } = await this.files.read(sandboxId, path, opts.user);
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(chunk as Buffer);
    const bytes = Buffer.concat(chunks);
    if (bytes.subarray(0, 8192).includes(0)) throw new EditFailure(`${path} is a binary file; the editor works on text`);
    const text = new TextDecoder('utf-8', { fatal: false }).decode(bytes);
    if (text.includes('\uFFFD') && !bytes.includes(Buffer.from('\uFFFD'))) throw new EditFailure(`${path} is not UTF-8 text; the editor works on UTF-8 files`);
    return text;
  }
}

/** Relative paths resolve against the tool set's working directory. */
function resolve(path: string, cwd: string | undefined): string {
  if (posix.isAbsolute(path)) return posix.normalize(path);
  if (!cwd) throw new EditFailure(`path must be absolute, e.g. /work/${path.slice(0, 200)}`);
  return posix.join(cwd, path);
}

function numbered(lines: string[], first: number): string {
  return `${lines.map((l, i) => `${String(first + i).padStart(6)}\t${l}`).join('\n')}\n`;
}

function snippet(text: string, line: number, changedLines: number): string {
  const lines = text.split('\n');
  const from = Math.max(1, line - SNIPPET_LINES);
  const to = Math.min(lines.length, line + changedLines - 1 + SNIPPET_LINES);
  return numbered(lines.slice(from - 1, to), from);
}

function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  return `${text.slice(0, max)}\n<response clipped: ${text.length - max} more characters; view a smaller view_range or search with bash grep -n>\n`;
}

function occurrences(text: string, needle: string): number[] {
  const at: number[] = [];
  for (let i = text.indexOf(needle); i !== -1; i = text.indexOf(needle, i + 1)) at.push(i);
  return at;
}

function lineOf(text: string, index: number): number {
  let n = 1;
  for (let i = text.indexOf('\n'); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) n++;
  return n;
}
