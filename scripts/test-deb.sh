#!/usr/bin/env bash
# `make test-deb`: builds the Debian package and tries it as an operator would, on this machine:
# installs it with dpkg, verifies its units with systemd-analyze (and their exposure), runs the
# installed `inbox migrate` and `inbox run` as the inbox user against a throwaway PostgreSQL until
# `inbox health` says it is ready, upgrades it over itself keeping a changed settings file, then
# removes and purges it, leaving nothing but the system user (Debian's policy keeps users).
#   scripts/test-deb.sh [BINARY]   package BINARY instead of building a release
set -euo pipefail
cd "$(dirname "$0")/.."
# dpkg -i, the inbox user's folder and running as that user need root: as anybody else, again with sudo.
[ "$(id -u)" = 0 ] || exec sudo -E "$0" "$@"
export DEBIAN_FRONTEND=noninteractive

step() { echo "test-deb: $*"; }
fail() { echo "test-deb: FAILED: $*" >&2; exit 1; }
pg=""; tier=""; units=""
cleanup() {
  [ -n "$tier" ] && kill -9 "$tier" 2>/dev/null || true
  [ -n "$pg" ] && scripts/test-postgres.sh stop "$pg"
  [ -n "$units" ] && rm -rf "$units"
  dpkg -P inbox >/dev/null 2>&1 || true
}
trap cleanup EXIT

if dpkg -s inbox >/dev/null 2>&1; then fail "a package named inbox is installed already: this test installs and purges its own"; fi
deb=$(scripts/build-deb.sh "${1:-}")
step "built $deb ($(du -h "$deb" | cut -f1)); Depends: $(dpkg-deb -f "$deb" Depends)"

step "install"
dpkg -i "$deb" >/dev/null
[ -x /usr/bin/inbox ] || fail "/usr/bin/inbox is missing"
getent passwd inbox >/dev/null || fail "no inbox system user"
[ "$(stat -c %U:%G:%a /etc/inbox/inbox.env)" = root:inbox:640 ] || fail "/etc/inbox/inbox.env is $(stat -c %U:%G:%a /etc/inbox/inbox.env), not root:inbox:640"
[ "$(ls /usr/share/inbox/sql/*.sql | wc -l)" = "$(ls sql/*.sql | wc -l)" ] || fail "/usr/share/inbox/sql does not hold every migration"
ldd /usr/bin/inbox | grep -q "not found" && fail "libraries missing: $(ldd /usr/bin/inbox | grep 'not found')"
ldd /usr/bin/inbox | grep -q "libswift" && fail "the binary needs the Swift toolchain's libraries"

step "units: systemd-analyze verify and security, for every role"
units=$(mktemp -d)
for role in run serve identity project fanout mail schedule; do
  ln -s /lib/systemd/system/inbox@.service "$units/inbox@$role.service"
  systemd-analyze verify "$units/inbox@$role.service" || fail "systemd-analyze verify inbox@$role.service"
done
exposure=$(systemd-analyze security --offline=true --threshold=20 "$units/inbox@run.service" 2>&1 | grep "Overall exposure") \
  || fail "the unit's exposure is above 2.0: $exposure"
step "${exposure#→ }"

step "migrate and run as the inbox user, with the installed migrations"
pg=$(scripts/test-postgres.sh start)
# What systemd's StateDirectory= would make.
install -d -o inbox -g inbox -m 0750 /var/lib/inbox
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(free_port); ops=$(free_port)
# Replaces the shell it runs in (setpriv and env exec): in the background, $! is inbox itself.
exec_as_inbox() {
  cd /var/lib/inbox
  exec setpriv --reuid=inbox --regid=inbox --init-groups env -i PATH=/usr/bin:/bin DATABASE_URL="postgres:///postgres?host=$pg&user=inbox" \
    INBOX_DATA_DIR=/var/lib/inbox INBOX_LOG_FORMAT=json INBOX_HTTP_PORT="$http" INBOX_OPS_PORT="$ops" "$@"
}
as_inbox() { (exec_as_inbox "$@"); }
as_inbox /usr/bin/inbox migrate >/dev/null || fail "inbox migrate as the inbox user"
log=$(mktemp)
exec_as_inbox /usr/bin/inbox run >"$log" 2>&1 &
tier=$!
for _ in $(seq 1 150); do as_inbox /usr/bin/inbox health >/dev/null 2>&1 && break; sleep 0.2; done
as_inbox /usr/bin/inbox health || { cat "$log" >&2; fail "the installed inbox run never became ready"; }
as_inbox /usr/bin/inbox status >/dev/null || fail "inbox status"
kill -TERM "$tier"; status=0; wait "$tier" || status=$?
[ "$status" = 0 ] || { tail -5 "$log" >&2; fail "inbox run did not stop cleanly on SIGTERM (exit $status)"; }
tier=""
rm -f "$log"

step "upgrade over itself, keeping a changed settings file"
echo "# changed by the operator" >>/etc/inbox/inbox.env
dpkg -i --force-confold "$deb" >/dev/null
grep -q "changed by the operator" /etc/inbox/inbox.env || fail "the upgrade replaced the operator's settings"
/usr/bin/inbox version >/dev/null || fail "inbox version after the upgrade"

step "remove, then purge"
dpkg -r inbox >/dev/null
[ ! -e /usr/bin/inbox ] || fail "/usr/bin/inbox is still there after remove"
[ -e /etc/inbox/inbox.env ] || fail "remove took the settings file (a conffile stays until purge)"
dpkg -P inbox >/dev/null
for path in /usr/bin/inbox /usr/share/inbox /usr/share/doc/inbox /lib/systemd/system/inbox@.service /etc/inbox /var/lib/inbox; do
  [ ! -e "$path" ] || fail "$path is left after purge"
done
dpkg -s inbox >/dev/null 2>&1 && fail "dpkg still knows the package after purge"
getent passwd inbox >/dev/null || fail "purge removed the inbox user (Debian's policy keeps it)"
step "passed"
