import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hintedConnect, parseHints } from './connect-hints.js';

const hints = parseHints([
  { host: 'Api.Example.com', port: 443 },
  { host: 'example.org', suffix: true },
  { host: '127.0.0.1', port: 8443 },
]);
const head = (line: string, rest = '') => Buffer.from(`${line}\r\nHost: x\r\n\r\n${rest}`, 'latin1');

test('a whole CONNECT head for a hinted target is answered, with what follows it kept', () => {
  assert.deepEqual(hintedConnect(head('CONNECT api.example.com:443 HTTP/1.1'), hints), {
    target: { host: 'api.example.com', port: 443 },
    headLength: head('CONNECT api.example.com:443 HTTP/1.1').length,
  });
  const withHello = hintedConnect(head('CONNECT API.EXAMPLE.COM:443 HTTP/1.0', '\x16\x03\x01'), hints);
  assert.deepEqual(withHello?.target, { host: 'api.example.com', port: 443 });
  assert.equal(head('CONNECT API.EXAMPLE.COM:443 HTTP/1.0', '\x16\x03\x01').subarray(withHello!.headLength).toString('latin1'), '\x16\x03\x01');
  // A suffix hint without a port covers any port of any name under it, not the name itself.
  assert.ok(hintedConnect(head('CONNECT pkg.sub.example.org:22 HTTP/1.1'), hints));
  assert.equal(hintedConnect(head('CONNECT example.org:443 HTTP/1.1'), hints), undefined);
  assert.ok(hintedConnect(head('CONNECT 127.0.0.1:8443 HTTP/1.1'), hints));
});

test('anything else is left to the daemon: other ports, other names, partial heads, other methods', () => {
  for (const line of [
    'CONNECT api.example.com:80 HTTP/1.1',
    'CONNECT evil.com:443 HTTP/1.1',
    'CONNECT xapi.example.com:443 HTTP/1.1',
    'CONNECT 127.0.0.2:8443 HTTP/1.1',
    'CONNECT [::1]:443 HTTP/1.1',
    'CONNECT api.example.com:0 HTTP/1.1',
    'CONNECT api.example.com:99999 HTTP/1.1',
    'CONNECT api.example.com:443 HTTP/2',
    'GET http://api.example.com:443/ HTTP/1.1',
  ]) {
    assert.equal(hintedConnect(head(line), hints), undefined, line);
  }
  assert.equal(hintedConnect(Buffer.from('CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n'), hints), undefined, 'head not finished');
  assert.equal(hintedConnect(head('CONNECT api.example.com:443 HTTP/1.1'), []), undefined, 'no hints');
});

test('hint lists from the daemon are checked', () => {
  assert.deepEqual(parseHints(undefined), []);
  assert.deepEqual(parseHints([{ host: 'A.b', port: 1, suffix: false }]), [{ host: 'a.b', port: 1 }]);
  for (const bad of [
    {},
    'x',
    [{ host: 'a b' }],
    [{ host: 'a.b', port: 0 }],
    [{ host: 'a.b', port: 1.5 }],
    [{ host: 'a\r\nb' }],
    new Array(1025).fill({ host: 'a.b' }),
  ]) {
    assert.throws(() => parseHints(bad), /connectHints/, JSON.stringify(bad).slice(0, 50));
  }
});
