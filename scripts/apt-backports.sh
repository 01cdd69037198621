#!/usr/bin/env bash
# Adds bookworm-backports to apt (runsc comes from there), using the mirror apt already
# uses for bookworm. Idempotent.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
if grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  exit 0
fi
mirror=$(debian_mirror)
cat >/etc/apt/sources.list.d/warren-backports.sources <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
log "added bookworm-backports to apt sources"
