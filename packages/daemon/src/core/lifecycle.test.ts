import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SandboxStates, WarrenError, type SandboxState } from '@warren/protocol';
import { nextState, REMOVED, requireState, transition, TRANSITIONS, type Action, type StateStore } from './lifecycle.js';

test('each operation accepts only its states, with one error code per refusal', () => {
  assert.doesNotThrow(() => requireState('sb-1', 'running', 'exec'));
  assert.throws(
    () => requireState('sb-1', 'dead', 'exec', 'out of memory'),
    (e: WarrenError) => e.code === 'not_found' && /out of memory/.test(e.message),
  );
  assert.throws(
    () => requireState('sb-1', 'creating', 'files'),
    (e: WarrenError) => e.code === 'failed_precondition',
  );
  assert.doesNotThrow(() => requireState('sb-1', 'dead', 'kill'));
});

/** An in-memory registry holding one sandbox, recording what transition() wrote. */
function store(state: SandboxState): StateStore & { state?: SandboxState; error?: string } {
  const s: StateStore & { state?: SandboxState; error?: string } = {
    state,
    get: () => (s.state ? { state: s.state } : undefined),
    setState: (_id, next, error) => {
      s.state = next;
      s.error = error;
    },
    delete: () => {
      s.state = undefined;
    },
  };
  return s;
}

const actions = Object.keys(TRANSITIONS) as Action[];

test('every allowed transition is applied, to the state the table names', () => {
  let applied = 0;
  for (const action of actions) {
    const { from, to } = TRANSITIONS[action];
    for (const state of from) {
      assert.equal(nextState('sb-1', state, action), to, `${state} --${action}-->`);
      const s = store(state);
      transition(s, 'sb-1', action, action === 'die' ? 'out of memory' : undefined);
      assert.equal(s.state, to === REMOVED ? undefined : to, `${state} --${action}--> in the store`);
      if (action === 'die') assert.equal(s.error, 'out of memory');
      applied++;
    }
  }
  // ready 1, hibernate 1, hibernate-failed 1, saved 1, resume 1, die 4, recover-saved 2,
  // recover-running 2, remove 5: the table is what the code and docs/sandboxes.md show.
  assert.equal(applied, 18);
});

test('every transition the table does not list is refused with the state and the action', () => {
  let refused = 0;
  for (const action of actions) {
    for (const state of SandboxStates.filter((st) => !TRANSITIONS[action].from.includes(st))) {
      const s = store(state);
      assert.throws(
        () => transition(s, 'sb-1', action),
        (e: unknown) =>
          e instanceof WarrenError &&
          e.code === 'failed_precondition' &&
          e.message.includes(`sandbox sb-1 is ${state}`) &&
          e.message.includes(`'${action}'`) &&
          e.details?.state === state &&
          e.details?.action === action,
        `${state} --${action}--> must be refused`,
      );
      assert.equal(s.state, state, 'a refused transition changes nothing');
      refused++;
    }
  }
  assert.ok(refused > 0);
});

test('a sample of illegal transitions, with the message a caller sees', () => {
  const cases: [SandboxState, Action, RegExp][] = [
    ['dead', 'resume', /sandbox sb-1 is dead: 'resume' is allowed only from hibernated/],
    ['dead', 'ready', /is dead: 'ready' is allowed only from creating/],
    ['dead', 'die', /is dead: 'die' is allowed only from creating or running or hibernating or hibernated/],
    ['hibernated', 'hibernate', /is hibernated: 'hibernate' is allowed only from running/],
    ['running', 'saved', /is running: 'saved' is allowed only from hibernating/],
    ['creating', 'resume', /is creating: 'resume'/],
    ['running', 'ready', /is running: 'ready'/],
    ['hibernated', 'hibernate-failed', /is hibernated: 'hibernate-failed' is allowed only from hibernating/],
  ];
  for (const [state, action, message] of cases) {
    assert.throws(() => nextState('sb-1', state, action), message);
  }
});

test('a sandbox no longer registered is left alone (its killer removed it)', () => {
  const s = store('running');
  s.state = undefined;
  assert.doesNotThrow(() => transition(s, 'sb-1', 'ready'));
  assert.equal(s.state, undefined);
});
