/**
 * Template recipes and the cached, layered build, against a real daemon with real gVisor
 * build steps. The daemon builds into its own templates dir, where `base` is a symlink to
 * the machine's base template; recipes use only run/copy/env/workdir/user steps from base,
 * so nothing here touches the network.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Template, TemplateBuildError, type Recipe, type TemplateBuildEvent } from '@warren/sdk';
import { REPO, TEMPLATES, eventually, runscContainers, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const TEST_ROOT = '/var/lib/warren-test';
let d: DaemonHandle | undefined;
let tpl: string;
let ctx: string;
// Baking (a separate feature) would start bake-* containers for templates with a start
// command; these tests are about building, so it is off.
// A registry no step reaches: the steps below only print it.
const NPM_REGISTRY = 'http://127.0.0.1:9/npm-registry/';
const DAEMON_ENV = () => ({ WARREN_TEMPLATES: tpl, WARREN_BAKE: '0', WARREN_NPM_REGISTRY: NPM_REGISTRY });

before(async () => {
  mkdirSync(TEST_ROOT, { recursive: true });
  tpl = mkdtempSync(path.join(TEST_ROOT, 'tpl-'));
  ctx = mkdtempSync(path.join(TEST_ROOT, 'ctx-'));
  symlinkSync(realpathSync(path.join(TEMPLATES, 'base')), path.join(tpl, 'base'));
  d = await startDaemon({ env: DAEMON_ENV() });
});

after(async () => {
  try {
    await stopAndCheckClean(d);
  } finally {
    const mounts = mountsUnder(tpl);
    for (const m of mounts) spawnSync('umount', ['-l', m]);
    rmSync(tpl, { recursive: true, force: true });
    rmSync(ctx, { recursive: true, force: true });
    assert.deepEqual(mounts, [], 'overlay mounts left under the templates dir');
  }
});

function mountsUnder(dir: string): string[] {
  const out = execFileSync('findmnt', ['-rn', '-o', 'TARGET'], { encoding: 'utf8' });
  return out.split('\n').filter((m) => m === dir || m.startsWith(`${dir}/`));
}

/**
 * POST /v1/templates/build with fetch. Sent once more if the pooled keep-alive connection
 * was closed by the daemon under it (the request never arrived; builds are idempotent).
 */
async function postBuild(body: unknown, signal?: AbortSignal): Promise<Response> {
  const send = () =>
    fetch(`${d!.url}/v1/templates/build`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d!.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal,
    });
  try {
    return await send();
  } catch {
    return send();
  }
}

function buildContainers(): string[] {
  return runscContainers(d!.home).filter((c) => c.startsWith('build-'));
}

function conn() {
  return d!.conn;
}

interface BuildResult {
  events: TemplateBuildEvent[];
  cached: boolean[];
  version?: string;
  error?: TemplateBuildError;
}

async function build(recipe: Recipe, contextDir = ctx): Promise<BuildResult> {
  const events: TemplateBuildEvent[] = [];
  try {
    const info = await Template.buildRecipe(recipe, { ...conn(), contextDir, onEvent: (e) => events.push(e) });
    return { events, cached: cachedFlags(events), version: info.version };
  } catch (err) {
    if (!(err instanceof TemplateBuildError)) throw err;
    return { events, cached: cachedFlags(events), error: err };
  }
}

function cachedFlags(events: TemplateBuildEvent[]): boolean[] {
  return events.flatMap((e) => (e.type === 'step' ? [e.cached] : []));
}

function rootfsFile(name: string, file: string): string {
  return readFileSync(path.join(tpl, name, 'current', 'rootfs', file), 'utf8');
}

function layerCount(): number {
  const dir = path.join(tpl, '.layers');
  return existsSync(dir) ? readdirSync(dir).length : 0;
}

function stagingLeft(): string[] {
  const dir = path.join(tpl, '.build');
  return existsSync(dir) ? readdirSync(dir) : [];
}

function appRecipe(lastCmd: string): Recipe {
  return {
    name: 'tcache',
    from: 'base',
    steps: [
      { type: 'run', cmd: 'head -c 16 /dev/urandom | od -An -tx1 | tr -d " \\n" > /stamp; date +%s%N >> /stamp' },
      { type: 'copy', src: 'app', dest: '/app', owner: 'user' },
      { type: 'env', env: { GREETING: 'hello' } },
      { type: 'workdir', path: '/app' },
      { type: 'user', user: 'user' },
      { type: 'run', cmd: lastCmd },
    ],
    start: { cmd: 'node /app/main.js' },
    ready: { port: 8080 },
  };
}

