/**
 * The package registries build steps use: the daemon host's own configuration, passed to each
 * `run` and `apt` step as environment (npm_config_registry), so `npm install` in a recipe
 * fetches from wherever this host's npm does, as `debootstrap` uses the host's Debian mirror.
 * No registry host is written in warren. Not part of a layer's key: where packages come from
 * is the host's business, what is installed is the recipe's (pin versions in the command).
 */
import type { Logger } from 'pino';
import { hostSources, npmRegistryUrls, type PresetSources } from '../network/presets.js';

/** Environment for build steps; a recipe's own `env` steps override it. */
export async function buildRegistryEnv(log: Logger, sources: PresetSources = hostSources()): Promise<Record<string, string>> {
  if (sources.env.WARREN_NPM_REGISTRY) return { npm_config_registry: sources.env.WARREN_NPM_REGISTRY };
  try {
    const config = JSON.parse(await sources.run('npm', ['config', 'list', '--json'], sources.env)) as Record<string, unknown>;
    const [registry] = npmRegistryUrls(config);
    return registry ? { npm_config_registry: registry } : {};
  } catch (err) {
    // Only the message's first line: npm's output may hold tokens.
    log.warn({ err: String((err as Error).message).split('\n')[0] }, "cannot read the host's npm registry; build steps use npm's default");
    return {};
  }
}
