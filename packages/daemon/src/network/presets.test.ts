/**
 * Egress presets: the config readers on fixture files and command output (no real
 * configuration of this machine is read, nothing is fetched), and the expansion.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';
import {
  aptRules,
  checkAllow,
  deb822SourceUris,
  GITHUB_RULES,
  hostSources,
  npmRegistryUrls,
  npmRules,
  oneLineSourceUris,
  parseIni,
  pipRules,
  PRESET_NAMES,
  Presets,
  urlRule,
  type PresetResult,
  type PresetSources,
} from './presets.js';
import { defaultAllow } from '../config.js';

/** A fixture tree: files by relative path. Removed by the caller. */
function fixture(files: Record<string, string>): string {
  const root = mkdtempSync(path.join(tmpdir(), 'warren-presets-'));
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), text);
  }
  return root;
}

const noCommand = () => Promise.reject(Object.assign(new Error('spawn ENOENT'), { code: 'ENOENT' }));

/** Sources rooted in a fixture: home is <root>/home, /etc is <root>/etc, no commands unless given. */
function sources(root: string, env: NodeJS.ProcessEnv = {}, run: PresetSources['run'] = noCommand): PresetSources {
  return { env, home: path.join(root, 'home'), etc: path.join(root, 'etc'), run };
}

function rulesOf(r: PresetResult): string[] {
  assert.ok(r.ok, r.ok ? '' : r.reason);
  return r.rules;
}

function reasonOf(r: PresetResult): string {
  assert.ok(!r.ok, `expected no hosts, got ${JSON.stringify(r)}`);
  return r.reason;
}

test('urlRule: host and port of http(s) URLs only, never the credentials or path', () => {
  assert.equal(urlRule('https://pkg.example.com/simple/'), 'pkg.example.com:443');
  assert.equal(urlRule('http://Mirror.Example.ORG/debian'), 'mirror.example.org:80');
  assert.equal(urlRule('https://user:s3cret@pkg.example.com:8443/x'), 'pkg.example.com:8443');
  assert.equal(urlRule('http://[2001:db8::5]:3142/debian'), '[2001:db8::5]:3142');
  assert.equal(urlRule('http://10.1.2.3/debian'), '10.1.2.3:80');
  assert.equal(urlRule('file:///srv/mirror'), undefined);
  assert.equal(urlRule('cdrom:[Debian]/'), undefined);
  assert.equal(urlRule('mirror+http://mirror.example.org/list.txt'), undefined);
  assert.equal(urlRule('not a url'), undefined);
});

test('parseIni reads pip files as configparser does', () => {
  const ini = parseIni(
    [
      '# comment',
      '[global]',
      'index-url = https://pkg.example.com/simple',
      'Timeout: 60',
      '; another comment',
      'extra-index-url =',
      '    https://one.example.net/simple',
      '    https://two.example.net/simple',
      '',
      '[install]',
      'trusted-host=files.example.net',
    ].join('\n'),
  );
  assert.equal(ini.get('global')?.get('index-url'), 'https://pkg.example.com/simple');
  assert.equal(ini.get('global')?.get('timeout'), '60');
  assert.equal(ini.get('global')?.get('extra-index-url'), '\nhttps://one.example.net/simple\nhttps://two.example.net/simple');
  assert.equal(ini.get('install')?.get('trusted-host'), 'files.example.net');
});

