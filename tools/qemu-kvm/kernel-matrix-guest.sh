#!/bin/sh
# kernel-matrix-guest.sh: runs inside the QEMU guest (busybox sh, real kvm_amd
# /dev/kvm), started by kernel-matrix.sh through run-in-qemu.sh --script. One boot
# runs everything the kernel matrix needs, and every result goes to $TSC_QEMU_OUT
# (copied back to the host after the script ends):
#
#   results.txt          key=value lines: kernel release, per step its exit code,
#                        seconds (guest uptime) and whether it hit its time limit
#   check.json / .stderr `tsc-rendezvous check --json ...` and its stderr
#   check-junit.xml      its --junit file
#   check.ktap           its --ktap file (when the binary has the option)
#   run.json / .stderr   `tsc-rendezvous run --json ...` and its stderr
#   restore.json / .stderr `tsc-rendezvous restore --json ...` and its stderr
#   skew.json / .stderr  `tsc-rendezvous run --json --initial-skew ...` and its stderr
#   test-NAME.log        each integration test binary's output (CI=1: no skipping)
#   dmesg.txt            the guest kernel log at the end
#
# The script decides nothing; the host's kernel-matrix-check.py judges the files.
# Its own exit code is 0 when every step exited 0, else 1.
#
# Environment (set by kernel-matrix.sh with run-in-qemu.sh --env):
#   TSC_BIN           the tsc-rendezvous binary (at the path compiled into the tests)
#   TSC_TESTS         space-separated test binaries to run (each with --test-threads 1)
#   TSC_CHECK_ARGS    extra arguments of `check` (default: the matrix's)
#   TSC_RUN_ARGS      arguments of `run` after `run --json` (default: the matrix's)
#   TSC_RESTORE_ARGS  arguments of `restore` after `restore --json` (default: the matrix's)
#   TSC_SKEW_ARGS     arguments of the --initial-skew run after `run --json` (default: the matrix's)
#   TSC_STEP_TIMEOUT  time limit of each step in seconds (default 300)

out=${TSC_QEMU_OUT:-/out}
mkdir -p "$out"
res=$out/results.txt
: >"$res"
bin=${TSC_BIN:-/bin/tsc-rendezvous}
limit=${TSC_STEP_TIMEOUT:-300}
check_args=${TSC_CHECK_ARGS:---rounds 50 --warp-iterations 5000}
run_args=${TSC_RUN_ARGS:---vcpus 2 --rounds 20 --kvmclock}
restore_args=${TSC_RESTORE_ARGS:---vcpus 2 --delay-ms 500 --warp-iterations 2000}
skew_args=${TSC_SKEW_ARGS:---vcpus 2 --rounds 3 --initial-skew 100000000}
status=0

put() { echo "$1=$2" >>"$res"; }
uptime_s() { read -r up _ </proc/uptime; echo "$up"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# step NAME STDOUT-FILE STDERR-FILE CMD...: run CMD under the step's time limit and
# record NAME_rc, NAME_seconds, NAME_timed_out. (busybox timeout: SIGTERM at the
# limit; the program's own exit code otherwise.)
step() {
    name=$1 so=$2 se=$3
    shift 3
    echo "kernel-matrix-guest: $name: $*"
    t0=$(uptime_s)
    if [ "$so" = "$se" ]; then
        timeout "$limit" "$@" >"$so" 2>&1 </dev/null
    else
        timeout "$limit" "$@" >"$so" 2>"$se" </dev/null
    fi
    rc=$?
    t1=$(uptime_s)
    secs=$(elapsed "$t0" "$t1")
    over=no
    # A step that ran into the limit: busybox timeout kills it with SIGTERM.
    if awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s + 0.5 >= l) }'; then over=yes; fi
    put "${name}_rc" "$rc"
    put "${name}_seconds" "$secs"
    put "${name}_timed_out" "$over"
    echo "kernel-matrix-guest: $name: exit $rc after ${secs}s"
    [ "$rc" -eq 0 ] || status=1
}

put kernel_release "$(uname -r)"
put nproc "$(nproc)"
put step_timeout "$limit"
put skew_args "$skew_args"
if grep -q ' /sys/kernel/debug debugfs ' /proc/mounts; then put debugfs_mounted yes; else put debugfs_mounted no; fi
if [ -d /sys/kernel/debug/kvm ]; then put debugfs_kvm yes; else put debugfs_kvm no; fi
put clocksource "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
t_start=$(uptime_s)
put uptime_start "$t_start"

if [ ! -x "$bin" ]; then
    echo "kernel-matrix-guest: no executable tsc-rendezvous at $bin"
    put error "no executable tsc-rendezvous at $bin"
    exit 1
fi

# 1. check. --ktap is new: use it when this binary's --help lists it.
if "$bin" check --help 2>/dev/null | grep -q -e '--ktap'; then
    put ktap_option yes
    # shellcheck disable=SC2086 # the argument lists are word lists
    step check "$out/check.json" "$out/check.stderr" \
        "$bin" check --json $check_args --junit "$out/check-junit.xml" --ktap "$out/check.ktap"
else
    put ktap_option no
    echo "kernel-matrix-guest: this tsc-rendezvous has no check --ktap; running without it"
    # shellcheck disable=SC2086
    step check "$out/check.json" "$out/check.stderr" \
        "$bin" check --json $check_args --junit "$out/check-junit.xml"
fi

# 2. run.
# shellcheck disable=SC2086
step run "$out/run.json" "$out/run.stderr" "$bin" run --json $run_args

# 3. restore: every method, a snapshot after a rendezvous restored into a fresh VM.
# shellcheck disable=SC2086
step restore "$out/restore.json" "$out/restore.stderr" "$bin" restore --json $restore_args

# 4. every variant from a skew set through KVM_VCPU_TSC_OFFSET (exit 2 where the
#    kernel lacks it: the host judges which).
# shellcheck disable=SC2086
step skew "$out/skew.json" "$out/skew.stderr" "$bin" run --json $skew_args

# 5. the real-VM integration tests; CI=1 turns "no /dev/kvm, skipped" into a failure.
tests=
for t in ${TSC_TESTS:-}; do
    tname=${t##*/}
    tests="$tests $tname"
    if [ ! -x "$t" ]; then
        echo "kernel-matrix-guest: test binary $t missing" >"$out/test-$tname.log"
        put "test_${tname}_rc" 127
        status=1
        continue
    fi
    step "test_$tname" "$out/test-$tname.log" "$out/test-$tname.log" \
        env CI=1 "$t" --test-threads 1
done
put tests "${tests# }"

t_end=$(uptime_s)
put uptime_end "$t_end"
put total_seconds "$(elapsed "$t_start" "$t_end")"
dmesg >"$out/dmesg.txt" 2>&1
put script_rc "$status"
exit "$status"
