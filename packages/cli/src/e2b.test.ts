import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { e2bEnvLines, shellQuote } from './e2b.js';

test('e2b env lines point both URLs at the daemon and survive a shell', () => {
  const text = e2bEnvLines('http://127.0.0.1:7070/', "wk_it's");
  assert.match(text, /^export E2B_API_URL='http:\/\/127\.0\.0\.1:7070\/e2b'$/m);
  assert.match(text, /^export E2B_SANDBOX_URL='http:\/\/127\.0\.0\.1:7070\/e2b\/envd'$/m);
  assert.match(text, /^export E2B_VALIDATE_API_KEY=false$/m);
  assert.doesNotMatch(text, /NODE_EXTRA_CA_CERTS/);
  // What a shell makes of the lines is the key as given, quote and all.
  const seen = execFileSync('/bin/sh', ['-c', `${text}printf %s "$E2B_API_KEY"`], { encoding: 'utf8' });
  assert.equal(seen, "wk_it's");
});

test('e2b env lines add the CA for a daemon with its own certificate', () => {
  const text = e2bEnvLines('https://warren.example:7070', 'wk_x', '/etc/warren/ca.pem');
  assert.match(text, /^export NODE_EXTRA_CA_CERTS='\/etc\/warren\/ca\.pem'$/m);
  assert.match(text, /^export SSL_CERT_FILE='\/etc\/warren\/ca\.pem'$/m);
  assert.equal(shellQuote("a'b"), `'a'\\''b'`);
});
