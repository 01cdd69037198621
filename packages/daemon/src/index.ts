export { startDaemon, VERSION, type RunningDaemon } from './daemon.js';
export { resolveConfig, layout, DEFAULT_HOME, DEFAULT_PORT, type DaemonConfig } from './config.js';
export { buildTemplateLocally, type LocalBuildOptions } from './templates/local.js';
export { inspectHostViews, removeHostViews } from './storage/sandbox-host-files.js';
// For the density bench, which seeds a bench daemon's registry with its own module.
export { Registry, type SandboxRecord } from './core/registry.js';
export { ImageStore } from './core/images.js';
// For the auth bench, which seeds API keys the same way.
export { KeyStore } from './keys/store.js';
// For the bench header: which runsc the bench's daemons will run, chosen as they choose it.
export { chooseRunsc } from './drivers/gvisor/runsc-binary.js';
