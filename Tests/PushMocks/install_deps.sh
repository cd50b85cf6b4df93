#!/bin/sh
# Installs the Debian packages the push mocks and their self-test need, only those missing.
set -eu
pkgs="python3 python3-h2 python3-cryptography openssl curl nghttp2-client"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
fi
