#!/usr/bin/env bash
# `make deb`: the inbox binary (release, the Swift runtime linked in statically, so the package
# needs only Debian's libraries), sql/, the systemd unit, the settings file and the maintainer
# scripts, as .build/packages/inbox_<version>_<arch>.deb. Its Depends are dpkg-shlibdeps' reading of the
# binary: each Debian library by the package that ships it, with the least version it needs.
#   scripts/build-deb.sh [BINARY]   package BINARY instead of building one
set -euo pipefail
cd "$(dirname "$0")/.."

binary=${1:-}
if [ -z "$binary" ]; then
  scripts/build-commit.sh
  swift build -c release --product inbox --static-swift-stdlib --scratch-path .build/deb >&2
  binary=.build/deb/release/inbox
fi
[ -x "$binary" ] || { echo "build-deb: no binary at $binary" >&2; exit 1; }

# 0.1.0+git<commits>.<commit>: later commits sort later (INBOX_DEB_VERSION outside a clone).
version=${INBOX_DEB_VERSION:-}
if [ -z "$version" ]; then
  version="0.1.0+git$(git rev-list --count HEAD).$(git rev-parse --short=10 HEAD)" \
    || { echo "build-deb: not a git clone: set INBOX_DEB_VERSION" >&2; exit 1; }
fi
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/inbox_${version}_${arch}"

install -D -m 0755 "$binary" "$root/usr/bin/inbox"
strip --strip-unneeded "$root/usr/bin/inbox"
install -d -m 0755 "$root/usr/share/inbox/sql"
install -m 0644 sql/*.sql "$root/usr/share/inbox/sql/"
install -D -m 0644 packaging/systemd/inbox@.service "$root/lib/systemd/system/inbox@.service"
install -D -m 0640 packaging/inbox.env "$root/etc/inbox/inbox.env"
install -D -m 0644 docs/operations.md "$root/usr/share/doc/inbox/operations.md"
install -D -m 0644 /dev/stdin "$root/usr/share/doc/inbox/copyright" <<'COPYRIGHT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: inbox
Source: https://wristler.eu

Files: *
Copyright: Wristler
License: proprietary
 All rights reserved.
COPYRIGHT

# dpkg-shlibdeps reads a source package's control file; a minimal one in the stage will do.
mkdir -p "$stage/debian"
printf 'Source: inbox\n\nPackage: inbox\nArchitecture: any\n' >"$stage/debian/control"
depends=$(cd "$stage" && dpkg-shlibdeps -O -e"$root/usr/bin/inbox" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "build-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

install -d "$root/DEBIAN"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
install -m 0644 packaging/debian/conffiles "$root/DEBIAN/"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" -e "s/@DEPENDS@/$depends/" \
  packaging/debian/control.in >"$root/DEBIAN/control"

mkdir -p .build/packages
dpkg-deb --root-owner-group -Zxz --build "$root" ".build/packages/inbox_${version}_${arch}.deb" >&2
echo ".build/packages/inbox_${version}_${arch}.deb"