test('cache hits and misses by step; a change re-runs only what changed', async () => {
  mkdirSync(path.join(ctx, 'app'), { recursive: true });
  writeFileSync(path.join(ctx, 'app', 'main.js'), 'console.log("v1")\n');
  const first = await build(appRecipe('echo "$GREETING from $(id -un) in $PWD" > built'));
  assert.equal(first.error, undefined, first.error?.message);
  assert.deepEqual(first.cached, [true, false, false, false, false, false, false]);
  const stamp = rootfsFile('tcache', 'stamp');
  assert.equal(rootfsFile('tcache', 'app/built'), 'hello from user in /app\n');
  assert.equal(rootfsFile('tcache', 'app/main.js'), 'console.log("v1")\n');

  // The same recipe again: every step cached, same version, nothing rebuilt.
  const t0 = Date.now();
  const again = await build(appRecipe('echo "$GREETING from $(id -un) in $PWD" > built'));
  assert.deepEqual(again.cached, [true, true, true, true, true, true, true]);
  assert.equal(again.version, first.version);
  assert.ok(Date.now() - t0 < 5000, `a fully cached build took ${Date.now() - t0} ms`);

  // Only the last step changes: it alone runs; the first run step's random stamp stays.
  const last = await build(appRecipe('echo "changed by $(id -un)" > built'));
  assert.deepEqual(last.cached, [true, true, true, true, true, true, false]);
  assert.notEqual(last.version, first.version);
  assert.equal(rootfsFile('tcache', 'app/built'), 'changed by user\n');
  assert.equal(rootfsFile('tcache', 'stamp'), stamp);

  // The copied content changes: the copy step and everything after it re-run.
  writeFileSync(path.join(ctx, 'app', 'main.js'), 'console.log("v2")\n');
  const copied = await build(appRecipe('echo "changed by $(id -un)" > built'));
  assert.deepEqual(copied.cached, [true, true, false, false, false, false, false]);
  assert.equal(rootfsFile('tcache', 'app/main.js'), 'console.log("v2")\n');
  assert.equal(rootfsFile('tcache', 'stamp'), stamp);
  assert.deepEqual(stagingLeft(), []);
});

test("the last step's deletions, replacements and opaque directories show in the template; the base is untouched", async () => {
  // The layers below the last step are flattened while it runs, then only its changes are applied.
  const recipe: Recipe = {
    name: 'tlayers',
    from: 'base',
    steps: [
      {
        type: 'run',
        cmd: 'mkdir -p /opt/t/dir2file /opt/t/opq /opt/t/keepdir && echo k > /opt/t/keep && echo d > /opt/t/del && echo x > /opt/t/dir2file/x && echo f > /opt/t/file2dir && echo a > /opt/t/opq/a && echo kd > /opt/t/keepdir/kd',
      },
      {
        type: 'run',
        cmd: 'rm /opt/t/del && rm -rf /opt/t/dir2file && echo f2 > /opt/t/dir2file && rm /opt/t/file2dir && mkdir /opt/t/file2dir && echo y > /opt/t/file2dir/y && rm -rf /opt/t/opq && mkdir /opt/t/opq && echo c > /opt/t/opq/c && echo new > /opt/t/keepdir/new && chmod 700 /opt/t/keepdir && rm -rf /usr/share/doc && rm /etc/debian_version',
      },
    ],
  };
  const r = await build(recipe);
  assert.equal(r.error, undefined, r.error?.message);
  assert.ok(
    r.events.some((e) => e.type === 'log' && /the lower 2 while the last step ran/.test(e.line)),
    'the lower layers were flattened during the last step',
  );
  const sbx = await d!.create({ template: 'tlayers' });
  try {
    const listing = await sbx.exec(
      [
        'bash',
        '-c',
        'cd /opt/t && find . | sort | tr "\\n" " "; stat -c %a keepdir; cat dir2file opq/c; ls -d /usr/share/doc /etc/debian_version 2>&1 | wc -l',
      ],
      { user: 'root' },
    );
    assert.equal(
      listing.stdout,
      '. ./dir2file ./file2dir ./file2dir/y ./keep ./keepdir ./keepdir/kd ./keepdir/new ./opq ./opq/c 700\nf2\nc\n2\n',
      listing.stderr,
    );
    const gone = await sbx.exec(['bash', '-c', 'test -e /usr/share/doc || test -e /etc/debian_version; echo $?']);
    assert.equal(gone.stdout, '1\n', 'deleted base paths are gone in the template');
  } finally {
    await sbx.kill();
  }
  // The base shares its files with the template by hard links; its own tree lost nothing.
  assert.ok(existsSync(path.join(tpl, 'base', 'current', 'rootfs', 'usr/share/doc')));
  assert.ok(existsSync(path.join(tpl, 'base', 'current', 'rootfs', 'etc/debian_version')));
  assert.deepEqual(stagingLeft(), []);
});

