#!/usr/bin/env bash
# Proves the release gate: for each path, a build with a slowdown planted in that path
# (built with -DPLANTED_SLOWDOWN, INBOX_PLANTED_SLOWDOWN=path:µs) judged against the unchanged
# build RUNS times, and the unchanged build judged against itself RUNS times (all ten paths each
# time). Writes every gate's JSON under OUT and a table of how often each was judged right
# (scripts/planted-table.py). make bench-planted builds both binaries and runs this.
#
#   scripts/bench-planted.sh UNCHANGED_BINARY PLANTED_BINARY [OUT]
#   RUNS=10 PATHS="append replay ..." UNCHANGED_RUNS=10 (RUNS=0 UNCHANGED_FROM=4: only the
#   unchanged runs from the 4th, to go on with an interrupted table)
set -euo pipefail
unchanged=${1:?usage: scripts/bench-planted.sh UNCHANGED_BINARY PLANTED_BINARY [OUT]}
planted=${2:?usage: scripts/bench-planted.sh UNCHANGED_BINARY PLANTED_BINARY [OUT]}
out=${3:-bench-results/planted}
runs=${RUNS:-10}
unchanged_runs=${UNCHANGED_RUNS:-$runs}
# Microseconds of CPU spent per unit of each path's work: about a quarter of what a unit costs on
# the 2-core machine, so that the path's rate falls by about a fifth (the table shows by how much
# it did fall, measured).
# (The conversation list's and a thread's page are answered from memory since 2026-12-05: 10 and
# 14 µs, where the pages read from PostgreSQL needed 25 and 75.)
declare -A spend=(
    [append]=10 [replay]=4 [catch-up]=7 [bell-page]=12 [conversation-list]=10
    [thread-messages]=14 [posting]=160 [fan-out]=13 [mail]=500 [refresh]=220
)
paths=${PATHS:-append replay catch-up bell-page conversation-list thread-messages posting fan-out mail refresh}
mkdir -p "$out"
export INBOX_MIGRATIONS_DIR=${INBOX_MIGRATIONS_DIR:-$PWD/sql}
for run in $(seq 1 "$runs"); do
    for path in $paths; do
        echo "planted $path:${spend[$path]} µs, run $run of $runs" >&2
        status=0
        INBOX_PLANTED_SLOWDOWN="$path:${spend[$path]}" "$unchanged" gate --baseline-binary "$unchanged" --candidate-binary "$planted" \
            --paths "$path" --json "$out/planted-$path-$run.json" >"$out/planted-$path-$run.out" 2>&1 || status=$?
        grep -E "^(PASSED|FELL|INCONCLUSIVE|FAILED)" "$out/planted-$path-$run.out" >&2 || true
        [[ $status == 0 || $status == 1 || $status == 4 ]] || { echo "bench-planted: the gate could not run (status $status): $out/planted-$path-$run.out" >&2; exit 3; }
    done
done
for run in $(seq "${UNCHANGED_FROM:-1}" "$unchanged_runs"); do
    echo "unchanged, run $run of $unchanged_runs" >&2
    status=0
    "$unchanged" gate --baseline-binary "$unchanged" --candidate-binary "$unchanged" \
        --paths "$(echo $paths | tr ' ' ',')" --json "$out/unchanged-$run.json" >"$out/unchanged-$run.out" 2>&1 || status=$?
    grep -E "^(PASSED|FELL|INCONCLUSIVE|FAILED)" "$out/unchanged-$run.out" >&2 || true
    [[ $status == 0 || $status == 1 || $status == 4 ]] || { echo "bench-planted: the gate could not run (status $status): $out/unchanged-$run.out" >&2; exit 3; }
done
/usr/bin/python3 "$(dirname "$0")/planted-table.py" "$out"
