#!/usr/bin/env bash
# selftest.sh — the argument handling of the tools/qemu-kvm scripts, without booting
# anything: every case asserts an exit code and a phrase of the error message, so a
# script that stopped rejecting bad input (or started rejecting good input) fails here.
# Also the version gates of kernel-matrix-check.py. Run by .ci/run's shellcheck step.
#
# The unknown-suite and unknown-flavour cases ask Debian's archive (the private apt
# lists of run-in-qemu.sh, a few MB); with --offline they are left out.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
offline=0
[[ ${1:-} != --offline ]] || offline=1

pass=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT

# expect NAME CODE PHRASE CMD...: CMD must exit CODE and print PHRASE (stdout or stderr).
expect() {
    local name=$1 code=$2 phrase=$3 rc=0
    shift 3
    "$@" </dev/null >"$tmp/out" 2>&1 || rc=$?
    if [[ $rc == "$code" ]] && grep -qF -- "$phrase" "$tmp/out"; then
        pass=$((pass + 1))
        echo "ok: $name"
    else
        failed=$((failed + 1))
        echo "FAILED: $name: expected exit $code and '$phrase', got exit $rc:"
        sed 's/^/    /' "$tmp/out" | tail -n 8
    fi
}

rq=("$here/run-in-qemu.sh")
km=("$here/kernel-matrix.sh")
prog=$tmp/prog
printf '\177ELF' >"$prog" # never run: every case fails before the program matters
# A file the x86 boot-protocol check takes for a bzImage ("HdrS" at 0x202).
fake=$tmp/bzImage
head -c 1024 /dev/zero >"$fake"
printf 'HdrS' | dd of="$fake" bs=1 seek=514 conv=notrunc status=none

# run-in-qemu.sh
expect "run-in-qemu: malformed suite" 2 "is not a Debian suite name" bash "${rq[@]}" --suite 'Sid!' "$prog"
expect "run-in-qemu: malformed flavour" 2 "is not a kernel flavour name" bash "${rq[@]}" --suite sid --flavour 'AMD 64' "$prog"
expect "run-in-qemu: --flavor is --flavour" 2 "is not a kernel flavour name" bash "${rq[@]}" --flavor '_' "$prog"
expect "run-in-qemu: --suite with --kernel" 2 "exclude each other" bash "${rq[@]}" --suite sid --kernel "$fake" "$prog"
expect "run-in-qemu: --flavour with --kernel" 2 "does nothing with --kernel" bash "${rq[@]}" --flavour rt-amd64 --kernel "$fake" "$prog"
expect "run-in-qemu: --modules without --kernel" 2 "--modules needs --kernel" bash "${rq[@]}" --modules "$tmp" "$prog"
expect "run-in-qemu: --kernel not a bzImage" 2 "is not a bzImage" bash "${rq[@]}" --kernel "$prog" "$prog"
expect "run-in-qemu: missing --modules dir" 2 "does not exist" bash "${rq[@]}" --kernel "$fake" --modules "$tmp/nonexistent" "$prog"
expect "run-in-qemu: --modules without kvm-amd.ko" 2 "no kernel modules" bash "${rq[@]}" --kernel "$fake" --modules "$tmp" "$prog"
expect "run-in-qemu: bad --tcg-thread" 2 "--tcg-thread must be single or multi" bash "${rq[@]}" --tcg-thread many "$prog"
expect "run-in-qemu: --help names the flavours" 0 "cloud-amd64" bash "${rq[@]}" --help

# kernel-matrix.sh (all of these fail before the static build)
expect "kernel-matrix: bad --suites entry" 2 "bad --suites entry" bash "${km[@]}" --suites 'sid@x'
expect "kernel-matrix: missing --modules dir" 2 "is not a directory" bash "${km[@]}" --kernel "$fake" --modules "$tmp/nonexistent"
expect "kernel-matrix: missing --kernel file" 2 "is not a file" bash "${km[@]}" --kernel "$tmp/nonexistent"
expect "kernel-matrix: --kernel not a bzImage" 2 "is not a bzImage" bash "${km[@]}" --kernel "$prog"
expect "kernel-matrix: --modules without --kernel" 2 "--modules needs --kernel" bash "${km[@]}" --modules "$tmp"
expect "kernel-matrix: bad --smp" 2 "--smp/--vcpus must be" bash "${km[@]}" --vcpus 0
expect "kernel-matrix: bad --tcg-thread" 2 "--tcg-thread must be" bash "${km[@]}" --tcg-thread x
expect "kernel-matrix: a value missing" 2 "needs a value" bash "${km[@]}" --suites
expect "kernel-matrix: the same kernel twice" 2 "the same kernel twice" bash "${km[@]}" --suites sid,sid
expect "kernel-matrix: unknown option" 2 "unknown argument" bash "${km[@]}" --frobnicate

# build-kernel.sh and mttcg-soak.sh
expect "build-kernel: bad --kvm" 1 "--kvm must be m or y" bash "$here/build-kernel.sh" --kvm x
expect "build-kernel: not a source tree" 1 "is not a Linux source tree" bash "$here/build-kernel.sh" --source "$tmp"
expect "mttcg-soak: bad --tcg-thread" 2 "must be single or multi" bash "$here/mttcg-soak.sh" --tcg-thread x

# kernel-matrix-check.py: expectations follow the version the guest reported.
cat >"$tmp/gates.py" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kmc", sys.argv[1])
kmc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kmc)
def k(rel):
    x = kmc.Kernel("/nonexistent", "t")
    x.release = rel
    return x
cases = [  # release, has KVM_VCPU_TSC_OFFSET, first host TSC write taken (6.7, bf328e22)
    ("5.10.0-46-amd64", False, False),
    ("5.15.0", False, False),
    ("5.16.0", True, False),
    ("6.1.0-57-amd64", True, False),
    ("6.7.0", True, True),
    ("6.12.118+deb13-amd64", True, True),
    ("7.3.4+deb13-amd64", True, True),
    ("12.0.0-rc1", True, True),  # newer than anything known: like the newest
]
bad = [(r, a, f) for r, a, f in cases if (k(r).has_offset_attr(), k(r).first_host_write_taken()) != (a, f)]
assert not bad, bad
assert k("garbage").version() is None
print("gates ok")
PY
expect "check.py: version gates" 0 "gates ok" python3 -B "$tmp/gates.py" "$here/kernel-matrix-check.py"

if ((!offline)) && [[ $(id -u) -eq 0 ]]; then
    echo true >"$tmp/script.sh" # --script: these get past the program checks to apt
    expect "run-in-qemu: unknown suite lists the suites" 2 "Suites that exist: " \
        bash "${rq[@]}" --suite nosuchsuite --script "$tmp/script.sh"
    expect "run-in-qemu: unknown flavour lists the flavours" 2 "Flavours there: amd64 cloud-amd64" \
        bash "${rq[@]}" --suite bookworm --flavour nosuch-amd64 --script "$tmp/script.sh"
fi

echo "selftest: $pass passed, $failed failed"
((failed == 0))
