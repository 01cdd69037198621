/**
 * The import rules `npm test` enforces (scripts/check-imports.sh): no circles, and each layer
 * imports only the layers below it. Layers, low to high:
 *   protocol  <-  guest (the agent inside a sandbox)
 *   protocol  <-  daemon: drivers, storage, network, templates  <-  core  <-  tools  <-  api  <-  daemon.ts
 *   protocol  <-  sdk  <-  cli (which may start the daemon)
 */
module.exports = {
  forbidden: [
    { name: 'no-circular', severity: 'error', comment: 'an import circle', from: {}, to: { circular: true } },
    {
      name: 'protocol-is-the-bottom',
      severity: 'error',
      comment: 'the wire contract depends on no other package',
      from: { path: '^packages/protocol/' },
      to: { path: '^packages/(guest|daemon|sdk|cli)/' },
    },
    {
      name: 'guest-knows-only-protocol',
      severity: 'error',
      comment: 'the agent inside a sandbox shares only the protocol with the host side',
      from: { path: '^packages/guest/' },
      to: { path: '^packages/(daemon|sdk|cli)/' },
    },
    {
      name: 'daemon-below-api',
      severity: 'error',
      comment: 'core, tools, drivers, storage, network and templates never see HTTP routes',
      from: { path: '^packages/daemon/src/(core|tools|drivers|storage|network|templates)/' },
      to: { path: '^packages/daemon/src/api/' },
    },
    {
      name: 'core-below-tools',
      comment: 'the agent tools are built on sandboxes, exec and files; nothing below them uses them',
      severity: 'error',
      from: { path: '^packages/daemon/src/(core|drivers|storage|network|templates)/' },
      to: { path: '^packages/daemon/src/tools/' },
    },
    {
      name: 'drivers-below-core',
      severity: 'error',
      comment: 'a driver runs sandboxes; it knows nothing of the services that use it',
      from: { path: '^packages/daemon/src/(drivers|storage)/' },
      to: { path: '^packages/daemon/src/(core|network|templates)/' },
    },
    {
      name: 'sdk-is-a-client',
      severity: 'error',
      comment: 'the SDK talks HTTP to the daemon; it does not import it',
      from: { path: '^packages/sdk/' },
      to: { path: '^packages/(daemon|guest|cli)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(dist|node_modules)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.base.json' },
    combinedDependencies: true,
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default', 'types'] },
  },
};
