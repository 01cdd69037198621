/**
 * Egress presets: named rule sets (`@github`, `@npm`, `@pypi`, `@debian`) that may stand
 * anywhere an allow rule does (a create's or a PUT's `network.allow`, a recipe's default, the
 * daemon's WARREN_DEFAULT_ALLOW). The daemon expands them into ordinary rules (policy.ts)
 * when a policy is set; the proxy only ever sees the expansion, and GET shows both.
 *
 * No package registry's host name is written in warren: every preset but `@github` comes
 * from the package manager configuration of the daemon's host, read once (at first use) by
 * the readers below. A preset whose configuration names nothing is refused (409) with what
 * it read; there is no built-in fallback. The readers take their environment, home and /etc
 * from `PresetSources`, so tests feed them fixtures.
 *
 * Each URL becomes `HOST:PORT`: the URL's port, else 443 for https and 80 for http. Other
 * schemes (file:, cdrom:, mirror+…) give nothing. A host that cannot be a rule (a name
 * without a dot, `localhost`) is left out and reported in `skipped`. URLs may carry
 * credentials (`https://user:token@host/`): only host and port are ever kept or logged.
 */
import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';
import { MAX_RULES, parsePolicy, policyRules } from './policy.js';

export const PRESET_NAMES = ['@github', '@npm', '@pypi', '@debian'] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

/** What a preset expands to on this host, or why it expands to nothing. */
export type PresetResult =
  | { ok: true; rules: string[] /** Hosts the configuration named that cannot be rules, and why. */; skipped: string[] }
  | { ok: false /** Which configuration was read, and that it named nothing usable. */; reason: string };

/** Where the readers look: the daemon's own environment, home and /etc, or a test's fixtures. */
export interface PresetSources {
  env: NodeJS.ProcessEnv;
  home: string;
  /** The directory read as /etc (pip.conf, apt's sources when apt-config is not there). */
  etc: string;
  /** Runs a command (no shell) and resolves with its stdout; rejects when it cannot run or fails. */
  run(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<string>;
}

/** The daemon's host as it is. */
export function hostSources(env: NodeJS.ProcessEnv = process.env): PresetSources {
  return { env, home: os.homedir(), etc: '/etc', run: runCommand };
}

function runCommand(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    // cwd '/': no project's own configuration file (an .npmrc next to a package.json) applies.
    execFile(cmd, args, { env, cwd: '/', timeout: 20_000, maxBuffer: 4 * 1024 * 1024, encoding: 'utf8' }, (err, stdout) =>
      err ? reject(err) : resolve(stdout),
    );
  });
}

// ---------------------------------------------------------------------------------------
// The presets

/**
 * `@github`: a code host, not a package registry, so its names are written here: the site
 * and API (github.com, *.github.com, which includes codeload and api) and the content hosts
 * under githubusercontent.com (raw files, release assets, avatars), all on 443; plus
 * github.com:22, because every sandbox's GIT_SSH_COMMAND sends `git clone git@github.com:…`
 * through the proxy (network.md).
 */
export const GITHUB_RULES = ['github.com:443', '*.github.com:443', '*.githubusercontent.com:443', 'github.com:22'];

/**
 * `@npm`: npm's configured registries, as `npm config list --json` (run once, in /) reports
 * them: `registry` (npm_config_registry, the npmrc files, else npm's own default) and every
 * scoped `@scope:registry`. Tarballs are fetched from the registry that lists them.
 */
export async function npmRules(src: PresetSources): Promise<PresetResult> {
  const what = "npm's configuration (`npm config list --json`: npm_config_registry, the npmrc files, npm's default)";
  let stdout: string;
  try {
    stdout = await src.run('npm', ['config', 'list', '--json'], src.env);
  } catch (err) {
    return { ok: false, reason: `@npm reads ${what}, and npm could not be run on the daemon's host (${npmFailure(err)})` };
  }
  let config: Record<string, unknown>;
  try {
    config = JSON.parse(stdout) as Record<string, unknown>;
  } catch {
    return { ok: false, reason: `@npm reads ${what}, and npm's answer was not JSON` };
  }
  return fromUrls('@npm', what, 'no registry', npmRegistryUrls(config));
}

