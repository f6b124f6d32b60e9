#!/bin/sh
# tsc-rendezvous check as a kselftest: KTAP on stdout (`check --ktap -`) and kselftest's
# exit codes (`--kselftest-exit-codes`: 0 pass, 1 fail, 4 skip), so that the kernel's
# kselftest runner (run_kselftest.sh, kselftest/runner.sh) reports it as one test of the
# collection `tsc_rendezvous` and nests its KTAP. Install this directory as the
# collection (docs/fleet.md); arguments for check come from the runner's
# KSELFTEST_TSC_RENDEZVOUS_CHECK_SH_ARGS, the binary from TSC_RENDEZVOUS, else PATH, else
# this directory. tests/routes.rs runs it through the kernel's own runner.
set -eu

bin="${TSC_RENDEZVOUS:-}"
if [ -z "$bin" ]; then
    if command -v tsc-rendezvous >/dev/null 2>&1; then
        bin=tsc-rendezvous
    elif [ -x "$(dirname "$0")/tsc-rendezvous" ]; then
        bin="$(dirname "$0")/tsc-rendezvous"
    else
        # A broken install, not a skipped test: it says so and fails.
        echo "# tsc-rendezvous not found: set TSC_RENDEZVOUS, put it on PATH or beside $0"
        exit 1
    fi
fi
exec "$bin" check --ktap - --kselftest-exit-codes "$@"
