#!/usr/bin/env bash
# Builds runsc from Debian's own gVisor source package (golang-gvisor-gvisor, bookworm-
# backports) with warren's patches (patches/gvisor/*.patch: the idle fast-path monitor
# parks, so an idle sandbox costs ~nothing; docs/runsc.md). Only Debian packages are used:
# the source package's build dependencies, Go in GOPATH mode against /usr/share/gocode,
# no module downloads (GOPROXY=off, GO111MODULE=off, as dh-golang builds it).
#
# Idempotent and cached: the result is $WARREN_RUNSC_CACHE/<source version>+<patch hash>/runsc
# (default /usr/local/lib/warren/runsc; the build tree, Go cache and log: /var/cache/warren/runsc-build)
# and a rerun with the same source version and patches does nothing. Only runsc is built,
# not the whole source package.
#
# Exit status 0 when the patched runsc is ready; non-zero when the build failed (the log
# file is named on stderr). setup.sh turns a failure into a warning: the daemon then uses
# the packaged /usr/bin/runsc.
#
#   bash scripts/build-runsc.sh            build if needed, print the binary's path last
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

[ "$(id -u)" = 0 ] || die "run as root (installs build dependencies with apt-get)"
# Not under $WARREN_HOME/runsc: that is runsc's own --root (container state).
cache_root="${WARREN_RUNSC_CACHE:-/usr/local/lib/warren/runsc}"
build_root=/var/cache/warren/runsc-build
src_pkg=golang-gvisor-gvisor
suite=bookworm-backports
repo_dir=$(pwd)
# Progress goes to stderr: stdout carries only the path of the binary, for callers to read.
step() { log "runsc build: $*" >&2; }

# --- a deb-src entry for bookworm-backports, on the mirror apt already uses --------------
src_version() { apt-cache showsrc "$src_pkg" 2>/dev/null | awk '/^Version:/{print $2}' | grep 2024 | sort -V | tail -1 || true; }
src_list=/etc/apt/sources.list.d/warren-backports-src.sources
version=$(src_version)
if [ -z "$version" ]; then
  if [ ! -f "$src_list" ]; then
    cat >"$src_list" <<SRC
Types: deb-src
URIs: $(debian_mirror)
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    step "added deb-src for $suite to apt sources ($src_list)"
  fi
  apt-get update -qq
  version=$(src_version)
fi
[ -n "$version" ] || die "apt knows no source package $src_pkg (is deb-src for $suite in apt's sources?)"
case "$version" in 0.0~2024*) ;; *) die "unexpected $src_pkg version $version (the patches are written for 0.0~20240729)" ;; esac

