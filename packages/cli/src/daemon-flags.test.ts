import { test } from 'node:test';
import assert from 'node:assert/strict';
import { daemonOverrides, parseListen } from './daemon-flags.js';

test('--listen forms and TLS flags', () => {
  assert.deepEqual(parseListen('0.0.0.0:7443'), { host: '0.0.0.0', port: 7443 });
  assert.deepEqual(parseListen('10.1.2.3'), { host: '10.1.2.3' });
  assert.deepEqual(parseListen('[::]:7443'), { host: '::', port: 7443 });
  assert.deepEqual(parseListen('::1'), { host: '::1' });
  assert.throws(() => parseListen('host:99999'), /0-65535/);
  assert.deepEqual(daemonOverrides({ listen: '127.0.0.1:0', tlsSelfSigned: true, port: 7070 }), { host: '127.0.0.1', port: 0, tls: 'self-signed' });
  assert.deepEqual(daemonOverrides({ tlsCert: 'c.pem', tlsKey: 'k.pem' }), { tls: { certFile: 'c.pem', keyFile: 'k.pem' } });
  assert.throws(() => daemonOverrides({ tlsCert: 'c.pem' }), /go together/);
  assert.throws(() => daemonOverrides({ tlsCert: 'c.pem', tlsKey: 'k.pem', tlsSelfSigned: true }), /not both/);
});
