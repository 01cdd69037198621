/** Wires the daemon together: lock, registry, driver, services, recovery, reaper, HTTP. */
import https from 'node:https';
import { requireSafeListen, serverTls } from './api/tls.js';
import type http from 'node:http';
import path from 'node:path';
import { mkdirSync, readFileSync } from 'node:fs';
import { DEFAULT_TEMPLATE, WarrenError } from '@warren/protocol';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { serve, type ServerType } from '@hono/node-server';
import { pino, type Logger } from 'pino';
import { buildApp } from './api/app.js';
import { KeyService } from './keys/service.js';
import { KeyStore } from './keys/store.js';
import { QuotaGate } from './keys/quotas.js';
import { ApiAudit } from './keys/audit.js';
import { SandboxTokens } from './keys/tokens.js';
import { AuthFailureLimiter } from './keys/auth-failures.js';
import type { Access } from './api/auth.js';
import { resolveConfig, layout, type DaemonConfig } from './config.js';
import { ExecService } from './core/exec.js';
import { FileService } from './core/files.js';
import { Reaper } from './core/reaper.js';
import { WarmPool } from './core/pool.js';
import { Baker } from './core/bake.js';
import { defaultPoolSize } from './core/default-pool.js';
import { ImageStore } from './core/images.js';
import { EgressLog } from './network/audit.js';
import { EgressProxy } from './network/proxy.js';
import { SandboxCaStore } from './network/ca.js';
import { upstreamTrust } from './network/upstream-trust.js';
import { serverLookup } from './network/resolver.js';
import { PortHosts, PortTokens } from './network/ports.js';
import { TcpForwards } from './network/tcp-forwards.js';
import { portUpgrade, type PortDeps } from './api/routes/ports.js';
import { SnapshotService } from './core/snapshots.js';
import { recover } from './core/recovery.js';
import { Registry } from './core/registry.js';
import { SandboxService } from './core/sandboxes.js';
import { hostSources, Presets } from './network/presets.js';
import { measureHost } from './core/admission.js';
import { UsageMeter } from './core/usage.js';
import { GvisorDriver } from './drivers/gvisor/driver.js';
import { chooseRunsc } from './drivers/gvisor/runsc-binary.js';
import { SandboxHostFiles } from './storage/sandbox-host-files.js';
import { TemplateCatalog } from './templates/catalog.js';
import { TemplateBuilder } from './templates/builder.js';
import { TemplateService } from './templates/service.js';
import { LogFile } from './storage/log-file.js';
import { ToolService } from './tools/service.js';
import { acquireHomeLock } from './lock.js';
import { TerminalService } from './core/terminals.js';
import { terminalUpgrade } from './api/terminal-socket.js';
import { UiSessions } from './api/ui-sessions.js';
import { LiveFeed } from './core/live.js';
import { BuildLogs } from './templates/build-logs.js';
import { DatabaseService } from './databases/service.js';
import { DatabaseStore } from './databases/store.js';
import { DatabaseUses } from './databases/uses.js';
import { WorkspaceDatabases } from './databases/workspaces.js';
import { TemplateAccess, TemplateOwners } from './templates/owners.js';

export const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;

export interface RunningDaemon {
  url: string;
  port: number;
  /** When it serves TLS: the certificate's SHA-256 fingerprint and file (what clients trust). */
  tls?: { fingerprint: string; certFile: string };
  adminKey: string;
  adminKeyFile: string;
  log: Logger;
  close(): Promise<void>;
}

