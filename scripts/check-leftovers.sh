#!/usr/bin/env bash
# Fails if the test suite left runsc containers, sandbox processes, mounts (template build
# overlays included) or network namespaces behind.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=/var/lib/warren-test
problems=0
if [ -d "$root" ]; then
  for home in "$root"/home-*; do
    [ -d "$home/runsc" ] || continue
    left=$(runsc --root "$home/runsc" list --quiet 2>/dev/null || true)
    if [ -n "$left" ]; then echo "leftover runsc containers in $home: $left"; problems=1; fi
  done
  if ps -eo args | grep -v grep | grep -q "$root"; then
    echo "leftover processes:"; ps -eo pid,args | grep -v grep | grep "$root"; problems=1
  fi
  if grep -q "$root" /proc/mounts; then echo "leftover mounts:"; grep "$root" /proc/mounts; problems=1; fi
fi
# Template builds mount overlays under <templatesDir>/.build and run build-* containers; a
# finished or failed build removes both, wherever its templates dir is.
home="${WARREN_HOME:-/var/lib/warren}"
overlays=$(findmnt -rn -t overlay -o TARGET 2>/dev/null | grep -E "^($root|$home)/" || true)
if [ -n "$overlays" ]; then echo "leftover overlay mounts under warren homes:"; echo "$overlays"; problems=1; fi
if [ -d "$home/runsc" ]; then
  builds=$(runsc --root "$home/runsc" list --quiet 2>/dev/null | grep '^build-' || true)
  if [ -n "$builds" ]; then echo "leftover template build containers in $home: $builds"; problems=1; fi
fi
if [ -n "$(ip netns list 2>/dev/null)" ]; then echo "leftover network namespaces: $(ip netns list)"; problems=1; fi
[ "$problems" = 0 ] || die "the tests left things behind (see above)"
log "no leftovers: no runsc containers, processes, mounts or network namespaces from the tests"
