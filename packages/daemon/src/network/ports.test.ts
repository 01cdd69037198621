import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PortHosts } from './ports.js';

test('port URLs: localhost by default; under a configured domain with its scheme; other hosts are not port URLs', () => {
  const local = new PortHosts();
  assert.deepEqual(local.parse('3000-sb-abc123.localhost:7070'), { sandboxId: 'sb-abc123', port: 3000 });
  assert.equal(local.url('sb-abc123', 3000, 7070, 'tok'), 'http://3000-sb-abc123.localhost:7070/?warren_token=tok');
  assert.equal(local.parse('3000-sb-abc123.warren.test:7070'), undefined);

  const remote = new PortHosts('warren.test', 'https');
  assert.deepEqual(remote.parse('8080-SB-ABC.warren.test'), { sandboxId: 'sb-abc', port: 8080 });
  assert.equal(remote.url('sb-abc', 8080, 443), 'https://8080-sb-abc.warren.test:443/');
  for (const host of [
    '3000-sb-abc.localhost',
    '3000-sb-abc.warrenXtest',
    '3000-sb-abc.evil.warren.test.attacker.net',
    '70000-sb-abc.warren.test',
    '127.0.0.1:7070',
    undefined,
  ]) {
    assert.equal(remote.parse(host), undefined, String(host));
  }
});
