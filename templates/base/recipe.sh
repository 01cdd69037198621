#!/usr/bin/env bash
# The `base` template: Debian 12 (debootstrap, minbase) with a shell, git, curl, python3
# and node (the host's node binary, mounted read-only by the daemon at /opt/warren/bin).
# Built once into $WARREN_HOME/templates/base/<recipe-hash>/ and reused until this file
# changes. Usage: recipe.sh WARREN_HOME
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/../../scripts/lib.sh"

home="${1:?usage: recipe.sh WARREN_HOME}"
PACKAGES="bash,coreutils,procps,git,curl,ca-certificates,python3,libstdc++6,less,xz-utils,findutils,grep,sed,tar,gzip,unzip"
hash=$(cat "$0" | sha256sum | cut -c1-12)
dir="$home/templates/base"
version="$dir/$hash"

if [ -f "$version/manifest.json" ]; then
  ln -sfn "$hash" "$dir/current"
  log "template base is up to date (version $hash)"
  exit 0
fi

mkdir -p "$dir"
build="$dir/.build-$hash"
rm -rf "$build"
mkdir -p "$build"
start=$(date +%s)
log "[1/4] debootstrap Debian 12 into $build/rootfs (a few minutes)"
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$build/rootfs" "$(debian_mirror)" >"$build/debootstrap.log" 2>&1 \
  || { tail -20 "$build/debootstrap.log" >&2; die "debootstrap failed (log: $build/debootstrap.log)"; }

log "[2/4] add user 'user' (uid 1000) and node"
chroot "$build/rootfs" /usr/sbin/useradd --create-home --shell /bin/bash --uid 1000 --user-group user
mkdir -p "$build/rootfs/opt/warren/bin" "$build/rootfs/opt/warren/lib"
: >"$build/rootfs/opt/warren/bin/node"   # mount point for the host's node binary
ln -sfn /opt/warren/bin/node "$build/rootfs/usr/local/bin/node"
echo 'sandbox' >"$build/rootfs/etc/hostname"

log "[3/4] trim caches"
rm -rf "$build/rootfs/var/cache/apt/archives"/*.deb "$build/rootfs/var/lib/apt/lists"/* "$build/rootfs/tmp"/*

log "[4/4] register version $hash"
printf '{"name":"base","version":"%s","builtAt":"%s"}\n' "$hash" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$build/manifest.json"
mv "$build" "$version"
ln -sfn "$hash" "$dir/current"
log "template base built in $(( $(date +%s) - start ))s"
