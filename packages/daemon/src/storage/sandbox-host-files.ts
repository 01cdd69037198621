/**
 * The host files sandboxes see, and the read-only views they see them through.
 *
 * A sandbox mounts the guest agent, warren-init, the connect and terminal helpers and the node binary
 * (and a build step also the host's resolv.conf), and its root filesystem's lower layer is
 * its template's rootfs. The daemon keeps its own copies of the small files in
 * `$WARREN_HOME/guest` (read-write for the daemon) and hands sandboxes only paths inside two
 * read-only views (storage/read-only-views.ts):
 *
 *   $WARREN_HOME/views/guest      -> $WARREN_HOME/guest          lib/, etc/resolv.conf
 *   $WARREN_HOME/views/templates  -> the templates directory     <name>/<version>/rootfs
 *   $WARREN_HOME/views/node       -> the host's node binary (a file bind mount)
 *
 * so nothing a sandbox does, as root in any namespace, can change a host file that other
 * sandboxes run (docs/security.md).
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import path from 'node:path';
import { AGENT_FILE, AGENT_PATH, CONNECT_HELPER_FILE, GUEST_NODE_PATH, INIT_FILE, PTY_HELPER_FILE } from '../drivers/gvisor/bundle.js';
import { ensureReadOnlyView, inspectView, readMountTable, removeView, type ViewStatus } from './read-only-views.js';

const require = createRequire(import.meta.url);

/** The host's CA bundle in the directory buildTrust() returns. */
export const BUILD_CA_FILE = 'host-ca.crt';

export interface HostFilesLayout {
  /** The daemon's read-write copies: $WARREN_HOME/guest. */
  guestDir: string;
  /** Where the read-only views are mounted: $WARREN_HOME/views. */
  viewsDir: string;
  templatesDir: string;
  /** The host's node binary, which runs the agent inside every sandbox. */
  nodeBinary: string;
}

function viewPairs(layout: HostFilesLayout): Array<{ source: string; target: string }> {
  const target = (name: 'guest' | 'templates' | 'node') => path.join(layout.viewsDir, name);
  return [
    { source: layout.guestDir, target: target('guest') },
    { source: layout.templatesDir, target: target('templates') },
    // A file view: no copy of ~100 MB, and no hard link (the home may be on another filesystem).
    { source: realpathSync(layout.nodeBinary), target: target('node') },
  ];
}

/**
 * Whether each view of a home is in place and read-only (`warren doctor`, tests): the three
 * every daemon makes, checked against their sources, and any other mount under the views
 * directory (a templates root's view), which must at least be read-only.
 */
export function inspectHostViews(layout: HostFilesLayout): ViewStatus[] {
  const table = readMountTable();
  const fixed = viewPairs(layout).map(({ source, target }) =>
    existsSync(source) ? inspectView(source, target, table) : { source, target, ok: false, detail: `${source} does not exist` },
  );
  const known = new Set(fixed.map((v) => v.target));
  const others = table
    .filter((m) => m.target.startsWith(`${layout.viewsDir}/`) && !known.has(m.target))
    .map((m) => ({
      source: '(a templates directory)',
      target: m.target,
      ok: m.options.includes('ro'),
      detail: m.options.includes('ro') ? 'read-only bind mount' : 'mounted read-write',
    }));
  return [...fixed, ...others];
}

/** Unmounts a home's views; for whoever removes the home itself. */
export function removeHostViews(viewsDir: string): void {
  const targets = new Set(
    readMountTable()
      .filter((m) => m.target.startsWith(`${viewsDir}/`))
      .map((m) => m.target),
  );
  for (const target of targets) removeView(target);
}

/** Replaces dest by a file with the given content only if it differs (tmp + rename). */
function writeIfChanged(dest: string, content: Buffer, mode: number): void {
  if (existsSync(dest) && readFileSync(dest).equals(content) && (statSync(dest).mode & 0o777) === mode) return;
  const tmp = `${path.dirname(dest)}/.${path.basename(dest)}.tmp`;
  writeFileSync(tmp, content, { mode });
  chmodSync(tmp, mode);
  renameSync(tmp, dest);
}

export class SandboxHostFiles {
  private constructor(
    private readonly layout: HostFilesLayout,
    private readonly guestView: string,
    private readonly templatesView: string,
    /** Mounted at GUEST_NODE_PATH. */
    readonly node: string,
  ) {}

  /** Views of templates roots by the root's real path, checked or mounted once per daemon. */
  private readonly templateViews = new Map<string, string>();

