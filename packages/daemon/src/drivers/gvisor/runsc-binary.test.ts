import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';
import { chooseRunsc } from './runsc-binary.js';

/** A cache dir laid out as scripts/build-runsc.sh leaves it, with a stand-in binary. */
function cacheWith(script: string | undefined): { dir: string; build: string; done: () => void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-runsc-cache-'));
  const build = path.join(dir, '0.0~20240729.0-4~bpo12+2+abc');
  if (script !== undefined) {
    mkdirSync(build);
    writeFileSync(path.join(build, 'runsc'), `#!/bin/sh\n${script}\n`);
    chmodSync(path.join(build, 'runsc'), 0o755);
    symlinkSync(path.basename(build), path.join(dir, 'current'));
  }
  return { dir, build, done: () => rmSync(dir, { recursive: true, force: true }) };
}

test('runsc choice: the patched build when it passes its self-check, by its resolved path', async () => {
  const c = cacheWith('echo "runsc version 0.0~20240729.0+warren.abc"; echo "spec: 1.0.2-dev"');
  try {
    const r = await chooseRunsc({ cacheDir: c.dir });
    assert.equal(r.kind, 'patched');
    assert.equal(r.binary, path.join(c.build, 'runsc'), 'not the current/ link: the bake key must change with the build');
    assert.equal(r.version, 'runsc version 0.0~20240729.0+warren.abc');
  } finally {
    c.done();
  }
});

test('runsc choice: a patched build that fails its self-check falls back to the packaged runsc, saying why', async () => {
  for (const script of ['exit 3', 'echo "something else"']) {
    const c = cacheWith(script);
    try {
      const r = await chooseRunsc({ cacheDir: c.dir });
      assert.equal(r.kind, 'packaged');
      assert.match(r.reason, /fails its self-check/);
      assert.match(r.reason, new RegExp(c.build.replace(/[.~+]/g, '\\$&')));
      assert.match(r.version, /^runsc version/);
    } finally {
      c.done();
    }
  }
});

test('runsc choice: no patched build means the packaged runsc, and the reason names the build script', async () => {
  const c = cacheWith(undefined);
  try {
    const r = await chooseRunsc({ cacheDir: c.dir });
    assert.equal(r.kind, 'packaged');
    assert.match(r.reason, /no patched build/);
    assert.match(r.reason, /build-runsc\.sh/);
  } finally {
    c.done();
  }
});

test('runsc choice: WARREN_RUNSC wins over a good patched build, and one that does not run stops the daemon', async () => {
  const c = cacheWith('echo "runsc version patched"');
  const other = cacheWith('echo "runsc version other"');
  try {
    const r = await chooseRunsc({ cacheDir: c.dir, override: path.join(other.build, 'runsc') });
    assert.equal(r.kind, 'override');
    assert.equal(r.version, 'runsc version other');
    await assert.rejects(
      chooseRunsc({ cacheDir: c.dir, override: path.join(c.dir, 'missing-runsc') }),
      (err: unknown) => err instanceof WarrenError && err.code === 'failed_precondition' && /WARREN_RUNSC/.test(err.message),
    );
  } finally {
    c.done();
    other.done();
  }
});
