import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/protocol';
import { recipeOf } from './templates.js';

test('an E2B template build becomes a warren recipe: its base, steps, start and ready commands', () => {
  const recipe = recipeOf('app', {
    fromTemplate: 'base',
    steps: [
      { type: 'RUN', args: ['apt-get install -y jq', 'root'] },
      { type: 'RUN', args: ['echo hi'] },
      { type: 'ENV', args: ['A', '1', 'B', 'two words'] },
      { type: 'WORKDIR', args: ['/app'] },
      { type: 'USER', args: ['user'] },
    ],
    startCmd: 'python3 -m http.server 8000',
    readyCmd: 'curl -fs localhost:8000',
  });
  assert.deepEqual(recipe, {
    name: 'app',
    from: 'base',
    steps: [
      { type: 'run', cmd: 'apt-get install -y jq', user: 'root' },
      { type: 'run', cmd: 'echo hi' },
      { type: 'env', env: { A: '1', B: 'two words' } },
      { type: 'workdir', path: '/app' },
      { type: 'user', user: 'user' },
    ],
    start: { cmd: 'python3 -m http.server 8000' },
    ready: { cmd: 'curl -fs localhost:8000' },
  });
  assert.equal(recipeOf('x', { fromImage: 'e2bdev/base', steps: [] }).from, 'base');
  assert.equal(recipeOf('x', { fromImage: 'debian:bookworm', steps: [] }).from, 'debian:bookworm');
});

test('what a recipe cannot express is refused, naming it', () => {
  const refused = (b: Parameters<typeof recipeOf>[1], pattern: RegExp) =>
    assert.throws(
      () => recipeOf('x', b),
      (err: unknown) => err instanceof WarrenError && err.code === 'invalid_argument' && pattern.test(err.message),
    );
  refused({ fromImage: 'python:3.12', steps: [] }, /python:3\.12.*does not pull container images/);
  refused({ fromTemplate: 'base', steps: [{ type: 'COPY', args: ['a', '/a'] }] }, /step 1 \(COPY\).*not supported/);
  refused({ fromTemplate: 'base', steps: [{ type: 'WORKDIR', args: [] }] }, /step 1 \(WORKDIR\) needs 1 argument/);
  refused({ fromTemplate: 'base', fromImageRegistry: { type: 'registry' }, steps: [] }, /registries are not supported/);
});
