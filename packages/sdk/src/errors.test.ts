import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ErrorCodes, type ErrorCode, type ExecResult } from '@warren/protocol';
import {
  AuthenticationError,
  CommandError,
  ConflictError,
  FailedPreconditionError,
  InternalError,
  InvalidArgumentError,
  NetworkError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  TimeoutError,
  TooLargeError,
  UnavailableError,
  WarrenError,
  errorFromBody,
} from './errors.js';
import * as sdk from './index.js';
import { TemplateBuildError } from './template.js';

/** Every API code and the class its errors are (a code added to the protocol fails the first test until it has one). */
const CLASS_OF: Record<ErrorCode, typeof WarrenError> = {
  invalid_argument: InvalidArgumentError,
  unauthenticated: AuthenticationError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  conflict: ConflictError,
  failed_precondition: FailedPreconditionError,
  too_large: TooLargeError,
  resource_exhausted: ResourceExhaustedError,
  internal: InternalError,
  unavailable: UnavailableError,
  deadline_exceeded: TimeoutError,
};

test('every API code maps to its own class, named after it, with the status, code and message', () => {
  assert.deepEqual(Object.keys(CLASS_OF).sort(), Object.keys(ErrorCodes).sort(), 'a class for every code in the protocol');
  assert.equal(new Set(Object.values(CLASS_OF)).size, Object.keys(CLASS_OF).length, 'no two codes share a class');
  for (const [code, cls] of Object.entries(CLASS_OF) as Array<[ErrorCode, typeof WarrenError]>) {
    const status = ErrorCodes[code];
    const e = errorFromBody(status, { error: { code, message: `${code} happened` } });
    assert.equal(e.constructor, cls, code);
    assert.ok(e instanceof WarrenError && e instanceof Error, code);
    assert.equal(e.name, cls.name);
    assert.equal(e.code, code);
    assert.equal(e.status, status);
    assert.equal(e.message, `${code} happened`);
    assert.equal(e.requestId, undefined);
    assert.equal(e.details, undefined);
  }
});

test('failed_precondition is a FailedPreconditionError and still a ConflictError; conflict is not a FailedPreconditionError', () => {
  const pre = errorFromBody(409, { error: { code: 'failed_precondition', message: 'process 7 has already exited' } });
  assert.ok(pre instanceof FailedPreconditionError);
  assert.ok(pre instanceof ConflictError, 'code written for ConflictError keeps catching it');
  const conflict = errorFromBody(409, { error: { code: 'conflict', message: 'in use' } });
  assert.ok(conflict instanceof ConflictError);
  assert.ok(!(conflict instanceof FailedPreconditionError));
});

test('a server-side failure names its request in the message and as a field; details come through', () => {
  const e = errorFromBody(500, { error: { code: 'internal', message: 'runsc could not start sandbox sb-1', requestId: 'req-42' } });
  assert.ok(e instanceof InternalError);
  assert.equal(e.message, 'runsc could not start sandbox sb-1 (request req-42; details in the daemon log)');
  assert.equal(e.requestId, 'req-42');
  assert.equal(e.status, 500);
  const d = errorFromBody(409, { error: { code: 'conflict', message: 'in use', details: { users: ['sb-1'] } } });
  assert.deepEqual(d.details, { users: ['sb-1'] });
  assert.equal(d.requestId, undefined);
  assert.ok(!d.message.includes('(request'), d.message);
});

