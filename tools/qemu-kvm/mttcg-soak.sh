#!/usr/bin/env bash
# mttcg-soak.sh — is QEMU's multi-threaded TCG reliable enough for the kernel matrix?
#
# Why: with thread=single the emulated vCPUs take turns, so the guest's warp test
# sees one lock hand-off in thousands of iterations and check 5 cannot decide. With
# thread=multi they run in parallel, but Debian bookworm's QEMU 7.2 hung now and then in
# kvm_destroy_vm (an IPI that never completes) and once panicked in kernel text
# patching. This script boots the same kernel N times with the same real workload
# (tsc-rendezvous check, which creates and destroys many VMs, then run over every
# variant) and counts how each boot ended: completed, hung (QEMU killed at the
# timeout), or crashed (QEMU ended without the exit marker: guest panic), plus guest
# kernel warnings (soft lockups, RCU stalls, Oopses) in boots that completed.
# One QEMU at a time; the results go to OUT/boots.tsv and OUT/summary.txt (by
# mttcg-soak-summary.py, which also gives check 5's lock hand-off numbers).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

usage() {
    cat <<EOF
Usage: mttcg-soak.sh [options]

Boot a kernel N times under QEMU TCG with the given threading and CPU count, each
boot running tsc-rendezvous check (and run) inside, and count hangs and panics.

  --boots N          boots (default 20)
  --tcg-thread MODE  multi (default) or single
  --smp N            emulated CPUs; check and run use as many vCPUs (default 2)
  --suite SUITE      Debian kernel to boot (default bookworm; run-in-qemu.sh --suite)
  --kernel BZIMAGE / --modules DIR   or a kernel of your own
  --timeout SECS     per boot (default 300): a boot that reaches it counts as a hang
  --check-args ARGS  check's arguments after --json --vcpus N (default
                     "--rounds 50 --warp-iterations 5000", the matrix's)
  --no-run           run only check in each boot (default: check, then run --rounds 10)
  --bin FILE         static tsc-rendezvous (default: built into target/static)
  --out DIR          where boots.tsv, summary.txt and each boot's files go
                     (default target/mttcg-soak/<thread>-smp<N>)
  -h, --help         show this text
EOF
}

boots=20
thread=multi
smp=2
kargs=(--suite bookworm)
kernel=
modules=
timeout_s=300
check_args="--rounds 50 --warp-iterations 5000"
with_run=1
bin=
out=
while (($#)); do
    case $1 in
        --boots) boots=$2; shift 2 ;;
        --tcg-thread) thread=$2; shift 2 ;;
        --smp) smp=$2; shift 2 ;;
        --suite) kargs=(--suite "$2"); shift 2 ;;
        --kernel) kernel=$2; shift 2 ;;
        --modules) modules=$2; shift 2 ;;
        --timeout) timeout_s=$2; shift 2 ;;
        --check-args) check_args=$2; shift 2 ;;
        --no-run) with_run=0; shift ;;
        --bin) bin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "mttcg-soak: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $boots =~ ^[0-9]+$ && $boots -ge 1 ]] || { echo "mttcg-soak: --boots must be a positive integer" >&2; exit 2; }
[[ $smp =~ ^[0-9]+$ && $smp -ge 1 ]] || { echo "mttcg-soak: --smp must be a positive integer" >&2; exit 2; }
[[ $thread == single || $thread == multi ]] || { echo "mttcg-soak: --tcg-thread must be single or multi" >&2; exit 2; }
if [[ -n $kernel ]]; then
    kargs=(--kernel "$kernel")
    [[ -z $modules ]] || kargs+=(--modules "$modules")
fi
out=${out:-$root/target/mttcg-soak/$thread-smp$smp}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [[ -z $bin ]]; then
    bin=$root/target/static/x86_64-unknown-linux-gnu/release/tsc-rendezvous
fi
# (kernel-matrix.sh's static build leaves one at that path; build only without it.)
if [[ ! -x $bin ]]; then
    echo "mttcg-soak: building a static tsc-rendezvous" >&2
    (cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked \
        --target x86_64-unknown-linux-gnu --target-dir "$root/target/static" >&2)
fi
[[ -x $bin ]] || { echo "mttcg-soak: no executable $bin" >&2; exit 2; }

