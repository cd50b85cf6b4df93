#!/usr/bin/env bash
# The thread access statement of a read (ThreadReader.accessSQL) and of a write (writeAccessSQL,
# with the live block check), side by side in three rounds on a throwaway PostgreSQL:
# 200,000 threads, 1,500 shop members, 5,000 blocks. Prints each round's tps and mean latency.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(scripts/test-postgres.sh start)
trap 'scripts/test-postgres.sh stop "$dir"' EXIT
psql "host=$dir user=inbox dbname=postgres" -q -f Benchmarks/access-check/setup.sql
for round in 1 2 3; do
    for statement in read write; do
        printf '%s %s: ' "$round" "$statement"
        pgbench -h "$dir" -U inbox -n -M prepared -T 8 -c 2 -j 2 -f "Benchmarks/access-check/$statement.sql" postgres 2>/dev/null \
            | grep -E '^tps|latency average' | tr '\n' ' '
        echo
    done
done