/** The registry URLs in npm's configuration (`npm config list --json`), default first. */
export function npmRegistryUrls(config: Record<string, unknown>): string[] {
  const urls: string[] = [];
  if (typeof config.registry === 'string') urls.push(config.registry);
  for (const [key, value] of Object.entries(config)) {
    if (/^@[^:/]+:registry$/.test(key) && typeof value === 'string') urls.push(value);
  }
  return urls;
}

const PIP_KEYS = ['index-url', 'extra-index-url', 'find-links', 'trusted-host'] as const;
/** The sections `pip install` and `pip download` read. */
const PIP_SECTIONS = ['global', 'install', 'download'];

/**
 * `@pypi`: pip's configured indexes. pip has a built-in default index; that default is not
 * configuration, so a host must name one. Read as pip reads them: PIP_INDEX_URL,
 * PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS and PIP_TRUSTED_HOST, else `index-url`,
 * `extra-index-url`, `find-links` and `trusted-host` in the [global], [install] and
 * [download] sections of pip's files, later files overriding earlier ones: the global files
 * ($XDG_CONFIG_DIRS/pip/pip.conf, /etc/xdg/pip/pip.conf, /etc/pip.conf), the user's
 * (~/.pip/pip.conf, $XDG_CONFIG_HOME/pip/pip.conf or ~/.config/pip/pip.conf; skipped when
 * PIP_CONFIG_FILE names an existing file), $VIRTUAL_ENV/pip.conf, then PIP_CONFIG_FILE
 * (/dev/null: no files at all). An index whose files are served by another host needs that
 * host named too: as another index, a `find-links` URL or a `trusted-host` (which gives
 * ports 443 and 80 unless it names one).
 */
export async function pipRules(src: PresetSources): Promise<PresetResult> {
  const { files, values } = await pipConfig(src);
  const what = `pip's configuration (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_TRUSTED_HOST; index-url, extra-index-url, find-links, trusted-host in ${files.length ? files.join(', ') : 'no file, PIP_CONFIG_FILE is /dev/null'})`;
  const urls = [...values['index-url'], ...values['extra-index-url'], ...values['find-links']];
  const trusted = values['trusted-host'].flatMap((h) => (/:[0-9]+$/.test(h) ? [`https://${h}/`] : [`https://${h}/`, `http://${h}/`]));
  return fromUrls('@pypi', what, 'no index URL', [...urls, ...trusted]);
}

/** pip's settings for the keys the preset reads: env variables win, else the merged files. */
async function pipConfig(src: PresetSources): Promise<{ files: string[]; values: Record<(typeof PIP_KEYS)[number], string[]> }> {
  const env = src.env;
  const files: string[] = [];
  const configFile = env.PIP_CONFIG_FILE;
  if (configFile !== '/dev/null') {
    const xdgDirs = (env.XDG_CONFIG_DIRS || path.join(src.etc, 'xdg')).split(':').filter(Boolean);
    files.push(...xdgDirs.map((d) => path.join(d, 'pip', 'pip.conf')), path.join(src.etc, 'pip.conf'));
    const configFileExists = configFile ? (await readText(configFile)) !== undefined : false;
    if (!configFileExists) {
      files.push(path.join(src.home, '.pip', 'pip.conf'), path.join(env.XDG_CONFIG_HOME || path.join(src.home, '.config'), 'pip', 'pip.conf'));
    }
    if (env.VIRTUAL_ENV) files.push(path.join(env.VIRTUAL_ENV, 'pip.conf'));
    if (configFile) files.push(configFile);
  }
  // section -> key -> value, later files overriding earlier ones.
  const merged = new Map<string, Map<string, string>>();
  for (const file of files) {
    const text = await readText(file);
    if (text === undefined) continue;
    for (const [section, entries] of parseIni(text)) {
      const into = merged.get(section) ?? new Map<string, string>();
      for (const [key, value] of entries) into.set(key.replace(/_/g, '-'), value);
      merged.set(section, into);
    }
  }
  const values = {} as Record<(typeof PIP_KEYS)[number], string[]>;
  for (const key of PIP_KEYS) {
    const fromEnv = env[`PIP_${key.toUpperCase().replace(/-/g, '_')}`];
    values[key] = fromEnv?.trim()
      ? fromEnv.trim().split(/\s+/)
      : unique(PIP_SECTIONS.flatMap((s) => (merged.get(s)?.get(key) ?? '').split(/\s+/).filter(Boolean)));
  }
  return { files, values };
}

