/**
 * Egress presets and default policies against real sandboxes (docs/network.md, Presets and
 * Default policies).
 *
 * Nothing here leaves the machine. The daemons read npm's, pip's and apt's configuration
 * from fixtures this test writes (npm_config_registry and empty npmrc files, PIP_INDEX_URL,
 * APT_CONFIG naming a fixture sources.list), all naming `*.example.test` hosts. They resolve
 * egress names only through a recording DNS server on 127.0.0.1 (WARREN_EGRESS_DNS_SERVER)
 * that maps every preset host to one random loopback address, where this test serves HTTPS
 * on 443 and HTTP on 80; an IP rule for that address lets the proxy connect there (it refuses
 * local addresses otherwise). So "allowed" is the proxy's decision plus an answer from the
 * test's own server, and "denied" is the proxy's refusal, in its audit log, of a name it then
 * never resolved.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { Snapshots, Template, type NetworkPolicyView, type Sandbox, type WarrenError } from '@warren/sdk';
import { REPO, TEMPLATES, eventually, startDaemon, stopAndCheckClean, unmountUnder, type DaemonHandle } from './harness.js';
import { startDnsRecorder, type DnsRecorder } from './dns-recorder.js';

const T = { timeout: 300_000 };
const TEST_ROOT = '/var/lib/warren-test';
/** The hosts the fixture configurations name (neutral test names, nothing real). */
const NPM_HOST = 'js-packages.example.test';
const PIP_HOST = 'py-packages.example.test';
const APT_HOST = 'deb-mirror.example.test';
/** Names @github expands to that the test asks for (the DNS recorder maps them to UPSTREAM). */
const GITHUB_NAMES = ['github.com', 'api.github.com', 'raw.githubusercontent.com'];
/** Names no preset covers; the recorder would answer them too, but must never be asked. */
const OTHER = 'other.example.test';
const LOOKALIKE = 'github.com.example.test';
/** A random loopback address for the upstreams, so parallel runs do not share one. */
const UPSTREAM = `127.${100 + Math.floor(Math.random() * 100)}.${Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;
const TEMPLATE = `presets-${process.pid}`;

let configured: DaemonHandle | undefined;
let withDefault: DaemonHandle | undefined;
let dns: DnsRecorder;
let secure: https.Server;
let plain: http.Server;
let root = '';
let tpl = '';

before(async () => {
  mkdirSync(TEST_ROOT, { recursive: true });
  root = mkdtempSync('/tmp/warren-presets-test-');
  tpl = mkdtempSync(path.join(TEST_ROOT, 'tpl-'));
  symlinkSync(realpathSync(path.join(TEMPLATES, 'base')), path.join(tpl, 'base'));
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', `${root}/key.pem`, '-out', `${root}/cert.pem`, '-days', '1'],
    {
      stdio: 'ignore',
    },
  );
  secure = https.createServer({ key: readFileSync(`${root}/key.pem`), cert: readFileSync(`${root}/cert.pem`) }, (req, res) =>
    res.end(`tls ${req.url} host=${req.headers.host}\n`),
  );
  plain = http.createServer((req, res) => res.end(`plain ${req.url} host=${req.headers.host}\n`));
  await new Promise<void>((r) => secure.listen(443, UPSTREAM, r));
  await new Promise<void>((r) => plain.listen(80, UPSTREAM, r));
  const answers: Record<string, string> = {};
  for (const name of [...GITHUB_NAMES, NPM_HOST, PIP_HOST, APT_HOST, OTHER, LOOKALIKE]) answers[name] = UPSTREAM;
  dns = await startDnsRecorder(answers);

  // apt's sources, where APT_CONFIG says they are.
  mkdirSync(path.join(root, 'etc/apt/sources.list.d'), { recursive: true });
  mkdirSync(path.join(root, 'etc/apt/apt.conf.d'), { recursive: true });
  writeFileSync(path.join(root, 'apt.conf'), `Dir::Etc "${root}/etc/apt";\n`);
  writeFileSync(path.join(root, 'etc/apt/sources.list'), `deb http://${APT_HOST}/debian bookworm main\n`);
  // npm refuses one file as both its user and its global config.
  writeFileSync(path.join(root, 'user-npmrc'), '');
  writeFileSync(path.join(root, 'global-npmrc'), '');

  const common = {
    WARREN_TEMPLATES: tpl,
    WARREN_BAKE: '0',
    WARREN_EGRESS_DNS_SERVER: dns.server,
    // npm: its registry from the environment, no npmrc of this machine's.
    npm_config_registry: `https://${NPM_HOST}/`,
    npm_config_userconfig: path.join(root, 'user-npmrc'),
    npm_config_globalconfig: path.join(root, 'global-npmrc'),
    npm_config_update_notifier: 'false',
    APT_CONFIG: path.join(root, 'apt.conf'),
    PIP_CONFIG_FILE: '/dev/null',
    PIP_EXTRA_INDEX_URL: '',
    PIP_FIND_LINKS: '',
    PIP_TRUSTED_HOST: '',
  };
  configured = await startDaemon({ env: { ...common, PIP_INDEX_URL: `https://${PIP_HOST}/simple/` } });
  // No pip index on this one, and a daemon-wide default.
  withDefault = await startDaemon({ env: { ...common, PIP_INDEX_URL: '', WARREN_DEFAULT_ALLOW: `@github, ${UPSTREAM}` } });
});

