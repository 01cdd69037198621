import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseDnsServers } from './resolver.js';

test('DNS servers are IP[:PORT], comma-separated; names and bad ports are refused', () => {
  assert.deepEqual(parseDnsServers('127.0.0.1:5353, 192.0.2.53'), ['127.0.0.1:5353', '192.0.2.53']);
  assert.deepEqual(parseDnsServers('[::1]:53'), ['[::1]:53']);
  assert.throws(() => parseDnsServers(' , '), /names no server/);
  assert.throws(() => parseDnsServers('dns.example.com'), /not IP\[:PORT\]/);
  assert.throws(() => parseDnsServers('127.0.0.1:70000'), /not IP\[:PORT\]/);
  assert.throws(() => parseDnsServers('::1'), /not IP\[:PORT\]/);
});
