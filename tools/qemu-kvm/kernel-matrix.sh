#!/usr/bin/env bash
# kernel-matrix.sh: tsc-rendezvous on real (SVM) KVM across the kernels users run:
# Debian bullseye (Linux 5.10), bookworm (6.1) and trixie (6.12, with 4 CPUs and
# --vcpus 4) by default, any other
# Debian suite with an amd64 kernel (sid, trixie-backports, ...), and kernels you built
# (--kernel bzImage --modules DIR), each booted under QEMU TCG with kvm_amd by
# run-in-qemu.sh beside this file, on a machine without VMX/SVM of its own.
#
# Each kernel gets EXACTLY ONE boot, whose guest script (kernel-matrix-guest.sh) runs
#   1. tsc-rendezvous check --json --vcpus N --rounds 50 --warp-iterations 5000
#          --junit /out/check-junit.xml --ktap /out/check.ktap
#      (without --ktap when the binary's check --help does not list it),
#   2. tsc-rendezvous run --json --vcpus N --rounds 20, restore --vcpus N and
#      run --vcpus N --initial-skew (N: the boot's CPU count, 2 unless SUITE@N),
#   3. the real-VM integration test binaries with CI=1 (a missing /dev/kvm fails
#      instead of skipping), each with --test-threads 1,
# and writes every result to $TSC_QEMU_OUT, which comes back to the host. The
# binaries are built statically; the tests spawn tsc-rendezvous by the absolute path
# compiled into them (CARGO_BIN_EXE_tsc-rendezvous), so the binary is copied to exactly
# that path inside the initramfs.
#
# kernel-matrix-check.py then asserts per kernel what real KVM must do, by the version
# the guest reports (KVM flavour svm; exact offsets from debugfs before 5.16 and from
# KVM_VCPU_TSC_OFFSET since;
# check verdicts 1-4 PASS, 5 PASS or an explained UNDECIDED, 6 SKIP; run honoured and
# exact with no disagreements; the tests ok; the KTAP file well-formed) and prints one
# summary table. Every kernel's outputs stay in ARTEFACTS/<label>/ (default
# target/kernel-matrix/). Exits non-zero on any failed expectation, boot failure or
# timeout; every boot is bounded by --boot-timeout.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

usage() {
    cat <<EOF
Usage: kernel-matrix.sh [options]

Build tsc-rendezvous and its real-VM integration tests statically, boot each kernel
once under QEMU with kvm_amd (tools/qemu-kvm/run-in-qemu.sh), run check, run, restore
and the tests inside, and assert the real-KVM expectations that each kernel's version
implies.

Kernels:
  --suites LIST        Debian kernels to boot, comma- or space-separated; each entry
                       SUITE[:FLAVOUR][@N]: any suite run-in-qemu.sh --suite takes
                       (bullseye, bookworm, trixie, sid, trixie-backports, ...), a
                       flavour (default: --flavour's), and @N to boot that kernel with
                       N emulated CPUs and run it with --vcpus N (default: --smp's).
                       Default: $default_suites without --kernel, none with it
  --flavour F, --flavor F  default kernel flavour of the entries (default amd64)
  --kernel BZIMAGE     also boot this kernel (e.g. a patched build's
                       arch/x86/boot/bzImage); its artefacts go to ARTEFACTS/LABEL/
  --modules DIR        its modules (as run-in-qemu.sh --modules: an
                       INSTALL_MOD_PATH tree, a lib/modules/REL directory or a
                       directory of .ko files); leave out if KVM is built in
  --label NAME         the --kernel entry's name in the table (default: kernel)

Machine:
  --smp N, --vcpus N   emulated CPUs of every boot, and vCPUs of check, run, restore
                       and the initial-skew run (default 2; an entry's @N wins)
  --tcg-thread MODE    $default_tcg (default) or the other of single/multi: QEMU's TCG
                       threading (run-in-qemu.sh --tcg-thread)

Run:
  --tests LIST         integration test binaries to run inside (default:
                       $default_tests; kvm_run and check are the ones the matrix must have)
  --boot-timeout SECS  limit of each QEMU run, boot included (default 420; a boot of
                       N > 2 CPUs gets N/2 times as much)
  --step-timeout SECS  limit of each step inside the guest (default 120, scaled alike)
  --download-timeout SECS  extra time per boot for a one-off kernel download
                       (default 900; cached kernels need none)
  --artefacts DIR      where each kernel's outputs go (default target/kernel-matrix)
  --refresh-kernel     ask apt for each suite's current kernel (passed to run-in-qemu.sh)
  -h, --help           show this text

Environment: TSC_QEMU_BOOT_TIMEOUT is the default of --boot-timeout.
EOF
}

default_suites="bullseye,bookworm,trixie@4"
default_tests="kvm_run,check,kvmclock,kvm_compare,faults,signals,restore,initial_skew"
# thread=single although run-in-qemu.sh defaults to multi: multi never hung (see
# measurements.md), but it leaves the emulated vCPUs' timing to the host's scheduler, and
# the matrix asserts timing-dependent outcomes (the initial skew removed to a tenth by
# the first round; the host-thread test's skew). On a loaded 2-core host those failed
# under multi (residual skews of 18M-62M cycles, a boot over its limit) and held under
# single. --tcg-thread multi for truly parallel vCPUs (check 5 then sees hand-offs).
default_tcg=single
suites=
suites_given=0
flavour=amd64
user_kernel=
user_modules=
label=kernel
smp=2
tcg_thread=$default_tcg
tests=$default_tests
boot_timeout="${TSC_QEMU_BOOT_TIMEOUT:-420}"
step_timeout=120
download_timeout=900
art="$root/target/kernel-matrix"
refresh=()
die_usage() {
    echo "kernel-matrix: $*" >&2
    exit 2
}
while (($#)); do
    case $1 in
        --refresh-kernel) refresh=(--refresh-kernel); shift; continue ;;
        -h | --help) usage; exit 0 ;;
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    esac
    case $1 in
        --suites | --flavour | --flavor | --kernel | --modules | --label | --smp | --vcpus | --tcg-thread | \
            --tests | --boot-timeout | --step-timeout | --download-timeout | --artefacts)
            [[ $# -ge 2 ]] || die_usage "$1 needs a value (see --help)" ;;
        *) die_usage "unknown argument '$1' (see --help)" ;;
    esac
    case $1 in
        --suites) suites=$2; suites_given=1 ;;
        --flavour | --flavor) flavour=$2 ;;
        --kernel) user_kernel=$2 ;;
        --modules) user_modules=$2 ;;
        --label) label=$2 ;;
        --smp | --vcpus) smp=$2 ;;
        --tcg-thread) tcg_thread=$2 ;;
        --tests) tests=$2 ;;
        --boot-timeout) boot_timeout=$2 ;;
        --step-timeout) step_timeout=$2 ;;
        --download-timeout) download_timeout=$2 ;;
        --artefacts) art=$2 ;;
    esac
    shift 2