after(async () => {
  secure?.close();
  plain?.close();
  await dns?.close();
  try {
    await stopAndCheckClean(configured);
    await stopAndCheckClean(withDefault);
  } finally {
    rmSync(root, { recursive: true, force: true });
    rmSync(tpl, { recursive: true, force: true });
  }
});

/** curl inside through the proxy (whose variables every sandbox has); exit code and output. */
async function curl(sbx: Sandbox, url: string): Promise<{ code: number; out: string }> {
  const r = await sbx.exec(['curl', '-sS', '-f', '-k', '--max-time', '20', url]);
  return { code: r.exitCode ?? -1, out: r.stdout + r.stderr };
}

/** The id of the sandbox's newest audit record (0: none), so a check reads only what follows. */
async function lastEgressId(sbx: Sandbox): Promise<number> {
  let after = 0;
  for (;;) {
    const page = await sbx.egressLog({ after, limit: 1000 });
    if (!page.length) return after;
    after = page.at(-1)!.id;
  }
}

/** Asserts the proxy allowed HOST:PORT and our upstream answered, per the audit log. */
async function assertAllowed(sbx: Sandbox, url: string, host: string, port: number): Promise<void> {
  const after = await lastEgressId(sbx);
  const r = await curl(sbx, url);
  assert.equal(r.code, 0, `${url}: ${r.out}`);
  assert.match(r.out, new RegExp(`host=${host.replace(/\./g, '\\.')}\\b`), 'answered by the test upstream');
  await eventually(
    async () => (await sbx.egressLog({ after })).some((e) => e.host === host && e.port === port && e.decision === 'allowed' && e.bytesDown > 0),
    10_000,
    `an allowed record for ${host}:${port}`,
  );
}

/** Asserts the proxy refused HOST:PORT by name, in the audit log, and never resolved it. */
async function assertDenied(sbx: Sandbox, url: string, host: string, port: number): Promise<void> {
  const after = await lastEgressId(sbx);
  const r = await curl(sbx, url);
  assert.notEqual(r.code, 0, `${url} should be refused: ${r.out}`);
  const log = await sbx.egressLog({ after });
  const rec = log.find((e) => e.host === host && e.port === port);
  assert.ok(rec, `${host}:${port} in the audit log: ${JSON.stringify(log)}`);
  assert.equal(rec.decision, 'denied');
  const target = `${host.replace(/\./g, '\\.')}:${port}`;
  // By name: 'no rule allows HOST:PORT', or for an empty policy 'the policy allows no egress (HOST:PORT)'.
  assert.match(rec.reason ?? '', new RegExp(`no rule allows ${target}|the policy allows no egress \\(${target}\\)`));
}

