import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import { newPassword, scramVerifier } from './password.js';

test('passwords: 32 random bytes, base64url, different each time', () => {
  const a = newPassword();
  assert.match(a, /^[A-Za-z0-9_-]{43}$/);
  assert.notEqual(a, newPassword());
});

test('the SCRAM-SHA-256 verifier checks out against the exchange of RFC 7677 section 3', () => {
  const salt = Buffer.from('W22ZaJ0SNY7soEsUEjb6gQ==', 'base64');
  const v = scramVerifier('pencil', salt, 4096);
  const [, iterations, saltB64, storedB64, serverB64] = /^SCRAM-SHA-256\$(\d+):([^$]+)\$([^:]+):(.+)$/.exec(v) ?? [];
  assert.equal(iterations, '4096');
  assert.equal(saltB64, 'W22ZaJ0SNY7soEsUEjb6gQ==');
  const nonce = 'rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0';
  const authMessage = `n=user,r=rOprNGfwEbeRWgbNEkqO,r=${nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=${nonce}`;
  // The server's signature of the RFC's exchange, computed from our ServerKey.
  const serverSignature = createHmac('sha256', Buffer.from(serverB64 ?? '', 'base64'))
    .update(authMessage)
    .digest('base64');
  assert.equal(serverSignature, '6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=');
  // The client's proof is accepted: H(ClientKey) equals our StoredKey.
  const proof = Buffer.from('dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=', 'base64');
  const clientSignature = createHmac('sha256', Buffer.from(storedB64 ?? '', 'base64'))
    .update(authMessage)
    .digest();
  const clientKey = Buffer.from(proof.map((b, i) => b ^ (clientSignature[i] ?? 0)));
  assert.equal(sha256(clientKey), storedB64);
});

function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('base64');
}
