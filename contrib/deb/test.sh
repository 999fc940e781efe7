#!/bin/bash
# Builds the package from BINARY, installs it with dpkg -i and checks what it installed (the example
# configuration passes `shuck check`, `man shuck` renders, the completions, unit and init script
# are in place, the system user exists), that the install started the service (serving the
# example on 127.0.0.1:8443 as the shuck user), that an upgrade of the package upgrades the
# running process in place with a client loop losing no request, that --self-signed alone
# serves, that remove stops the service and purge removes configuration and state, and that
# policy-rc.d (exit 101) or DEB_NO_START=1 keep an install from starting it. The machine's own
# policy-rc.d (container images ship one that forbids everything) is moved aside for the run and
# put back on every exit, so each step runs under the policy it names. Needs root and
# 127.0.0.1:8443 free; leaves nothing installed. .ci/run runs it.
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
policy=/usr/sbin/policy-rc.d
saved=$work/policy-rc.d.machine
policy_ours=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  touch "$work/loop.stop" 2>/dev/null || true
  dpkg -P shuck >/dev/null 2>&1 || true
  # The machine's policy back as it was: ours removed, its own restored (and the work
  # directory, which holds it meanwhile, removed only once it is back).
  [ -n "$policy_ours" ] && rm -f "$policy"
  if [ -e "$saved" ] || [ -L "$saved" ]; then
    mv -f "$saved" "$policy" || { echo "package test: restore $policy from $saved" >&2; return; }
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
fail() { echo "package test: $*" >&2; exit 1; }

# The steps below set the policy each needs; the machine's own is kept aside until the end.
if [ -e "$policy" ] || [ -L "$policy" ]; then
  mv "$policy" "$saved"
  echo "package test: this machine's $policy moved aside for the test (restored at exit)"
else
  echo "package test: this machine has no $policy"
fi

# build.sh strips the binaries and puts their debug information in shuck-dbgsym (large for a
# test build: compressed lightly).
deb=$(DEB_COMPRESSION=gzip DEB_LEVEL=1 "$here/build.sh" "$bin" "$work")
pkgversion=$(dpkg-deb -f "$deb" Version)
# Debian's own checker: no error and no warning, on the package and its debug symbols.
lint=$(lintian --fail-on error,warning --tag-display-limit 0 "$deb" "$work"/shuck-dbgsym_*.deb 2>&1) ||
  fail "lintian: $lint"
# (Outputs are captured before grep -q: under pipefail a writer cut short by grep fails the test.)
info=$(dpkg-deb --info "$deb")
grep -q "Package: shuck" <<<"$info" || fail "not a shuck package"
dpkg -i "$deb" >/dev/null || fail "dpkg -i failed"
[ -x /usr/bin/shuck ] || fail "no /usr/bin/shuck"
version=$(/usr/bin/shuck --version)
grep -q "commit" <<<"$version" || fail "shuck --version: $version"
/usr/bin/shuck check --config /etc/shuck/shuck.toml >/dev/null || fail "shuck check on the shipped example"
getent passwd shuck >/dev/null || fail "no shuck system user"
# `shuck speed` through the helper the package puts in /usr/lib/shuck (when it was built).
if [ -x "$(dirname "$bin")/shuck-bench" ]; then
  help=$(/usr/bin/shuck speed --help) || fail "shuck speed --help failed"
  grep -q "Usage: shuck speed" <<<"$help" || fail "shuck speed --help: $help"
