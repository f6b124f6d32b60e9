#!/usr/bin/env bash
# Installs LAVA's own lava-test-case helper (with lava-common-functions, which it
# sources) into DEST (default target/ci-lint/lava-test-shell), taken from Debian's
# lava-dispatcher package by `apt-get download` and unpacked there only: the package
# itself, which wants systemd-sysv, QEMU and a dispatcher's services, is not installed.
# On a device LAVA copies these scripts onto PATH and puts the interpreter line on
# top; this does the same, so that tests/routes.rs runs tools/lava/run-check.sh
# against the real helper. Idempotent: when DEST/VERSION names the version apt
# offers, nothing is downloaded.
#
# Usage: tools/lava/install-test-shell.sh [DEST]
set -euo pipefail

die() { echo "install-test-shell.sh: $*" >&2; exit "${2:-1}"; }
[ $# -le 1 ] || die "usage: $0 [DEST] (got $# arguments)" 2
cd "$(dirname "$0")/../.."
dest="${1:-target/ci-lint/lava-test-shell}"
command -v apt-get >/dev/null || die "apt-get is missing: lava-test-case comes from Debian's lava-dispatcher package"

version="$(apt-cache policy lava-dispatcher | awk '/Candidate:/ { print $2 }')"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    die "apt has no installable version of lava-dispatcher: run apt-get update"
fi
if [ "$(cat "$dest/VERSION" 2>/dev/null)" = "lava-dispatcher $version" ] \
    && [ -x "$dest/bin/lava-test-case" ]; then
    echo "lava-test-case: lava-dispatcher $version already in $dest"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "lava-dispatcher=$version" >/dev/null 2>"$work/download.log") \
    || die "apt-get download lava-dispatcher=$version failed: $(tail -n 3 "$work/download.log")"
deb="$(find "$work" -maxdepth 1 -name '*.deb' | head -n 1)"
[ -n "$deb" ] || die "apt-get download left no .deb in $work"
dpkg-deb -x "$deb" "$work/root"
shell="$work/root/usr/lib/python3/dist-packages/lava_dispatcher/lava_test_shell"
for f in lava-test-case lava-common-functions; do
    [ -f "$shell/$f" ] || die "$deb has no lava_test_shell/$f"
done

rm -rf "$dest"
mkdir -p "$dest/bin"
# As LAVA's test shell action does on the device: the interpreter line, then the script.
{ echo '#!/bin/sh'; cat "$shell/lava-test-case"; } >"$dest/bin/lava-test-case"
cp "$shell/lava-common-functions" "$dest/bin/"
chmod +x "$dest/bin/lava-test-case"
echo "lava-dispatcher $version" >"$dest/VERSION"
echo "lava-test-case: lava-dispatcher $version installed into $dest"