test("build steps get the host's npm registry and CA bundle, and neither stays in the template", async () => {
  const hostCa = process.env.SSL_CERT_FILE && existsSync(process.env.SSL_CERT_FILE) ? process.env.SSL_CERT_FILE : '/etc/ssl/certs/ca-certificates.crt';
  assert.ok(existsSync(hostCa), `this host has no CA bundle at ${hostCa}`);
  const r = await build({
    name: 'ttrust',
    from: 'base',
    steps: [
      {
        type: 'run',
        cmd: 'echo "$npm_config_registry" > /reg && sha256sum < "$npm_config_cafile" > /ca.sum && echo "$SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $GIT_SSL_CAINFO" > /ca.env && (touch /opt/warren/lib/x 2>/dev/null && echo writable || echo read-only) > /ca.rw',
      },
    ],
  });
  assert.equal(r.error, undefined, r.error?.message);
  assert.equal(rootfsFile('ttrust', 'reg'), `${NPM_REGISTRY}\n`);
  const hostSum = `${createHash('sha256').update(readFileSync(hostCa)).digest('hex')}  -\n`;
  assert.equal(rootfsFile('ttrust', 'ca.sum'), hostSum);
  const ca = '/opt/warren/lib/host-ca.crt';
  assert.equal(rootfsFile('ttrust', 'ca.env'), `${ca} ${ca} ${ca}\n`);
  assert.equal(rootfsFile('ttrust', 'ca.rw'), 'read-only\n');
  assert.deepEqual(readdirSync(path.join(tpl, 'ttrust', 'current', 'rootfs', 'opt/warren/lib')), []);
  const manifest = JSON.parse(readFileSync(path.join(tpl, 'ttrust', 'current', 'manifest.json'), 'utf8')) as { env?: Record<string, string> };
  assert.equal(Object.keys(manifest.env ?? {}).filter((k) => /npm|CA|CERT/i.test(k)).length, 0, JSON.stringify(manifest.env));
});

test('env, workdir, user, start and ready become the manifest (SDK builder)', async () => {
  const info = await Template.from('base')
    .run('mkdir -p /srv/site && echo ok > /srv/site/index.html')
    .env({ A: '1', B: 'two words' })
    .workdir('/srv/site')
    .env({ A: 'overridden' })
    .user('user')
    .start('python3 -m http.server 8000', { cwd: '/srv/site' })
    .readyPort(8000, { timeoutSeconds: 20 })
    .build({ ...conn(), name: 'tmanifest', contextDir: ctx });
  assert.equal(info.name, 'tmanifest');
  assert.match(info.version, /^[0-9a-f]{12}$/);
  assert.deepEqual(info.env, { A: 'overridden', B: 'two words' });
  assert.equal(info.workdir, '/srv/site');
  assert.equal(info.user, 'user');
  assert.deepEqual(info.start, { cmd: 'python3 -m http.server 8000', cwd: '/srv/site' });
  assert.deepEqual(info.ready, { port: 8000, timeoutSeconds: 20 });
  assert.equal(info.from, 'base');

  const manifest = JSON.parse(readFileSync(path.join(tpl, 'tmanifest', 'current', 'manifest.json'), 'utf8')) as Record<string, unknown>;
  assert.deepEqual(Object.keys(manifest).sort(), ['builtAt', 'env', 'from', 'layers', 'name', 'ready', 'recipeHash', 'start', 'user', 'version', 'workdir']);
  // One cache layer per step after `from: base` (env, workdir and user leave a marker layer).
  assert.equal((manifest.layers as string[]).length, 5);
  assert.ok((manifest.layers as string[]).every((l) => existsSync(path.join(tpl, '.layers', l, 'layer.json'))));
  assert.equal('layers' in info, false, 'the API does not show the layer list');
  assert.equal(manifest.version, info.version);
  assert.equal((manifest.recipeHash as string).slice(0, 12), info.version);
  assert.equal(realpathSync(path.join(tpl, 'tmanifest', 'current')), path.join(tpl, 'tmanifest', info.version));

  const listed = await Template.list(conn());
  assert.ok(listed.some((t) => t.name === 'tmanifest' && t.version === info.version));
  assert.ok(listed.some((t) => t.name === 'base'));
  assert.equal((await Template.get('tmanifest', conn())).workdir, '/srv/site');

  // Only start/ready change: no step re-runs, but it is a new version with a new manifest.
  const events: TemplateBuildEvent[] = [];
  const next = await Template.from('base')
    .run('mkdir -p /srv/site && echo ok > /srv/site/index.html')
    .env({ A: '1', B: 'two words' })
    .workdir('/srv/site')
    .env({ A: 'overridden' })
    .user('user')
    .readyCommand('test -f /srv/site/index.html')
    .build({ ...conn(), name: 'tmanifest', contextDir: ctx, onEvent: (e) => events.push(e) });
  assert.deepEqual(cachedFlags(events), [true, true, true, true, true, true]);
  assert.notEqual(next.version, info.version);
  assert.deepEqual(next.ready, { cmd: 'test -f /srv/site/index.html', timeoutSeconds: 60 });
  assert.equal(next.start, undefined);
});

