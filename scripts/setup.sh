#!/usr/bin/env bash
# One-command setup for a fresh Debian 12 machine, as root. Idempotent: run it again any time.
#   bash scripts/setup.sh              install, build, start the daemon, run the demo
#   bash scripts/setup.sh --no-daemon  install and build only (used by the test command)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

start_daemon=1
for arg in "$@"; do
  case "$arg" in
    --no-daemon) start_daemon=0 ;;
    *) die "unknown option $arg (known: --no-daemon)" ;;
  esac
done

[ "$(id -u)" = 0 ] || die "run as root (runsc needs root for cgroups and namespaces)"
export WARREN_HOME="${WARREN_HOME:-/var/lib/warren}"

# --- Debian packages -------------------------------------------------------------------
need_pkgs=()
command -v runsc >/dev/null && runsc --version | grep -q 2024 || need_pkgs+=(runsc)
# gcc and libc6-dev build warren-init, the small static init that starts commands in sandboxes.
# python3 runs the Python SDK (packages/python). tmux drives `warren shell` in the tests.
# postgresql-client-15: psql, pg_receivewal, pg_basebackup and pg_amcheck on the host, for
# databases (docs/databases.md): WAL archiving and base backups run beside the daemon.
# chromium: the dashboard's tests drive it with puppeteer-core (no browser download).
host_pkgs=(debootstrap iproute2 procps ca-certificates openssl gcc libc6-dev python3 zstd tmux postgresql-client-15 chromium)
for p in "${host_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_pkgs[*]}"
  bash scripts/apt-backports.sh
  apt-get update -qq
  export DEBIAN_FRONTEND=noninteractive
  # runsc must come from bookworm-backports: bookworm's own build is an old ptrace-only one.
  apt-get install -y -qq -t bookworm-backports runsc >/dev/null
  apt-get install -y -qq "${host_pkgs[@]}" >/dev/null
fi
log "runsc: $(runsc --version | head -1)"

# --- warren's runsc build ----------------------------------------------------------------
# With the packaged runsc every idle sandbox costs 3-4% of a core; warren's build from
# Debian's own gVisor source package parks the idle monitor (docs/runsc.md). Several minutes
# the first time, cached afterwards. A failed build is a warning: the daemon then uses the
# packaged runsc. WARREN_BUILD_RUNSC=0 skips it.
if [ "${WARREN_BUILD_RUNSC:-1}" != 0 ]; then
  if ! bash scripts/build-runsc.sh >/dev/null; then
    printf '\033[33m[warren] warning:\033[0m %s\n' "building the patched runsc failed (see the message above and /var/cache/warren/runsc-build/build.log); the daemon uses the packaged runsc, whose idle sandboxes cost 3-4% of a core each" >&2
  fi
fi

# --- Node and npm packages -------------------------------------------------------------
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
[ "$node_major" -ge 20 ] || die "Node.js 20 or newer is required (found: $(node -v 2>/dev/null || echo none))"
stamp=node_modules/.warren-lock-hash
lock_hash=$(sha256sum package-lock.json | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_hash" ]; then
  log "installing npm packages"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_hash" >"$stamp"
fi
log "building"
npm run --silent build

# --- Python SDK ------------------------------------------------------------------------
# `from warren import Sandbox` for root's python3 (the one on PATH, and Debian's if that is
# another): a .pth in its site-packages points at packages/python (scripts/lib.sh).
install_python_sdk $( { command -v python3; echo /usr/bin/python3; } | sort -u)

# --- base template ---------------------------------------------------------------------
# Built from templates/base/recipe.json by the template builder, in-process (no daemon
# needed). Cached per step: unchanged, this takes about a second; the first build runs
# debootstrap (a few minutes). Build steps have network; sandboxes never do.
mkdir -p "$WARREN_HOME" && chmod 700 "$WARREN_HOME"
WARREN_DEBIAN_MIRROR="${WARREN_DEBIAN_MIRROR:-$(debian_mirror)}" ./bin/warren template build --local templates/base/recipe.json
# --- dev template ----------------------------------------------------------------------
# The toolchains an agent expects (docs/templates.md): about 430 Debian packages, so the
# first build takes 5 to 15 minutes on 2 cores; cached per step like base afterwards.
log "dev template (git, build-essential, python3, node, go, ripgrep, ...; the first build takes minutes)"
WARREN_DEBIAN_MIRROR="${WARREN_DEBIAN_MIRROR:-$(debian_mirror)}" ./bin/warren template build --local templates/dev/recipe.json
# --- postgres template -----------------------------------------------------------------
# Databases (docs/databases.md) are sandboxes of this template: Debian's postgresql-15,
# initdb'd at build time, so a new database is a restore of a running server.
log "postgres template (Debian's postgresql-15)"
WARREN_DEBIAN_MIRROR="${WARREN_DEBIAN_MIRROR:-$(debian_mirror)}" ./bin/warren template build --local templates/postgres/recipe.json

[ "$start_daemon" = 1 ] || exit 0

# --- daemon and demo -------------------------------------------------------------------
# A daemon this script started from an older build is restarted on the new one: sandboxes
# survive daemon restarts (they are re-attached), so nothing is lost.
# The runsc build the daemon would pick counts too: a new one is used after a restart.
build_id=$({ find packages/*/dist -type f \( -name '*.js' -o -name '*.cjs' -o -name warren-init \) -print0 | sort -z | xargs -0 cat; readlink "${WARREN_RUNSC_CACHE:-/usr/local/lib/warren/runsc}/current" || true; } | sha256sum | cut -c1-16)
pid_file="$WARREN_HOME/daemon.pid"
if ./bin/warren ls >/dev/null 2>&1 && [ -f "$pid_file" ] \
  && [ "$(cat "$WARREN_HOME/daemon.build" 2>/dev/null)" != "$build_id" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
  log "restarting the daemon on the new build (its sandboxes keep running)"
  kill -TERM "$(cat "$pid_file")"
  for _ in $(seq 1 60); do
    ./bin/warren ls >/dev/null 2>&1 || break
    sleep 0.5
  done
fi
if ./bin/warren ls >/dev/null 2>&1; then
  log "daemon already running"
else
  log "starting the daemon (log: $WARREN_HOME/daemon.log)"
  setsid nohup ./bin/warren daemon >>"$WARREN_HOME/daemon.log" 2>&1 </dev/null &
  echo $! >"$pid_file"
  echo "$build_id" >"$WARREN_HOME/daemon.build"
  for _ in $(seq 1 60); do
    ./bin/warren ls >/dev/null 2>&1 && break
    sleep 0.5
  done
  ./bin/warren doctor || die "the daemon did not come up; see $WARREN_HOME/daemon.log"
fi
bash scripts/demo.sh
