/**
 * The `bash` tool: a command's stdout, stderr and exit code, each stream cut to its tail
 * inside the sandbox (the error is at the end; megabytes of log never cross the wire). With a
 * session name, the working directory and exported variables carry over between calls, kept
 * in a state directory inside the sandbox, so they also survive hibernation and go with forks.
 */
import { type BashInput, DEFAULT_TOOL_TIMEOUT_SECONDS, type BashOutput } from '@warren/protocol';
import type { ExecService } from '../core/exec.js';

/** Where sessions keep their state, under the home of the user they run as. */
const SESSION_DIR = '.warren-bash';

/**
 * Runs `$2` in bash after restoring the session named `$1`, and saves it on the way
 * out, whatever the exit (a failing command, `exit 3`). Exported variables are kept as
 * `export -p` prints them (sourcing that sets them again; a readonly one cannot be, and is
 * skipped quietly), the directory as `$PWD`: builtins and redirections only, no command
 * substitution, so a call forks nothing beyond its own command (in gVisor each fork is
 * milliseconds: a fork per variable made a session call of `true` 0.9 s instead of 0.1 s).
 * PWD, OLDPWD and SHLVL come back too, and are then set by bash and the `cd` as before. A
 * directory that is gone leaves the call where it started. (`read` with IFS a newline drops
 * the newline that files written by the earlier `pwd >cwd` end with.)
 * The state lives in the user's home, never in a shared directory: a session's env file is
 * sourced, so one another user could write (as /tmp allows) would run code as this user,
 * e.g. the sandbox's `user` planting commands for a root session.
 */
const SESSION_SCRIPT = String.raw`__warren_state=$HOME/${SESSION_DIR}/$1
__warren_cmd=$2
__warren_start=$PWD
set --
if [ -f "$__warren_state/env" ]; then . "$__warren_state/env" 2>/dev/null; fi
if [ -f "$__warren_state/cwd" ]; then
  IFS=$'\n' read -r -d '' __warren_dir <"$__warren_state/cwd"
  builtin cd -- "$__warren_dir" 2>/dev/null || builtin cd -- "$__warren_start"
fi
unset __warren_dir __warren_start
__warren_save() {
  local rc=$?
  [ -d "$__warren_state" ] || mkdir -p -m 700 -- "$__warren_state"
  printf '%s' "$PWD" >"$__warren_state/cwd"
  export -p >"$__warren_state/env"
  return $rc
}
trap __warren_save EXIT
eval "$__warren_cmd"`;

export interface BashOptions {
  cwd?: string;
  user?: string;
  session?: string;
  maxOutputChars: number;
}

export async function runBash(exec: ExecService, sandboxId: string, input: BashInput, opts: BashOptions): Promise<BashOutput> {
  const session = opts.session;
  if (input.restart) {
    if (session) {
      // The session name is checked (letters, digits, _ and -), so it is one path segment.
      await exec.run(sandboxId, {
        argv: ['/bin/bash', '-c', `rm -rf -- "$HOME/${SESSION_DIR}/$1"`, 'warren-bash', session],
        ...(opts.user ? { user: opts.user } : {}),
      });
    }
    if (input.command === undefined) return { stdout: 'shell session restarted\n', stderr: '', exit_code: 0, timed_out: false, truncated: false };
  }
  const command = input.command ?? '';
  const argv = session ? ['/bin/bash', '-c', SESSION_SCRIPT, 'warren-bash', session, command] : ['/bin/bash', '-c', command];
  const result = await exec.runKeepingTail(
    sandboxId,
    {
      argv,
      timeoutSeconds: input.timeout ?? DEFAULT_TOOL_TIMEOUT_SECONDS,
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
      ...(opts.user ? { user: opts.user } : {}),
    },
    // A character is at most 4 bytes of UTF-8: enough bytes for the characters asked for.
    opts.maxOutputChars * 4,
  );
  const stdout = keepTail(result.stdout, opts.maxOutputChars, result.outputChars?.stdout, 'stdout');
  const stderr = keepTail(result.stderr, opts.maxOutputChars, result.outputChars?.stderr, 'stderr');
  return {
    stdout: stdout.text,
    stderr: stderr.text,
    exit_code: result.exitCode,
    timed_out: result.timedOut,
    truncated: stdout.cut || stderr.cut,
  };
}

/**
 * The last `max` characters of `text`, led by a line saying how many earlier characters were
 * dropped when any were. `total` is how many the stream wrote in all (counted in the sandbox).
 */
export function keepTail(text: string, max: number, total: number | undefined, stream: string): { text: string; cut: boolean } {
  const chars = Array.from(text);
  const kept = chars.length > max ? chars.slice(chars.length - max) : chars;
  const dropped = Math.max(0, (total ?? chars.length) - kept.length);
  if (dropped === 0) return { text, cut: false };
  return { text: `[warren: ${dropped} earlier characters of ${stream} cut; the last ${kept.length} follow]\n${kept.join('')}`, cut: true };
}