/**
 * An INI file as Python's configparser reads pip's files: `[section]`, `key = value` or
 * `key: value` (the first delimiter), indented lines continuing a value, whole-line `#` and
 * `;` comments. Keys are lower-cased.
 */
export function parseIni(text: string): Map<string, Map<string, string>> {
  const sections = new Map<string, Map<string, string>>();
  let section: Map<string, string> | undefined;
  let key: string | undefined;
  for (const raw of text.split(/\r?\n/)) {
    const trimmed = raw.trim();
    if (trimmed === '' || trimmed.startsWith('#') || trimmed.startsWith(';')) continue;
    if (/^\s/.test(raw) && section && key !== undefined) {
      section.set(key, `${section.get(key) ?? ''}\n${trimmed}`);
      continue;
    }
    const header = /^\[([^\]]+)\]$/.exec(trimmed);
    if (header?.[1]) {
      const name = header[1].trim();
      section = sections.get(name) ?? new Map<string, string>();
      sections.set(name, section);
      key = undefined;
      continue;
    }
    const at = trimmed.search(/[=:]/);
    if (!section || at <= 0) {
      key = undefined;
      continue;
    }
    key = trimmed.slice(0, at).trim().toLowerCase();
    section.set(key, trimmed.slice(at + 1).trim());
  }
  return sections;
}

/**
 * `@debian`: every http and https URI of apt's enabled sources (any suite, `deb` and
 * `deb-src`): Dir::Etc::sourcelist in the one-line format and the `*.list` (one-line) and
 * `*.sources` (deb822, `Enabled: no` skipped) files in Dir::Etc::sourceparts. Where those are
 * comes from `apt-config shell` (so APT_CONFIG is honoured), else /etc/apt/sources.list and
 * /etc/apt/sources.list.d/.
 */
export async function aptRules(src: PresetSources): Promise<PresetResult> {
  const { list, parts } = await aptSourcePaths(src);
  const what = `apt's sources (${list}, ${path.join(parts, '*.list')}, ${path.join(parts, '*.sources')})`;
  const urls: string[] = [];
  const listText = await readText(list);
  if (listText !== undefined) urls.push(...oneLineSourceUris(listText));
  const names = await readdir(parts).catch(() => [] as string[]);
  // apt ignores files with other extensions or other characters in their names.
  for (const name of names.filter((n) => /^[A-Za-z0-9_.-]+\.(list|sources)$/.test(n)).sort()) {
    const text = await readText(path.join(parts, name));
    if (text === undefined) continue;
    urls.push(...(name.endsWith('.list') ? oneLineSourceUris(text) : deb822SourceUris(text)));
  }
  return fromUrls('@debian', what, 'no http or https source', urls);
}

async function aptSourcePaths(src: PresetSources): Promise<{ list: string; parts: string }> {
  try {
    const out = await src.run('apt-config', ['shell', 'LIST', 'Dir::Etc::sourcelist/f', 'PARTS', 'Dir::Etc::sourceparts/d'], src.env);
    const list = /^LIST='([^']*)'$/m.exec(out)?.[1];
    const parts = /^PARTS='([^']*)'$/m.exec(out)?.[1];
    if (list && parts) return { list, parts };
  } catch {
    // no apt-config: apt's default places
  }
  return { list: path.join(src.etc, 'apt', 'sources.list'), parts: path.join(src.etc, 'apt', 'sources.list.d') };
}

