import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { UsageReport } from '@warren/sdk';
import { duration, parseWhen, usageText } from './usage.js';

test('usage tables escape what callers named (templates, API key ids)', () => {
  const amounts = { activeSeconds: 60, vcpuSeconds: 120, gibSeconds: 120, cost: 0.0036 };
  const report: UsageReport = {
    since: '2024-05-01T00:00:00.000Z',
    until: '2024-05-02T00:00:00.000Z',
    prices: { currency: 'USD', vcpuHour: 0.054, gibHour: 0.0162 },
    sandboxes: [{ sandboxId: 'sb-1', apiKeyId: 'k\u009d0;x\u009c', template: 't\x1b[2J', active: false, ...amounts }],
    apiKeys: [{ apiKeyId: 'k\u009d0;x\u009c', sandboxes: 1, ...amounts }],
    total: { sandboxes: 1, ...amounts },
  };
  const text = usageText(report);
  assert.match(text, /sb-1 +t\\x1b\[2J /);
  assert.match(text, /^k\\u009d0;x\\u009c +1 /m);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: looking for control characters is the point
  assert.doesNotMatch(text, /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
});

test('durations: tenths of seconds under a minute, then m/s, h/m/s, d/h/m with two-digit fields', () => {
  assert.equal(duration(0), '0.0s');
  assert.equal(duration(59.94), '59.9s');
  assert.equal(duration(60), '1m00s');
  assert.equal(duration(61.6), '1m02s');
  assert.equal(duration(3600), '1h00m00s');
  assert.equal(duration(3 * 3600 + 5 * 60 + 7), '3h05m07s');
  assert.equal(duration(86400 * 2 + 3600 + 60 * 4 + 59), '2d01h04m');
});

test('--since/--until: a duration back from now, or an ISO 8601 date or time; anything else is refused', () => {
  const now = Date.parse('2024-05-10T12:00:00.000Z');
  const when = parseWhen('--since', now);
  assert.equal(when('30m').toISOString(), '2024-05-10T11:30:00.000Z');
  assert.equal(when('2h').toISOString(), '2024-05-10T10:00:00.000Z');
  assert.equal(when('1.5d').toISOString(), '2024-05-09T00:00:00.000Z');
  assert.equal(when('1w').toISOString(), '2024-05-03T12:00:00.000Z');
  assert.equal(when(' 45s ').toISOString(), '2024-05-10T11:59:15.000Z');
  assert.equal(when('2024-05-01').toISOString(), '2024-05-01T00:00:00.000Z');
  assert.equal(when('2024-05-01T12:30:00Z').toISOString(), '2024-05-01T12:30:00.000Z');
  assert.equal(when('2024-05-01T12:30:00+02:00').toISOString(), '2024-05-01T10:30:00.000Z');
  for (const bad of ['yesterday', '5', '2h30m', '-2h', 'May 1 2024', '2024-13-45', '']) {
    assert.throws(() => when(bad), { message: new RegExp(`^--since must be an ISO 8601 date or time .* got '${bad}'$`) }, bad);
  }
});
