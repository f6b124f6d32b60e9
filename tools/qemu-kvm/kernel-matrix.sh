#!/usr/bin/env bash
# kernel-matrix.sh: tsc-rendezvous on real (SVM) KVM across the kernels users run:
# Debian bullseye (Linux 5.10), bookworm (6.1) and trixie (6.12), each booted under
# QEMU TCG with kvm_amd by run-in-qemu.sh beside this file, on a machine without
# VMX/SVM of its own.
#
# Each kernel gets EXACTLY ONE boot, whose guest script (kernel-matrix-guest.sh) runs
#   1. tsc-rendezvous check --json --rounds 50 --warp-iterations 5000
#          --junit /out/check-junit.xml --ktap /out/check.ktap
#      (without --ktap when the binary's check --help does not list it),
#   2. tsc-rendezvous run --json --vcpus 2 --rounds 20,
#   3. the real-VM integration test binaries with CI=1 (a missing /dev/kvm fails
#      instead of skipping), each with --test-threads 1,
# and writes every result to $TSC_QEMU_OUT, which comes back to the host. The
# binaries are built statically; the tests spawn tsc-rendezvous by the absolute path
# compiled into them (CARGO_BIN_EXE_tsc-rendezvous), so the binary is copied to exactly
# that path inside the initramfs.
#
# kernel-matrix-check.py then asserts per kernel what real KVM must do (KVM flavour
# svm; exact offsets from debugfs on 5.10 and from KVM_VCPU_TSC_OFFSET on 6.1/6.12;
# check verdicts 1-4 PASS, 5 PASS or an explained UNDECIDED, 6 SKIP; run honoured and
# exact with no disagreements; the tests ok; the KTAP file well-formed) and prints one
# summary table. Every kernel's outputs stay in ARTEFACTS/<suite>/ (default
# target/kernel-matrix/). Exits non-zero on any failed expectation, boot failure or
# timeout; every boot is bounded by --boot-timeout.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

usage() {
    cat <<EOF
Usage: kernel-matrix.sh [options]

Build tsc-rendezvous and its real-VM integration tests statically, boot each Debian
kernel once under QEMU with kvm_amd (tools/qemu-kvm/run-in-qemu.sh), run check, run
and the tests inside, and assert the real-KVM expectations per kernel.

Options:
  --suites LIST        Debian suites to boot, comma- or space-separated
                       (default: bullseye,bookworm,trixie = Linux 5.10, 6.1, 6.12)
  --tests LIST         integration test binaries to run inside (default:
                       kvm_run,check,kvm_compare,faults,signals,restore; kvm_run and check
                       are the ones the matrix must have)
  --boot-timeout SECS  limit of each QEMU run, boot included (default 420)
  --step-timeout SECS  limit of each step inside the guest (default 120)
  --download-timeout SECS  extra time per boot for a one-off kernel download
                       (default 900; cached kernels need none)
  --artefacts DIR      where each kernel's outputs go (default target/kernel-matrix)
  --refresh-kernel     ask apt for each suite's current kernel (passed to run-in-qemu.sh)
  -h, --help           show this text

Environment: TSC_QEMU_BOOT_TIMEOUT is the default of --boot-timeout.
EOF
}