# Bump when the recipe below changes what is built (not for comments or messages), so
# that a rerun rebuilds; edits that do not change the binary keep the cache.
recipe=1
patch_hash=$( { echo "recipe $recipe"; cat patches/gvisor/*.patch patches/gvisor/debian/*.patch; } | sha256sum | cut -c1-12)
out_dir="$cache_root/${version}+${patch_hash}"
# The daemon runs $cache_root/current/runsc (drivers/gvisor/runsc-binary.ts).
point_current() { ln -sfn "$(basename "$out_dir")" "$cache_root/current.tmp" && mv -T "$cache_root/current.tmp" "$cache_root/current"; }
if [ -x "$out_dir/runsc" ] && "$out_dir/runsc" --version >/dev/null 2>&1; then
  point_current
  step "cached: $out_dir/runsc"
  echo "$out_dir/runsc"
  exit 0
fi

work="$build_root/src"
log_file="$build_root/build.log"
mkdir -p "$work"
: >"$log_file"
started=$(date +%s)
fail() {
  printf '\033[31m[warren] runsc build failed:\033[0m %s (log: %s)\n' "$*" "$log_file" >&2
  exit 1
}

# --- build dependencies (Debian's, from the source package's Build-Depends) --------------
step "installing build dependencies of $src_pkg $version (apt-get build-dep)"
DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -qq -t "$suite" "$src_pkg" >>"$log_file" 2>&1 \
  || fail "apt-get build-dep $src_pkg"
command -v go >/dev/null || fail "no go after installing build dependencies"

# --- the source --------------------------------------------------------------------------
step "fetching the source of $src_pkg $version (apt-get source)"
rm -rf "$work" && mkdir -p "$work"
cd "$work"
upstream=${version%-*}
upstream=${upstream#*:}
tree="$work/$src_pkg-$upstream"
# apt verifies each file against the signed Sources index. Some mirrors carry the upstream
# tarball but not the .dsc and the Debian tarball of a backport; then the upstream tarball
# is unpacked by hand and Debian's two source patches come from patches/gvisor/debian/
# (copies of debian/patches/ of the same upstream version).
if apt-get source -qq -t "$suite" "$src_pkg=$version" >>"$log_file" 2>&1 && [ -d "$tree" ]; then
  step "unpacked with Debian's patches (dpkg-source)"
else
  orig=$(ls "$work"/${src_pkg}_"$upstream".orig.tar.* 2>/dev/null | head -1)
  [ -n "$orig" ] || fail "apt-get source $src_pkg=$version fetched neither the source package nor its upstream tarball"
  step "the mirror lacks the Debian part of $version; using its upstream tarball and patches/gvisor/debian/"
  tar xf "$orig" -C "$work" >>"$log_file" 2>&1 || fail "unpacking $orig"
  for p in "$repo_dir"/patches/gvisor/debian/*.patch; do
    patch -d "$tree" -p1 --forward <"$p" >>"$log_file" 2>&1 || fail "applying Debian patch $(basename "$p")"
  done
fi
for p in "$repo_dir"/patches/gvisor/*.patch; do
  step "applying $(basename "$p")"
  patch -d "$tree" -p1 --forward <"$p" >>"$log_file" 2>&1 || fail "applying $(basename "$p")"
done

# --- generated parts, as debian/rules makes them ------------------------------------------
# GOPATH layout as dh-golang makes it: _build/src/gvisor.dev/gvisor, Debian's Go libraries
# from /usr/share/gocode.
gopath="$work/_build"
pkg_dir="$gopath/src/gvisor.dev/gvisor"
mkdir -p "$(dirname "$pkg_dir")"
mv "$tree" "$pkg_dir"
cd "$pkg_dir"
step "building the vDSO, the systrap signal handler blob and the eBPF programs"
{
  g++ -I. -O2 -std=c++11 -fPIC -fno-sanitize=all -fno-stack-protector -shared -nostdlib \
    -Wl,-soname=linux-vdso.so.1 -Wl,--hash-style=sysv -Wl,--no-undefined -Wl,-Bsymbolic \
    -Wl,-z,max-page-size=4096 -Wl,-z,common-page-size=4096 -Wl,-Tvdso/vdso_amd64.lds \
    -o pkg/sentry/loader/vdsodata/vdso_amd64.so vdso/vdso.cc vdso/vdso_time.cc \
    && python3 ./vdso/check_vdso.py --check-data --vdso=pkg/sentry/loader/vdsodata/vdso_amd64.so
} >>"$log_file" 2>&1 || fail "building the vDSO"
(
  # sync with pkg/sentry/platform/systrap/sysmsg/build.bzl (and Debian's sysmsg.makefile)
  cd pkg/sentry/platform/systrap/sysmsg
  unset ELF_PACKAGE_METADATA
  cflags=(-Wall -Wno-unused-command-line-argument -fpie -O2 -fno-builtin -ffreestanding
    -mgeneral-regs-only -g -Wa,--noexecstack -fno-asynchronous-unwind-tables -fno-stack-protector)
  objs=()
  for f in sighandler_amd64.c syshandler_amd64.S sigrestorer_amd64.S sysmsg_lib.c; do
    cc "${cflags[@]}" -c "$f" -o "${f%.*}.o"
    objs+=("${f%.*}.o")
  done
  ld -pie -z noexecstack -T pie.lds.S "${objs[@]}" -o sighandler.built-in.bin.o
  bash gen_offsets_go.sh sighandler Sighandler sighandler.built-in.bin.o >sighandler_amd64.go
  objcopy -O binary sighandler.built-in.bin.o sighandler.built-in.amd64.bin
  rm -f ./*.o
) >>"$log_file" 2>&1 || fail "building the systrap signal handler blob"
# runsc embeds these (runsc/sandbox and the xdp tools it links in).
for c in runsc/sandbox/bpf/*.ebpf.c tools/xdp/cmd/bpf/*.ebpf.c; do
  clang -O2 -Wall -Werror -target bpf -c "$c" -o "${c%.ebpf.c}_ebpf.o" -I/usr/include/x86_64-linux-gnu \
    >>"$log_file" 2>&1 || fail "building $c"
done

# --- runsc ---------------------------------------------------------------------------------
step "compiling runsc (go build; several minutes on 2 cores)"
export GOPATH="$gopath:/usr/share/gocode" GO111MODULE=off GOPROXY=off GOFLAGS= CGO_ENABLED=0
export GOCACHE="$build_root/gocache" GOTOOLCHAIN=local
go build -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$upstream+warren.$patch_hash" \
  -o "$work/runsc" gvisor.dev/gvisor/runsc >>"$log_file" 2>&1 || fail "go build of runsc"
"$work/runsc" --version >>"$log_file" 2>&1 || fail "the new runsc does not run (runsc --version)"

mkdir -p "$out_dir"
install -m 0755 "$work/runsc" "$out_dir/runsc.tmp"
mv "$out_dir/runsc.tmp" "$out_dir/runsc"
point_current
cd "$repo_dir"
rm -rf "$work"
step "built $out_dir/runsc in $(($(date +%s) - started)) s"
echo "$out_dir/runsc"