const expectedGithub = ['github.com:443', '*.github.com:443', '*.githubusercontent.com:443', 'github.com:22'];

test('presets expand from the host configuration; the sandbox reaches exactly the expanded hosts', T, async () => {
  const sbx = await configured!.create({ network: { allow: ['@github', '@npm', '@pypi', '@debian', UPSTREAM] } });
  try {
    const policy = await sbx.getNetwork();
    assert.deepEqual(policy, {
      allow: ['@github', '@npm', '@pypi', '@debian', UPSTREAM],
      expanded: [...expectedGithub, `${NPM_HOST}:443`, `${PIP_HOST}:443`, `${APT_HOST}:80`, UPSTREAM],
      presets: { '@github': expectedGithub, '@npm': [`${NPM_HOST}:443`], '@pypi': [`${PIP_HOST}:443`], '@debian': [`${APT_HOST}:80`] },
    } satisfies NetworkPolicyView);

    await assertAllowed(sbx, 'https://github.com/org/repo.git/info/refs', 'github.com', 443);
    await assertAllowed(sbx, 'https://api.github.com/repos', 'api.github.com', 443);
    await assertAllowed(sbx, 'https://raw.githubusercontent.com/org/repo/main/README', 'raw.githubusercontent.com', 443);
    await assertAllowed(sbx, `https://${NPM_HOST}/left-pad`, NPM_HOST, 443);
    await assertAllowed(sbx, `https://${PIP_HOST}/simple/requests/`, PIP_HOST, 443);
    await assertAllowed(sbx, `http://${APT_HOST}/debian/dists/bookworm/Release`, APT_HOST, 80);

    // Everything else is refused by name, before any lookup.
    await assertDenied(sbx, `https://${OTHER}/`, OTHER, 443);
    await assertDenied(sbx, `https://${LOOKALIKE}/`, LOOKALIKE, 443);
    await assertDenied(sbx, 'http://github.com/', 'github.com', 80); // @github is 443 (and 22) only
    await assertDenied(sbx, `http://${NPM_HOST}/`, NPM_HOST, 80);
    assert.equal(dns.asked(OTHER), false, 'a refused name is never resolved');
    assert.equal(dns.asked(LOOKALIKE), false, 'a refused name is never resolved');
    assert.ok(dns.asked('github.com') && dns.asked(NPM_HOST) && dns.asked(APT_HOST));

    // `warren net ID` prints the presets as given and what each expanded to.
    const net = spawnSync(path.join(REPO, 'bin/warren'), ['net', sbx.id], {
      encoding: 'utf8',
      env: { ...process.env, WARREN_URL: configured!.url, WARREN_API_KEY: configured!.apiKey },
    });
    assert.equal(net.status, 0, net.stderr);
    assert.equal(
      net.stdout,
      [
        'allow @github, which expands to:',
        ...expectedGithub.map((r) => `    ${r}`),
        'allow @npm, which expands to:',
        `    ${NPM_HOST}:443`,
        'allow @pypi, which expands to:',
        `    ${PIP_HOST}:443`,
        'allow @debian, which expands to:',
        `    ${APT_HOST}:80`,
        `allow ${UPSTREAM}`,
        '',
      ].join('\n'),
    );

    // A PUT naming presets is expanded the same way; forks keep the policy as given.
    const put = await sbx.setNetwork({ allow: ['@debian', UPSTREAM] });
    assert.deepEqual(put, { allow: ['@debian', UPSTREAM], expanded: [`${APT_HOST}:80`, UPSTREAM], presets: { '@debian': [`${APT_HOST}:80`] } });
    await assertDenied(sbx, 'https://github.com/again', 'github.com', 443);
    const [child] = await sbx.forkTree(1);
    assert.ok(child);
    try {
      assert.deepEqual(await child.getNetwork(), put);
      await assertAllowed(child, `http://${APT_HOST}/child`, APT_HOST, 80);
    } finally {
      await child.kill();
    }
  } finally {
    await sbx.kill();
  }
});

