import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WarrenError } from '@warren/protocol';
import { credentialFor, credentialRules, parseCredentials, redactedCredentials } from './credentials.js';
import { parsePolicy } from './policy.js';

const policy = parsePolicy(['api.example.com:443', 'git.example.org', '127.0.0.1:8443', '[2001:db8::1]:443', '*.wild.example']);
const SECRET = 'Bearer s3cr3t-value';

function rejects(input: unknown, field: RegExp, reason: RegExp): void {
  assert.throws(
    () => parseCredentials(input as never, policy),
    (e: WarrenError) => {
      assert.equal(e.code, 'invalid_argument');
      assert.match(e.message, field);
      assert.match(e.message, reason);
      assert.ok(!e.message.includes('s3cr3t'), `the secret leaked into: ${e.message}`);
      return true;
    },
  );
}

test('valid credentials are normalised', () => {
  const parsed = parseCredentials(
    [
      { host: 'API.example.com:443', headers: { Authorization: SECRET } },
      { host: 'git.example.org', headers: { 'X-Token': 'a', 'x-other': 'b' } },
      { host: '127.0.0.1:8443', headers: { Authorization: 'Basic eDp5' } },
      { host: '[2001:DB8::1]:443', headers: { Authorization: 'x' } },
    ],
    policy,
  );
  assert.deepEqual(parsed[0], { host: 'api.example.com', port: 443, headers: [['authorization', SECRET]] });
  assert.deepEqual(parsed[1], {
    host: 'git.example.org',
    headers: [
      ['x-token', 'a'],
      ['x-other', 'b'],
    ],
  });
  assert.equal(parsed[3]?.host, '2001:db8::1');
  assert.deepEqual(
    credentialRules(parsed).map((c) => c.host),
    ['api.example.com:443', 'git.example.org', '127.0.0.1:8443', '[2001:db8::1]:443'],
  );
  assert.deepEqual(parseCredentials(undefined, policy), []);
});

test('lookup: exact port first, then a rule without a port; names compare without case', () => {
  const parsed = parseCredentials(
    [
      { host: 'git.example.org', headers: { A: 'any port' } },
      { host: 'git.example.org:8443', headers: { A: 'port 8443' } },
    ],
    parsePolicy(['git.example.org']),
  );
  assert.equal(credentialFor(parsed, 'GIT.example.org.', 8443)?.headers[0]?.[1], 'port 8443');
  assert.equal(credentialFor(parsed, 'git.example.org', 443)?.headers[0]?.[1], 'any port');
  assert.equal(credentialFor(parsed, 'other.example.org', 443), undefined);
  assert.equal(credentialFor(undefined, 'git.example.org', 443), undefined);
});

test('redaction keeps header names and drops every value', () => {
  const shown = redactedCredentials(parseCredentials([{ host: 'api.example.com:443', headers: { Authorization: SECRET } }], policy));
  assert.deepEqual(shown, [{ host: 'api.example.com:443', headers: { authorization: '[redacted]' } }]);
  assert.ok(!JSON.stringify(shown).includes('s3cr3t'));
});

test('bad input is refused naming the field and the reason, never the secret', () => {
  rejects([{ host: '*.wild.example', headers: { A: SECRET } }], /credentials\[0\]\.host/, /wildcards are not allowed/);
  rejects([{ host: 'not-allowed.example.com', headers: { A: SECRET } }], /credentials\[0\]\.host/, /not allowed by any allow rule/);
  rejects([{ host: 'api.example.com:8443', headers: { A: SECRET } }], /credentials\[0\]\.host/, /not allowed/);
  rejects([{ host: 'https://api.example.com/', headers: { A: SECRET } }], /\.host/, /not a URL/);
  rejects([{ host: 'api.example.com:99999', headers: { A: SECRET } }], /\.host/, /port/);
  rejects([{ host: 'api.example.com:443', headers: { 'Bad Name': SECRET } }], /credentials\[0\]\.headers/, /not a valid header name/);
  rejects([{ host: 'api.example.com:443', headers: { Authorization: `${SECRET}\r\nX-Injected: 1` } }], /headers\.Authorization/, /CR at position 19/);
  rejects([{ host: 'api.example.com:443', headers: { Authorization: `${SECRET}\n` } }], /headers\.Authorization/, /LF/);
  rejects([{ host: 'api.example.com:443', headers: { Host: 'evil.example' } }], /headers\.Host/, /frames or routes/);
  rejects([{ host: 'api.example.com:443', headers: { 'Content-Length': '1' } }], /headers\.Content-Length/, /frames or routes/);
  rejects([{ host: 'api.example.com:443', headers: {} }], /headers/, /at least one header/);
  rejects([{ host: 'api.example.com:443', headers: { A: ' ' } }], /headers\.A/, /empty/);
  rejects([{ host: 'api.example.com:443', headers: { A: 'x'.repeat(9000) } }], /headers\.A/, /longer than/);
  rejects([{ host: 'api.example.com:443', headers: { A: 'x', a: 'y' } }], /headers\.a/, /given twice/);
  rejects(
    [
      { host: 'api.example.com:443', headers: { A: 'x' } },
      { host: 'API.example.com:443', headers: { B: 'y' } },
    ],
    /credentials\[1\]\.host/,
    /has a credential already/,
  );
  rejects('nope', /network\.credentials/, /list/);
});
