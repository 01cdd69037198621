import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseCredentialFlags } from './credentials.js';

test('--credential HOST=Header: value; flags for one host become one credential with several headers', () => {
  assert.deepEqual(parseCredentialFlags([]), []);
  assert.deepEqual(parseCredentialFlags(['api.example.com:443=Authorization: Bearer a:b', 'api.example.com:443=X-Team:  t1 ', 'other.example=X-Key:k']), [
    { host: 'api.example.com:443', headers: { Authorization: 'Bearer a:b', 'X-Team': 't1' } },
    { host: 'other.example', headers: { 'X-Key': 'k' } },
  ]);
  for (const bad of ['no-equals: x', '=X-Key: v', 'host=no colon']) {
    assert.throws(() => parseCredentialFlags([bad]), { message: `--credential '${bad}': expected HOST=Header: value` });
  }
  // A long secret is not echoed whole in the message.
  assert.throws(
    () => parseCredentialFlags([`host=${'s'.repeat(100)}`]),
    (e: Error) => !e.message.includes('s'.repeat(41)),
  );
});

test('values from @env:NAME and @file:PATH (one trailing newline dropped); a missing one is named', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-cred-test-'));
  try {
    const file = path.join(dir, 'token');
    writeFileSync(file, 'from-file\n');
    process.env.WARREN_TEST_CRED = 'from-env';
    assert.deepEqual(parseCredentialFlags([`h=A: @env:WARREN_TEST_CRED`, `h=B: @file:${file}`]), [{ host: 'h', headers: { A: 'from-env', B: 'from-file' } }]);
    delete process.env.WARREN_TEST_CRED;
    assert.throws(() => parseCredentialFlags(['h=A: @env:WARREN_TEST_CRED']), {
      message: '--credential h A: environment variable WARREN_TEST_CRED is not set',
    });
    assert.throws(() => parseCredentialFlags([`h=B: @file:${dir}/missing`]), { message: `--credential h B: cannot read ${dir}/missing: ENOENT` });
  } finally {
    delete process.env.WARREN_TEST_CRED;
    rmSync(dir, { recursive: true, force: true });
  }
});
