#!/usr/bin/env bash
# Removes what an earlier test run left under the test root because it was cut short (the
# machine restarted, the run was killed): runsc containers, their processes, mounts and the
# daemon homes. Runs before the suite, so the leftover check after it judges only this run.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=/var/lib/warren-test
[ -d "$root" ] || exit 0
[ -n "$(ls -A "$root")" ] || exit 0
log "removing what an earlier, interrupted test run left in $root: $(ls -A "$root" | tr '\n' ' ')"
# A daemon home is any directory with a runsc root (some tests put theirs on a tmpfs).
for runsc_root in $(find "$root" -maxdepth 3 -type d -name runsc); do
  for id in $(runsc --root "$runsc_root" list --quiet 2>/dev/null || true); do
    runsc --root "$runsc_root" delete --force "$id" >/dev/null 2>&1 || log "could not delete runsc container $id under $runsc_root"
  done
done
for pid in $(ps -eo pid,args | grep -v grep | grep "$root" | awk '{print $1}'); do
  kill -9 "$pid" 2>/dev/null || true
done
# Deepest first, so nested mounts come off before their parents.
for target in $(findmnt -rn -o TARGET | grep "^$root/" | sort -r); do
  umount -l "$target" || log "could not unmount $target"
done
rm -rf "${root:?}"/*
