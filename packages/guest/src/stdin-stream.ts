/**
 * proc.stdinStream: bytes from the daemon into a process's stdin as they come, binary-safe
 * and flow-controlled. Credit goes back only once the pipe has taken a chunk, so a fast
 * producer outside waits for the command instead of filling the agent's (or the daemon's)
 * memory: at most one stream window is ever queued here.
 */
import type { Socket } from 'node:net';
import { ReceiveCredit, WarrenError, type GuestOps } from '@warren/protocol/wire';
import type { Channel } from './channel.js';

/** Processes whose stdin a stream is feeding now: a second stream would interleave bytes. */
const feeding = new Set<number>();

/**
 * Feeds `stdin` (of process `params.pid`, open and running: ProcessTable.openStdin) from the
 * call's Data frames. Resolves after End with the bytes written; rejects with
 * failed_precondition when the process exits or closes its stdin first, so a producer is
 * told to stop rather than left waiting for credit that never comes.
 */
export function streamStdin(
  stdin: Socket,
  params: GuestOps['proc.stdinStream']['params'],
  channel: Channel,
  stream: number,
): Promise<GuestOps['proc.stdinStream']['result']> {
  const { pid } = params;
  if (feeding.has(pid)) throw new WarrenError('conflict', `stdin of process ${pid} is already being streamed by another call`);
  feeding.add(pid);
  const credit = new ReceiveCredit((bytes) => channel.sendMessage({ event: 'credit', stream, bytes }));
  let written = 0;
  let queued = 0;
  let ended = false;
  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (err?: Error) => {
      if (settled) return;
      settled = true;
      feeding.delete(pid);
      stdin.off('close', onClose);
      channel.finishIncoming(stream);
      if (err) reject(err);
      else resolve({ bytes: written });
    };
    // The process exited (ProcessTable destroys its stdin then) or stopped reading (EPIPE).
    const onClose = () =>
      settle(new WarrenError('failed_precondition', `process ${pid} exited or closed its stdin after taking ${written} bytes of the stream`));
    stdin.on('close', onClose);
    const finishIfDrained = () => {
      if (!ended || queued > 0) return;
      if (params.close) stdin.end();
      settle();
    };
    channel.acceptStream(stream, {
      onData(chunk) {
        // The channel's decoder reuses the chunk's memory once this returns.
        const copy = Buffer.from(chunk);
        queued++;
        stdin.write(copy, (err) => {
          queued--;
          if (err) return; // the pipe is gone: onClose says so
          written += copy.length;
          credit.consumed(copy.length);
          finishIfDrained();
        });
      },
      onEnd() {
        ended = true;
        finishIfDrained();
      },
      onAbort() {
        // The sender went away mid-stream. Like a pipe whose writer died, the command then
        // sees EOF (when the caller asked for stdin to be closed) instead of waiting forever.
        if (params.close && !stdin.destroyed) stdin.end();
        settle(new WarrenError('unavailable', `the stream into the stdin of process ${pid} was aborted after ${written} bytes`));
      },
    });
  });
}