test('a failing step fails the build and leaves nothing behind', async () => {
  const layersBefore = layerCount();
  const r = await build({
    name: 'tfail',
    from: 'base',
    steps: [
      { type: 'run', cmd: `echo ${Date.now()} > /ok` },
      { type: 'run', cmd: 'echo some output; echo the error >&2; exit 3' },
    ],
  });
  assert.ok(r.error, 'the build should fail');
  assert.equal(r.error.exitCode, 3);
  assert.equal(r.error.step, 3);
  assert.match(r.error.message, /step 3\/3 .* exit code 3/);
  assert.match(r.error.output ?? '', /some output/);
  assert.match(r.error.output ?? '', /the error/);
  const logs = r.events.filter((e) => e.type === 'log').map((e) => (e as { line: string }).line);
  assert.ok(logs.includes('the error'), 'the failing step streamed its output');

  // Nothing registered, only the successful step's layer kept, no staging, mount or container.
  await assert.rejects(Template.get('tfail', conn()), /unknown template/);
  assert.equal(existsSync(path.join(tpl, 'tfail')), false);
  assert.equal(layerCount(), layersBefore + 1);
  assert.deepEqual(stagingLeft(), []);
  assert.deepEqual(mountsUnder(tpl), []);
  assert.deepEqual(buildContainers(), []);
});

test('bad input is refused with 400 naming the field', async () => {
  const bad = async (body: unknown, pattern: RegExp) => {
    const res = await postBuild(body);
    const text = await res.text();
    assert.equal(res.status, 400, text);
    assert.match(text, pattern);
  };
  await bad({ name: 'Bad_Name', from: 'base' }, /name: must be lowercase/);
  await bad({ name: '-x', from: 'base' }, /name:/);
  await bad({ name: 'ok', from: 'nosuchbase' }, /from: unknown template 'nosuchbase'/);
  await bad(
    { name: 'ok', from: 'base', contextDir: ctx, steps: [{ type: 'copy', src: 'missing.txt', dest: '/x' }] },
    /steps\.0\.src: 'missing\.txt' does not exist/,
  );
  await bad(
    { name: 'ok', from: 'base', contextDir: ctx, steps: [{ type: 'copy', src: '../../etc/passwd', dest: '/x' }] },
    /steps\.0\.src: .* outside the build context/,
  );
  await bad({ name: 'ok', from: 'base', steps: [{ type: 'copy', src: 'a', dest: '/x' }] }, /contextDir: required/);
  await bad({ name: 'ok', from: 'base', steps: [{ type: 'copy', src: 'a', dest: 'relative' }] }, /steps\.0\.dest: must be an absolute path/);
  await bad({ name: 'ok', from: 'base', steps: [{ type: 'nope' }] }, /steps\.0/);
  await bad({ name: 'ok', from: 'base', steps: [{ type: 'run' }] }, /steps\.0\.cmd/);
  await bad({ name: 'ok', from: 'base', ready: { cmd: 'true', port: 80 } }, /ready: give exactly one of cmd and port/);
  await bad({ name: 'ok', from: 'base', include: ['jq'] }, /include: only allowed with from: 'debian:bookworm'/);
  await bad({ name: 'ok', from: 'base', extra: 1 }, /extra/);
  const res = await fetch(`${d!.url}/v1/templates/nosuch`, { headers: { authorization: `Bearer ${d!.apiKey}` } });
  assert.equal(res.status, 404);
  assert.equal(existsSync(path.join(tpl, 'ok')), false);
});

