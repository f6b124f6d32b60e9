#!/bin/sh
# Runs tsc-rendezvous check on a LAVA device (or reads a KTAP file it wrote) and reports
# one LAVA test case per check: lava-test-case ID --result pass|fail|skip|unknown, where
# ID is the check's number and id (e.g. 3-adjust-equals-offset) and UNDECIDED (KTAP
# "# SKIP undecided: ...") is unknown. The KTAP is kept beside the results as
# checks.ktap and shown in the log. POSIX sh: it runs in LAVA's test shell.
#
# Usage: run-check.sh [--binary PATH] [-- CHECK_ARGS...]   run check, report its cases
#        run-check.sh --ktap FILE                         report the cases of FILE
# Exit status: 0 when the cases were reported (whatever their results: LAVA judges
# them), 1 when check did not run or wrote no result line, 2 for bad usage.
set -eu

usage() {
    echo "usage: $0 [--binary PATH] [-- CHECK_ARGS...] | --ktap FILE" >&2
    exit 2
}

binary=""
ktap=""
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) [ $# -ge 2 ] || usage; binary="$2"; shift 2 ;;
        --ktap) [ $# -ge 2 ] || usage; ktap="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "run-check.sh: unknown argument '$1'" >&2; usage ;;
    esac
done
command -v lava-test-case >/dev/null 2>&1 \
    || { echo "run-check.sh: lava-test-case is not on PATH: run this in LAVA's test shell" >&2; exit 1; }

if [ -z "$ktap" ]; then
    if [ -z "$binary" ]; then
        binary=target/release/tsc-rendezvous
        if [ ! -x "$binary" ]; then
            lava-test-case build --shell cargo build --release --locked
        fi
    fi
    [ -x "$binary" ] \
        || { echo "run-check.sh: no tsc-rendezvous binary at '$binary' (set the BINARY parameter or put cargo on the device)" >&2; exit 1; }
    ktap=checks.ktap
    # check's exit code says pass/fail/could not run; the cases below say which check.
    status=0
    "$binary" check --ktap - "$@" >"$ktap" || status=$?
    echo "check exited with $status"
fi
[ -r "$ktap" ] || { echo "run-check.sh: cannot read the KTAP file '$ktap'" >&2; exit 1; }
cat "$ktap"

# Only the top-level result lines: "ok N ID # ..." / "not ok N ID # ...".
cases="$(awk '
    /^ok [0-9]+ / || /^not ok [0-9]+ / {
        ok = ($1 == "ok"); n = ok ? $2 : $3; id = ok ? $3 : $4
        result = ok ? "pass" : "fail"
        if (ok && index($0, " # SKIP undecided:")) result = "unknown"
        else if (ok && index($0, " # SKIP")) result = "skip"
        print n "-" id, result
    }' "$ktap")"
[ -n "$cases" ] || { echo "run-check.sh: no result line in '$ktap': check did not run (see above)" >&2; exit 1; }
echo "$cases" | while read -r name result; do
    lava-test-case "$name" --result "$result"
done
