/**
 * Sandbox states and which operations each accepts. Every operation names the states it
 * accepts here; anything else is refused with one error code.
 *
 *   creating --ready--> running --crash/oom--> dead
 *       \--fail--> (removed)       \--kill/ttl--> (removed)
 *
 * Killed and expired sandboxes are removed from the registry (later calls get not_found);
 * sandboxes that died on their own stay as 'dead' with the reason, so callers can see why.
 */
import { WarrenError, type SandboxState } from '@warren/protocol';

export type Operation = 'exec' | 'files' | 'processes' | 'setTtl' | 'kill' | 'get';

const ACCEPTS: Record<Operation, SandboxState[]> = {
  exec: ['running'],
  files: ['running'],
  processes: ['running'],
  setTtl: ['creating', 'running'],
  kill: ['creating', 'running', 'dead'],
  get: ['creating', 'running', 'dead'],
};

export function requireState(id: string, state: SandboxState, op: Operation, error?: string): void {
  if (ACCEPTS[op].includes(state)) return;
  if (state === 'dead') {
    throw new WarrenError('not_found', `sandbox ${id} is dead${error ? ` (${error})` : ''}; create a new one`);
  }
  throw new WarrenError('failed_precondition', `sandbox ${id} is ${state}; '${op}' needs it to be ${ACCEPTS[op].join(' or ')}`);
}
