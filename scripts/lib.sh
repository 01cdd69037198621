# Shared helpers for warren's setup scripts (sourced, not run).

log() { printf '\033[1m[warren]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[warren] error:\033[0m %s\n' "$*" >&2; exit 1; }

# The Debian mirror this machine's apt already uses for bookworm. Read from apt's own
# configuration so no archive host is written into warren.
debian_mirror() {
  local f uri=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    if grep -Eq '^Suites:.*\bbookworm\b' "$f"; then
      uri=$(awk '/^URIs:/{print $2; exit}' "$f")
      [ -n "$uri" ] && break
    fi
  done
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1=="deb" && $3=="bookworm" {print $2; exit}' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || die "cannot find the Debian mirror for bookworm in apt's sources"
  printf '%s\n' "$uri"
}

# Makes `import warren` work for each given python3 (3.11 or newer): a .pth file in its
# site-packages names this checkout's packages/python. Nothing is copied or downloaded (the
# SDK is standard library only), and a rebuilt checkout needs no reinstall. Idempotent.
install_python_sdk() {
  local py site line src
  src="$(pwd)/packages/python"
  for py in "$@"; do
    [ -x "$py" ] || continue
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      log "skipping the Python SDK for $py: it needs Python 3.11 or newer (found $("$py" -V 2>&1))"
      continue
    fi
    site=$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    line=$(cat "$site/warren.pth" 2>/dev/null || true)
    if [ "$line" != "$src" ]; then
      mkdir -p "$site"
      printf '%s\n' "$src" >"$site/warren.pth"
      log "Python SDK: $py imports warren from $src"
    fi
    "$py" -c 'from warren import Sandbox' || die "python3 cannot import warren after installing $site/warren.pth"
  done
}