test('@pypi: pip files in order (later override), sections global/install/download, env variables win', async () => {
  const root = fixture({
    'etc/pip.conf': '[global]\nindex-url = https://old.example.com/simple\n',
    'etc/xdg/pip/pip.conf': '[global]\nindex-url = https://xdg.example.com/simple\n',
    'home/.config/pip/pip.conf': [
      '[global]',
      'index_url = https://user:token@pkg.example.com/simple',
      '[install]',
      'extra-index-url =',
      '    https://extra.example.net/simple',
      '    http://plain.example.net:8080/simple',
      'find-links = /local/wheels https://wheels.example.org/links/',
      '[download]',
      'trusted-host = files.example.net cache.example.net:3141',
      '[list]',
      'index-url = https://not-read.example.com/',
    ].join('\n'),
  });
  try {
    assert.deepEqual(rulesOf(await pipRules(sources(root))), [
      'pkg.example.com:443', // the user file overrides both global files
      'extra.example.net:443',
      'plain.example.net:8080',
      'wheels.example.org:443',
      'files.example.net:443', // trusted-host without a port: both
      'files.example.net:80',
      'cache.example.net:3141',
    ]);
    // PIP_INDEX_URL replaces the files' index-url, the other keys still come from the files.
    const env = { PIP_INDEX_URL: 'https://env.example.com/simple', PIP_TRUSTED_HOST: 'env-files.example.com:443' };
    assert.deepEqual(rulesOf(await pipRules(sources(root, env))), [
      'env.example.com:443',
      'extra.example.net:443',
      'plain.example.net:8080',
      'wheels.example.org:443',
      'env-files.example.com:443',
    ]);
    // XDG_CONFIG_HOME moves the user file; a named PIP_CONFIG_FILE that exists skips the user's.
    writeFileSync(path.join(root, 'own.conf'), '[global]\nindex-url = https://own.example.com/simple\n');
    assert.deepEqual(rulesOf(await pipRules(sources(root, { XDG_CONFIG_HOME: path.join(root, 'nowhere') }))), ['old.example.com:443']);
    assert.deepEqual(rulesOf(await pipRules(sources(root, { PIP_CONFIG_FILE: path.join(root, 'own.conf') }))), ['own.example.com:443']);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('@pypi without an index in the configuration has no hosts, and says what it read', async () => {
  const root = fixture({ 'home/.config/pip/pip.conf': '[global]\ntimeout = 10\nfind-links = /srv/wheels\n' });
  try {
    const reason = reasonOf(await pipRules(sources(root)));
    assert.match(
      reason,
      /^@pypi reads pip's configuration \(PIP_INDEX_URL, .*index-url.* in .*\/etc\/pip\.conf, .*\/home\/\.config\/pip\/pip\.conf\) and found no index URL$/,
    );
    assert.match(reasonOf(await pipRules(sources(root, { PIP_CONFIG_FILE: '/dev/null', PIP_INDEX_URL: '' }))), /no file, PIP_CONFIG_FILE is \/dev\/null/);
    // A host that cannot be a rule is named in the reason, without the URL around it.
    const bare = reasonOf(await pipRules(sources(root, { PIP_INDEX_URL: 'http://user:pw@pipcache:3141/root/pypi/+simple/' })));
    assert.match(bare, /found no index URL this daemon can use \(pipcache:3141: a name without a dot/);
    assert.doesNotMatch(bare, /user:pw|\+simple/);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('apt one-line sources: deb and deb-src, options, comments; other schemes give nothing', () => {
  assert.deepEqual(
    oneLineSourceUris(
      [
        '# deb http://commented.example.org/debian bookworm main',
        'deb http://mirror.example.org/debian bookworm main contrib',
        'deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] https://apt.example.com/repo stable main # trailing',
        'deb [ arch=arm64 ] http://spaced.example.net/debian bookworm main',
        'deb-src http://mirror.example.org/debian bookworm main',
        'deb cdrom:[Debian GNU/Linux]/ bookworm main',
        'rpm http://not-apt.example.org/ x',
        '',
      ].join('\n'),
    ),
    [
      'http://mirror.example.org/debian',
      'https://apt.example.com/repo',
      'http://spaced.example.net/debian',
      'http://mirror.example.org/debian',
      'cdrom:[Debian',
    ],
  );
});

test('apt deb822 sources: several URIs, continuation lines, Enabled: no and other types skipped', () => {
  assert.deepEqual(
    deb822SourceUris(
      [
        '# a comment',
        'Types: deb deb-src',
        'URIs: http://mirror.example.org/debian https://second.example.org/debian',
        'Suites: bookworm bookworm-updates',
        'Components: main',
        'Signed-By:',
        ' -----BEGIN PGP PUBLIC KEY BLOCK-----',
        ' .',
        ' -----END PGP PUBLIC KEY BLOCK-----',
        '',
        'Enabled: no',
        'Types: deb',
        'URIs: http://disabled.example.org/debian',
        'Suites: bookworm',
        '',
        'types: deb',
        'uris: http://lower.example.net/debian',
        '  http://continued.example.net/debian',
        'suites: bookworm',
        '',
        '',
        'Types: rpm',
        'URIs: http://not-apt.example.org/',
      ].join('\n'),
    ),
    ['http://mirror.example.org/debian', 'https://second.example.org/debian', 'http://lower.example.net/debian', 'http://continued.example.net/debian'],
  );
});

test("@debian: sources.list and sources.list.d's .list and .sources files, in apt's default places without apt-config", async () => {
  const root = fixture({
    'etc/apt/sources.list': 'deb http://mirror.example.org/debian bookworm main\n# deb http://old.example.org/debian buster main\n',
    'etc/apt/sources.list.d/b.sources': 'Types: deb\nURIs: https://secure.example.org/debian\nSuites: bookworm\nComponents: main\n',
    'etc/apt/sources.list.d/a.list': 'deb http://mirror.example.org/debian bookworm-updates main\ndeb http://third.example.net:8080/repo ./\n',
    'etc/apt/sources.list.d/c.list.disabled': 'deb http://ignored.example.org/debian bookworm main\n',
    'etc/apt/sources.list.d/d.sources': 'Types: deb\nURIs: file:/srv/local\nSuites: ./\n',
  });
  try {
    assert.deepEqual(rulesOf(await aptRules(sources(root))), ['mirror.example.org:80', 'third.example.net:8080', 'secure.example.org:443']);
    rmSync(path.join(root, 'etc/apt'), { recursive: true });
    assert.match(
      reasonOf(await aptRules(sources(root))),
      /^@debian reads apt's sources \(.*\/etc\/apt\/sources\.list, .*sources\.list\.d\/\*\.list, .*sources\.list\.d\/\*\.sources\) and found no http or https source$/,
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('@debian: the places apt-config names (APT_CONFIG is honoured by apt-config itself)', async () => {
  const root = fixture({
    'apt/list': 'deb http://from-list.example.org/debian bookworm main\n',
    'apt/parts/x.sources': 'Types: deb\nURIs: http://from-parts.example.org/debian\nSuites: bookworm\n',
  });
  try {
    const asked: string[][] = [];
    const run: PresetSources['run'] = (cmd, args) => {
      asked.push([cmd, ...args]);
      return Promise.resolve(`LIST='${path.join(root, 'apt/list')}'\nPARTS='${path.join(root, 'apt/parts')}/'\n`);
    };
    assert.deepEqual(rulesOf(await aptRules(sources(root, {}, run))), ['from-list.example.org:80', 'from-parts.example.org:80']);
    assert.deepEqual(asked, [['apt-config', 'shell', 'LIST', 'Dir::Etc::sourcelist/f', 'PARTS', 'Dir::Etc::sourceparts/d']]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('@debian with the real apt-config and an APT_CONFIG fixture (skipped without apt)', async (t) => {
  if (!hasCommand('apt-config')) return t.skip('apt-config is not installed');
  const root = fixture({
    'etc/apt/sources.list': 'deb http://fixture.example.org/debian bookworm main\n',
    'etc/apt/sources.list.d/y.sources': 'Types: deb\nURIs: https://fixture-parts.example.org/debian\nSuites: bookworm\n',
  });
  try {
    mkdirSync(path.join(root, 'etc/apt/apt.conf.d'));
    writeFileSync(path.join(root, 'apt.conf'), `Dir::Etc "${path.join(root, 'etc/apt')}";\n`);
    const src = { ...hostSources({ PATH: process.env.PATH, APT_CONFIG: path.join(root, 'apt.conf') }), etc: path.join(root, 'nothing') };
    assert.deepEqual(rulesOf(await aptRules(src)), ['fixture.example.org:80', 'fixture-parts.example.org:443']);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("@npm: the default and scoped registries of npm's configuration", async () => {
  assert.deepEqual(
    npmRegistryUrls({
      registry: 'https://npm.example.test/',
      '@corp:registry': 'https://corp.example.test:8443/npm/',
      '//npm.example.test/:_authToken': 'x',
      fund: true,
    }),
    ['https://npm.example.test/', 'https://corp.example.test:8443/npm/'],
  );
  const root = fixture({});
  try {
    const json = JSON.stringify({ registry: 'https://npm.example.test/', '@corp:registry': 'http://corp.example.test/npm/' });
    assert.deepEqual(rulesOf(await npmRules(sources(root, {}, () => Promise.resolve(json)))), ['npm.example.test:443', 'corp.example.test:80']);
    assert.match(
      reasonOf(await npmRules(sources(root))),
      /^@npm reads npm's configuration \(`npm config list --json`.*\), and npm could not be run on the daemon's host \(npm is not installed or not in PATH\)$/,
    );
    assert.match(reasonOf(await npmRules(sources(root, {}, () => Promise.resolve('{}')))), /and found no registry$/);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('@npm with the real npm reading fixture npmrc files (skipped without npm)', async (t) => {
  if (!hasCommand('npm')) return t.skip('npm is not installed');
  const root = fixture({
    'home/.npmrc': 'registry=https://npm-user.example.test/\n@corp:registry=https://corp.example.test:8443/\n',
    'global-npmrc': 'registry=https://npm-global.example.test/\n',
  });
  try {
    const env = {
      PATH: process.env.PATH,
      HOME: path.join(root, 'home'),
      npm_config_userconfig: path.join(root, 'home/.npmrc'),
      npm_config_globalconfig: path.join(root, 'global-npmrc'),
      npm_config_cache: path.join(root, 'cache'),
      npm_config_update_notifier: 'false',
    };
    assert.deepEqual(rulesOf(await npmRules({ ...hostSources(env), home: env.HOME })), ['npm-user.example.test:443', 'corp.example.test:8443']);
    // npm_config_registry in the daemon's environment wins over the files, as it does for npm.
    const withEnv = { ...env, npm_config_registry: 'https://npm-env.example.test/' };
    assert.deepEqual(rulesOf(await npmRules({ ...hostSources(withEnv), home: env.HOME })), ['npm-env.example.test:443', 'corp.example.test:8443']);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

function hasCommand(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Presets on fixture readers: npm answers with `npmConfigJson`, pip and apt read the fixture root. */
function fixturePresets(root: string, npmConfigJson?: string): { presets: Presets; runs: string[] } {
  const runs: string[] = [];
  const run: PresetSources['run'] = (cmd) => {
    runs.push(cmd);
    return cmd === 'npm' && npmConfigJson !== undefined ? Promise.resolve(npmConfigJson) : noCommand();
  };
  return { presets: new Presets(sources(root, {}, run)), runs };
}

test('expand: presets become their rules, the list as given is kept, each host is read once', async () => {
  const root = fixture({
    'etc/pip.conf': '[global]\nindex-url = https://pkg.example.com/simple\n',
    'etc/apt/sources.list': 'deb http://mirror.example.org/debian bookworm main\n',
  });
  try {
    const { presets, runs } = fixturePresets(root, JSON.stringify({ registry: 'https://npm.example.test/' }));
    const e = await presets.expand(['@github', ' API.example.com:443 ', '@npm', '@pypi', '@debian', '@github', 'api.example.com:443', 'github.com:443']);
    assert.deepEqual(e.given, ['@github', 'api.example.com:443', '@npm', '@pypi', '@debian', 'github.com:443']);
    assert.deepEqual(e.rules, [
      ...GITHUB_RULES,
      'api.example.com:443',
      'npm.example.test:443',
      'pkg.example.com:443',
      'mirror.example.org:80',
      // 'github.com:443' is already there through @github
    ]);
    assert.deepEqual(e.presets, {
      '@github': GITHUB_RULES,
      '@npm': ['npm.example.test:443'],
      '@pypi': ['pkg.example.com:443'],
      '@debian': ['mirror.example.org:80'],
    });
    // Read once: later expansions do not run npm or apt-config again.
    await presets.expand(['@npm', '@debian']);
    assert.deepEqual(runs, ['npm', 'apt-config']);
    // No presets: the rules as given (normalised), nothing else.
    assert.deepEqual(await presets.expand(['Example.COM']), { given: ['example.com'], rules: ['example.com'], presets: {} });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('expand: an unknown preset is a 400 naming the known ones; an unconfigured one a 409 naming what it read', async () => {
  const root = fixture({});
  try {
    const { presets } = fixturePresets(root);
    await assert.rejects(presets.expand(['@github', '@cargo']), (err: unknown) => {
      assert.ok(err instanceof WarrenError);
      assert.equal(err.code, 'invalid_argument');
      assert.equal(err.message, "network.allow: unknown preset '@cargo' (known presets: @github, @npm, @pypi, @debian)");
      assert.deepEqual(err.details, { rule: '@cargo', presets: [...PRESET_NAMES] });
      return true;
    });
    await assert.rejects(presets.expand(['@pypi'], "template 'x' network.allow"), (err: unknown) => {
      assert.ok(err instanceof WarrenError);
      assert.equal(err.code, 'failed_precondition');
      assert.match(err.message, /^template 'x' network\.allow: @pypi reads pip's configuration .* and found no index URL$/);
      return true;
    });
    await assert.rejects(
      presets.expand(['@debian']),
      (err: WarrenError) => err.code === 'failed_precondition' && /found no http or https source/.test(err.message),
    );
    await assert.rejects(presets.expand(['bad rule']), (err: WarrenError) => err.code === 'invalid_argument' && err.message.includes("'bad rule'"));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('checkAllow and WARREN_DEFAULT_ALLOW: rules and known presets, named by their field', () => {
  checkAllow(['@github', '@npm', 'api.example.com:443', '10.0.0.0/8'], 'network.allow');
  assert.throws(() => checkAllow(['@GitHub'], 'network.allow'), /unknown preset '@GitHub' \(known presets: @github, @npm, @pypi, @debian\)/);
  assert.throws(() => checkAllow(['localhost'], 'network.allow'), /^WarrenError: network\.allow: 'localhost' is not a valid rule/);
  assert.equal(defaultAllow(undefined), undefined);
  assert.equal(defaultAllow('  '), undefined);
  assert.deepEqual(defaultAllow(' @github, api.example.com:443,,@npm '), ['@github', 'api.example.com:443', '@npm']);
  assert.throws(() => defaultAllow('@github,*'), /^WarrenError: WARREN_DEFAULT_ALLOW: '\*' is not a valid rule/);
  assert.throws(() => defaultAllow('@nope'), /WARREN_DEFAULT_ALLOW: unknown preset '@nope'/);
});
