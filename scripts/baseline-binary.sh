#!/usr/bin/env bash
# Prints the path of the baseline's own inbox-bench, built in release mode from the commit its
# baseline file names, in a git worktree under .build/baseline/<commit> (kept: the next gate
# reuses it; the first build took about 5 minutes on 2 cores). When that commit is HEAD and
# the tree is clean, the candidate's own binary is that build: its path is printed instead.
#
#   scripts/baseline-binary.sh [Benchmarks/baseline.json]
set -euo pipefail
baseline=${1:-Benchmarks/baseline.json}
[[ -f $baseline ]] || { echo "baseline-binary: no baseline at $baseline (make bench-baseline writes one)" >&2; exit 3; }
commit=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["commit"])' "$baseline")
if [[ $commit == *-dirty || $commit == unknown ]]; then
    echo "baseline-binary: $baseline was measured on uncommitted code ($commit); its build cannot be made again: write a new baseline from a clean tree" >&2
    exit 3
fi
full=$(git rev-parse --verify --quiet "$commit^{commit}") || { echo "baseline-binary: the baseline's commit $commit is not in this repository" >&2; exit 3; }
if [[ $full == "$(git rev-parse HEAD)" && -z $(git status --porcelain --untracked-files=no) ]]; then
    echo "$PWD/.build/release/inbox-bench"
    exit 0
fi
tree=.build/baseline/$commit
if [[ ! -d $tree ]]; then
    mkdir -p .build/baseline
    git worktree prune
    git worktree add --detach "$tree" "$full" >&2
fi
echo "baseline-binary: building the baseline's inbox-bench from $commit in $tree" >&2
(cd "$tree" && ${SWIFT:-swift} build -c release --product inbox-bench >&2)
echo "$PWD/$tree/.build/release/inbox-bench"