  /**
   * Installs the guest files into the home and makes sure both views are mounted read-only.
   * Throws failed_precondition when they cannot be (not root, no mount): the daemon must not
   * start sandboxes on host paths they could write.
   */
  static prepare(layout: HostFilesLayout): SandboxHostFiles {
    const { guestDir } = layout;
    for (const sub of ['lib', 'etc', 'build']) mkdirSync(path.join(guestDir, sub), { recursive: true, mode: 0o755 });
    chmodSync(guestDir, 0o755);
    // Before the views, the files sat at the top of guest/ (removed so nothing mounts them).
    for (const legacy of [AGENT_FILE, INIT_FILE, CONNECT_HELPER_FILE]) rmSync(path.join(guestDir, legacy), { force: true });
    // Literal specifiers: the dependency on @warren/guest is visible (knip.jsonc).
    for (const [file, name] of [
      [require.resolve('@warren/guest/agent'), AGENT_FILE],
      [require.resolve('@warren/guest/init'), INIT_FILE],
      [require.resolve('@warren/guest/pty'), PTY_HELPER_FILE],
    ] as const) {
      writeIfChanged(path.join(guestDir, 'lib', name), readFileSync(file), 0o755);
    }
    // `connect HOST PORT` inside the sandbox: TCP through the egress proxy (docs/network.md).
    writeIfChanged(path.join(guestDir, 'lib', CONNECT_HELPER_FILE), Buffer.from(`#!/bin/sh\nexec ${GUEST_NODE_PATH} ${AGENT_PATH} connect "$@"\n`), 0o755);
    mkdirSync(layout.templatesDir, { recursive: true, mode: 0o700 });
    for (const { source, target } of viewPairs(layout)) ensureReadOnlyView(source, target);
    const [guest, templates, node] = viewPairs(layout).map((v) => v.target);
    return new SandboxHostFiles(layout, guest!, templates!, node!);
  }

  /** The host files the agent consists of (read-write copies), for bake invalidation. */
  get agentInputs(): string[] {
    return [path.join(this.layout.guestDir, 'lib', AGENT_FILE), path.join(this.layout.guestDir, 'lib', INIT_FILE)];
  }

  /** Mounted at GUEST_LIB_DIR. */
  get guestLib(): string {
    return path.join(this.guestView, 'lib');
  }

  /**
   * A read-only copy of the host's resolv.conf, for build steps (they resolve names with the
   * host's network); refreshed on each call, so a changed host file is seen by the next step.
   */
  resolvConf(hostFile = '/etc/resolv.conf'): string | undefined {
    if (!existsSync(hostFile)) return undefined;
    writeIfChanged(path.join(this.layout.guestDir, 'etc', 'resolv.conf'), readFileSync(hostFile), 0o644);
    return path.join(this.guestView, 'etc', 'resolv.conf');
  }

  /**
   * A read-only directory holding a copy of the host's CA bundle (`host-ca.crt`), for build
   * steps: they fetch with the host's network, so they trust what the host trusts (a host
   * behind a TLS-inspecting proxy has that proxy's CA in its bundle). The bundle is
   * $SSL_CERT_FILE, else Debian's /etc/ssl/certs/ca-certificates.crt; undefined when neither
   * exists. Refreshed on each call, like resolvConf.
   */
  buildTrust(env: NodeJS.ProcessEnv = process.env): string | undefined {
    const bundle = [env.SSL_CERT_FILE, '/etc/ssl/certs/ca-certificates.crt'].find((f): f is string => !!f && existsSync(f));
    if (!bundle) return undefined;
    writeIfChanged(path.join(this.layout.guestDir, 'build', BUILD_CA_FILE), readFileSync(bundle), 0o644);
    return path.join(this.guestView, 'build');
  }

  /**
   * The view path of a template rootfs (<root>/<name>/<version>/rootfs). The templates
   * directory's view serves most; a template whose version lives elsewhere (the directory
   * holds a symlink to another templates directory's template) gets a view of that other
   * directory, made on first use.
   */
  rootfs(hostRootfs: string): string {
    const real = realpathSync(hostRootfs);
    const root = path.dirname(path.dirname(path.dirname(real)));
    let view = this.templateViews.get(root);
    if (!view) {
      const own = realpathSync(this.layout.templatesDir);
      view = root === own ? this.templatesView : path.join(this.layout.viewsDir, `templates-${createHash('sha256').update(root).digest('hex').slice(0, 12)}`);
      ensureReadOnlyView(root, view);
      this.templateViews.set(root, view);
    }
    return path.join(view, path.relative(root, real));
  }
}
