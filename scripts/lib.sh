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