test('an unknown preset is a 400 naming the known ones; an unconfigured one a 409 naming what it reads', T, async () => {
  await assert.rejects(configured!.create({ network: { allow: ['@github', '@cargo'] } }), (e: WarrenError) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /network\.allow: unknown preset '@cargo' \(known presets: @github, @npm, @pypi, @debian\)/);
    return true;
  });
  const sbx = await withDefault!.create({ network: { allow: [] } });
  try {
    await assert.rejects(
      sbx.setNetwork({ allow: ['@nope'] }),
      (e: WarrenError) => e.status === 400 && /known presets: @github, @npm, @pypi, @debian/.test(e.message),
    );
    // This daemon's host has no pip index configured: no fallback, a 409 saying what was read.
    await assert.rejects(sbx.setNetwork({ allow: ['@pypi'] }), (e: WarrenError) => {
      assert.equal(e.status, 409);
      assert.match(
        e.message,
        /^network\.allow: @pypi reads pip's configuration \(PIP_INDEX_URL, .*no file, PIP_CONFIG_FILE is \/dev\/null\) and found no index URL/,
      );
      return true;
    });
    assert.deepEqual(await sbx.getNetwork(), { allow: [] }, 'a refused PUT changes nothing');
  } finally {
    await sbx.kill();
  }
  // The same holds for a default: a daemon whose WARREN_DEFAULT_ALLOW cannot be expanded does not start.
  for (const [value, why] of [
    ['@pypi', /@pypi reads pip's configuration .* and found no index URL/],
    ['@github,@nope', /WARREN_DEFAULT_ALLOW: unknown preset '@nope' \(known presets: @github, @npm, @pypi, @debian\)/],
  ] as const) {
    const home = mkdtempSync(path.join(TEST_ROOT, 'home-'));
    try {
      await assert.rejects(
        startDaemon({ home, env: { WARREN_TEMPLATES: tpl, PIP_CONFIG_FILE: '/dev/null', PIP_INDEX_URL: '', WARREN_DEFAULT_ALLOW: value } }),
        (e: Error) => why.test(e.message),
      );
    } finally {
      unmountUnder(home);
      rmSync(home, { recursive: true, force: true });
      rmSync(`${home}.log`, { force: true });
    }
  }
});

