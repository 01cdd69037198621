/**
 * Which runsc the daemon runs (docs/runsc.md): the patched build from scripts/build-runsc.sh
 * when it passes its self-check, else the packaged runsc, and GET /v1/health and
 * `warren doctor` say which and why. The patched binary really runs the sandboxes: the
 * sandbox's Sentry process is that binary, and commands, hibernate and resume work on it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readlinkSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { HealthInfo } from '@warren/sdk';
import { REPO, TEMPLATES, allRunscContainers, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 240_000 };
const PATCHED = path.join(process.env.WARREN_RUNSC_CACHE || '/usr/local/lib/warren/runsc', 'current/runsc');

function doctor(d: DaemonHandle): { stdout: string; status: number | null } {
  const r = spawnSync(path.join(REPO, 'bin/warren'), ['doctor'], {
    encoding: 'utf8',
    env: { ...process.env, WARREN_HOME: d.home, WARREN_TEMPLATES: TEMPLATES, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey },
  });
  return { stdout: r.stdout, status: r.status };
}

/** The executable of each runsc sandbox process (the Sentry) under a daemon home. */
function sentryBinaries(d: DaemonHandle): string[] {
  const root = path.join(d.home, 'runsc');
  return allRunscContainers(d.home).map((id) => {
    const r = spawnSync('runsc', ['--root', root, 'state', id], { encoding: 'utf8' });
    const pid = (JSON.parse(r.stdout) as { pid: number }).pid;
    return readlinkSync(`/proc/${pid}/exe`).replace(/ \(deleted\)$/, '');
  });
}

test('runsc: without a patched build the daemon runs the packaged runsc, and health and doctor say why', T, async () => {
  const emptyCache = mkdtempSync(path.join(tmpdir(), 'warren-no-runsc-build-'));
  let d: DaemonHandle | undefined;
  try {
    d = await startDaemon({ env: { WARREN_RUNSC_CACHE: emptyCache, WARREN_SHELLS: '0' } });
    const h = await d.http.json<HealthInfo>('GET', '/v1/health');
    assert.equal(h.runsc.kind, 'packaged');
    assert.ok(path.isAbsolute(h.runsc.binary), h.runsc.binary);
    assert.match(h.runsc.version, /^runsc version/);
    assert.match(h.runsc.reason, /no patched build/);
    const r = doctor(d);
    assert.match(r.stdout, /warn\s+runsc in use: packaged \S+runsc .*no patched build/, r.stdout);
    assert.match(r.stdout, /fix: bash scripts\/build-runsc\.sh/, r.stdout);
  } finally {
    await stopAndCheckClean(d);
    rmSync(emptyCache, { recursive: true, force: true });
  }
});

test('runsc: the patched build runs sandboxes: commands, hibernate and resume, and its binary is the Sentry', T, async () => {
  // Fails loudly rather than skipping: setup builds it (a failed build warns there).
  assert.ok(existsSync(PATCHED), `no patched runsc at ${PATCHED}: run bash scripts/build-runsc.sh`);
  const binary = realpathSync(PATCHED);
  let d: DaemonHandle | undefined;
  try {
    d = await startDaemon({ env: { WARREN_SHELLS: '0' } });
    const h = await d.http.json<HealthInfo>('GET', '/v1/health');
    assert.deepEqual({ kind: h.runsc.kind, binary: h.runsc.binary }, { kind: 'patched', binary });
    assert.match(h.runsc.version, /\+warren\./, 'the version names the warren build');
    assert.match(doctor(d).stdout, new RegExp(`ok\\s+runsc in use: patched ${binary.replace(/[.~+]/g, '\\$&')}`));

    const sbx = await d.create();
    const r = await sbx.exec('echo hello from $(uname -s)');
    assert.equal(r.stdout, 'hello from Linux\n');
    assert.deepEqual(sentryBinaries(d), [binary], 'the sandbox process is the patched binary');
    await sbx.exec('echo kept > /home/user/mark');
    await sbx.hibernate();
    const again = await sbx.exec('cat /home/user/mark');
    assert.equal(again.stdout, 'kept\n', 'resume restored the sandbox with the patched runsc');
    assert.deepEqual(sentryBinaries(d), [binary]);
    await sbx.kill();
  } finally {
    await stopAndCheckClean(d);
  }
});
