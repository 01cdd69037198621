import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Scope } from '@warren/protocol';
import type { Principal } from '../keys/service.js';
import { TemplateCatalog } from './catalog.js';
import { TemplateAccess, TemplateOwners } from './owners.js';

const key = (keyId: string, admin = false): Principal => ({ keyId, admin, scopes: new Set<Scope>(admin ? ['admin'] : ['templates:build']) });
const ADMIN = key('key-admin', true);
const ALICE = key('key-alice');
const BOB = key('key-bob');

function installed(dir: string, name: string): void {
  mkdirSync(path.join(dir, name, 'v1', 'rootfs'), { recursive: true });
  symlinkSync('v1', path.join(dir, name, 'current'));
}

function fixture(): { access: TemplateAccess; dir: string; done: () => void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-owners-'));
  installed(dir, 'base');
  const access = new TemplateAccess(new TemplateCatalog(dir), new TemplateOwners(new Database(':memory:')));
  return { access, dir, done: () => rmSync(dir, { recursive: true, force: true }) };
}

const code = (c: string) => (e: unknown) => (e as { code?: string }).code === c;

test("a key's template is its own: others see nothing, not even in the 404's list", () => {
  const { access, dir, done } = fixture();
  try {
    assert.deepEqual(access.claimForBuild(ALICE, 'web'), { claimed: true });
    installed(dir, 'web');
    assert.deepEqual(
      access.list(ALICE).map((t) => t.name),
      ['base', 'web'],
    );
    assert.deepEqual(
      access.list(BOB).map((t) => t.name),
      ['base'],
    );
    assert.equal(access.resolve(ALICE, 'web').name, 'web');
    assert.equal(access.resolve(ADMIN, 'web').name, 'web');
    // Bob's 404 for Alice's template reads as for a name that exists nowhere.
    const hidden = (() => {
      try {
        access.resolve(BOB, 'web');
      } catch (e) {
        return (e as Error).message;
      }
    })();
    assert.equal(hidden, "unknown template 'web'; available: base");
    assert.throws(() => access.requireChange(BOB, 'web', 'remove'), code('not_found'));
    assert.throws(
      () => access.requireBase(BOB, 'web'),
      (e: Error) => code('invalid_argument')(e) && e.message === "from: unknown template 'web' (installed: base; or use 'debian:bookworm')",
    );
    access.requireBase(ALICE, 'web');
    access.requireBase(BOB, 'base');
    assert.throws(() => access.claimForBuild(BOB, 'web'), code('conflict'));
    access.requireChange(ALICE, 'web', 'remove');
    access.requireChange(ADMIN, 'web', 'remove');
  } finally {
    done();
  }
});

test('a shared template is every key’s to use and only an admin key’s to change', () => {
  const { access, done } = fixture();
  try {
    assert.equal(access.resolve(BOB, 'base').name, 'base');
    assert.throws(
      () => access.requireChange(BOB, 'base', 'remove'),
      (e: Error) => code('permission_denied')(e) && /only an admin key may remove/.test(e.message),
    );
    assert.throws(() => access.claimForBuild(BOB, 'base'), code('permission_denied'));
    access.requireChange(ADMIN, 'base', 'remove');
    assert.deepEqual(access.claimForBuild(ADMIN, 'base'), { claimed: false });
    assert.equal(access.owners.ownerOf('base'), undefined, 'an admin build leaves the template shared');
    assert.throws(() => access.requireChange(BOB, 'nosuch', 'bake'), code('not_found'));
  } finally {
    done();
  }
});

test('a released name (failed first build, removal) is free for any key', () => {
  const { access, done } = fixture();
  try {
    access.claimForBuild(ALICE, 'tmp');
    assert.equal(access.owners.ownerOf('tmp'), 'key-alice');
    assert.deepEqual(access.claimForBuild(ALICE, 'tmp'), { claimed: false }, 'its own name again: no new claim');
    access.owners.release('tmp');
    assert.deepEqual(access.claimForBuild(BOB, 'tmp'), { claimed: true });
  } finally {
    done();
  }
});
