#!/usr/bin/env bash
# A short tour: create a sandbox, run commands, move a file in and out, remove it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
w=./bin/warren

log "create a sandbox"
id=$($w create --metadata demo=quickstart --ttl 600)
trap '$w rm "$id" >/dev/null 2>&1 || true' EXIT
echo "  $id"

log "run commands (its own kernel: gVisor)"
$w exec "$id" -- bash -c 'echo "hello from $(hostname) as $(whoami)"; uname -sr; node -v; python3 -V'

log "write a file in, edit it inside, read it back"
tmp=$(mktemp)
echo "print('computed inside:', sum(range(10)))" >"$tmp"
$w cp "$tmp" "$id:/home/user/hello.py"
$w exec "$id" -- python3 hello.py
$w exec "$id" -- bash -c 'echo "# edited in the sandbox" >> hello.py'
$w cp "$id:/home/user/hello.py" - | tail -1
rm -f "$tmp"

log "a command that exits non-zero passes its exit code through"
set +e
$w exec "$id" -- bash -c 'echo failing >&2; exit 3'
echo "  exit code: $?"
set -e

log "list, then remove"
$w ls
$w rm "$id"
trap - EXIT
log "demo finished. Try: ./bin/warren create, ./bin/warren exec ID -- CMD, ./bin/warren --help"
