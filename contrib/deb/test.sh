#!/bin/bash
# Builds the package from BINARY, installs it with dpkg -i, checks what it installed (the example
# configuration passes `shuck check`, `shuck serve` answers on it and on --self-signed alone,
# `man shuck` renders, the completions and the unit are in place, the system user exists), then removes it with dpkg -r
# and checks it is gone. Needs root; leaves nothing installed. .ci/run runs it.
#   contrib/deb/test.sh [BINARY]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/target/release/shuck}
if dpkg -s shuck >/dev/null 2>&1; then
  echo "package test: shuck is installed on this machine; not touching it" >&2
  exit 1
fi
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  dpkg -P shuck >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "package test: $*" >&2; exit 1; }

# A test build's binary is large with debug information: strip a copy, compress lightly.
if command -v strip >/dev/null; then
  strip -o "$work/shuck" "$bin"
  bin=$work/shuck
fi
deb=$(DEB_COMPRESSION=gzip "$here/build.sh" "$bin" "$work")
# (Outputs are captured before grep -q: under pipefail a writer cut short by grep fails the test.)
info=$(dpkg-deb --info "$deb")
grep -q "Package: shuck" <<<"$info" || fail "not a shuck package"
dpkg -i "$deb" >/dev/null || fail "dpkg -i failed"
[ -x /usr/bin/shuck ] || fail "no /usr/bin/shuck"
version=$(/usr/bin/shuck --version)
grep -q "commit" <<<"$version" || fail "shuck --version: $version"
/usr/bin/shuck check --config /etc/shuck/shuck.toml >/dev/null || fail "shuck check on the shipped example"
getent passwd shuck >/dev/null || fail "no shuck system user"
[ -f /lib/systemd/system/shuck.service ] || fail "no unit"
[ -f /usr/share/bash-completion/completions/shuck ] || fail "no bash completion"
page=$(MANPAGER=cat man shuck 2>/dev/null || true)
grep -q "TLS terminator" <<<"$page" || fail "man shuck does not render"

# The installed binary serves the shipped example (as root, told it may: the unit runs it as shuck).
ready=$work/ready
/usr/bin/shuck serve --config /etc/shuck/shuck.toml --allow-root --ready-file "$ready" 2>"$work/serve.log" &
pid=$!
for _ in $(seq 100); do [ -s "$ready" ] && break; sleep 0.1; done
[ -s "$ready" ] || fail "shuck serve did not start: $(cat "$work/serve.log")"
addr=$(head -1 "$ready")
answer=$(curl -sk --max-time 5 "https://$addr/" || true)
grep -qi "shuck" <<<"$answer" || fail "no answer from https://$addr/"
kill "$pid"; wait "$pid" || true; pid=

# And the README's first command, with the flags alone: a self-signed certificate, the demo page.
rm -f "$ready"
/usr/bin/shuck serve --self-signed --listen 127.0.0.1:0 --allow-root --ready-file "$ready" 2>"$work/flags.log" &
pid=$!
for _ in $(seq 100); do [ -s "$ready" ] && break; sleep 0.1; done
[ -s "$ready" ] || fail "shuck serve --self-signed did not start: $(cat "$work/flags.log")"
answer=$(curl -sk --max-time 5 "https://$(head -1 "$ready")/" || true)
grep -qi "shuck" <<<"$answer" || fail "no answer from shuck serve --self-signed"
kill "$pid"; wait "$pid" || true; pid=

dpkg -r shuck >/dev/null || fail "dpkg -r failed"
[ ! -e /usr/bin/shuck ] || fail "/usr/bin/shuck left behind"
[ -f /etc/shuck/shuck.toml ] || fail "the configuration (a conffile) should stay until purge"
dpkg -P shuck >/dev/null || fail "dpkg -P failed"
[ ! -e /etc/shuck/shuck.toml ] || fail "purge left the configuration"
echo "package test: ok ($(basename "$deb"))"