test('template rm is refused while a sandbox uses it, and works after', async () => {
  const built = await build({ name: 'tuse', from: 'base', steps: [{ type: 'run', cmd: 'echo in-use > /marker' }] });
  assert.equal(built.error, undefined, built.error?.message);
  const sbx = await d!.create({ template: 'tuse', ttlSeconds: 300 });
  assert.equal((await sbx.exec('cat /marker')).stdout, 'in-use\n');
  await assert.rejects(Template.delete('tuse', conn()), (err: Error & { status?: number }) => {
    assert.equal(err.status, 409);
    assert.match(err.message, new RegExp(`in use by sandbox ${sbx.id}`));
    return true;
  });
  assert.ok(existsSync(path.join(tpl, 'tuse', 'current', 'rootfs')));
  await sbx.kill();
  await Template.delete('tuse', conn());
  assert.equal(existsSync(path.join(tpl, 'tuse')), false);
  await assert.rejects(Template.get('tuse', conn()), /unknown template/);
  await assert.rejects(Template.delete('tuse', conn()), /unknown template/);
});

/** Starts a build whose step prints "started" and sleeps; resolves once it prints. `cancel` closes its stream. */
async function sleepingBuild(name: string): Promise<{ cancel: () => Promise<void> }> {
  const abort = new AbortController();
  const res = await postBuild({ name, from: 'base', steps: [{ type: 'run', cmd: 'echo started; sleep 120' }] }, abort.signal);
  assert.equal(res.status, 200);
  const reader = res.body!.getReader();
  let text = '';
  while (!text.includes('"line":"started"')) {
    const { value, done } = await reader.read();
    assert.ok(!done, `the stream ended early: ${text}`);
    text += new TextDecoder().decode(value);
  }
  return {
    cancel: async () => {
      abort.abort();
      await reader.cancel().catch(() => undefined);
    },
  };
}

function layersOf(name: string): string[] {
  const manifest = JSON.parse(readFileSync(path.join(tpl, name, 'current', 'manifest.json'), 'utf8')) as { layers?: string[] };
  assert.ok(manifest.layers?.length, `${name}'s manifest lists its layers`);
  return manifest.layers!;
}

function layerExists(layer: string): boolean {
  return existsSync(path.join(tpl, '.layers', layer, 'layer.json'));
}

