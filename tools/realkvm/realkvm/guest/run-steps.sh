#!/bin/sh
# shellcheck disable=SC2317 # the functions are called from the generated steps file
# run-steps.sh STEPS: the generic runner of a realkvm run inside the guest
# (busybox sh, a real /dev/kvm). STEPS is a file the host generated from the
# run's data (realkvm/runs.py): shell calls of the functions below, one per
# line, run in order. Every result goes to $TSC_QEMU_OUT (copied back to the
# host after the script ends):
#
#   results.txt   key=value lines: the kernel release, the CPU count, debugfs,
#                 the clocksource, per step NAME_rc, NAME_seconds (guest uptime)
#                 and NAME_timed_out, and what the steps file records
#   dmesg.txt     the guest kernel log at the end
#
# The runner decides nothing; the host judges the files. Its exit code is 0
# when every step exited 0, else 1.
#
# Functions a steps file calls:
#   limit SECS                 the time limit of each later step (default 300)
#   record KEY VALUE           a results.txt line
#   say TEXT                   a console line
#   require PATH               stop (exit 1) unless PATH is executable
#   probe NAME TEXT CMD...     record NAME=yes when CMD's output holds TEXT, else no
#   when NAME VALUE CALL...    CALL only when probe NAME recorded VALUE
#   step NAME STDOUT STDERR CMD...  run CMD under the limit (STDOUT = STDERR: one file)
#   begin NAME DIR UNLOAD... -- LOAD...  start group NAME: unload the modules
#                              UNLOAD (those loaded), load the files LOAD in order;
#                              records NAME_modules_rc (0: swapped, /dev/kvm there)
#                              and, on failure, NAME_modules_error; the group's
#                              steps then record NAME_rc=blocked instead of running
#   end NAME                   end the group: its kernel log to DIR/dmesg.txt

out=${TSC_QEMU_OUT:-/out}
mkdir -p "$out"
res=$out/results.txt
: >"$res"
limit_s=300
status=0
blocked=

put() { echo "$1=$2" >>"$res"; }
uptime_s() { read -r up _ </proc/uptime; echo "$up"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

limit() { limit_s=$1; put step_timeout "$1"; }
record() { put "$1" "$2"; }
say() { echo "run-steps: $*"; }
require() {
    [ -x "$1" ] && return 0
    say "no executable $1"
    put error "no executable $1"
    exit 1
}
probe() {
    name=$1 text=$2
    shift 2
    if "$@" 2>/dev/null | grep -q -e "$text"; then v=yes; else v=no; fi
    put "$name" "$v"
    eval "probe_$name=\$v"
}
when() {
    eval "v=\${probe_$1:-}"
    [ "$v" = "$2" ] || return 0
    shift 2
    "$@"
}
# (busybox timeout: SIGTERM at the limit; the program's own exit code otherwise.)
loaded() { grep -q "^$1 " /proc/modules; }
begin() {
    group=$1 gdir=$2
    shift 2
    mkdir -p "$gdir"
    blocked=
    # A marker in the kernel log: end cuts the group's part out from it.
    echo "realkvm-group-begin $group" >/dev/kmsg 2>/dev/null
    say "$group: modules"
    why=
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        if loaded "$1" && ! rmmod "$1" 2>>"$gdir/modules.log"; then
            [ -n "$why" ] || why="rmmod $1 failed"
        fi
        shift
    done
    [ "${1:-}" = "--" ] && shift
    for f in "$@"; do
        [ -n "$why" ] && break
        insmod "$f" 2>>"$gdir/modules.log" || why="insmod $f failed"
    done
    [ -n "$why" ] || [ -c /dev/kvm ] || why="no /dev/kvm after loading the modules"
    if [ -n "$why" ]; then
        blocked=$group
        put "${group}_modules_rc" 1
        put "${group}_modules_error" "$why"
        say "$group: $why: its steps do not run"
        status=1
    else
        put "${group}_modules_rc" 0
    fi
}
end() {
    dmesg 2>/dev/null | sed -n "/realkvm-group-begin $1\$/,\$p" >"$gdir/dmesg.txt"
    blocked=
}
step() {
    name=$1 so=$2 se=$3
    shift 3
    if [ -n "$blocked" ]; then
        say "$name: not run (the modules of $blocked did not load)"
        put "${name}_rc" blocked
        return 0
    fi
    mkdir -p "$(dirname "$so")" "$(dirname "$se")"
    say "$name: $*"
    t0=$(uptime_s)
    if [ "$so" = "$se" ]; then
        timeout "$limit_s" "$@" >"$so" 2>&1 </dev/null
    else
        timeout "$limit_s" "$@" >"$so" 2>"$se" </dev/null
    fi
    rc=$?
    t1=$(uptime_s)
    secs=$(elapsed "$t0" "$t1")
    over=no
    # A step that ran into the limit: busybox timeout kills it with SIGTERM.
    if awk -v s="$secs" -v l="$limit_s" 'BEGIN { exit !(s + 0.5 >= l) }'; then over=yes; fi
    put "${name}_rc" "$rc"
    put "${name}_seconds" "$secs"
    put "${name}_timed_out" "$over"
    say "$name: exit $rc after ${secs}s"
    [ "$rc" -eq 0 ] || status=1
}

put kernel_release "$(uname -r)"
put nproc "$(nproc)"
if grep -q ' /sys/kernel/debug debugfs ' /proc/mounts; then put debugfs_mounted yes; else put debugfs_mounted no; fi
if [ -d /sys/kernel/debug/kvm ]; then put debugfs_kvm yes; else put debugfs_kvm no; fi
put clocksource "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
t_start=$(uptime_s)
put uptime_start "$t_start"

# shellcheck disable=SC1090 # the steps file is generated per boot
. "$1"

t_end=$(uptime_s)
put uptime_end "$t_end"
put total_seconds "$(elapsed "$t_start" "$t_end")"
dmesg >"$out/dmesg.txt" 2>&1
put script_rc "$status"
exit "$status"
