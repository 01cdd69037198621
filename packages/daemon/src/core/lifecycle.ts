/**
 * The sandbox state machine: every state, every allowed transition, and which operations
 * each state accepts. Two tables, one job each:
 *
 * - TRANSITIONS: how a sandbox's persisted state may change. `transition()` is the only way
 *   core changes it (create, boot, hibernate, resume, death, recovery, kill, the reaper);
 *   an action the current state does not allow is refused with one error code.
 * - ACCEPTS: which states an API operation (exec, fork, kill, ...) accepts; `requireState()`
 *   refuses the others. Calls on a hibernated sandbox are accepted: they resume it first.
 *
 *   creating --ready--> running --die (crash/oom/disk/hung)--> dead
 *       \--remove (failure)     | ^
 *            hibernate (or idle)| |hibernate-failed / resume / recover-running
 *                               v |
 *                  hibernating --saved--> hibernated
 *   every state --remove (kill, ttl, failed create, reaper)--> (removed)
 *
 * Killed and expired sandboxes are removed from the registry (later calls get not_found);
 * sandboxes that died on their own stay as 'dead' with the reason, so callers can see why.
 * The state names are persisted (registry.ts, SQLite) and are part of the API: renaming one
 * needs a migration of the sandboxes table.
 */
import { SandboxStates, WarrenError, type SandboxState } from '@warren/protocol';

/** Every state a registered sandbox can be in, as the registry stores it. */
const STATES: readonly SandboxState[] = SandboxStates;

/** A sandbox that is no longer registered (killed, expired, failed create). Not persisted. */
export const REMOVED = 'removed';

export type Action =
  /** Created, forked or restored: its agent answered and took the request's identity. */
  | 'ready'
  /** Its image is being written (hibernate, or idle for idleSeconds). */
  | 'hibernate'
  /** The checkpoint failed before it stopped anything: the sandbox carries on. */
  | 'hibernate-failed'
  /** The image is complete and the sandbox holds nothing on the host any more. */
  | 'saved'
  /** Restored from its hibernation image. */
  | 'resume'
  /** Crashed, ran out of memory or disk, hung, or lost while the daemon was down. */
  | 'die'
  /** Recovery after a restart: a complete hibernation image makes it hibernated. */
  | 'recover-saved'
  /** Recovery after a restart: a hibernate that never saved it; it still runs. */
  | 'recover-running'
  /** Killed, expired, a create that failed, or a dead record past its retention. */
  | 'remove';

interface Transition {
  from: readonly SandboxState[];
  to: SandboxState | typeof REMOVED;
}

/** Every allowed transition. Anything not in here is refused by transition(). */
export const TRANSITIONS: Readonly<Record<Action, Transition>> = {
  ready: { from: ['creating'], to: 'running' },
  hibernate: { from: ['running'], to: 'hibernating' },
  'hibernate-failed': { from: ['hibernating'], to: 'running' },
  saved: { from: ['hibernating'], to: 'hibernated' },
  resume: { from: ['hibernated'], to: 'running' },
  // A sandbox that is being created can die too: the heartbeat watches it from its boot.
  die: { from: ['creating', 'running', 'hibernating', 'hibernated'], to: 'dead' },
  // Recovery finds a record hibernating (the daemon stopped mid-save) or hibernated.
  'recover-saved': { from: ['hibernating', 'hibernated'], to: 'hibernated' },
  'recover-running': { from: ['hibernating', 'hibernated'], to: 'running' },
  remove: { from: STATES, to: REMOVED },
};

/** The state an action leads to from `current`; refuses an action `current` does not allow. */
export function nextState(id: string, current: SandboxState, action: Action): SandboxState | typeof REMOVED {
  const t = TRANSITIONS[action];
  if (t.from.includes(current)) return t.to;
  throw new WarrenError('failed_precondition', `sandbox ${id} is ${current}: '${action}' is allowed only from ${t.from.join(' or ')}`, {
    details: { state: current, action },
  });
}

/** What transition() needs of the registry: a sandbox's record, and writes of its state. */
export interface StateStore {
  get(id: string): { state: SandboxState } | undefined;
  setState(id: string, state: SandboxState, error?: string): void;
  delete(id: string): void;
}

/**
 * Applies an action to a sandbox's persisted state: the one place core changes it. Refuses
 * an action the current state does not allow (failed_precondition, with both in the
 * message). A sandbox that is not registered any more (killed while the caller worked) is
 * left alone, as an update of a missing row always was: whoever removed it owns its end.
 * `error` is the reason a sandbox died, kept on its record.
 */
export function transition(store: StateStore, id: string, action: Action, error?: string): void {
  const r = store.get(id);
  if (!r) return;
  const to = nextState(id, r.state, action);
  if (to === REMOVED) store.delete(id);
  else store.setState(id, to, error);
}

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
