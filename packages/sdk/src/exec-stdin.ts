/** A foreground exec with streamed stdin (bytes or a stream); see stdin.ts. */
import type { ExecRequest, ExecResult } from '@warren/protocol';
import type { HttpClient } from './client.js';
import { FailedPreconditionError } from './errors.js';
import { consumeExecStream, type OutputCallbacks } from './processes.js';
import { putStdin, type StdinData } from './stdin.js';

/**
 * A foreground exec whose stdin is streamed: the command starts with stdin open, and as soon
 * as the `start` event names its pid, `stdin` goes to it on a second request while the output
 * streams back on the first. A command that exits before reading all of it is not an error
 * (like the reader of a shell pipe that stops early): the result is the command's.
 */
export async function execWithStdin(http: HttpClient, sandboxId: string, req: ExecRequest, stdin: StdinData, cb: OutputCallbacks): Promise<ExecResult> {
  const route = `/v1/sandboxes/${sandboxId}`;
  const res = await http.request('POST', `${route}/exec`, { json: { ...req, stdin: undefined, keepStdinOpen: true }, query: { stream: 1 } });
  let feeding: Promise<void> | undefined;
  let feedError: unknown;
  const result = await consumeExecStream(res, cb, (pid) => {
    // One feed per command, whatever the stream says.
    feeding ??= putStdin(http, `${route}/processes/${pid}`, stdin, true).then(
      () => undefined,
      (err: unknown) => {
        feedError = err;
      },
    );
  });
  await feeding;
  // Any other failure (the stdin source itself failed, the connection broke) means the
  // command saw a cut-short stdin: its result would mislead.
  if (feedError !== undefined && !(feedError instanceof FailedPreconditionError)) throw feedError;
  return result;
}
