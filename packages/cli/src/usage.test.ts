import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { UsageReport } from '@warren/sdk';
import { usageText } from './usage.js';

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
