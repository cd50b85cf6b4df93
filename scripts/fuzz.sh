#!/usr/bin/env bash
# `make fuzz`: schemathesis (PyPI) against a live `inbox serve`, driven by its own /openapi.json.
# A throwaway PostgreSQL, a fresh data folder (the development token key), a free port, a person's
# development token; bounded by FUZZ_SECONDS (600) and FUZZ_EXAMPLES per operation (25); everything
# it started is stopped however it ends. The document is first checked with openapi-spec-validator. Exit status: schemathesis's (0: no failure of any check).
#   INBOX_BIN    the binary to fuzz (default .build/debug/inbox, built by `make fuzz`)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
inbox=${INBOX_BIN:-$root/.build/debug/inbox}
venv=$root/.build/fuzz-venv
seconds=${FUZZ_SECONDS:-600}
examples=${FUZZ_EXAMPLES:-25}

if ! [ -x "$venv/bin/schemathesis" ] || ! [ -x "$venv/bin/openapi-spec-validator" ]; then
  echo "fuzz: installing schemathesis and openapi-spec-validator into $venv"
  # Debian's python3 makes venvs only with python3-venv installed.
  if ! python3 -c 'import ensurepip' 2>/dev/null; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
  fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q schemathesis openapi-spec-validator
fi

db=$("$root/scripts/test-postgres.sh" start)
data=$(mktemp -d /tmp/inbox-fuzz.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  "$root/scripts/test-postgres.sh" stop "$db"
  echo "fuzz: server log kept in $data/serve.log"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export DATABASE_URL="postgres:///postgres?host=$db&user=inbox" INBOX_DATA_DIR="$data" INBOX_MIGRATIONS_DIR="$root/sql"
export INBOX_HTTP_HOST=127.0.0.1 INBOX_HTTP_PORT="$port" INBOX_LOG_FORMAT=json
"$inbox" migrate >"$data/migrate.log" 2>&1
# Person 7 has an account, so the account's routes (/v1/me, its sessions and second factor) answer
# more than 404.
printf 'correct horse battery staple\n' | "$inbox" account create --email fuzz@example.com --person-id 7 --verified >>"$data/migrate.log" 2>&1
token=$("$inbox" token --person 7)
"$inbox" serve >"$data/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
status=0
curl -fsS "http://127.0.0.1:$port/openapi.json" -o "$data/openapi.json"
"$venv/bin/openapi-spec-validator" "$data/openapi.json" || { echo "fuzz: /openapi.json is not valid OpenAPI"; status=1; }
echo "fuzz: inbox serve on port $port, schemathesis for at most ${seconds}s, $examples examples per operation"

# A person's bucket refills at 20 requests a second (docs/api.md): stay under it, or every check
# would meet 429s. The service route gets the person's token too, so it is fuzzed only up to its 401.
timeout --signal=INT --kill-after=10 "$seconds" "$venv/bin/schemathesis" --config-file "$root/scripts/fuzz.toml" run "http://127.0.0.1:$port/openapi.json" \
  --header "Authorization: Bearer $token" --max-examples "$examples" --rate-limit 18/s \
  --checks all --report junit --report-dir "$data/report" --no-color "$@" || status=$?
echo "fuzz: server errors logged: $(grep -c '"status":5[0-9][0-9]' "$data/serve.log" || true)"
exit "$status"
