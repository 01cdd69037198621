import { test } from 'node:test';
import assert from 'node:assert/strict';
import { csrfMatches, SESSION_IDLE_MS, UiSessions } from './ui-sessions.js';

test('a login token opens one session, once, within its minute', () => {
  let now = 1_000_000;
  const sessions = new UiSessions(() => now);
  const { token } = sessions.issueLogin('wk_key');
  const id = sessions.redeem(token);
  assert.ok(id);
  assert.equal(sessions.get(id)?.secret, 'wk_key');
  assert.equal(sessions.redeem(token), undefined, 'spent');

  const late = sessions.issueLogin('wk_key').token;
  now += 60_001;
  assert.equal(sessions.redeem(late), undefined, 'expired');
  assert.equal(sessions.redeem('made-up'), undefined);
});

test('a session ends after its idle time, and each request restarts the clock', () => {
  let now = 0;
  const sessions = new UiSessions(() => now);
  const id = sessions.open('wk_key');
  now += SESSION_IDLE_MS - 1;
  assert.ok(sessions.get(id), 'still open just before the idle limit');
  now += SESSION_IDLE_MS - 1;
  assert.ok(sessions.get(id), 'the last request restarted the clock');
  now += SESSION_IDLE_MS;
  assert.equal(sessions.get(id), undefined);
  const other = sessions.open('wk_key');
  sessions.close(other);
  assert.equal(sessions.get(other), undefined, 'closed by logout');
  assert.equal(sessions.get(undefined), undefined);
});

test("the CSRF token is the session's own, compared whole", () => {
  const sessions = new UiSessions();
  const a = sessions.get(sessions.open('k1'));
  const b = sessions.get(sessions.open('k1'));
  assert.ok(a && b);
  assert.notEqual(a.csrf, b.csrf);
  assert.equal(csrfMatches(a, a.csrf), true);
  assert.equal(csrfMatches(a, b.csrf), false);
  assert.equal(csrfMatches(a, a.csrf.slice(0, -1)), false);
  assert.equal(csrfMatches(a, undefined), false);
  assert.equal(csrfMatches(a, ''), false);
});
