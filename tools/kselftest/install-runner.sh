#!/usr/bin/env bash
# Installs the kernel's kselftest runner (tools/testing/selftests/run_kselftest.sh,
# kselftest/runner.sh and the files it uses: prefix.pl, ktap_helpers.sh) into DEST
# (default target/ci-lint/kselftest), taken from Debian's linux-source package
# (`apt-get download`, then only those members are unpacked: nothing else of the
# kernel's tree is kept, nothing is committed). tests/routes.rs runs the check through
# it. Idempotent: when DEST/VERSION names the package version apt offers, nothing is
# downloaded.
#
# Usage: tools/kselftest/install-runner.sh [DEST]
#   LINUX_SOURCE=linux-source-6.12   the package (default: the newest linux-source-X.Y
#                                    apt knows; 6.1 or newer is needed)
set -euo pipefail

die() { echo "install-runner.sh: $*" >&2; exit "${2:-1}"; }
[ $# -le 1 ] || die "usage: $0 [DEST] (got $# arguments)" 2
cd "$(dirname "$0")/../.."
dest="${1:-target/ci-lint/kselftest}"
command -v apt-get >/dev/null || die "apt-get is missing: the runner comes from Debian's linux-source package"

# The newest linux-source-X.Y apt knows (by version order of X.Y), unless given.
package="${LINUX_SOURCE:-}"
if [ -z "$package" ]; then
    package="$(apt-cache pkgnames linux-source- | grep -E '^linux-source-[0-9]+\.[0-9]+$' \
        | sort -t- -k3,3V | tail -n 1)"
    [ -n "$package" ] || die "apt knows no linux-source-X.Y package: run apt-get update (the package lists may be missing)"
fi
version="$(apt-cache policy "$package" | awk '/Candidate:/ { print $2 }')"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    die "apt has no installable version of $package: run apt-get update, or set LINUX_SOURCE to one that exists"
fi

if [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$package $version" ] \
    && [ -x "$dest/run_kselftest.sh" ] && [ -f "$dest/kselftest/runner.sh" ]; then
    echo "kselftest runner: $package $version already in $dest"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "$package=$version" >/dev/null 2>"$work/download.log") \
    || die "apt-get download $package=$version failed: $(tail -n 3 "$work/download.log")"
deb="$(find "$work" -maxdepth 1 -name '*.deb' | head -n 1)"
[ -n "$deb" ] || die "apt-get download left no .deb in $work"
# The package holds /usr/src/linux-source-X.Y.tar.xz; only the runner's files leave it.
inner="./usr/src/${package}.tar.xz"
top="${package}/tools/testing/selftests"
dpkg-deb --fsys-tarfile "$deb" | tar -xO "$inner" \
    | tar -xJ -C "$work" "$top/run_kselftest.sh" "$top/kselftest/runner.sh" \
        "$top/kselftest/prefix.pl" "$top/kselftest/ktap_helpers.sh" \
    || die "$deb has no $top/run_kselftest.sh and kselftest/runner.sh (a kernel older than 6.1?)"

rm -rf "$dest"
mkdir -p "$dest/kselftest"
cp "$work/$top/run_kselftest.sh" "$dest/"
cp "$work/$top/kselftest/runner.sh" "$work/$top/kselftest/prefix.pl" \
    "$work/$top/kselftest/ktap_helpers.sh" "$dest/kselftest/"
chmod +x "$dest/run_kselftest.sh" "$dest/kselftest/prefix.pl"
echo "$package $version" >"$dest/VERSION"
echo "kselftest runner: $package $version installed into $dest"
