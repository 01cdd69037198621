/**
 * Agent tools over a sandbox: the definitions to hand a model and the calls that run them.
 * The daemon implements the tools (`POST /v1/sandboxes/:id/tools/:name`), so the Python SDK,
 * this one and the MCP server behave the same.
 */
import { DEFAULT_MAX_OUTPUT_CHARS, toolSchemas, type AnthropicToolSchema, type OpenAiToolSchema, type ToolFormat, type ToolResult } from '@warren/protocol';
import { InvalidArgumentError, NotFoundError } from './errors.js';
import type { Sandbox } from './sandbox.js';

export interface ToolsetOptions {
  /** Where commands start and relative paths resolve (default /work). */
  cwd?: string;
  /** Characters kept of each output stream (its end) and of a viewed file (default 20000). */
  maxOutputChars?: number;
  /** Run bash in this named session: `cd` and exported variables carry over between calls. */
  session?: string;
  /** Run as this sandbox user (default the template's user). */
  user?: string;
}

export class Toolset {
  readonly cwd: string;
  readonly maxOutputChars: number;

  constructor(
    readonly sandbox: Sandbox,
    private readonly opts: ToolsetOptions = {},
  ) {
    this.cwd = opts.cwd ?? '/work';
    this.maxOutputChars = opts.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
  }

  /** Tool definitions for a model: Anthropic's `{name, description, input_schema}` or OpenAI's function tools. */
  schemas(format: 'anthropic'): AnthropicToolSchema[];
  schemas(format: 'openai'): OpenAiToolSchema[];
  schemas(format: ToolFormat = 'anthropic'): AnthropicToolSchema[] | OpenAiToolSchema[] {
    return toolSchemas(format);
  }

  /**
   * Runs the tool call a model asked for and returns what to give back to it: a failed action,
   * a bad argument or an unknown tool name is `{is_error: true, error}`, never an exception
   * (the loop above goes on and the model fixes its call). Sandbox and network failures throw.
   */
  async call(name: string, args: Record<string, unknown>): Promise<ToolResult> {
    try {
      return await this.sandbox.callTool(name, args, {
        cwd: this.cwd,
        maxOutputChars: this.maxOutputChars,
        ...(this.opts.session ? { session: this.opts.session } : {}),
        ...(this.opts.user ? { user: this.opts.user } : {}),
      });
    } catch (err) {
      if (err instanceof InvalidArgumentError || (err instanceof NotFoundError && /no tool named/.test(err.message))) {
        return { is_error: true, error: err.message };
      }
      throw err;
    }
  }
}

/** One attempt of `bestOf`, in the order the attempts were forked. */
export type AttemptOutcome<T> = { ok: true; value: T; sandboxId: string } | { ok: false; error: unknown; sandboxId: string };

/**
 * Best of N: `prepare` makes a sandbox once (clone, install, warm up), it is forked into `n`
 * live copies from that instant, `attempt` runs on each concurrently, and every copy (and the
 * prepared sandbox, unless `keepPrepared`) is killed whatever happens. Outcomes come back in
 * order; an attempt that throws is an outcome with its error, not the end of the others.
 * @example const outcomes = await bestOf(3, () => Sandbox.create(), (sbx, i) => sbx.exec(`./try.sh ${i}`))
 */
export async function bestOf<T>(
  n: number,
  prepare: () => Promise<Sandbox>,
  attempt: (sandbox: Sandbox, index: number) => Promise<T>,
  opts: { metadata?: Record<string, string>; keepPrepared?: boolean } = {},
): Promise<AttemptOutcome<T>[]> {
  const base = await prepare();
  try {
    const children = await base.forkTree(n, opts.metadata ? { metadata: opts.metadata } : {});
    try {
      return await Promise.all(
        children.map(async (child, i): Promise<AttemptOutcome<T>> => {
          try {
            return { ok: true, value: await attempt(child, i), sandboxId: child.id };
          } catch (error) {
            return { ok: false, error, sandboxId: child.id };
          }
        }),
      );
    } finally {
      await killAll(children);
    }
  } finally {
    if (!opts.keepPrepared) await killAll([base]);
  }
}

/** Kills every sandbox even if some kills fail; one already gone is fine, other failures are thrown together. */
async function killAll(sandboxes: Sandbox[]): Promise<void> {
  const kills = await Promise.allSettled(sandboxes.map((s) => s.kill()));
  const failures = kills.flatMap((k) => (k.status === 'rejected' && !(k.reason instanceof NotFoundError) ? [k.reason as unknown] : []));
  if (failures.length) throw new AggregateError(failures, `could not kill ${failures.length} of ${sandboxes.length} sandboxes`);
}
