/**
 * The import rules `npm test` enforces (scripts/check-imports.sh): no circles, and each layer
 * imports only the layers below it. Layers, low to high:
 *   protocol  <-  guest (the agent inside a sandbox)
 *   protocol  <-  daemon: drivers, storage, network, templates  <-  core  <-  tools  <-  api  <-  daemon.ts
 *   protocol  <-  sdk  <-  mcp (the MCP server, a client of the daemon through the SDK)  <-  cli (which may start the daemon)
 *   mcp  <-  daemon's api (serves it at /mcp; the daemon uses the SDK only through it)
 * Imports of another package ('@warren/sdk') resolve to its dist/, which is not followed but
 * is checked, so these rules hold across packages too (the static checks build first).
 */
module.exports = {
  forbidden: [
    { name: 'no-circular', severity: 'error', comment: 'an import circle', from: {}, to: { circular: true } },
    {
      name: 'protocol-is-the-bottom',
      severity: 'error',
      comment: 'the wire contract depends on no other package',
      from: { path: '^packages/protocol/' },
      to: { path: '^packages/(guest|daemon|sdk|mcp|cli)/' },
    },
    {
      name: 'guest-knows-only-protocol',
      severity: 'error',
      comment: 'the agent inside a sandbox shares only the protocol with the host side',
      from: { path: '^packages/guest/' },
      to: { path: '^packages/(daemon|sdk|mcp|cli)/' },
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
      name: 'sandbox-parts-below-facade',
      severity: 'error',
      comment: 'the parts of the sandbox service (core/sandboxes/) are wired by its facade (core/sandboxes.ts); none of them imports it',
      from: { path: '^packages/daemon/src/core/sandboxes/' },
      to: { path: '^packages/daemon/src/core/sandboxes[.]ts$' },
    },
    {
      name: 'sandboxes-do-not-import-bake',
      severity: 'error',
      comment: 'bakes and sandbox boots share only core/template-start.ts; the service gets the Baker as an interface (BakedImages)',
      from: { path: '^packages/daemon/src/core/sandboxes([.]ts$|/)' },
      to: { path: '^packages/daemon/src/core/bake[.]ts$' },
    },
    {
      name: 'bake-does-not-import-sandboxes',
      severity: 'error',
      comment: 'a bake boots its own sandbox through the driver; it knows nothing of the sandbox service',
      from: { path: '^packages/daemon/src/core/bake[.]ts$' },
      to: { path: '^packages/daemon/src/core/sandboxes([.]ts$|/)' },
    },
    {
      name: 'sdk-is-a-client',
      severity: 'error',
      comment: 'the SDK talks HTTP to the daemon; it does not import it',
      from: { path: '^packages/sdk/' },
      to: { path: '^packages/(daemon|guest|mcp|cli)/' },
    },
    {
      name: 'mcp-is-a-client',
      severity: 'error',
      comment: 'the MCP server acts on the daemon through the SDK, like any client; it does not import the daemon',
      from: { path: '^packages/mcp/' },
      to: { path: '^packages/(daemon|guest|cli)/' },
    },
    {
      name: 'mcp-only-in-api',
      severity: 'error',
      comment: 'the daemon serves the MCP server from its HTTP routes; nothing below them knows of it',
      from: { path: '^packages/daemon/src/(core|tools|drivers|storage|network|templates)/' },
      to: { path: '^packages/mcp/' },
    },
    {
      name: 'daemon-is-no-sdk-client',
      severity: 'error',
      comment: "the daemon calls itself only through the MCP server (on loopback, with the caller's key), never the SDK directly",
      from: { path: '^packages/daemon/' },
      to: { path: '^packages/sdk/' },
    },
  ],
  options: {
    doNotFollow: { path: '(^|/)(dist|node_modules)/' },
    exclude: { path: '(^|/)node_modules/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.base.json' },
    combinedDependencies: true,
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default', 'types'] },
  },
};
