#!/bin/sh
# Writes the commit being built into Sources/CLibraries/CShims/build_commit.h (`inbox version`
# prints it), and only when it changed, so an unchanged tree rebuilds nothing. Outside a git
# checkout it writes nothing and the binary says "unknown".
set -eu
cd "$(dirname "$0")/.."
header=Sources/CLibraries/CShims/build_commit.h
commit=$(git describe --always --dirty --abbrev=12 2>/dev/null) || exit 0
line="#define WRISTLER_BUILD_COMMIT \"$commit\""
if [ ! -f "$header" ] || [ "$(cat "$header")" != "$line" ]; then
    printf '%s\n' "$line" > "$header"
fi