test("defaults: the request's policy wins, then the template's, then WARREN_DEFAULT_ALLOW, else nothing", T, async () => {
  // A template whose sandboxes get @debian (and the upstream's address) unless told otherwise.
  const built = await Template.from('base')
    .network({ allow: ['@debian', UPSTREAM] })
    .build({ ...configured!.conn, name: TEMPLATE });
  assert.deepEqual(built.network, { allow: ['@debian', UPSTREAM] });
  await assert.rejects(
    Template.from('base')
      .network({ allow: ['@nope'] })
      .build({ ...configured!.conn, name: `${TEMPLATE}-bad` }),
    (e: WarrenError) => e.status === 400 && /network\.allow: unknown preset '@nope'/.test(e.message),
  );
  const templateDefault = { allow: ['@debian', UPSTREAM], expanded: [`${APT_HOST}:80`, UPSTREAM], presets: { '@debian': [`${APT_HOST}:80`] } };
  const daemonDefault = { allow: ['@github', UPSTREAM], expanded: [...expectedGithub, UPSTREAM], presets: { '@github': expectedGithub } };
  const made: Sandbox[] = [];
  try {
    // Template default, on a daemon without one of its own.
    const fromTemplate = await configured!.create({ template: TEMPLATE });
    made.push(fromTemplate);
    assert.deepEqual(await fromTemplate.getNetwork(), { ...templateDefault, default: 'template' });
    await assertAllowed(fromTemplate, `http://${APT_HOST}/pool/`, APT_HOST, 80);
    await assertDenied(fromTemplate, 'https://github.com/', 'github.com', 443);

    // A sandbox restored from a snapshot: the request's policy, else its template version's default.
    const snap = await fromTemplate.snapshot();
    try {
      const restored = await configured!.create({ snapshot: snap.id });
      made.push(restored);
      assert.deepEqual(await restored.getNetwork(), { ...templateDefault, default: 'template' });
      const told = await configured!.create({ snapshot: snap.id, network: { allow: ['@npm'] } });
      made.push(told);
      assert.deepEqual(await told.getNetwork(), { allow: ['@npm'], expanded: [`${NPM_HOST}:443`], presets: { '@npm': [`${NPM_HOST}:443`] } });
    } finally {
      await Snapshots.delete(snap.id, configured!.conn);
    }

    // No defaults anywhere: deny-by-default as before.
    const bare = await configured!.create();
    made.push(bare);
    assert.deepEqual(await bare.getNetwork(), { allow: [] });
    await assertDenied(bare, `http://${APT_HOST}/`, APT_HOST, 80);

    // The daemon's default, for a template without one.
    const fromDaemon = await withDefault!.create();
    made.push(fromDaemon);
    assert.deepEqual(await fromDaemon.getNetwork(), { ...daemonDefault, default: 'daemon' });
    await assertAllowed(fromDaemon, 'https://api.github.com/', 'api.github.com', 443);
    await assertDenied(fromDaemon, `http://${APT_HOST}/`, APT_HOST, 80);

    // The template's default beats the daemon's.
    const both = await withDefault!.create({ template: TEMPLATE });
    made.push(both);
    assert.deepEqual(await both.getNetwork(), { ...templateDefault, default: 'template' });
    await assertDenied(both, 'https://api.github.com/', 'api.github.com', 443);

    // The request's policy beats both, an explicit empty list included.
    const explicit = await withDefault!.create({ template: TEMPLATE, network: { allow: [`${NPM_HOST}:443`, UPSTREAM] } });
    made.push(explicit);
    assert.deepEqual(await explicit.getNetwork(), { allow: [`${NPM_HOST}:443`, UPSTREAM] });
    await assertAllowed(explicit, `https://${NPM_HOST}/`, NPM_HOST, 443);
    await assertDenied(explicit, `http://${APT_HOST}/`, APT_HOST, 80);
    const none = await withDefault!.create({ template: TEMPLATE, network: { allow: [] } });
    made.push(none);
    assert.deepEqual(await none.getNetwork(), { allow: [] });
    await assertDenied(none, `http://${APT_HOST}/`, APT_HOST, 80);

    // `warren create --deny-all` sends that empty list; without flags, the defaults apply.
    const cli = (...args: string[]) =>
      spawnSync(path.join(REPO, 'bin/warren'), args, {
        encoding: 'utf8',
        env: { ...process.env, WARREN_URL: withDefault!.url, WARREN_API_KEY: withDefault!.apiKey },
      });
    const denyAll = cli('create', '--deny-all');
    assert.equal(denyAll.status, 0, denyAll.stderr);
    const plainCreate = cli('create', '--allow', '@github');
    assert.equal(plainCreate.status, 0, plainCreate.stderr);
    const defaulted = cli('create');
    assert.equal(defaulted.status, 0, defaulted.stderr);
    const netOf = (id: string) => cli('net', id).stdout;
    assert.equal(netOf(denyAll.stdout.trim()), 'nothing allowed (all egress is refused)\n');
    assert.match(netOf(plainCreate.stdout.trim()), /^allow @github, which expands to:\n {4}github\.com:443\n/);
    assert.match(netOf(defaulted.stdout.trim()), /^\(the daemon's default policy\)\nallow @github, which expands to:\n/);
    for (const out of [denyAll, plainCreate, defaulted]) cli('rm', out.stdout.trim());

    // A PUT replaces a default like any policy, and it is no longer marked as one.
    assert.deepEqual(await fromDaemon.setNetwork({ allow: [UPSTREAM] }), { allow: [UPSTREAM] });
  } finally {
    await Promise.all(made.map((s) => s.kill().catch(() => undefined)));
  }
});