export async function startDaemon(overrides: Partial<DaemonConfig> = {}): Promise<RunningDaemon> {
  const config = resolveConfig(overrides);
  const paths = layout(config.home);
  // Before anything is started: a listen that would send keys in clear text stops here.
  requireSafeListen(config.host, config.tls !== undefined, config.insecure);
  mkdirSync(config.home, { recursive: true, mode: 0o700 });
  const tls = await serverTls(config.tls, config.home, config.host, config.portDomain);
  // Logged to stdout for whoever runs the daemon, and to a file under home that the API
  // searches by request id (GET /v1/logs, `warren logs --request ID`).
  const logFile = new LogFile(paths.logFile);
  const log = pino({ name: 'warrend' }, pino.multistream([{ stream: process.stdout }, { stream: logFile }]));
  // One stray promise must not take every sandbox's control plane down with it; the bug is
  // logged loudly instead, and sandboxes survive a daemon restart anyway.
  process.on('unhandledRejection', (err) => log.error({ err: err instanceof Error ? err.stack : String(err) }, 'BUG: unhandled promise rejection'));
  // Presets are read from this host's package manager configuration at first use (network/presets.ts).
  const presets = new Presets(hostSources(), (name, r) =>
    r.ok
      ? log.info({ preset: name, rules: r.rules, ...(r.skipped.length ? { skipped: r.skipped } : {}) }, 'egress preset read from this host')
      : log.warn({ preset: name, reason: r.reason }, 'egress preset has no hosts on this host'),
  );
  if (config.defaultAllow) {
    // Expanded now, before anything is mounted or started, so a default naming a preset this
    // host cannot give stops the daemon here.
    const expanded = await presets.expand(config.defaultAllow, 'WARREN_DEFAULT_ALLOW');
    log.info({ allow: expanded.given, expanded: expanded.rules }, 'default egress policy (WARREN_DEFAULT_ALLOW) for sandboxes created without one');
  }
  // Chosen before anything is locked or mounted, so a WARREN_RUNSC that does not run stops here.
  const runsc = await chooseRunsc({ ...(config.runscBinary ? { override: config.runscBinary } : {}), cacheDir: config.runscCache });
  // A fallback is worth a warning: every idle sandbox then costs 3-4% of a core (docs/runsc.md).
  (runsc.kind === 'packaged' ? log.warn : log.info).call(log, { runsc }, `runsc: ${runsc.kind} ${runsc.binary}`);
  for (const dir of [paths.runscRoot, paths.sandboxes, paths.bakes, config.templatesDir]) mkdirSync(dir, { recursive: true, mode: 0o700 });
  const lock = await acquireHomeLock(paths.lockSocket, config.home);

  const registry = new Registry(paths.db);
  const keys = new KeyService(new KeyStore(registry.database), log);
  const tokens = new SandboxTokens(registry.database, log);
  const { key: adminKey, created } = keys.ensureAdminKey(paths.adminKey);
  log.info({ keyFile: paths.adminKey, created }, created ? 'created admin API key' : 'admin API key loaded');
  const hostFiles = SandboxHostFiles.prepare({ guestDir: paths.guest, viewsDir: paths.views, templatesDir: config.templatesDir, nodeBinary: process.execPath });

  const driver = new GvisorDriver({
    runscBinary: runsc.binary,
    stateRoot: paths.runscRoot,
    sandboxesDir: paths.sandboxes,
    shellsDir: paths.shells,
    shellsPerShape: config.shellsPerShape,
    hostFiles,
    log,
  });
  const templates = new TemplateCatalog(config.templatesDir, (msg, fields) => log.warn(fields, msg));
  const baker = new Baker({
    driver,
    catalog: templates,
    dir: paths.bakes,
    inputs: [...hostFiles.agentInputs, process.execPath, runsc.binary],
    mode: config.bake,
    log,
  });
  const defaultPool = defaultPoolSize(config.defaultPool, config.poolMinFreeMB);
  log.info({ template: DEFAULT_TEMPLATE, size: defaultPool.size, why: defaultPool.why, bake: config.bake }, 'default template: warm pool size unless set');
  const pool = new WarmPool({
    catalog: templates,
    stateFile: paths.pools,
    minFreeMB: config.poolMinFreeMB,
    log,
    defaults: { [DEFAULT_TEMPLATE]: defaultPool.size },
    bakeFirst: (t) => {
      baker.prepare(t);
      return baker.baking(t);
    },
  });
  const meter = new UsageMeter(registry.database, {
    priceVcpuHour: config.priceVcpuHour,
    priceGibHour: config.priceGibHour,
    templateOf: (id) => registry.get(id)?.template,
    log,
  });
  let databasesLate = (): WorkspaceDatabases => {
    throw new WarrenError('unavailable', 'databases are not ready yet; retry shortly');
  };
  const egressLog = new EgressLog(registry.database, (err) => log.error({ err: err.message }, 'egress audit records could not be written'));
  const egressCa = new SandboxCaStore(paths.egressCa);
  const egress = new EgressProxy({
    log: log.child({ component: 'egress' }),
    audit: { start: (r) => egressLog.record(r), finish: (id, up, down) => egressLog.finish(id, up, down) },
    ...(config.egressDnsServers ? { lookup: serverLookup(config.egressDnsServers) } : {}),
    credentialTls: { contextFor: (id, host) => egressCa.contextFor(id, host), upstreamCa: upstreamTrust(config.egressUpstreamCaFile) },
    // `db:NAME` rules: DatabaseService exists only later (it needs the sandboxes), so bound late.
    databases: { connect: (sandboxId, name) => databasesLate().connect(sandboxId, name) },
  });
  if (config.egressDnsServers) log.info({ servers: config.egressDnsServers }, 'egress proxy resolves names with these DNS servers');
  const images = new ImageStore(paths.images);
  await images.clearStale();
  const capacity = measureHost(paths.sandboxes);
  log.info({ capacity }, 'host capacity: the most one sandbox may have');
  const sandboxes = new SandboxService({
    registry,
    driver,
    templates,
    log,
    pool,
    poolBackground: config.poolBackground,
    bakes: baker,
    meter,
    images,
    maxForkCount: config.maxForkCount,
    egress,
    egressCa,
    capacity,
    presets,
    ...(config.defaultAllow ? { defaultAllow: config.defaultAllow } : {}),
  });
  const snapshots = new SnapshotService(registry, images, sandboxes, log);
  const exec = new ExecService(sandboxes);
  const files = new FileService(sandboxes);
  const terminals = new TerminalService(sandboxes);

  const builder = new TemplateBuilder({
    templatesDir: config.templatesDir,
    runscBinary: runsc.binary,
    runscRoot: paths.runscRoot,
    hostFiles,
    catalog: templates,
    log,
  });
  await builder.recover();
  const buildLogs = new BuildLogs(path.join(config.templatesDir, '.build-logs'));
  buildLogs.recover();
  const templateService = new TemplateService(templates, builder, log, buildLogs);
  templateService.addUsageCheck((name) => registry.liveUsingTemplate(name).map((id) => `sandbox ${id}`));
  templateService.addUsageCheck((name) => registry.snapshotsUsingTemplate(name).map((id) => `snapshot ${id}`));
  templateService.onRemove((name) => pool.drop(name));
  templateService.onRemove((name) => baker.forget(name));
  // A new version with a start command is baked right away, so even its first create restores.
  templateService.onBuilt((t) => baker.prepare(t));
  await driver.init();
  await recover({ registry, driver, sandboxes, images, sandboxesDir: paths.sandboxes, log });
  await snapshots.reconcile();
  // Sandboxes that died while the daemon was down stop being billed now.
  meter.reconcile(new Set(sandboxes.liveIds()));
  sandboxes.startHeartbeat();
  // The default template is baked in the background right away (not waited for: creates
  // boot cold until the image is ready), so that even the first creates restore it.
  const defaultTemplate = templates.find(DEFAULT_TEMPLATE);
  if (defaultTemplate) baker.prepare(defaultTemplate);
  pool.start({ boot: (t) => sandboxes.bootForPool(t), discard: (m, why) => sandboxes.discardPooled(m, why) });
  const reaper = new Reaper(registry, sandboxes, log, config.reapIntervalMs);
  reaper.start();

  let listeningPort = config.port;
  const forwards = new TcpForwards(async (id, port) => (await sandboxes.guest(id, 'ports')).connectPort(port), log);
  sandboxes.onTeardown((id) => forwards.removeSandbox(id));
  sandboxes.onTeardown((id) => tokens.removeSandbox(id));
  const databaseUses = new DatabaseUses(registry.database);
  const databases = new DatabaseService({
    store: new DatabaseStore(registry.database),
    uses: databaseUses,
    archiveRoot: path.join(config.home, 'databases'),
    ...(process.env.WARREN_DB_BASE_BACKUP_SECONDS ? { baseBackupEveryMs: Number(process.env.WARREN_DB_BASE_BACKUP_SECONDS) * 1000 } : {}),
    writeFile: (id, file, source, user) => files.write(id, file, source, user),
    sandboxes,
    snapshots,
    forwards,
    exec: (id, req) => exec.run(id, req),
    log,
  });
  const workspaceDatabases = new WorkspaceDatabases({ databases, uses: databaseUses, sandboxes, log });
  databasesLate = () => workspaceDatabases;
  // Forwards are in memory only: each database's is opened again, on its old port if free.
  await databases.reconcile();
  const access: Access = {
    keys,
    owners: {
      sandbox: (id) => registry.ownerOf(id),
      snapshot: (id) => registry.getSnapshot(id)?.apiKeyId,
      database: (name) => databases.apiKeyOf(name),
    },
    quotas: new QuotaGate(
      (keyId) => registry.heldBy(keyId),
      Date.now,
      (keyId) => registry.hibernatedBytesOf(keyId),
    ),
    tokens,
    failures: new AuthFailureLimiter(config.authFailuresPerMinute),
    templates: new TemplateAccess(templates, new TemplateOwners(registry.database)),
    sessions: new UiSessions(),
  };
  // A resume, asked for or caused by a call, counts against its owner's quota of running sandboxes.
  sandboxes.onResumeAdmission((id) => {
    const keyId = registry.ownerOf(id);
    return access.quotas.admitResume(keyId ?? '', keyId ? keys.quotasOf(keyId) : undefined, sandboxes.resourcesOf(id));
  });
  sandboxes.onHibernateAdmission((id) => {
    const keyId = registry.ownerOf(id);
    if (keyId) access.quotas.admitHibernate(keyId, keys.quotasOf(keyId));
  });
  const portHosts = new PortHosts(config.portDomain, tls ? 'https' : 'http');
  const ports: PortDeps = { sandboxes, access, forwards, tokens: new PortTokens(paths.portSecret), daemonPort: () => listeningPort, hosts: portHosts };
  const audit = new ApiAudit(registry.database);
  // Both audit logs, the API's and the egress log, keep entries for the same retention.
  const pruneAudit = () => {
    const before = Date.now() - config.auditRetentionDays * 86_400_000;
    const removed = audit.prune(before);
    if (removed) log.info({ removed, retentionDays: config.auditRetentionDays }, 'API audit trail pruned');
    const egressRemoved = egressLog.prune(before);
    if (egressRemoved) log.info({ removed: egressRemoved, retentionDays: config.auditRetentionDays }, 'egress log pruned');
  };
  pruneAudit();
  const auditPruner = setInterval(pruneAudit, 3_600_000);
  auditPruner.unref();
  const app = buildApp({
    registry,
    access,
    audit,
    sandboxes,
    exec,
    files,
    templateService,
    pool,
    baker,
    meter,
    snapshots,
    egressLog,
    ports,
    log,
    logFile,
    tools: new ToolService(exec, files),
    version: VERSION,
    runsc,
    self: () => ({ url: loopbackUrl(config.host, listeningPort, tls !== undefined), ...(tls ? { ca: tls.cert } : {}) }),
    terminals,
    databases,
    workspaceDatabases,
    live: new LiveFeed(sandboxes, driver, () => registry.generation),
  });
  const server: ServerType = await new Promise((resolve) => {
    // The app discards unread request bodies itself (see lingerOnUnreadBody): the adapter's
    // own clean-up gives up after 64 MiB or 500 ms and resets the connection, which loses
    // the error response of a refused large upload and breaks the client's next request.
    const s = serve(
      {
        fetch: app.fetch,
        port: config.port,
        hostname: config.host,
        autoCleanupIncoming: false,
        ...(tls ? { createServer: https.createServer, serverOptions: { cert: tls.cert, key: tls.key } } : {}),
      },
      () => resolve(s),
    );
  });
  // Idle keep-alive connections stay open longer than clients keep them (node's global agent
  // drops its idle sockets after 5 s, the server's default too): at equal timeouts a client
  // could send a request on a socket the daemon was closing that instant, and a POST that is
  // not safe to send twice failed with "socket hang up" (seen on a database branch under load).
  (server as http.Server).keepAliveTimeout = 65_000;
  (server as http.Server).headersTimeout = 66_000;
  // Requests node's parser rejects (bad header lines, oversized headers) never reach the
  // app; answer them in the API's JSON error shape too, instead of a bare status line.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (!socket.writable) return;
    const why = err.code === 'HPE_HEADER_OVERFLOW' ? 'request headers are too large' : `malformed HTTP request (${err.code ?? err.message})`;
    const body = JSON.stringify({ error: { code: 'invalid_argument', message: why } });
    socket.end(`HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
  const port = (server.address() as AddressInfo).port;
  listeningPort = port;
  server.on('upgrade', terminalUpgrade({ access, terminals, portHosts, log }, portUpgrade(ports, log)));
  const url = `${tls ? 'https' : 'http'}://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  log.info(
    { url, home: config.home, version: VERSION, ...(tls ? { tlsFingerprint: tls.fingerprint, tlsCertFile: tls.certFile } : {}) },
    'warren daemon listening',
  );

  return {
    url,
    port,
    ...(tls ? { tls: { fingerprint: tls.fingerprint, certFile: tls.certFile } } : {}),
    adminKey,
    adminKeyFile: paths.adminKey,
    log,
    async close() {
      reaper.stop();
      clearInterval(auditPruner);
      await pool.stop();
      await baker.stop();
      await driver.close();
      await databases.stopArchives();
      forwards.closeAll();
      sandboxes.detachAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      egressLog.flush();
      registry.close();
      await new Promise<void>((resolve) => lock.close(() => resolve()));
      logFile.close();
    },
  };
}

/** The URL that reaches a daemon listening on `host` from the same machine. */
function loopbackUrl(host: string, port: number, tls: boolean): string {
  const scheme = tls ? 'https' : 'http';
  if (host === '0.0.0.0' || host === '') return `${scheme}://127.0.0.1:${port}`;
  if (host === '::') return `${scheme}://[::1]:${port}`;
  return `${scheme}://${host.includes(':') ? `[${host}]` : host}:${port}`;
}