# The guest's workload; its files come back in WORKDIR/out/.
guest=$out/guest.sh
cat >"$guest" <<'EOF'
#!/bin/sh
out=${TSC_QEMU_OUT:-/out}
n=${SOAK_VCPUS:-2}
rc=0
t0=$(cut -d' ' -f1 /proc/uptime)
# shellcheck disable=SC2086
tsc-rendezvous check --json --vcpus "$n" $SOAK_CHECK_ARGS >"$out/check.json" 2>"$out/check.stderr" || rc=$?
echo "check_rc=$rc" >"$out/results.txt"
if [ "${SOAK_RUN:-1}" = 1 ]; then
    r=0
    tsc-rendezvous run --json --vcpus "$n" --rounds 10 >"$out/run.json" 2>"$out/run.stderr" || r=$?
    echo "run_rc=$r" >>"$out/results.txt"
    [ "$r" -eq 0 ] || rc=$r
fi
t1=$(cut -d' ' -f1 /proc/uptime)
echo "workload_seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" >>"$out/results.txt"
dmesg >"$out/dmesg.txt"
exit "$rc"
EOF

tsv=$out/boots.tsv
printf 'boot\toutcome\trun_in_qemu_rc\tqemu_seconds\tworkload_seconds\tkernel_warnings\tcheck5\tcheck5_reason\n' >"$tsv"
qemu_version=$(qemu-system-x86_64 --version 2>/dev/null | awk 'NR == 1 { print $4 }' || true)
echo "mttcg-soak: $boots boots, QEMU ${qemu_version:-?} thread=$thread smp $smp, ${kargs[*]}, timeout ${timeout_s}s; results in $out" >&2
for ((b = 1; b <= boots; b++)); do
    w=$out/boot-$b
    rm -rf "$w"
    rc=0
    bash "$here/run-in-qemu.sh" "${kargs[@]}" --tcg-thread "$thread" --smp "$smp" --timeout "$timeout_s" \
        --workdir "$w" --script "$guest" --file "$bin" \
        --env "SOAK_VCPUS=$smp" --env "SOAK_CHECK_ARGS=$check_args" --env "SOAK_RUN=$with_run" \
        </dev/null >"$w.console" 2>&1 || rc=$?
    mv "$w.console" "$w/console.log" 2>/dev/null || true
    rm -f "$w/initrd.gz"
    case $rc in
        0 | 1) outcome=completed ;;
        124) outcome=hang ;;
        125) outcome=panic ;;
        *) outcome=error ;;
    esac
    qs=$(sed -n 's/^qemu_seconds=//p' "$w/run-info.txt" 2>/dev/null || true)
    ws=$(sed -n 's/^workload_seconds=//p' "$w/out/results.txt" 2>/dev/null || true)
    # Warnings of the guest kernel: on the console (panics, hangs) or in its dmesg.
    # (Not in the base64 blocks of the files coming back, where "int3" or "Oops" can occur.)
    warn=$({ awk '/^@@TSC-QEMU-FILE [0-9a-f]+ /{ skip = 1 } !skip { print } /^@@TSC-QEMU-FILE-END@@/{ skip = 0 }' \
        "$w/serial.log" 2>/dev/null; cat "$w/out/dmesg.txt" 2>/dev/null; } |
        grep -aoE 'soft lockup|hard LOCKUP|rcu_(sched|preempt) (self-)?detected stall|Oops|BUG:|Kernel panic|general protection fault|int3|WARNING: CPU' |
        sort | uniq -c | awk '{ n = $1; $1 = ""; printf "%s%s x%d", sep, substr($0, 2), n; sep = "; " }' || true)
    read -r v5 r5 < <(python3 - "$w/out/check.json" <<'PY' || echo "- -"
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except Exception:
    print("- -")
    sys.exit(0)
c = next((c for c in doc.get("checks", []) if c.get("id") == "warp"), {})
print(c.get("verdict", "-"), " ".join(str(c.get("reason", "-")).split()))
PY
    )
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$b" "$outcome" "$rc" "${qs:--}" "${ws:--}" "${warn:--}" "${v5:--}" "${r5:--}" >>"$tsv"
    echo "mttcg-soak: boot $b/$boots: $outcome (exit $rc) in ${qs:-?}s; check 5 ${v5:--}${warn:+; guest kernel: $warn}" >&2
done

python3 -B "$here/mttcg-soak-summary.py" "$out" >"$out/summary.txt"
cat "$out/summary.txt"