/** URIs of `deb [options] URI suite [components]` lines; `#` starts a comment. */
export function oneLineSourceUris(text: string): string[] {
  const uris: string[] = [];
  for (const raw of text.split(/\r?\n/)) {
    const tokens = raw.replace(/#.*/, '').trim().split(/\s+/).filter(Boolean);
    const [type] = tokens;
    if (type !== 'deb' && type !== 'deb-src') continue;
    let at = 1;
    if (tokens[at]?.startsWith('[')) {
      while (at < tokens.length && !tokens[at]!.endsWith(']')) at++;
      at++;
    }
    const uri = tokens[at];
    if (uri) uris.push(uri);
  }
  return uris;
}

/** URIs of the enabled deb/deb-src stanzas of a deb822 `.sources` file (stanzas end at a blank line). */
export function deb822SourceUris(text: string): string[] {
  const uris: string[] = [];
  let fields = new Map<string, string>();
  let last: string | undefined;
  const endStanza = () => {
    const enabled = (fields.get('enabled') ?? 'yes').toLowerCase() !== 'no';
    const types = (fields.get('types') ?? '').split(/\s+/);
    if (enabled && (types.includes('deb') || types.includes('deb-src'))) uris.push(...(fields.get('uris') ?? '').split(/\s+/).filter(Boolean));
    fields = new Map();
    last = undefined;
  };
  for (const line of text.split(/\r?\n/)) {
    if (line.trim() === '') {
      endStanza();
      continue;
    }
    if (line.startsWith('#')) continue;
    if (/^[ \t]/.test(line) && last) {
      fields.set(last, `${fields.get(last) ?? ''} ${line.trim()}`);
      continue;
    }
    const at = line.indexOf(':');
    if (at <= 0) continue;
    last = line.slice(0, at).trim().toLowerCase();
    fields.set(last, line.slice(at + 1).trim());
  }
  endStanza();
  return uris;
}

// ---------------------------------------------------------------------------------------
// URLs to rules

/** `HOST:PORT` for an http(s) URL, or undefined for any other scheme or text. */
export function urlRule(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return undefined;
  if (url.hostname === '') return undefined;
  return `${url.hostname}:${url.port || (url.protocol === 'https:' ? '443' : '80')}`;
}

function fromUrls(preset: string, what: string, nothing: string, urls: string[]): PresetResult {
  const rules: string[] = [];
  const skipped: string[] = [];
  for (const url of urls) {
    const rule = urlRule(url);
    if (!rule) continue;
    try {
      const [normalised] = policyRules(parsePolicy([rule]));
      if (normalised && !rules.includes(normalised)) rules.push(normalised);
    } catch (err) {
      // The rule holds only host and port, never the URL's credentials or path.
      skipped.push(`${rule}: ${err instanceof Error ? err.message.replace(/^network\.allow: '[^']*' is not a valid rule: /, '') : String(err)}`);
    }
  }
  if (!rules.length) {
    const why = skipped.length ? `${nothing} this daemon can use (${skipped.join('; ')})` : nothing;
    return { ok: false, reason: `${preset} reads ${what} and found ${why}` };
  }
  return { ok: true, rules, skipped };
}

// ---------------------------------------------------------------------------------------
// Expansion

/** A policy's allow list with its presets expanded. */
export interface ExpandedAllow {
  /** The list as given: rules normalised, presets by name, duplicates dropped. */
  given: string[];
  /** What the proxy applies: presets replaced by their rules, normalised, duplicates dropped. */
  rules: string[];
  /** The rules of each preset the list names (empty when it names none). */
  presets: Record<string, string[]>;
}

function isPresetName(name: string): name is PresetName {
  return (PRESET_NAMES as readonly string[]).includes(name);
}

function unknownPreset(field: string, name: string): WarrenError {
  return new WarrenError('invalid_argument', `${field}: unknown preset '${name}' (known presets: ${PRESET_NAMES.join(', ')})`, {
    details: { rule: name, presets: [...PRESET_NAMES] },
  });
}

/**
 * Checks a list without expanding it (recipes, WARREN_DEFAULT_ALLOW): every entry is a known
 * preset or a valid rule. Whether a preset has hosts is up to the host it is expanded on.
 */
export function checkAllow(allow: string[], field: string): void {
  const rules: string[] = [];
  for (const entry of allow) {
    const text = entry.trim();
    if (text.startsWith('@')) {
      if (!isPresetName(text)) throw unknownPreset(field, text);
    } else rules.push(entry);
  }
  try {
    parsePolicy(rules);
  } catch (err) {
    if (err instanceof WarrenError) throw new WarrenError(err.code, err.message.replace(/^network\.allow/, field), err.details ? { details: err.details } : {});
    throw err;
  }
}

/** The presets of one daemon: each read from the host at its first use, then kept. */
export class Presets {
  private results = new Map<PresetName, Promise<PresetResult>>();

  constructor(
    private sources: PresetSources = hostSources(),
    private onRead: (name: PresetName, result: PresetResult) => void = () => {},
  ) {}

  /** The preset's rules on this host (read once), or why it has none. */
  resolve(name: PresetName): Promise<PresetResult> {
    let result = this.results.get(name);
    if (!result) {
      result = this.read(name).then((r) => {
        this.onRead(name, r);
        return r;
      });
      this.results.set(name, result);
    }
    return result;
  }

  private read(name: PresetName): Promise<PresetResult> {
    switch (name) {
      case '@github':
        return Promise.resolve({ ok: true, rules: [...GITHUB_RULES], skipped: [] });
      case '@npm':
        return npmRules(this.sources);
      case '@pypi':
        return pipRules(this.sources);
      case '@debian':
        return aptRules(this.sources);
    }
  }

  /**
   * Expands `allow` (400 for an unknown preset or a bad rule, 409 for a preset this host's
   * configuration gives no hosts for). `field` names the list in errors.
   */
  async expand(allow: string[], field = 'network.allow'): Promise<ExpandedAllow> {
    if (!Array.isArray(allow)) throw new WarrenError('invalid_argument', `${field}: must be a list of rules`);
    checkAllow(allow, field);
    const given: string[] = [];
    const rules: string[] = [];
    const presets: Record<string, string[]> = {};
    for (const entry of allow) {
      const text = entry.trim();
      if (isPresetName(text)) {
        if (presets[text]) continue;
        const result = await this.resolve(text);
        if (!result.ok) throw new WarrenError('failed_precondition', `${field}: ${result.reason}`, { details: { rule: text, preset: text } });
        presets[text] = result.rules;
        given.push(text);
        rules.push(...result.rules);
      } else {
        const [normalised] = policyRules(parsePolicy([text]));
        if (normalised === undefined || given.includes(normalised)) continue;
        given.push(normalised);
        rules.push(normalised);
      }
    }
    const expanded = unique(rules);
    if (expanded.length > MAX_RULES) {
      throw new WarrenError('invalid_argument', `${field}: at most ${MAX_RULES} rules (got ${expanded.length} with the presets expanded)`);
    }
    return { given, rules: expanded, presets };
  }
}

// ---------------------------------------------------------------------------------------

async function readText(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch {
    return undefined;
  }
}

function unique(items: string[]): string[] {
  return [...new Set(items)];
}

/** Why npm did not answer, without its output (which may hold tokens). */
function npmFailure(err: unknown): string {
  const e = err as NodeJS.ErrnoException & { killed?: boolean };
  if (e.code === 'ENOENT') return 'npm is not installed or not in PATH';
  if (e.killed) return 'it did not answer in 20 s';
  return typeof e.code === 'string' || typeof e.code === 'number' ? `exit ${String(e.code)}` : (e.message ?? String(err)).split('\n')[0]!;
}
