/**
 * Sandbox states and which operations each accepts. Every operation names the states it
 * accepts here; anything else is refused with one error code.
 *
 *   creating --ready--> running --crash/oom--> dead
 *       \--fail--> (removed)     |  \--kill/ttl--> (removed)
 *                   hibernate/idle |  ^ any call (exec, files, processes), fork-free
 *                                  v  |
 *                  hibernating --> hibernated --kill/ttl--> (removed)
 *
 * Killed and expired sandboxes are removed from the registry (later calls get not_found);
 * sandboxes that died on their own stay as 'dead' with the reason, so callers can see why.
 */
import { WarrenError, type SandboxState } from '@warren/protocol';

export type Operation = 'exec' | 'files' | 'processes' | 'setTtl' | 'kill' | 'get' | 'hibernate' | 'resume' | 'fork' | 'snapshot' | 'setNetwork' | 'ports';

/** Calls on a hibernated (or hibernating) sandbox are accepted: they resume it first. */
const AWAKE_OR_ASLEEP: SandboxState[] = ['running', 'hibernating', 'hibernated'];

const ACCEPTS: Record<Operation, SandboxState[]> = {
  exec: AWAKE_OR_ASLEEP,
  files: AWAKE_OR_ASLEEP,
  processes: AWAKE_OR_ASLEEP,
  hibernate: AWAKE_OR_ASLEEP,
  resume: AWAKE_OR_ASLEEP,
  // A hibernated sandbox is forked and snapshotted from its saved image, without waking it.
  fork: AWAKE_OR_ASLEEP,
  snapshot: AWAKE_OR_ASLEEP,
  setTtl: ['creating', ...AWAKE_OR_ASLEEP],
  setNetwork: ['creating', ...AWAKE_OR_ASLEEP],
  ports: AWAKE_OR_ASLEEP,
  kill: ['creating', ...AWAKE_OR_ASLEEP, 'dead'],
  get: ['creating', ...AWAKE_OR_ASLEEP, 'dead'],
};

export function requireState(id: string, state: SandboxState, op: Operation, error?: string): void {
  if (ACCEPTS[op].includes(state)) return;
  if (state === 'dead') {
    throw new WarrenError('not_found', `sandbox ${id} is dead${error ? ` (${error})` : ''}; create a new one`);
  }
  throw new WarrenError('failed_precondition', `sandbox ${id} is ${state}; '${op}' needs it to be ${ACCEPTS[op].join(' or ')}`);
}
