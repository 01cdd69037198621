import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { writeBrowserPolicy } from './browser-policy.js';

test('writeBrowserPolicy turns ECH off where no policy file is, and leaves a file or link of that name alone', () => {
  const root = mkdtempSync(path.join(tmpdir(), 'warren-policy-'));
  try {
    const fresh = path.join(root, 'chromium/policies/managed');
    const edited = path.join(root, 'chrome/policies/managed');
    const linked = path.join(root, 'linked/policies/managed');
    mkdirSync(edited, { recursive: true });
    writeFileSync(path.join(edited, 'warren-egress.json'), '{"EncryptedClientHelloEnabled": true}\n');
    mkdirSync(linked, { recursive: true });
    symlinkSync('/nonexistent-target', path.join(linked, 'warren-egress.json'));
    writeBrowserPolicy([fresh, edited, linked]);
    assert.deepEqual(JSON.parse(readFileSync(path.join(fresh, 'warren-egress.json'), 'utf8')), { EncryptedClientHelloEnabled: false });
    assert.equal(readFileSync(path.join(edited, 'warren-egress.json'), 'utf8'), '{"EncryptedClientHelloEnabled": true}\n');
    assert.equal(readlinkSync(path.join(linked, 'warren-egress.json')), '/nonexistent-target', 'a planted link is not followed');
    writeBrowserPolicy([fresh]); // a second configure changes nothing
    assert.deepEqual(JSON.parse(readFileSync(path.join(fresh, 'warren-egress.json'), 'utf8')), { EncryptedClientHelloEnabled: false });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
