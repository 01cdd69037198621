/** /v1/sandboxes/:id/exec and /processes. */
import { StringDecoder } from 'node:string_decoder';
import { Hono } from 'hono';
import { ExecRequest, SignalRequest, StdinRequest, WarrenError } from '@warren/protocol';
import type { ExecCallbacks, ExecService, RunningExec } from '../../core/exec.js';
import type { AuthVars } from '../auth.js';
import { bodyChunks } from '../body.js';
import { jsonBody, parse, toWarrenError } from '../errors.js';
import { ndjsonResponse, type EventSink } from '../ndjson.js';

function pidParam(text: string): number {
  const pid = Number(text);
  if (!Number.isInteger(pid) || pid < 1) throw new WarrenError('invalid_argument', `pid must be a positive integer, got '${text}'`);
  return pid;
}

function offsetQuery(text: string | undefined, name: string): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0) throw new WarrenError('invalid_argument', `${name} must be a non-negative integer`);
  return n;
}

function closeQuery(text: string | undefined): boolean {
  if (text === undefined || text === '1' || text === 'true') return true;
  if (text === '0' || text === 'false') return false;
  throw new WarrenError('invalid_argument', `close must be 1 or 0, got '${text.slice(0, 32)}'`);
}

/** Streams a process's output and exit as NDJSON, after `begin` has subscribed. */
function streamProcess(begin: (cb: ExecCallbacks) => Promise<RunningExec>): Promise<Response> {
  return new Promise((resolve, reject) => {
    let sinkRef: EventSink | undefined;
    const buffered: Array<Parameters<EventSink['send']>[0]> = [];
    const emit = (e: Parameters<EventSink['send']>[0]) => (sinkRef ? sinkRef.send(e) : buffered.push(e));
    // Chunks may end inside a UTF-8 character; decoding each alone would garble it.
    const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
    const text = (type: 'stdout' | 'stderr', data: string) => data && emit({ type, data });
    begin({
      onStdout: (d) => text('stdout', decoders.stdout.write(d)),
      onStderr: (d) => text('stderr', decoders.stderr.write(d)),
    }).then((running) => {
      resolve(
        ndjsonResponse((sink) => {
          sinkRef = sink;
          sink.send({ type: 'start', pid: running.pid });
          for (const e of buffered) sink.send(e);
          running.done.then(
            ({ stdout: _o, stderr: _e, ...exit }) => {
              text('stdout', decoders.stdout.end());
              text('stderr', decoders.stderr.end());
              sink.send({ type: 'exit', ...exit });
              sink.close();
            },
            (err: unknown) => {
              const e = toWarrenError(err);
              sink.send({ type: 'error', code: e.code, message: e.message });
              sink.close();
            },
          );
          return running.detach;
        }),
      );
    }, reject);
  });
}

export function execRoutes(exec: ExecService): Hono<AuthVars> {
  const app = new Hono<AuthVars>();

  app.post('/:id/exec', async (c) => {
    const req = parse(ExecRequest, await jsonBody(c));
    const id = c.req.param('id');
    const streamed = c.req.query('stream') === '1' || c.req.query('stream') === 'true';
    // A plain exec answers only at exit, so nobody could learn the pid to write stdin to.
    if (req.keepStdinOpen && !req.background && !streamed) {
      throw new WarrenError('invalid_argument', 'keepStdinOpen needs background: true or a streamed exec (?stream=1), whose start event gives the pid');
    }
    if (req.background) {
      const { pid } = await exec.start(id, req);
      return c.json({ pid }, 201);
    }
    if (streamed) {
      return streamProcess((cb) => exec.start(id, req, cb));
    }
    return c.json(await exec.run(id, req));
  });

  app.get('/:id/processes', async (c) => c.json({ processes: await exec.list(c.req.param('id')) }));

  app.get('/:id/processes/:pid/output', async (c) => {
    const id = c.req.param('id');
    const pid = pidParam(c.req.param('pid'));
    const stdoutOffset = offsetQuery(c.req.query('stdoutOffset'), 'stdoutOffset');
    const stderrOffset = offsetQuery(c.req.query('stderrOffset'), 'stderrOffset');
    if (c.req.query('follow') === '1' || c.req.query('follow') === 'true') {
      return streamProcess((cb) => exec.follow(id, pid, { stdout: stdoutOffset, stderr: stderrOffset }, cb));
    }
    return c.json(await exec.output(id, pid, stdoutOffset, stderrOffset));
  });

  app.post('/:id/processes/:pid/stdin', async (c) => {
    const { data, close, encoding } = parse(StdinRequest, await jsonBody(c));
    await exec.writeStdin(c.req.param('id'), pidParam(c.req.param('pid')), data, close, encoding);
    return c.body(null, 204);
  });

  // The body, raw bytes of any length, streamed into stdin as it arrives; stdin is closed at
  // its end unless ?close=0 (the agent's stdin-stream.ts has the rules).
  app.put('/:id/processes/:pid/stdin', async (c) => {
    const close = closeQuery(c.req.query('close'));
    return c.json(await exec.streamStdin(c.req.param('id'), pidParam(c.req.param('pid')), bodyChunks(c), close));
  });

  app.post('/:id/processes/:pid/signal', async (c) => {
    const { signal } = parse(SignalRequest, await jsonBody(c));
    await exec.signal(c.req.param('id'), pidParam(c.req.param('pid')), signal);
    return c.body(null, 204);
  });

  return app;
}
