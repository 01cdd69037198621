#!/usr/bin/env bash
# The whole test suite: unit tests beside the code, then end-to-end tests against real
# runsc sandboxes. Installs and builds what is missing first (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bash scripts/setup.sh --no-daemon
# Format, lint, types and import rules: seconds, before minutes of sandboxes.
bash scripts/check-static.sh
bash scripts/clean-test-root.sh
shopt -s globstar nullglob
unit=(packages/*/dist/**/*.test.js)
e2e=(tests/dist/*.test.js)
[ ${#e2e[@]} -gt 0 ] || die "no end-to-end tests found in tests/dist (did the build run?)"
log "running ${#unit[@]} unit and ${#e2e[@]} end-to-end test files"
# One file at a time: a 2-core machine runs real sandboxes, and timing-sensitive tests
# (reaper, heartbeat) should not starve each other.
node --test --test-concurrency=1 "${unit[@]}" "${e2e[@]}"
bash scripts/check-leftovers.sh
