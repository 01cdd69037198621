/**
 * Builds a template in-process, without a daemon: what `warren template build --local` and
 * scripts/setup.sh use to build base before any daemon runs. Same builder, same layout
 * under the templates dir, same runsc root as the daemon of that home; safe beside a
 * running daemon (builds stage privately and commit by rename).
 */
import { mkdirSync } from 'node:fs';
import { pino, type Logger } from 'pino';
import { BuildTemplateRequest, validationError, type TemplateBuildEvent } from '@warren/protocol';
import { layout, resolveConfig } from '../config.js';
import { TemplateBuilder } from './builder.js';
import { chooseRunsc } from '../drivers/gvisor/runsc-binary.js';
import { SandboxHostFiles } from '../storage/sandbox-host-files.js';
import { publicTemplateInfo, TemplateCatalog, type TemplateInfo } from './catalog.js';
import { planBuild } from './plan.js';

export interface LocalBuildOptions {
  home?: string;
  templatesDir?: string;
  emit: (event: TemplateBuildEvent) => void;
  signal: AbortSignal;
  log?: Logger;
}

export async function buildTemplateLocally(request: unknown, opts: LocalBuildOptions): Promise<Omit<TemplateInfo, 'rootfs'>> {
  const parsed = BuildTemplateRequest.safeParse(request);
  if (!parsed.success) throw validationError(parsed.error);
  const config = resolveConfig({ ...(opts.home ? { home: opts.home } : {}), ...(opts.templatesDir ? { templatesDir: opts.templatesDir } : {}) });
  const paths = layout(config.home);
  mkdirSync(config.home, { recursive: true, mode: 0o700 });
  for (const dir of [paths.runscRoot, config.templatesDir]) mkdirSync(dir, { recursive: true, mode: 0o700 });
  const hostFiles = SandboxHostFiles.prepare({ guestDir: paths.guest, viewsDir: paths.views, templatesDir: config.templatesDir, nodeBinary: process.execPath });
  const log = opts.log ?? pino({ name: 'warren-build', level: 'warn' }, pino.destination(2));
  const catalog = new TemplateCatalog(config.templatesDir, (msg, fields) => log.warn(fields, msg));
  // The same choice as the daemon's, so a local build runs what sandboxes will run.
  const runsc = await chooseRunsc({ ...(config.runscBinary ? { override: config.runscBinary } : {}), cacheDir: config.runscCache });
  const builder = new TemplateBuilder({
    templatesDir: config.templatesDir,
    runscBinary: runsc.binary,
    runscRoot: paths.runscRoot,
    hostFiles,
    catalog,
    log,
  });
  await builder.recover();
  const plan = await planBuild(parsed.data, catalog);
  return publicTemplateInfo(await builder.build(plan, opts.emit, opts.signal));
}