test('template prune drops the layers no version was built from, refuses during a build, and --all empties the cache', async () => {
  const nonce = Date.now();
  const keep = await build({
    name: 'tkeep',
    from: 'base',
    steps: [
      { type: 'run', cmd: `echo keep ${nonce} > /kept` },
      { type: 'env', env: { KEPT: '1' } },
    ],
  });
  assert.equal(keep.error, undefined, keep.error?.message);
  // 2 MB of its own in the layer: space a prune must give back once the template is gone.
  const gone = await build({ name: 'tgone', from: 'base', steps: [{ type: 'run', cmd: `head -c 2M /dev/urandom > /blob; echo ${nonce} > /gone` }] });
  assert.equal(gone.error, undefined, gone.error?.message);
  const keptLayers = layersOf('tkeep');
  const goneLayers = layersOf('tgone');
  assert.equal(keptLayers.length, 2, 'a run step and an env step');
  const before = await d!.create({ template: 'tkeep', ttlSeconds: 300 });
  await Template.delete('tgone', conn());

  // Refused while a build runs.
  const busy = await sleepingBuild('tbusy');
  await assert.rejects(Template.pruneLayers({}, conn()), (err: Error & { status?: number }) => {
    assert.equal(err.status, 409);
    assert.match(err.message, /a template build is running \(this daemon\)/);
    return true;
  });
  assert.ok(goneLayers.every(layerExists), 'a refused prune removed nothing');
  await busy.cancel();
  await eventually(
    () => {
      const left = [...stagingLeft(), ...buildContainers()];
      if (left.length) throw new Error(`left: ${left.join(',')}`);
      return true;
    },
    30_000,
    'the cancelled build to clean up',
  );

  const pruned = await Template.pruneLayers({}, conn());
  assert.ok(pruned.removed >= goneLayers.length, JSON.stringify(pruned));
  assert.ok(pruned.kept >= keptLayers.length, JSON.stringify(pruned));
  assert.ok(pruned.freedBytes >= 2 * 1024 * 1024, `freed ${pruned.freedBytes} bytes`);
  assert.ok(keptLayers.every(layerExists), 'the layers of a template on disk stay');
  assert.ok(!goneLayers.some(layerExists), "the removed template's layers went");
  assert.equal(layerCount(), pruned.kept);
  assert.deepEqual(readdirSync(path.join(tpl, '.trash')), []);
  const again = await build({
    name: 'tkeep',
    from: 'base',
    steps: [
      { type: 'run', cmd: `echo keep ${nonce} > /kept` },
      { type: 'env', env: { KEPT: '1' } },
    ],
  });
  assert.deepEqual(again.cached, [true, true, true], 'rebuilding a kept template is still cached');

  // Bad input names the field.
  for (const [body, pattern] of [
    [{ all: 'yes' }, /all/],
    [{ everything: true }, /everything/],
  ] as const) {
    const r = await fetch(`${d!.url}/v1/templates/prune`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d!.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const t = await r.text();
    assert.equal(r.status, 400, t);
    assert.match(t, pattern);
  }

  // --all, from the CLI: nothing is cached any more, and templates and sandboxes do not care.
  const cli = spawnSync(path.join(REPO, 'bin/warren'), ['template', 'prune', '--all'], {
    encoding: 'utf8',
    env: { ...process.env, WARREN_URL: d!.url, WARREN_API_KEY: d!.apiKey },
    timeout: 120_000,
  });
  assert.equal(cli.status, 0, cli.stderr);
  assert.match(cli.stdout, /^removed \d+ cached layers?, \d+\.\d MB freed; kept 0 that template versions were built from$/m);
  assert.equal(layerCount(), 0);
  assert.equal((await before.exec('cat /kept')).stdout, `keep ${nonce}\n`, 'a sandbox made before the prune runs on');
  const after = await d!.create({ template: 'tkeep', ttlSeconds: 300 });
  assert.equal((await after.exec('cat /kept; echo $KEPT')).stdout, `keep ${nonce}\n1\n`, 'a template needs no layer to start');
  // A version on disk is the whole build's cache: nothing runs, no layer comes back.
  const same = await build({
    name: 'tkeep',
    from: 'base',
    steps: [
      { type: 'run', cmd: `echo keep ${nonce} > /kept` },
      { type: 'env', env: { KEPT: '1' } },
    ],
  });
  assert.deepEqual(same.cached, [true, true, true]);
  assert.ok(same.events.some((e) => e.type === 'log' && /is already built/.test(e.line)));
  assert.equal(layerCount(), 0);
  // Anything else runs every step again.
  const rebuilt = await build({ name: 'tgone', from: 'base', steps: [{ type: 'run', cmd: `head -c 2M /dev/urandom > /blob; echo ${nonce} > /gone` }] });
  assert.deepEqual(rebuilt.cached, [true, false], 'after --all the steps run again');
  assert.equal(rootfsFile('tgone', 'gone'), `${nonce}\n`);
  await before.kill();
  await after.kill();
});

test('CLI: template build shows progress, ls, rm, and exits non-zero on failure', () => {
  const dir = mkdtempSync(path.join(ctx, 'cli-'));
  writeFileSync(path.join(dir, 'hello.txt'), 'hi from the context\n');
  const recipe = {
    name: 'will-be-overridden',
    from: 'base',
    steps: [
      { type: 'copy', src: 'hello.txt', dest: '/opt/hello.txt' },
      { type: 'run', cmd: 'echo building; cat /opt/hello.txt' },
    ],
  };
  writeFileSync(path.join(dir, 'recipe.json'), JSON.stringify(recipe));
  const warren = (...args: string[]) => {
    const r = spawnSync(path.join(REPO, 'bin/warren'), args, {
      encoding: 'utf8',
      env: { ...process.env, WARREN_URL: d!.url, WARREN_API_KEY: d!.apiKey },
      timeout: 300_000,
    });
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  const first = warren('template', 'build', path.join(dir, 'recipe.json'), '--name', 'tcli');
  assert.equal(first.code, 0, first.stderr);
  assert.match(first.stdout, /^\[1\/3\] from base \([0-9a-f]{12}\) \(cached\)$/m);
  assert.match(first.stdout, /^\[2\/3\] copy hello\.txt -> \/opt\/hello\.txt$/m);
  assert.match(first.stdout, /^\[3\/3\] run echo building; cat \/opt\/hello\.txt$/m);
  assert.match(first.stdout, /^ {4}hi from the context$/m);
  assert.match(first.stdout, /^ {4}done in \d+\.\ds$/m);
  assert.match(first.stdout, /^built tcli version [0-9a-f]{12} in \d+\.\ds$/m);

  // A directory stands for its recipe.json.
  const second = warren('template', 'build', dir, '--name', 'tcli');
  assert.equal(second.code, 0, second.stderr);
  assert.match(second.stdout, /^\[3\/3\] run echo building; cat \/opt\/hello\.txt \(cached\)$/m);

  const ls = warren('template', 'ls');
  assert.match(ls.stdout, /^NAME\s+VERSION\s+FROM/m);
  assert.match(ls.stdout, /^tcli\s+[0-9a-f]{12}\s+base/m);
  const json = JSON.parse(warren('template', 'ls', '--json').stdout) as Array<{ name: string }>;
  assert.ok(json.some((t) => t.name === 'tcli'));

  writeFileSync(path.join(dir, 'fail.json'), JSON.stringify({ name: 'tclifail', from: 'base', steps: [{ type: 'run', cmd: 'echo about to fail; exit 42' }] }));
  const failed = warren('template', 'build', path.join(dir, 'fail.json'));
  assert.notEqual(failed.code, 0);
  assert.match(failed.stdout, /about to fail/);
  assert.match(failed.stderr, /step 2\/2 \(run echo about to fail; exit 42\) failed with exit code 42/);

  const bad = warren('template', 'build', path.join(dir, 'recipe.json'), '--name', 'Not Valid');
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /name: must be lowercase/);

  assert.equal(warren('template', 'rm', 'tcli').code, 0);
  assert.doesNotMatch(warren('template', 'ls').stdout, /^tcli\s/m);
});

test('closing the build stream cancels the build and cleans up', async () => {
  const build = await sleepingBuild('tcancel');
  await build.cancel();
  await eventually(
    () => {
      const left = [...buildContainers(), ...mountsUnder(tpl), ...stagingLeft()];
      if (left.length) throw new Error(`left: ${left.join(',')}`);
      return true;
    },
    30_000,
    'the cancelled build to clean up',
  );
  assert.equal(existsSync(path.join(tpl, 'tcancel')), false);
});

test('a daemon killed mid-build leaves nothing once it is back', async () => {
  const events: TemplateBuildEvent[] = [];
  let started: () => void = () => undefined;
  const stepRuns = new Promise<void>((resolve) => (started = resolve));
  const building = Template.buildRecipe(
    { name: 'tkilled', from: 'base', steps: [{ type: 'run', cmd: 'echo started; sleep 120' }] },
    {
      ...conn(),
      contextDir: ctx,
      onEvent: (e) => {
        events.push(e);
        if (e.type === 'log' && e.line === 'started') started();
      },
    },
  ).catch((err: Error) => err);
  // Wait until the step's command runs inside its build sandbox.
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    stepRuns.then(() => 'started'),
    building,
    new Promise<string>((resolve) => (timer = setTimeout(() => resolve('not started after 60 s'), 60_000))),
  ]);
  clearTimeout(timer);
  assert.equal(outcome, 'started', `the step did not start: ${String(outcome)} ${JSON.stringify(events)}`);
  assert.equal(buildContainers().length, 1);
  assert.equal(mountsUnder(tpl).length, 1);
  // The build's own marker, the step's staging, and the version's: the layers below the last
  // step are flattened while it runs.
  assert.equal(stagingLeft().length, 3);
  const home = d!.home;
  await d!.crash();
  await building;

  d = await startDaemon({ home, env: DAEMON_ENV() });
  assert.deepEqual(buildContainers(), []);
  assert.deepEqual(mountsUnder(tpl), []);
  assert.deepEqual(stagingLeft(), []);
  assert.equal(existsSync(path.join(tpl, 'tkilled')), false);
  await assert.rejects(Template.get('tkilled', conn()), /unknown template/);
});
