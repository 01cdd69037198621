import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BuildTemplateRequest, CreateSandboxRequest, ExecRequest, ForkRequest, SetPoolRequest, WarrenError } from '@warren/protocol';
import { parse } from './errors.js';

/** The 400's message for a body, through the same parse() the routes use. */
function refusal(schema: Parameters<typeof parse>[0], body: unknown): WarrenError {
  try {
    parse(schema, body);
  } catch (err) {
    assert.ok(err instanceof WarrenError);
    assert.equal(err.code, 'invalid_argument');
    return err;
  }
  assert.fail(`accepted ${JSON.stringify(body).slice(0, 200)}`);
}

test('a bound names the field, the limit and what was given', () => {
  assert.equal(refusal(CreateSandboxRequest, { resources: { cpus: 0.001 } }).message, 'resources.cpus must be at least 0.1 (got 0.001)');
  assert.equal(refusal(CreateSandboxRequest, { resources: { cpus: 4096 } }).message, 'resources.cpus must be at most 1024 (got 4096)');
  assert.equal(refusal(CreateSandboxRequest, { resources: { memoryMB: 1 } }).message, 'resources.memoryMB must be at least 64 (got 1)');
  assert.equal(refusal(CreateSandboxRequest, { resources: { memoryMB: 100.5 } }).message, 'resources.memoryMB must be an integer (got 100.5)');
  assert.equal(refusal(CreateSandboxRequest, { resources: { pids: 1_000_000 } }).message, 'resources.pids must be at most 65536 (got 1000000)');
  assert.equal(refusal(CreateSandboxRequest, { resources: { diskMB: 1 } }).message, 'resources.diskMB must be at least 64 (got 1)');
  assert.equal(refusal(CreateSandboxRequest, { ttlSeconds: 0 }).message, 'ttlSeconds must be at least 1 (got 0)');
  assert.equal(refusal(ForkRequest, { count: 0 }).message, 'count must be at least 1 (got 0)');
  assert.equal(refusal(SetPoolRequest, { size: 65 }).message, 'size must be at most 64 (got 65)');
  assert.equal(refusal(CreateSandboxRequest, { resources: { cpus: '2' } }).message, "resources.cpus must be a number (got string '2')");
});

test('metadata is bounded in keys, key and value length, and total size', () => {
  const many = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v']));
  assert.equal(refusal(CreateSandboxRequest, { metadata: many }).message, 'metadata must have at most 64 keys (got 65)');
  assert.equal(refusal(CreateSandboxRequest, { metadata: { k: 'v'.repeat(1025) } }).message, 'metadata.k must be at most 1024 characters long (got 1025)');
  const longKey = 'x'.repeat(200);
  assert.equal(
    refusal(CreateSandboxRequest, { metadata: { [longKey]: 'v' } }).message,
    `metadata key '${'x'.repeat(64)}…' must be at most 128 characters long (got 200)`,
  );
  assert.equal(refusal(CreateSandboxRequest, { metadata: { '': 'v' } }).message, "metadata key '' must not be empty");
  const big = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, 'v'.repeat(1000)]));
  assert.match(
    refusal(CreateSandboxRequest, { metadata: big }).message,
    /^metadata must be at most 16384 bytes in all, keys and values in UTF-8 \(got 20\d\d\d\)$/,
  );
  // Within every bound: accepted, control characters included (the CLI escapes them).
  parse(CreateSandboxRequest, { metadata: { ...Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, 'v'.repeat(200)])), k0: '\x1b[2J\u009b' } });
});

test('env is bounded per variable (the kernel limit) and in total', () => {
  parse(ExecRequest, { cmd: 'true', env: { A: 'x'.repeat(131069) } });
  assert.equal(
    refusal(ExecRequest, { cmd: 'true', env: { A: 'x'.repeat(131070) } }).message,
    "env.A must be at most 131071 bytes as NAME=value in UTF-8, the kernel's limit for one variable (got 131072)",
  );
  const total = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`V${i}`, 'y'.repeat(120_000)]));
  assert.match(refusal(CreateSandboxRequest, { env: total }).message, /^env must be at most 1048576 bytes in all, names and values in UTF-8 \(got 1080018\)$/);
  assert.match(refusal(CreateSandboxRequest, { env: { '1BAD': 'x' } }).message, /^env key '1BAD' is invalid: environment variable names are letters/);
});

test('other issues still name the field; a flood of issues is cut short', () => {
  assert.equal(refusal(CreateSandboxRequest, { resources: { bogus: 1 } }).message, "resources has unknown field 'bogus'");
  assert.equal(refusal(ExecRequest, {}).message, 'body: give exactly one of cmd or argv');
  // Other refinements keep their wording after a colon.
  assert.equal(
    refusal(BuildTemplateRequest, { name: 'ok', from: 'base', steps: [{ type: 'copy', src: 'a', dest: 'relative' }] }).message,
    'steps.0.dest: must be an absolute path',
  );
  const flood = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, 'v'.repeat(2000)]));
  const err = refusal(CreateSandboxRequest, { metadata: flood });
  assert.match(err.message, /; and 46 more$/);
  assert.equal((err.details?.issues as string[] | undefined)?.length, 51);
});
