#!/usr/bin/env bash
# `make test-client`: a client generated from the tier's own /openapi.json by openapi-python-client
# (PyPI) walks the app guide's path (Tests/Client/app_guide_path.py): the buyer signs in, registers a
# device, reads the bell, starts a thread about a watch and writes again; the shop's member signs in
# and reads it. A throwaway PostgreSQL, `inbox run` (the API with the identity role's /oauth/token
# and /internal/v1/accounts, and the projectors that make bell entries) on a free port with a fresh
# data folder; everything it started is stopped however it ends. The client is generated into
# .build/client/ (with the document and the generator's output beside it). An operation of the path
# that the generator skipped fails the test. Exit status: the test's.
#   INBOX_BIN          the binary (default .build/debug/inbox, built by `make test-client`)
#   CLIENT_GENERATOR   the generator's pip requirement (default openapi-python-client==0.29.1:
#                      the test reads the generated code's layout, so a new release is a choice)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
inbox=${INBOX_BIN:-$root/.build/debug/inbox}
venv=$root/.build/client-venv
generator=${CLIENT_GENERATOR:-openapi-python-client==0.29.1}
out=$root/.build/client
package=wristler_inbox_client
started=$SECONDS

installed=""; [ -x "$venv/bin/pip" ] && installed=$("$venv/bin/pip" freeze 2>/dev/null || true)
if ! [ -x "$venv/bin/openapi-python-client" ] || ! grep -qixF "$generator" <<<"$installed"; then
  echo "client-test: installing $generator into $venv"
  # Debian's python3 makes venvs only with python3-venv installed.
  if ! python3 -c 'import ensurepip' 2>/dev/null; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
  fi
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q "$generator"
fi

db=$("$root/scripts/test-postgres.sh" start)
data=$(mktemp -d /tmp/inbox-client.XXXXXX)
pid=""
status=1
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  "$root/scripts/test-postgres.sh" stop "$db"
  if [ "$status" = 0 ]; then
    rm -rf "$data"
  else
    echo "client-test: FAILED; the server's log is kept in $data/run.log"
  fi
  echo "client-test: $((SECONDS - started))s in all"
}
trap cleanup EXIT

# Two other tiers' credentials: the catalogue's (catalogue events) and the website's (its sign-ups).
catalogue_secret=catalogue-$(python3 -c 'import secrets; print(secrets.token_hex(16))')
website_secret=website-$(python3 -c 'import secrets; print(secrets.token_hex(16))')
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export DATABASE_URL="postgres:///postgres?host=$db&user=inbox" INBOX_DATA_DIR="$data" INBOX_MIGRATIONS_DIR="$root/sql"
export INBOX_HTTP_HOST=127.0.0.1 INBOX_HTTP_PORT="$port" INBOX_LOG_FORMAT=json
export INBOX_SERVICE_CREDENTIALS="catalogue=$catalogue_secret,website=$website_secret"
# The cheapest Argon2id the settings allow: the test signs in, it does not measure the hash.
export INBOX_PASSWORD_HASH_MEMORY_KIB=1024 INBOX_PASSWORD_HASH_ITERATIONS=1
"$inbox" migrate >"$data/migrate.log" 2>&1 || { cat "$data/migrate.log"; exit 1; }
"$inbox" run >"$data/run.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "client-test: inbox run stopped at start"; tail -20 "$data/run.log"; exit 1; }
  sleep 0.1
done
curl -fs "http://127.0.0.1:$port/readyz" >/dev/null || { echo "client-test: inbox run was not ready within 30 s"; exit 1; }
echo "client-test: inbox run on port $port (data folder $data)"

mkdir -p "$out"
curl -fsS "http://127.0.0.1:$port/openapi.json" -o "$out/openapi.json"
# The generator's own post-hooks format the code with ruff, which its venv has.
if ! (cd "$out" && PATH="$venv/bin:$PATH" COLUMNS=1000 "$venv/bin/openapi-python-client" generate \
      --path "$out/openapi.json" --config "$root/Tests/Client/generator.yaml" --meta none \
      --output-path "$out/$package" --overwrite) >"$out/generate.log" 2>&1; then
  cat "$out/generate.log"
  echo "client-test: openapi-python-client could not generate a client from /openapi.json ($out/openapi.json):"
  grep -E '^WARNING parsing|Unable to (parse|process) schema|Failed to parse' "$out/generate.log" | sed 's/^/  /' || true
  exit 1
fi
echo "client-test: openapi-python-client's output ($out/generate.log):"
sed -e '/^[[:space:]]*$/d' -e 's/^/  | /' "$out/generate.log"

status=0
CLIENT_CATALOGUE_SECRET="$catalogue_secret" CLIENT_WEBSITE_SECRET="$website_secret" PYTHONPATH="$out" "$venv/bin/python" "$root/Tests/Client/app_guide_path.py" \
  --base-url "http://127.0.0.1:$port" --package "$package" --document "$out/openapi.json" \
  --generator-log "$out/generate.log" || status=$?
exit "$status"
