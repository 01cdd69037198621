import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WarrenError } from '@warren/protocol';
import { requireState } from './lifecycle.js';

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
