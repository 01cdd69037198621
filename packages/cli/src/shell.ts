/**
 * `warren shell ID`: a terminal in a sandbox on this terminal, like `docker exec -it`. On a
 * TTY the local terminal goes into raw mode (every key, Ctrl-C included, goes to the sandbox)
 * and its size follows the window; whatever way the command ends, the terminal is restored
 * before warren exits. Without a TTY (a pipe, a script) bytes are passed through as they are.
 */
import type { Command } from 'commander';
import { Sandbox, type PtyHandle } from '@warren/sdk';

interface ShellOptions {
  user?: string;
  cwd?: string;
  attach?: string;
}

export function registerShellCommand(program: Command): void {
  program
    .command('shell')
    .description('open a terminal in a sandbox (raw mode on a TTY); exits with the remote exit status')
    .argument('<id>')
    .argument('[command...]', 'command and arguments (after --; default: the login shell)')
    .option('--user <user>', 'run as this user (default: the template user)')
    .option('--cwd <dir>', "working directory (default: the user's home)")
    .option('--attach <terminal>', 'attach to a running terminal instead (its recent output is replayed)')
    .action(async (id: string, command: string[], opts: ShellOptions) => {
      process.exitCode = await shell(id, command, opts);
    });
}

async function shell(id: string, command: string[], opts: ShellOptions): Promise<number> {
  const sbx = await Sandbox.connect(id);
  const stdin = process.stdin;
  const stdout = process.stdout;
  const tty = stdin.isTTY === true;
  const size = () => ({ cols: stdout.columns || 80, rows: stdout.rows || 24 });
  const onData = (data: Buffer) => stdout.write(data);
  const term: PtyHandle = opts.attach
    ? await sbx.pty.connect(opts.attach, { onData })
    : await sbx.pty.create({ ...size(), user: opts.user, cwd: opts.cwd, cmd: command.length ? command : undefined, onData });

  const restore = tty ? enterRawMode(stdin) : () => undefined;
  const onResize = () => term.resize(size().cols, size().rows);
  const onInput = (chunk: Buffer) => term.write(chunk);
  const onSignal = () => term.signal('SIGHUP');
  // The window may have changed since the create (or, attaching, the terminal has another size).
  if (stdout.isTTY) {
    stdout.on('resize', onResize);
    if (opts.attach) onResize();
  }
  stdin.on('data', onInput);
  // Piped input: its end is a Ctrl-D, which ends a shell reading a fresh line.
  const onEnd = () => term.write('\x04');
  if (!tty) stdin.once('end', onEnd);
  // Ctrl-C reaches this process only without raw mode: pass it on, as the key would.
  const onInterrupt = () => term.signal('SIGINT');
  process.on('SIGINT', onInterrupt);
  // A local hangup or kill ends this client: pass it on (SIGHUP) and leave the terminal sane.
  process.once('SIGTERM', onSignal);
  process.once('SIGHUP', onSignal);
  try {
    return (await term.wait()) ?? 1;
  } catch (err) {
    process.stderr.write(`\r\nwarren: ${(err as Error).message}\r\n`);
    return 1;
  } finally {
    restore();
    stdin.off('data', onInput);
    stdin.off('end', onEnd);
    process.off('SIGINT', onInterrupt);
    stdin.pause();
    stdout.off('resize', onResize);
    process.off('SIGTERM', onSignal);
    process.off('SIGHUP', onSignal);
    term.disconnect();
  }
}

/** Raw mode until the returned function runs; also on an uncaught exit, so the terminal is never left raw. */
function enterRawMode(stdin: NodeJS.ReadStream): () => void {
  stdin.setRawMode(true);
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    process.off('exit', restore);
    stdin.setRawMode(false);
  };
  process.on('exit', restore);
  return restore;
}
