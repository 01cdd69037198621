/**
 * /v1/sandboxes/:id/terminals: terminals over plain HTTP, for clients without WebSockets (the
 * Python SDK, curl). The WebSocket at /pty is in api/terminal-socket.ts; both drive the same
 * TerminalService. docs/terminals.md has the formats.
 */
import { Hono } from 'hono';
import {
  TerminalCreateRequest,
  TerminalInputRequest,
  TerminalResizeRequest,
  TerminalSignalRequest,
  WarrenError,
  type TerminalOutputEvent,
} from '@warren/protocol';
import type { TerminalService } from '../../core/terminals.js';
import type { AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';
import { ndjsonResponse, type EventSink } from '../ndjson.js';

type OutputLine = TerminalOutputEvent | { type: 'error'; code: string; message: string };

function offsetQuery(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 0) throw new WarrenError('invalid_argument', `offset must be a non-negative integer (got '${text}')`);
  return n;
}

/**
 * Output as NDJSON: `output` lines (base64 bytes and the offset of their first byte), then
 * `exit` once the command has exited. Without follow the response ends after what is kept.
 */
async function outputResponse(terminals: TerminalService, id: string, terminalId: string, offset: number | undefined, follow: boolean): Promise<Response> {
  let sink: EventSink<OutputLine> | undefined;
  const early: OutputLine[] = [];
  const emit = (line: OutputLine) => (sink ? sink.send(line) : early.push(line));
  let at = 0;
  let ended = false;
  const attached = await terminals.attach(
    id,
    terminalId,
    { offset, follow },
    {
      onData: (chunk, handedOn) => {
        emit({ type: 'output', data: chunk.toString('base64'), offset: at });
        at += chunk.length;
        // NDJSON responses queue in the web stream: credit goes back as lines are made.
        handedOn();
      },
      onExit: (exitCode) => {
        emit({ type: 'exit', exitCode, offset: at });
        ended = true;
        sink?.close();
      },
      onClose: (reason) => {
        if (follow) emit({ type: 'error', code: 'unavailable', message: reason });
        ended = true;
        sink?.close();
      },
    },
  );
  // Output that came with the call's answer is numbered from the replay's start.
  at += attached.offset;
  for (const line of early) if (line.type === 'output' || line.type === 'exit') line.offset += attached.offset;
  return ndjsonResponse<OutputLine>((s) => {
    sink = s;
    for (const line of early) s.send(line);
    if (ended) s.close();
    return () => attached.detach();
  });
}

export function terminalRoutes(terminals: TerminalService): Hono<AuthVars> {
  const app = new Hono<AuthVars>();

  app.post('/:id/terminals', async (c) => {
    const req = parse(TerminalCreateRequest, await jsonBody(c));
    return c.json(await terminals.create(c.req.param('id'), req), 201);
  });

  app.get('/:id/terminals', async (c) => c.json({ terminals: await terminals.list(c.req.param('id')) }));

  app.get('/:id/terminals/:tid', async (c) => c.json(await terminals.get(c.req.param('id'), c.req.param('tid'))));

  app.get('/:id/terminals/:tid/output', async (c) => {
    const follow = c.req.query('follow') === '1' || c.req.query('follow') === 'true';
    return outputResponse(terminals, c.req.param('id'), c.req.param('tid'), offsetQuery(c.req.query('offset')), follow);
  });

  // Raw bytes (application/octet-stream), or JSON with base64 `data` or `text`.
  app.post('/:id/terminals/:tid/input', async (c) => {
    let bytes: Buffer;
    if ((c.req.header('content-type') ?? '').startsWith('application/octet-stream')) bytes = Buffer.from(await c.req.arrayBuffer());
    else {
      const { data, text } = parse(TerminalInputRequest, await jsonBody(c));
      bytes = data !== undefined ? Buffer.from(data, 'base64') : Buffer.from(text ?? '', 'utf8');
    }
    await (await terminals.control(c.req.param('id'), c.req.param('tid'))).input(bytes);
    return c.body(null, 204);
  });

  app.post('/:id/terminals/:tid/resize', async (c) => {
    const { cols, rows } = parse(TerminalResizeRequest, await jsonBody(c));
    await (await terminals.control(c.req.param('id'), c.req.param('tid'))).resize(cols, rows);
    return c.body(null, 204);
  });

  app.post('/:id/terminals/:tid/signal', async (c) => {
    const { signal } = parse(TerminalSignalRequest, await jsonBody(c));
    await (await terminals.control(c.req.param('id'), c.req.param('tid'))).signal(signal);
    return c.body(null, 204);
  });

  app.post('/:id/terminals/:tid/kill', async (c) => {
    await terminals.kill(c.req.param('id'), c.req.param('tid'));
    return c.body(null, 204);
  });

  return app;
}