fi
[ -f /lib/systemd/system/shuck.service ] || fail "no unit"
[ -f /usr/share/bash-completion/completions/shuck ] || fail "no bash completion"
page=$(MANPAGER=cat man shuck 2>/dev/null || true)
grep -q "TLS terminator" <<<"$page" || fail "man shuck does not render"
# Every page shipped renders without a groff warning: shuck(1), one per subcommand, and
# shuck.toml(5) made from docs/configuration.md. (Except "cannot adjust line": a long code
# word, a URL or a list of label values, set past the right margin; lintian accepts those.)
pages=(/usr/share/man/man1/shuck*.1.gz /usr/share/man/man5/shuck.toml.5.gz)
[ ${#pages[@]} -ge 8 ] || fail "only ${#pages[@]} manual pages: ${pages[*]}"
for p in "${pages[@]}"; do
  warnings=$(MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null || echo "man failed")
  warnings=$(grep -v "cannot adjust line" <<<"$warnings" || true)
  [ -z "$warnings" ] || fail "man -l $p: $warnings"
  text=$(MANWIDTH=80 man -l "$p" 2>/dev/null)
  grep -q "^NAME" <<<"$text" || fail "$p has no NAME section"
done
page=$(MANPAGER=cat man 5 shuck.toml 2>/dev/null || true)
grep -q "max_connections" <<<"$page" || fail "man 5 shuck.toml does not render the configuration"
grep -q "shuck-serve" <<<"$(MANPAGER=cat man shuck 2>/dev/null)" || fail "man shuck names no subcommand page"
[ -f /etc/logrotate.d/shuck ] || fail "no logrotate file for the init script's log"

# Installed as a service: started on install (no systemd here: through its init script and
# invoke-rc.d; under systemd the unit), serving the shipped example on 127.0.0.1:8443.
pidfile=/run/shuck/shuck.pid
alive() { [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
alive || fail "install did not start the service: $(cat /var/log/shuck/shuck.log 2>/dev/null)"
first=$(cat "$pidfile")
answer=$(curl -sk --max-time 5 https://127.0.0.1:8443/ || true)
grep -qi "shuck" <<<"$answer" || fail "the service does not answer on 127.0.0.1:8443"
[ "$(stat -c %U "/proc/$first")" = shuck ] || fail "the service does not run as the shuck user"
# The admin socket the package enables, at the path shuck ctl looks at without --socket.
[ "$(stat -c '%a %U %G' /run/shuck/admin.sock)" = "660 shuck shuck" ] || fail "admin socket: $(stat -c '%a %U %G' /run/shuck/admin.sock 2>&1)"
/usr/bin/shuck ctl show limits | grep -qx "pid $first" || fail "shuck ctl does not reach the service: $(/usr/bin/shuck ctl show limits 2>&1)"

# An upgrade of the package upgrades the running process in place (SIGUSR2) while a client
# loop runs: every request answered, a new process serving after it.
SHUCK_DEB_VERSION="$pkgversion+upgrade1" DEB_COMPRESSION=gzip DEB_LEVEL=1 DEB_DBGSYM=0 \
  "$here/build.sh" "$bin" "$work/next" >/dev/null
next=$(ls "$work"/next/shuck_*.deb)
: >"$work/loop.out"
(
  for _ in $(seq 2000); do
    [ -e "$work/loop.stop" ] && break
    curl -sk --max-time 5 -o /dev/null -w '%{http_code}\n' https://127.0.0.1:8443/ >>"$work/loop.out" || echo failed >>"$work/loop.out"
  done
) &
loop=$!
for _ in $(seq 100); do [ "$(wc -l <"$work/loop.out")" -ge 20 ] && break; sleep 0.05; done
dpkg -i "$next" >/dev/null || fail "dpkg -i of the upgrade failed"
for _ in $(seq 100); do [ -s "$pidfile" ] && [ "$(cat "$pidfile")" != "$first" ] && break; sleep 0.1; done
sleep 1
touch "$work/loop.stop"
wait "$loop"
[ "$(cat "$pidfile")" != "$first" ] || fail "the upgrade left the old process serving"
! kill -0 "$first" 2>/dev/null || fail "dpkg -i returned before the old process was gone"
alive || fail "no process after the upgrade: $(tail -20 /var/log/shuck/shuck.log)"
/usr/bin/shuck ctl show limits | grep -qx "pid $(cat "$pidfile")" || fail "after the upgrade shuck ctl does not reach the new process"
total=$(wc -l <"$work/loop.out")
bad=$(grep -vc '^200$' "$work/loop.out" || true)
[ "$bad" -eq 0 ] || fail "$bad of $total requests failed during the upgrade"
[ "$total" -ge 40 ] || fail "only $total requests ran across the upgrade"
echo "package test: upgrade in place, $total requests, none failed"

# An upgrade whose binary refuses the configuration leaves the running process serving (no
# restart into an outage).
SHUCK_DEB_VERSION="$pkgversion+upgrade2" DEB_COMPRESSION=gzip DEB_LEVEL=1 DEB_DBGSYM=0 \
  "$here/build.sh" "$bin" "$work/third" >/dev/null
serving=$(cat "$pidfile")
cp /etc/shuck/shuck.toml "$work/shuck.toml.good"
printf 'shutdown_grace = "2h"\n' | cat - "$work/shuck.toml.good" >/etc/shuck/shuck.toml
dpkg -i "$(ls "$work"/third/shuck_*.deb)" >"$work/third.log" 2>&1 || fail "dpkg -i with a refused configuration failed: $(cat "$work/third.log")"
grep -q "left serving" "$work/third.log" || fail "the refused upgrade said nothing: $(cat "$work/third.log")"
[ "$(cat "$pidfile")" = "$serving" ] && kill -0 "$serving" || fail "a refused configuration stopped the service"
answer=$(curl -sk --max-time 5 https://127.0.0.1:8443/ || true)
grep -qi "shuck" <<<"$answer" || fail "not serving after an upgrade with a refused configuration"
cp "$work/shuck.toml.good" /etc/shuck/shuck.toml

# And the README's first command, with the flags alone: a self-signed certificate, the demo page.
ready=$work/ready
/usr/bin/shuck serve --self-signed --listen 127.0.0.1:0 --allow-root --ready-file "$ready" 2>"$work/flags.log" &
pid=$!
for _ in $(seq 100); do [ -s "$ready" ] && break; sleep 0.1; done
[ -s "$ready" ] || fail "shuck serve --self-signed did not start: $(cat "$work/flags.log")"
answer=$(curl -sk --max-time 5 "https://$(head -1 "$ready")/" || true)
grep -qi "shuck" <<<"$answer" || fail "no answer from shuck serve --self-signed"
kill "$pid"; wait "$pid" || true; pid=

last=$(cat "$pidfile")
dpkg -r shuck >/dev/null || fail "dpkg -r failed"
[ ! -e /usr/bin/shuck ] || fail "/usr/bin/shuck left behind"
! kill -0 "$last" 2>/dev/null || fail "remove left the service running"
! kill -0 "$first" 2>/dev/null || fail "the process from before the upgrade is still running"
[ -f /etc/shuck/shuck.toml ] || fail "the configuration (a conffile) should stay until purge"
dpkg -P shuck >/dev/null || fail "dpkg -P failed"
[ ! -e /etc/shuck/shuck.toml ] || fail "purge left the configuration"
[ ! -e /var/lib/shuck ] || fail "purge left the state directory"

# policy-rc.d forbidding actions (as in image builds and chroots): installed, not started.
policy_ours=1
printf '#!/bin/sh\nexit 101\n' >"$policy"
chmod +x "$policy"
dpkg -i "$deb" >/dev/null || fail "dpkg -i under policy-rc.d failed"
rm -f "$policy"
policy_ours=
! alive || fail "installed under a policy-rc.d that forbids it, the service started"
dpkg -P shuck >/dev/null || fail "dpkg -P failed"
echo "package test: under a policy-rc.d that forbids starting, installed and not started"
# DEB_NO_START=1 likewise.
DEB_NO_START=1 dpkg -i "$deb" >/dev/null || fail "dpkg -i with DEB_NO_START failed"
! alive || fail "installed with DEB_NO_START=1, the service started"
dpkg -P shuck >/dev/null || fail "dpkg -P failed"
echo "package test: ok ($(basename "$deb"))"
