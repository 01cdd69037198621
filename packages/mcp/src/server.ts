/**
 * The MCP server's tools: sandboxes (create, list, fork, hibernate, kill), the agent tools the
 * daemon runs (`bash`, `str_replace_based_edit_tool`) and whole-file reads and writes, each a
 * call on the daemon through the SDK with one connection (URL and API key). Both transports
 * (stdio in `warren mcp`, streamable HTTP in the daemon) serve this one server, so a tool
 * behaves the same whichever way a client comes in, with the key's permissions.
 */
import { readFileSync } from 'node:fs';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { CallToolResult, ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { z } from 'zod';
import { BASH_TOOL, BashInput, EDIT_TOOL, EditInput, MAX_EDIT_FILE_BYTES, SandboxStates, type BashOutput } from '@warren/protocol';
import { Files, HttpClient, Sandbox, type ConnectionOptions, type SandboxInfo, type ToolResult } from '@warren/sdk';

const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/**
 * The shell session every `bash` call of the MCP server runs in: `cd` and exported variables
 * carry over between calls on a sandbox (and go with its forks), as a model expects of a
 * shell; `restart: true` forgets them.
 */
export const MCP_BASH_SESSION = 'mcp';

/** Bytes `read_file` returns unless asked for more; a model rarely wants a bigger file whole. */
const DEFAULT_READ_BYTES = 256 * 1024;

const sandboxId = z.string().min(1).max(128).describe('The id of the sandbox (from create_sandbox or list_sandboxes), e.g. sb-k3m9x2q7ab4c.');
const metadata = z.record(z.string(), z.string());

const SandboxSummary = z.object({
  id: z.string(),
  state: z.enum(SandboxStates),
  template: z.string(),
  created_at: z.string(),
  expires_at: z.string(),
  metadata,
  source: z.string().optional(),
  error: z.string().optional(),
});
type SandboxSummary = z.infer<typeof SandboxSummary>;

function summary(i: SandboxInfo): SandboxSummary {
  return {
    id: i.id,
    state: i.state,
    template: i.template,
    created_at: i.createdAt,
    expires_at: i.expiresAt,
    metadata: i.metadata,
    ...(i.source ? { source: i.source } : {}),
    ...(i.error ? { error: i.error } : {}),
  };
}

function line(s: SandboxSummary): string {
  const meta = Object.entries(s.metadata)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
  return [s.id, s.state, s.template, `expires ${s.expires_at}`, ...(meta ? [meta] : []), ...(s.error ? [`(${s.error})`] : [])].join('  ');
}

const text = (t: string): CallToolResult['content'] => [{ type: 'text', text: t }];

function toolError(message: string): CallToolResult {
  return { isError: true, content: text(message) };
}

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/** How often a call still running tells a client that asked for progress (its timeout can restart on each). */
const PROGRESS_INTERVAL_MS = 10_000;

/**
 * A call on the daemon, with whatever it refuses (a bad id, a bad field, a dead sandbox) as a
 * tool error carrying its message. While it runs, a client that sent a progress token gets a
 * progress notification every `progressMs`: MCP clients give up on a request after their own
 * timeout (the SDK's is 60 s) unless progress resets it, and a bash call may run for hours.
 */
async function run(extra: Extra, progressMs: number, fn: () => Promise<CallToolResult>): Promise<CallToolResult> {
  const token = extra._meta?.progressToken;
  const started = Date.now();
  let ticks = 0;
  const timer =
    token === undefined
      ? undefined
      : setInterval(() => {
          const seconds = Math.round((Date.now() - started) / 1000);
          extra
            .sendNotification({
              method: 'notifications/progress',
              params: { progressToken: token, progress: ++ticks, message: `still running after ${seconds} s` },
            })
            .catch(() => undefined); // the client went away; the call's own result will say so
        }, progressMs);
  try {
    return await fn();
  } catch (err) {
    return toolError(err instanceof Error ? err.message : String(err));
  } finally {
    clearInterval(timer);
  }
}

/** A bash result as the text a model reads: the exit status first, then each stream that has output. */
export function bashText(r: BashOutput): string {
  const parts = [r.timed_out ? 'timed out: the command and everything it started were killed' : `exit code ${r.exit_code ?? 'none'}`];
  if (r.stdout) parts.push(`stdout:\n${r.stdout}`);
  if (r.stderr) parts.push(`stderr:\n${r.stderr}`);
  if (!r.stdout && !r.stderr) parts.push('(no output)');
  return parts.join('\n');
}

function toolResult(r: ToolResult): CallToolResult {
  if ('is_error' in r) return toolError(r.error);
  if ('output' in r) return { content: text(r.output) };
  return { content: text(bashText(r)), structuredContent: { ...r } };
}

// Built once, as /mcp makes a server per request: the tools' zod schemas took about a
// millisecond to make, and each server's own JSON Schema validator (Ajv, for elicitation
// answers, which these tools never ask for) half of one.
const VALIDATOR = new AjvJsonSchemaValidator();

const CREATE_SANDBOX = {
  title: 'Create a sandbox',
  description: [
    'Create a new isolated Linux sandbox (its own kernel, an unprivileged user, files under /home/user) and return its id, which every other tool takes as sandbox_id.',
    'Start here unless list_sandboxes shows one you should reuse. The sandbox is killed when its time to live runs out (default one hour); kill it with kill_sandbox when you are done.',
    'It reaches no network unless allow names the hosts it may reach.',
  ].join(' '),
  inputSchema: z.object({
    template: z
      .string()
      .min(1)
      .max(128)
      .optional()
      .describe('Template to start from (default "base": Debian 12 with bash, coreutils, git, curl, python3 and node).'),
    ttl_seconds: z.number().int().positive().optional().describe('Seconds until the sandbox is killed (default 3600).'),
    metadata: metadata.optional().describe('Labels to find it by later, e.g. {"task": "fix-123"}; list_sandboxes filters on them.'),
    allow: z
      .array(z.string().min(1).max(300))
      .max(256)
      .optional()
      .describe(
        'Hosts it may reach through the egress proxy: "DOMAIN[:PORT]", "*.SUFFIX[:PORT]" or "IP[/CIDR][:PORT]", e.g. ["api.example.com:443", "*.github.com:443"]. Default: nothing.',
      ),
  }),
  outputSchema: SandboxSummary,
};

const BASH = {
  title: 'Run a bash command in a sandbox',
  description: [
    'Run a bash command in a sandbox as its unprivileged user and get the exit code, stdout and stderr.',
    'The shell session persists between calls on the same sandbox: the working directory (starting in /home/user) and exported variables carry over; restart: true starts afresh.',
    'Long output keeps only its last part (errors are usually at the end), with a note of how much was cut: filter or page output (grep, head, tail) rather than printing large files.',
    'A command that runs past its timeout (default 300 s) is killed with everything it started. The network is closed unless the sandbox was created with allow rules.',
    'A non-zero exit code is a normal result, not a tool error.',
  ].join(' '),
  inputSchema: z.object({ sandbox_id: sandboxId, ...BashInput.shape }),
  outputSchema: z.object({
    stdout: z.string(),
    stderr: z.string(),
    exit_code: z.number().int().nullable(),
    timed_out: z.boolean(),
    truncated: z.boolean(),
  }),
};

const EDIT = {
  title: 'View, create and edit files in a sandbox',
  description: [
    "View, create and edit text files in a sandbox (the commands of Anthropic's text editor tool).",
    'view: a file with line numbers (optionally view_range), or a directory two levels deep.',
    'create: a new file with file_text (refused if the path exists).',
    'str_replace: replace old_str, which must occur exactly once (whitespace included), with new_str; the error names the lines of every match.',
    'insert: insert new_str after line insert_line (0 for the top).',
    'undo_edit: revert the last edit of a file made with this tool.',
    'Paths are absolute, e.g. /home/user/app/main.py. UTF-8 text up to 16 MiB.',
  ].join(' '),
  inputSchema: z.object({ sandbox_id: sandboxId, ...EditInput.shape }),
};

const READ_FILE = {
  title: 'Read a file from a sandbox',
  description: [
    'Read a whole file from a sandbox, as UTF-8 text or (encoding: base64) as base64 bytes.',
    `At most max_bytes are returned (default ${DEFAULT_READ_BYTES}); a longer file is cut with a note at the end.`,
    'For a source file you mean to edit, str_replace_based_edit_tool view gives line numbers; for a large log, bash with grep or tail.',
  ].join(' '),
  inputSchema: z.object({
    sandbox_id: sandboxId,
    path: z.string().min(1).max(4096).describe('Path of the file: absolute, or relative to /home/user.'),
    encoding: z.enum(['utf8', 'base64']).optional().describe('utf8 (default) for text; base64 for binary files.'),
    max_bytes: z
      .number()
      .int()
      .positive()
      .max(MAX_EDIT_FILE_BYTES)
      .optional()
      .describe(`Most bytes to return (default ${DEFAULT_READ_BYTES}, at most ${MAX_EDIT_FILE_BYTES}).`),
  }),
};

const WRITE_FILE = {
  title: 'Write a file in a sandbox',
  description: [
    'Create or replace a whole file in a sandbox (written atomically; the directory must exist: mkdir -p it with bash first).',
    'content is UTF-8 text, or base64 bytes with encoding: base64. To change part of a file, use str_replace_based_edit_tool instead.',
  ].join(' '),
  inputSchema: z.object({
    sandbox_id: sandboxId,
    path: z.string().min(1).max(4096).describe('Path of the file: absolute, or relative to /home/user.'),
    content: z.string().describe('The whole new content of the file.'),
    encoding: z.enum(['utf8', 'base64']).optional().describe('How content is encoded: utf8 (default) or base64.'),
    mode: z
      .string()
      .regex(/^[0-7]{3,4}$/, 'an octal mode such as 644 or 755')
      .optional()
      .describe('Permission bits in octal, e.g. "755" for a script (default 644, or the mode of the file it replaces).'),
  }),
};

const LIST_SANDBOXES = {
  title: 'List sandboxes',
  description:
    'List the sandboxes this API key can see: id, state (running, hibernated, ...), template, expiry and metadata, optionally only those with some metadata or in one state. Use it to find a sandbox made earlier instead of creating another.',
  inputSchema: z.object({
    metadata: metadata.optional().describe('Only sandboxes with all of these metadata labels.'),
    state: z.enum(SandboxStates).optional().describe('Only sandboxes in this state.'),
  }),
  outputSchema: z.object({ sandboxes: z.array(SandboxSummary) }),
};

const FORK_SANDBOX = {
  title: 'Fork a sandbox',
  description: [
    'Make count new sandboxes (default 1) that continue from this instant of a sandbox: the same files, memory and running processes, each with its own id.',
    'Use it to try several approaches from one prepared state (after a clone and an install), then keep the best and kill the others. The original keeps running.',
    'All or none: if one copy fails, none is kept. At most 16 at once by default.',
  ].join(' '),
  inputSchema: z.object({
    sandbox_id: sandboxId,
    count: z.number().int().min(1).optional().describe('How many copies (default 1).'),
    metadata: metadata.optional().describe("Metadata of the copies (default: the original's)."),
    ttl_seconds: z.number().int().positive().optional().describe('Time to live of the copies, from now (default one hour).'),
  }),
  outputSchema: z.object({ sandboxes: z.array(SandboxSummary) }),
};

const HIBERNATE_SANDBOX = {
  title: 'Hibernate a sandbox',
  description:
    'Save a sandbox (memory, processes, files) to disk and free its memory while it is not needed. Any later call on it (bash, a file tool, fork) resumes it where it was, in about a second. Refused while another call on it is running.',
  inputSchema: z.object({ sandbox_id: sandboxId }),
};

const KILL_SANDBOX = {
  title: 'Kill a sandbox',
  description: 'Destroy a sandbox and everything in it, for good. Do it when you are done with a sandbox (or with the forks you did not keep).',
  inputSchema: z.object({ sandbox_id: sandboxId }),
  annotations: { destructiveHint: true },
};

/**
 * An MCP server whose tools act on the daemon at `connection` (default $WARREN_URL, with
 * $WARREN_API_KEY or the admin key file, as the SDK resolves them). Connect it to a transport.
 * `progressIntervalMs`: how often a running call sends progress to a client that asked (10 s).
 */
export function createMcpServer(connection: ConnectionOptions = {}, opts: { progressIntervalMs?: number } = {}): McpServer {
  const progressMs = opts.progressIntervalMs ?? PROGRESS_INTERVAL_MS;
  const http = new HttpClient(connection);
  const conn: ConnectionOptions = { url: http.url, ...(connection.apiKey ? { apiKey: connection.apiKey } : {}) };
  const server = new McpServer(
    { name: 'warren', version: VERSION },
    {
      jsonSchemaValidator: VALIDATOR,
      instructions:
        'warren runs isolated Linux sandboxes (gVisor). Create one with create_sandbox, act in it with bash and str_replace_based_edit_tool (or read_file/write_file) passing its sandbox_id, fork it to try several approaches from the same state, and kill_sandbox when done: sandboxes otherwise live until their TTL.',
    },
  );
  const callTool = (id: string, name: string, input: Record<string, unknown>, session?: string) =>
    http.json<ToolResult>('POST', `/v1/sandboxes/${encodeURIComponent(id)}/tools/${name}`, { json: { input, ...(session ? { session } : {}) } });

  server.registerTool('create_sandbox', CREATE_SANDBOX, (args, extra) =>
    run(extra, progressMs, async () => {
      const sbx = await Sandbox.create({
        ...conn,
        ...(args.template ? { template: args.template } : {}),
        ...(args.ttl_seconds ? { ttlSeconds: args.ttl_seconds } : {}),
        ...(args.metadata ? { metadata: args.metadata } : {}),
        ...(args.allow ? { network: { allow: args.allow } } : {}),
      });
      const s = summary(sbx.info);
      return { content: text(`created sandbox ${s.id} (template ${s.template}, expires ${s.expires_at})`), structuredContent: s };
    }),
  );

  server.registerTool(BASH_TOOL, BASH, ({ sandbox_id, ...input }, extra) =>
    run(extra, progressMs, async () => toolResult(await callTool(sandbox_id, BASH_TOOL, input, MCP_BASH_SESSION))),
  );

  server.registerTool(EDIT_TOOL, EDIT, ({ sandbox_id, ...input }, extra) =>
    run(extra, progressMs, async () => toolResult(await callTool(sandbox_id, EDIT_TOOL, input))),
  );

  server.registerTool('read_file', READ_FILE, (args, extra) =>
    run(extra, progressMs, async () => {
      const limit = args.max_bytes ?? DEFAULT_READ_BYTES;
      const { bytes, cut } = await readAtMost(new Files(http, args.sandbox_id), args.path, limit);
      const note = cut ? `\n[warren: the file is longer than ${limit} bytes; only the first ${limit} are shown]` : '';
      if (args.encoding === 'base64') return { content: text(bytes.toString('base64') + note) };
      let body: string;
      try {
        // A cut can split a character at the end: decode what is whole.
        body = new TextDecoder('utf-8', { fatal: true }).decode(cut ? wholeCharacters(bytes) : bytes);
      } catch {
        return toolError(`${args.path} is not UTF-8 text; read it with encoding: "base64"`);
      }
      return { content: text(body + note) };
    }),
  );

  server.registerTool('write_file', WRITE_FILE, (args, extra) =>
    run(extra, progressMs, async () => {
      const data = args.encoding === 'base64' ? Buffer.from(args.content, 'base64') : args.content;
      const r = await new Files(http, args.sandbox_id).write(args.path, data, args.mode ? { mode: Number.parseInt(args.mode, 8) } : {});
      return { content: text(`wrote ${r.size} bytes to ${r.path}`) };
    }),
  );

  server.registerTool('list_sandboxes', LIST_SANDBOXES, (args, extra) =>
    run(extra, progressMs, async () => {
      const list = (await Sandbox.list({ ...conn, ...(args.metadata ? { metadata: args.metadata } : {}), ...(args.state ? { state: args.state } : {}) })).map(
        summary,
      );
      return { content: text(list.length ? list.map(line).join('\n') : 'no sandboxes'), structuredContent: { sandboxes: list } };
    }),
  );

  server.registerTool('fork_sandbox', FORK_SANDBOX, (args, extra) =>
    run(extra, progressMs, async () => {
      const parent = await Sandbox.connect(args.sandbox_id, conn);
      const children = (
        await parent.forkTree(args.count ?? 1, {
          ...(args.metadata ? { metadata: args.metadata } : {}),
          ...(args.ttl_seconds ? { ttlSeconds: args.ttl_seconds } : {}),
        })
      ).map((c) => summary(c.info));
      return {
        content: text(
          `forked ${args.sandbox_id} into ${children.length} sandbox${children.length === 1 ? '' : 'es'}:\n${children.map((c) => c.id).join('\n')}`,
        ),
        structuredContent: { sandboxes: children },
      };
    }),
  );

  server.registerTool('hibernate_sandbox', HIBERNATE_SANDBOX, (args, extra) =>
    run(extra, progressMs, async () => {
      const started = Date.now();
      const info = await (await Sandbox.connect(args.sandbox_id, conn)).hibernate();
      return { content: text(`sandbox ${info.id} is ${info.state} (saved in ${((Date.now() - started) / 1000).toFixed(1)} s); any call on it resumes it`) };
    }),
  );

  server.registerTool('kill_sandbox', KILL_SANDBOX, (args, extra) =>
    run(extra, progressMs, async () => {
      await (await Sandbox.connect(args.sandbox_id, conn)).kill();
      return { content: text(`killed sandbox ${args.sandbox_id}`) };
    }),
  );

  return server;
}

/** The first `limit` bytes of a file, and whether there was more (the rest is not transferred). */
async function readAtMost(files: Files, path: string, limit: number): Promise<{ bytes: Buffer; cut: boolean }> {
  const stream = await files.readStream(path);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const b = chunk as Buffer;
    chunks.push(b);
    size += b.length;
    if (size > limit) {
      stream.destroy();
      return { bytes: Buffer.concat(chunks).subarray(0, limit), cut: true };
    }
  }
  return { bytes: Buffer.concat(chunks), cut: false };
}

/** Drops an incomplete UTF-8 sequence at the end of a cut. */
function wholeCharacters(b: Buffer): Buffer {
  let i = b.length - 1;
  // Back over continuation bytes to the start of the last character.
  while (i > 0 && i > b.length - 4 && (b[i]! & 0xc0) === 0x80) i--;
  const lead = b[i] ?? 0;
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return i + need > b.length ? b.subarray(0, i) : b;
}