test('a body without a known code is mapped by its status; no message gives "HTTP <status>"', () => {
  const cases: Array<[number, unknown, typeof WarrenError, string]> = [
    [404, undefined, NotFoundError, 'not_found'],
    [401, { error: { message: 'who are you' } }, AuthenticationError, 'unauthenticated'],
    [409, null, ConflictError, 'conflict'],
    [413, 'Payload Too Large', TooLargeError, 'too_large'],
    [502, { error: { message: 'Bad Gateway' } }, InternalError, 'internal'],
    [418, {}, InternalError, 'internal'],
    [400, { error: { code: 'no_such_code', message: 'from a newer daemon' } }, InvalidArgumentError, 'invalid_argument'],
  ];
  for (const [status, body, cls, code] of cases) {
    const e = errorFromBody(status, body);
    assert.equal(e.constructor, cls, `${status} ${JSON.stringify(body)}`);
    assert.equal(e.code, code);
    assert.equal(e.status, status);
  }
  assert.equal(errorFromBody(404, undefined).message, 'HTTP 404');
  assert.equal(errorFromBody(503, { error: { message: '' } }).message, 'HTTP 503');
  assert.equal(errorFromBody(401, { error: { message: 'who are you' } }).message, 'who are you');
  // A wrong type where a string belongs is ignored rather than printed as [object Object].
  const odd = errorFromBody(500, { error: { code: 'internal', message: { nested: true }, requestId: 7, details: 'text' } });
  assert.equal(odd.message, 'HTTP 500');
  assert.equal(odd.requestId, undefined);
  assert.equal(odd.details, undefined);
});

test('WarrenError takes code, message, options, as the protocol one does', () => {
  const cause = new Error('ECONNREFUSED');
  const e = new WarrenError('unavailable', 'agent gone', { status: 503, requestId: 'r1', details: { why: 'oom' }, cause });
  assert.equal(e.code, 'unavailable');
  assert.equal(e.message, 'agent gone');
  assert.equal(e.status, 503);
  assert.equal(e.requestId, 'r1');
  assert.deepEqual(e.details, { why: 'oom' });
  assert.equal(e.cause, cause);
  assert.equal(e.name, 'WarrenError');
  const bare = new NetworkError('network', 'cannot reach warren daemon at http://127.0.0.1:1');
  assert.equal(bare.name, 'NetworkError');
  assert.equal(bare.status, undefined);
  assert.ok(!('cause' in bare), 'no cause property when none was given');
  assert.deepEqual(Object.keys(bare).sort(), ['code', 'name'], 'absent options leave no undefined fields behind');
});

test('CommandError: failed_precondition, with the exit code, output and the last lines of stderr in the message', () => {
  const result: ExecResult = { pid: 9, exitCode: 2, stdout: 'out', stderr: 'l1\nl2\nl3\nl4\n', timedOut: false, durationMs: 5 };
  const e = new CommandError('make test', result);
  assert.ok(e instanceof WarrenError);
  assert.equal(e.code, 'failed_precondition');
  assert.equal(e.message, 'command "make test" exited with code 2: l2\nl3\nl4');
  assert.equal(e.exitCode, 2);
  assert.equal(e.stdout, 'out');
  assert.equal(e.stderr, 'l1\nl2\nl3\nl4\n');
  assert.equal(e.timedOut, false);
  const t = new CommandError('sleep 9', { ...result, exitCode: null, stderr: '', timedOut: true });
  assert.equal(t.message, 'command "sleep 9" timed out');
  assert.equal(t.timedOut, true);
});

test('TemplateBuildError: code, message, then the failed step in the options', () => {
  const e = new TemplateBuildError('failed_precondition', 'step 2/2 (run ls) failed with exit code 2', {
    status: 409,
    step: 2,
    exitCode: 2,
    output: 'ls: nope',
  });
  assert.ok(e instanceof WarrenError);
  assert.equal(e.name, 'TemplateBuildError');
  assert.equal(e.code, 'failed_precondition');
  assert.equal(e.status, 409);
  assert.equal(e.step, 2);
  assert.equal(e.exitCode, 2);
  assert.equal(e.output, 'ls: nope');
  assert.deepEqual(Object.keys(new TemplateBuildError('internal', 'x')).sort(), ['code', 'name']);
});

test('the package exports every error class', () => {
  for (const cls of [...Object.values(CLASS_OF), WarrenError, NetworkError, CommandError, TemplateBuildError]) {
    assert.equal((sdk as Record<string, unknown>)[cls.name], cls, cls.name);
  }
  assert.equal(sdk.errorFromBody, errorFromBody);
});
