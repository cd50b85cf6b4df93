#!/usr/bin/env bash
# A throwaway S3-compatible server for the test suite: moto's server (PyPI), installed into
# .build/test-venv when missing, listening on a free loopback port.
#   scripts/test-s3.sh start        prints "<url> <pid>"; the tests read the URL from INBOX_TEST_S3_URL
#   scripts/test-s3.sh stop PID
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.build/test-venv

case "${1:-}" in
  start)
    if ! [ -x "$venv/bin/moto_server" ]; then
      echo "test-s3: installing moto's server into $venv" >&2
      # Debian's python3 makes venvs only with python3-venv installed.
      if ! python3 -c 'import ensurepip' 2>/dev/null; then
        sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
        $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
      fi
      python3 -m venv "$venv"
      "$venv/bin/pip" install -q 'moto[server]' >&2
    fi
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    log=$(mktemp /tmp/inbox-test-s3.XXXXXX.log)
    "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
      if curl -s -o /dev/null "http://127.0.0.1:$port/"; then echo "http://127.0.0.1:$port $pid"; exit 0; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    echo "test-s3: moto's server did not start:" >&2; cat "$log" >&2
    exit 1
    ;;
  stop)
    pid=${2:?usage: test-s3.sh stop PID}
    kill "$pid" 2>/dev/null || true
    ;;
  *)
    echo "usage: $0 start | stop PID" >&2
    exit 2
    ;;
esac
