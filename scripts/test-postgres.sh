#!/usr/bin/env bash
# A throwaway PostgreSQL for the test suite: a cluster in a temporary folder, listening only on a
# Unix socket there, run as an unprivileged user when we are root (PostgreSQL refuses root).
#   scripts/test-postgres.sh start   prints the folder; the URL is postgres:///postgres?host=<folder>&user=inbox
#   scripts/test-postgres.sh stop FOLDER
set -euo pipefail

bin_dir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$dir/initdb" ] && { echo "$dir"; return; }
  done
  echo "test-postgres: no PostgreSQL server is installed (run make deps)" >&2
  exit 1
}

as_server_user() {
  if [ "$(id -u)" = 0 ]; then
    local user=postgres
    id postgres >/dev/null 2>&1 || user=nobody
    runuser -u "$user" -- "$@"
  else
    "$@"
  fi
}

case "${1:-}" in
  start)
    bin=$(bin_dir)
    dir=$(mktemp -d /tmp/inbox-test-pg.XXXXXX)
    chmod 755 "$dir"
    if [ "$(id -u)" = 0 ]; then
      user=postgres; id postgres >/dev/null 2>&1 || user=nobody
      chown "$user" "$dir"
    fi
    as_server_user "$bin/initdb" -D "$dir/data" -U inbox -A trust -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    # Durability is not what the tests measure; fsync off keeps a 2-core machine's suite fast.
    as_server_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
      -o "-k $dir -c listen_addresses='' -c max_connections=1000 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >/dev/null || { cat "$dir/postgres.log" >&2; exit 1; }
    echo "$dir"
    ;;
  stop)
    dir=${2:?usage: test-postgres.sh stop FOLDER}
    bin=$(bin_dir)
    [ -d "$dir/data" ] && as_server_user "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *)
    echo "usage: $0 start | stop FOLDER" >&2
    exit 2
    ;;
esac