suites="bullseye,bookworm,trixie"
tests="kvm_run,check,kvm_compare,faults,signals,restore,initial_skew"
boot_timeout="${TSC_QEMU_BOOT_TIMEOUT:-420}"
step_timeout=120
download_timeout=900
art="$root/target/kernel-matrix"
refresh=()
while (($#)); do
    case $1 in
        --suites) suites=$2; shift 2 ;;
        --tests) tests=$2; shift 2 ;;
        --boot-timeout) boot_timeout=$2; shift 2 ;;
        --step-timeout) step_timeout=$2; shift 2 ;;
        --download-timeout) download_timeout=$2; shift 2 ;;
        --artefacts) art=$2; shift 2 ;;
        --refresh-kernel) refresh=(--refresh-kernel); shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "kernel-matrix: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for n in "$boot_timeout" "$step_timeout" "$download_timeout"; do
    [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || { echo "kernel-matrix: timeouts must be positive integers (seconds)" >&2; exit 2; }
done
read -r -a suite_list <<<"${suites//,/ }"
read -r -a test_list <<<"${tests//,/ }"
((${#suite_list[@]})) || { echo "kernel-matrix: no suites" >&2; exit 2; }
((${#test_list[@]})) || { echo "kernel-matrix: no test binaries" >&2; exit 2; }

target="x86_64-unknown-linux-gnu"
target_dir="$root/target/static"
check_args="--rounds 50 --warp-iterations 5000"
run_args="--vcpus 2 --rounds 20"

log() { printf 'kernel-matrix: %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

t_all=$(now)
mkdir -p "$art"
art="$(cd "$art" && pwd)"
stage="$art/.stage"
rm -rf "$stage"
mkdir -p "$stage"

# ---------------------------------------------------------------- static builds
# One cargo invocation builds the binary and the test binaries (the tests need the
# binary and compile its path in); the JSON messages name the executables.
log "building statically linked tsc-rendezvous and tests (${test_list[*]}) in $target_dir"
t_build=$(now)
test_args=()
for t in "${test_list[@]}"; do test_args+=(--test "$t"); done
RUSTFLAGS="-C target-feature=+crt-static" \
    cargo test --release --locked --target "$target" --target-dir "$target_dir" \
    "${test_args[@]}" --no-run --message-format=json >"$stage/build.json" || {
    # With --message-format=json the compiler's errors are on stdout, as JSON.
    python3 - "$stage/build.json" <<'PY' >&2 || true
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    msg = m.get("message") or {}
    if m.get("reason") == "compiler-message" and msg.get("level") in ("error", "error: internal compiler error"):
        sys.stdout.write(msg.get("rendered") or msg.get("message", "") + "\n")
PY
    fail "the static build failed (compiler errors above)"
}
build_seconds=$(since "$t_build")
python3 - "$stage/build.json" "${test_list[@]}" >"$stage/executables" <<'PY' || fail "the build did not produce every executable"
import json, sys
want = sys.argv[2:]
found = {}
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if "bin" in t["kind"] and t["name"] == "tsc-rendezvous":
        found["@bin"] = m["executable"]
    elif "test" in t["kind"] and t["name"] in want:
        found[t["name"]] = m["executable"]
missing = [n for n in ["@bin"] + want if n not in found]
if missing:
    sys.exit(f"kernel-matrix: no executable for {missing} in cargo's messages")
for n in ["@bin"] + want:
    print(n, found[n])
PY
bin=$(awk '$1 == "@bin" { print $2 }' "$stage/executables")
log "built in ${build_seconds}s: $bin"

is_static() { ! readelf -lW "$1" 2>/dev/null | grep -q 'Requesting program interpreter'; }
# A copy without debug info (the release profile keeps some; it would triple the
# initramfs) but with symbols, so backtraces still name functions.
slim() {
    if command -v strip >/dev/null; then strip --strip-debug -o "$2" "$1"; else cp "$1" "$2"; fi
}
files=()
guest_tests=()
mkdir -p "$stage/bin"
[ -x "$bin" ] || fail "no tsc-rendezvous at $bin"
is_static "$bin" || fail "$bin is not statically linked"
slim "$bin" "$stage/bin/tsc-rendezvous"
# The tests find the binary at the absolute path cargo compiled into them.
files+=(--file "$stage/bin/tsc-rendezvous:$bin")
while read -r name exe; do
    [[ $name == @bin ]] && continue
    [ -x "$exe" ] || fail "no test binary $exe"
    is_static "$exe" || fail "test binary $exe is not statically linked"
    grep -aqF -- "$bin" "$exe" || log "warning: $name does not contain the path $bin; its tests may not find the binary"
    slim "$exe" "$stage/bin/$name"
    files+=(--file "$stage/bin/$name:/tests/$name")
    guest_tests+=("/tests/$name")
done <"$stage/executables"

# ---------------------------------------------------------------- one boot per kernel
boot_failed=0
for suite in "${suite_list[@]}"; do
    dir="$art/$suite"
    rm -rf "$dir"
    mkdir -p "$dir"
    log "$suite: booting (QEMU limit ${boot_timeout}s); console in $dir/console.log"
    t_boot=$(now)
    rc=0
    # The outer limit adds room for a one-off kernel download, which run-in-qemu.sh's
    # own --timeout does not cover.
    timeout -k 15 $((boot_timeout + download_timeout)) \
        bash "$here/run-in-qemu.sh" --suite "$suite" "${refresh[@]+"${refresh[@]}"}" \
        --timeout "$boot_timeout" --workdir "$dir/boot" \
        --script "$here/kernel-matrix-guest.sh" "${files[@]}" \
        --env "TSC_BIN=$bin" --env "TSC_TESTS=${guest_tests[*]}" \
        --env "TSC_CHECK_ARGS=$check_args" --env "TSC_RUN_ARGS=$run_args" \
        --env "TSC_STEP_TIMEOUT=$step_timeout" \
        </dev/null >"$dir/console.log" 2>&1 || rc=$?
    secs=$(since "$t_boot")
    qemu_secs=$(sed -n 's/^qemu_seconds=//p' "$dir/boot/run-info.txt" 2>/dev/null || true)
    if [[ -d $dir/boot/out ]]; then
        cp -R "$dir/boot/out/." "$dir/"
        rm -rf "$dir/boot/out"
    fi
    rm -f "$dir/boot/initrd.gz"
    printf 'boot_rc=%s\nboot_seconds=%s\nqemu_seconds=%s\nboot_timeout=%s\n' \
        "$rc" "$secs" "${qemu_secs:-}" "$boot_timeout" >"$dir/boot.txt"
    log "$suite: run-in-qemu.sh exited $rc after ${secs}s (QEMU ${qemu_secs:-?}s)"
    if ((rc != 0 && rc != 1)); then
        boot_failed=1
        tail -n 25 "$dir/console.log" | sed "s/^/  $suite| /" >&2 || true
    fi
done

# ---------------------------------------------------------------- judge
echo
rc=0
python3 "$here/kernel-matrix-check.py" "$art" "${suite_list[@]}" || rc=$?
rm -rf "$stage"
echo
echo "timings: static build ${build_seconds}s; boots:$(for s in "${suite_list[@]}"; do
    printf ' %s %ss (QEMU %ss)' "$s" "$(sed -n 's/^boot_seconds=//p' "$art/$s/boot.txt")" \
        "$(sed -n 's/^qemu_seconds=//p' "$art/$s/boot.txt")"
done); total $(since "$t_all")s"
echo "artefacts (check JSON, run JSON, KTAP, JUnit, test logs, serial logs) per kernel: $art/<suite>/"
((rc == 0 && boot_failed == 0)) || { log "FAILED: see the lines above"; exit 1; }
log "all real-KVM expectations met on: ${suite_list[*]}"