done
for n in "$boot_timeout" "$step_timeout" "$download_timeout"; do
    [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || die_usage "timeouts must be positive integers (seconds)"
done
[[ $smp =~ ^[0-9]+$ && $smp -ge 1 && $smp -le 64 ]] || die_usage "--smp/--vcpus must be an integer from 1 to 64"
[[ $tcg_thread == single || $tcg_thread == multi ]] || die_usage "--tcg-thread must be single or multi"
[[ $flavour =~ ^[a-z0-9]+(-[a-z0-9]+)*$ ]] || die_usage "--flavour '$flavour' is not a flavour name (amd64, cloud-amd64, rt-amd64, ...)"
[[ $label =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die_usage "--label must be a plain name (letters, digits, . _ -)"
if [[ -n $user_kernel ]]; then
    [[ -f $user_kernel ]] || die_usage "--kernel '$user_kernel' is not a file"
    # The x86 boot protocol's "HdrS" at 0x202 (as run-in-qemu.sh checks, but before the build).
    [[ $(od -An -tx1 -j514 -N4 -- "$user_kernel" 2>/dev/null | tr -d ' \n') == 48647253 ]] ||
        die_usage "--kernel '$user_kernel' is not a bzImage (want e.g. arch/x86/boot/bzImage)"
    user_kernel=$(realpath -- "$user_kernel")
    if [[ -n $user_modules ]]; then
        [[ -d $user_modules ]] || die_usage "--modules '$user_modules' is not a directory"
        user_modules=$(realpath -- "$user_modules")
    fi
else
    [[ -z $user_modules ]] || die_usage "--modules needs --kernel"
fi
((suites_given)) || [[ -n $user_kernel ]] || suites=$default_suites
read -r -a suite_list <<<"${suites//,/ }"
read -r -a test_list <<<"${tests//,/ }"
((${#suite_list[@]})) || [[ -n $user_kernel ]] || die_usage "no suites and no --kernel"
((${#test_list[@]})) || die_usage "no test binaries"

# The boots, one element per kernel in each array. e_label names the artefact
# directory and the kernel in the table; e_args holds run-in-qemu.sh's kernel options
# separated by newlines.
e_label=()
e_args=()
e_smp=()
for entry in "${suite_list[@]}"; do
    [[ $entry =~ ^([a-z]+(-[a-z]+)*)(:([a-z0-9]+(-[a-z0-9]+)*))?(@([0-9]+))?$ ]] ||
        die_usage "bad --suites entry '$entry' (want SUITE[:FLAVOUR][@N], e.g. sid, trixie-backports:cloud-amd64, trixie@4)"
    s=${BASH_REMATCH[1]}
    f=${BASH_REMATCH[4]:-$flavour}
    n=${BASH_REMATCH[7]:-$smp}
    ((n >= 1 && n <= 64)) || die_usage "--suites entry '$entry': N must be from 1 to 64"
    l=$s
    [[ $f == amd64 ]] || l+="-$f"
    ((n == 2)) || l+="-smp$n"
    e_label+=("$l")
    e_args+=("--suite"$'\n'"$s"$'\n'"--flavour"$'\n'"$f")
    e_smp+=("$n")
done
if [[ -n $user_kernel ]]; then
    l=$label
    ((smp == 2)) || l+="-smp$smp"
    e_label+=("$l")
    a="--kernel"$'\n'"$user_kernel"
    [[ -z $user_modules ]] || a+=$'\n'"--modules"$'\n'"$user_modules"
    e_args+=("$a")
    e_smp+=("$smp")
fi
dups=$(printf '%s\n' "${e_label[@]}" | sort | uniq -d)
[[ -z $dups ]] || die_usage "the same kernel twice: $dups"

target="x86_64-unknown-linux-gnu"
target_dir="$root/target/static"

# The guest steps' arguments; check, run, restore and the skew run get --vcpus N first.
check_args="--rounds 50 --warp-iterations 5000"
run_args="--rounds 20 --kvmclock"
restore_args="--delay-ms 500 --warp-iterations 2000"
skew_args="--rounds 3 --initial-skew 100000000"

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
for i in "${!e_label[@]}"; do
    name=${e_label[i]}
    n=${e_smp[i]}
    mapfile -t kargs <<<"${e_args[i]}"
    dir="$art/$name"
    rm -rf "$dir"
    mkdir -p "$dir"
    # More vCPUs take longer under emulation: N > 2 gets N/2 times the limits.
    scale=$(((n + 1) / 2))
    ((scale >= 1)) || scale=1
    bt=$((boot_timeout * scale))
    st=$((step_timeout * scale))
    log "$name: booting ${kargs[*]} with $n CPUs, TCG thread=$tcg_thread (QEMU limit ${bt}s); console in $dir/console.log"
    t_boot=$(now)
    rc=0
    # The outer limit adds room for a one-off kernel download, which run-in-qemu.sh's
    # own --timeout does not cover.
    timeout -k 15 $((bt + download_timeout)) \
        bash "$here/run-in-qemu.sh" "${kargs[@]}" "${refresh[@]+"${refresh[@]}"}" \
        --smp "$n" --tcg-thread "$tcg_thread" \
        --timeout "$bt" --workdir "$dir/boot" \
        --script "$here/kernel-matrix-guest.sh" "${files[@]}" \
        --env "TSC_BIN=$bin" --env "TSC_TESTS=${guest_tests[*]}" \
        --env "TSC_CHECK_ARGS=--vcpus $n $check_args" --env "TSC_RUN_ARGS=--vcpus $n $run_args" \
        --env "TSC_RESTORE_ARGS=--vcpus $n $restore_args" --env "TSC_SKEW_ARGS=--vcpus $n $skew_args" \
        --env "TSC_STEP_TIMEOUT=$st" \
        </dev/null >"$dir/console.log" 2>&1 || rc=$?
    secs=$(since "$t_boot")
    info=$dir/boot/run-info.txt
    qemu_secs=$(sed -n 's/^qemu_seconds=//p' "$info" 2>/dev/null || true)
    if [[ -d $dir/boot/out ]]; then
        cp -R "$dir/boot/out/." "$dir/"
        rm -rf "$dir/boot/out"
    fi
    rm -f "$dir/boot/initrd.gz"
    {
        printf 'boot_rc=%s\nboot_seconds=%s\nqemu_seconds=%s\nboot_timeout=%s\n' "$rc" "$secs" "${qemu_secs:-}" "$bt"
        printf 'label=%s\nkernel_args=%s\nsmp=%s\nvcpus=%s\ntcg_thread=%s\n' "$name" "${kargs[*]}" "$n" "$n" "$tcg_thread"
        # What the host meant to boot (checked against what the guest reports) and the QEMU.
        sed -n 's/^\(expected_release\|qemu_version\)=/\1=/p' "$info" 2>/dev/null || true
    } >"$dir/boot.txt"
    log "$name: run-in-qemu.sh exited $rc after ${secs}s (QEMU ${qemu_secs:-?}s)"
    if ((rc != 0 && rc != 1)); then
        boot_failed=1
        tail -n 25 "$dir/console.log" | sed "s/^/  $name| /" >&2 || true
    fi
done

# ---------------------------------------------------------------- judge
echo
rc=0
python3 "$here/kernel-matrix-check.py" "$art" "${e_label[@]}" || rc=$?
rm -rf "$stage"
echo
echo "timings: static build ${build_seconds}s; boots:$(for s in "${e_label[@]}"; do
    printf ' %s %ss (QEMU %ss)' "$s" "$(sed -n 's/^boot_seconds=//p' "$art/$s/boot.txt")" \
        "$(sed -n 's/^qemu_seconds=//p' "$art/$s/boot.txt")"
done); total $(since "$t_all")s"
echo "artefacts (check JSON, run JSON, KTAP, JUnit, test logs, serial logs) per kernel: $art/<kernel>/"
((rc == 0 && boot_failed == 0)) || { log "FAILED: see the lines above"; exit 1; }
log "all real-KVM expectations met on: ${e_label[*]}"
