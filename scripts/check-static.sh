#!/usr/bin/env bash
# Static checks `npm test` runs before any sandbox starts (docs/dependencies.md says why each
# tool): format and syntax lint (Biome), type errors (tsc, strict with
# noUncheckedIndexedAccess), type-aware async rules (typescript-eslint: floating and misused
# promises, exhaustive switches), import rules (dependency-cruiser: no circles, each layer
# imports only the ones below it), and dead code (knip: unused files, exports and dependencies,
# and dependencies used but not listed). Fix formatting with `npx biome format --write .`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
log "static checks: format and lint (biome)"
npx --no-install biome check --error-on-warnings .
log "static checks: types (tsc -b)"
npx --no-install tsc -b packages/protocol packages/guest packages/daemon packages/sdk packages/mcp packages/cli tests bench
npx --no-install tsc -p packages/ui
log "static checks: async rules (typescript-eslint)"
npx --no-install eslint --max-warnings 0 .
log "static checks: import circles and layers (dependency-cruiser)"
npx --no-install depcruise packages --config .dependency-cruiser.cjs
log "static checks: unused exports and dependencies (knip)"
npx --no-install knip --no-progress
