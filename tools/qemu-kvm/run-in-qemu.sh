#!/usr/bin/env bash
# run-in-qemu.sh — run a statically linked program against a *real* (SVM) /dev/kvm.
#
# Why this exists: the workplace machines only offer PVM's /dev/kvm, which accepts
# guest/host TSC writes and then ignores them. QEMU's TCG (pure software emulation)
# implements AMD SVM well enough that a stock Debian kernel booted under it loads
# kvm_amd, and *that* /dev/kvm has the real TSC-offset semantics. So we boot a Debian
# kernel under TCG with a tiny busybox initramfs, insmod the KVM modules, run the
# program under test as the only userspace process and report its exit code.
# See shared/notes/real-kvm-in-qemu.md for the background and measured pitfalls.
#
# Everything downloaded (kernel package, extracted kernel + modules) lives in a cache
# directory outside the repository; the per-run initramfs, serial log and extracted
# program output live in the work directory.

set -euo pipefail

readonly PROG_NAME=run-in-qemu.sh

# Exit codes of this script other than the program's own.
readonly EX_USAGE=2      # bad command line
readonly EX_BADBIN=3     # program missing or not a static x86-64 ELF
readonly EX_HOST=4       # host-side setup failed (packages, kernel download, initramfs)
readonly EX_GUEST=97     # inside the guest: a module did not load or /dev/kvm is missing
readonly EX_TIMEOUT=124  # same as timeout(1)
readonly EX_NOMARK=125   # QEMU ended without our exit marker (kernel panic, QEMU error)

# Marker lines printed by the guest's /init on the serial console. The script parses
# them; they are also what a human greps for in the log.
readonly M_BEGIN='@@TSC-QEMU-BEGIN@@'
readonly M_EXIT_RE='@@TSC-QEMU-EXIT [0-9]+@@'
readonly M_FAIL_RE='@@TSC-QEMU-SETUP-FAIL [^@]*@@'

usage() {
    cat <<EOF
Usage: $PROG_NAME [options] -- /path/to/static-binary [args...]

Boot a Debian kernel under QEMU TCG (-cpu max, so the guest sees AMD SVM), load
kvm_amd, and run the given statically linked x86-64 program inside as /prog with
a real /dev/kvm. Its stdout/stderr go to the serial console, which is copied to
stdout and to WORKDIR/serial.log; the program's output alone is written to
WORKDIR/prog-output.txt. The script exits with the program's exit code.

Options:
  --timeout SECS   wall-clock limit for the QEMU run, boot included (default 600;
                   package installs and the one-off kernel download come on top)
  --smp N          number of emulated CPUs (default 2)
  --mem MB         guest memory in MiB (default 1024)
  --cpu MODEL      QEMU -cpu model (default max; it must offer svm for kvm_amd)
  --workdir DIR    where to put initrd.gz, serial.log, prog-output.txt
                   (default: a new mktemp directory under \${TMPDIR:-/tmp})
  --env NAME=VAL   export NAME=VAL to the program (repeatable)
  --dmesg          print the guest kernel log after the program has exited
  --refresh-kernel ask apt for the kernel linux-image-amd64 currently points at and
                   download it if it is not cached (default: reuse the newest
                   cached kernel without asking apt, which saves ~1.5 s and keeps
                   runs on one kernel)
  -h, --help       show this text

Exit codes: the program's own exit code (a program killed by signal N inside
the guest gives 128+N); $EX_USAGE usage error; $EX_BADBIN binary missing or not
statically linked; $EX_HOST host setup failed; $EX_GUEST a KVM module failed to load
or /dev/kvm is missing in the guest; $EX_TIMEOUT timeout; $EX_NOMARK QEMU ended
without an exit marker (guest kernel panic or QEMU error).

Needs root (installs qemu-system-x86, busybox-static, cpio with apt-get when
missing). The kernel is cached in \${XDG_CACHE_HOME:-\$HOME/.cache}/tsc-rendezvous/qemu-kvm.
Emulation is slow (~1 ms per guest exit): check KVM semantics with it, not timings.
EOF
}

log() { printf '%s: %s\n' "$PROG_NAME" "$*" >&2; }
die() {
    local code=$1
    shift
    log "error: $*"
    exit "$code"
}

# ---------------------------------------------------------------- command line
TIMEOUT=600
SMP=2
MEM=1024
CPU=max
WORKDIR=
DMESG=0
REFRESH=0
ENVS=()
while (($#)); do
    case $1 in
        --timeout) [[ $# -ge 2 ]] || die $EX_USAGE "--timeout needs a value"; TIMEOUT=$2; shift 2 ;;
        --timeout=*) TIMEOUT=${1#*=}; shift ;;
        --smp) [[ $# -ge 2 ]] || die $EX_USAGE "--smp needs a value"; SMP=$2; shift 2 ;;
        --smp=*) SMP=${1#*=}; shift ;;
        --mem) [[ $# -ge 2 ]] || die $EX_USAGE "--mem needs a value"; MEM=$2; shift 2 ;;
        --mem=*) MEM=${1#*=}; shift ;;
        --cpu) [[ $# -ge 2 ]] || die $EX_USAGE "--cpu needs a value"; CPU=$2; shift 2 ;;
        --cpu=*) CPU=${1#*=}; shift ;;
        --workdir) [[ $# -ge 2 ]] || die $EX_USAGE "--workdir needs a value"; WORKDIR=$2; shift 2 ;;
        --workdir=*) WORKDIR=${1#*=}; shift ;;
        --env) [[ $# -ge 2 ]] || die $EX_USAGE "--env needs NAME=VALUE"; ENVS+=("$2"); shift 2 ;;
        --env=*) ENVS+=("${1#*=}"); shift ;;
        --dmesg) DMESG=1; shift ;;
        --refresh-kernel) REFRESH=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        -*) die $EX_USAGE "unknown option '$1' (see --help)" ;;
        *) break ;; # first non-option is the program
    esac
done
(($# >= 1)) || { usage >&2; exit $EX_USAGE; }
BIN=$1
shift
PROG_ARGS=("$@")

[[ $TIMEOUT =~ ^[0-9]+$ && $TIMEOUT -gt 0 ]] || die $EX_USAGE "--timeout must be a positive integer (seconds)"
[[ $SMP =~ ^[0-9]+$ && $SMP -ge 1 ]] || die $EX_USAGE "--smp must be a positive integer"
[[ $MEM =~ ^[0-9]+$ && $MEM -ge 256 ]] || die $EX_USAGE "--mem must be an integer >= 256 (MiB)"
for e in "${ENVS[@]+"${ENVS[@]}"}"; do
    [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die $EX_USAGE "--env wants NAME=VALUE, got '$e'"
done

# ---------------------------------------------------------------- ELF checks
# Read an unsigned little-endian integer of $3 bytes at offset $2 of file $1.
# (od prints in host byte order; this script only makes sense on x86-64 hosts.)
elf_uint() {
    local v
    v=$(od -An -tu"$3" -j"$2" -N"$3" -- "$1") || return 1
    [[ -n ${v// /} ]] || return 1
    echo $((v))
}

# Succeeds if $1 is a 64-bit little-endian x86-64 ELF without a PT_INTERP program
# header, i.e. it does not need a dynamic loader (static or static-pie). Done with od
# rather than readelf/file so that no extra package is needed. Prints why on failure.
elf_static_x86_64() {
    local f=$1 magic phoff phentsize phnum i type
    magic=$(od -An -tx1 -N6 -- "$f" | tr -d ' \n')
    [[ $magic == 7f454c460201 ]] || { echo "not a 64-bit little-endian ELF file"; return 1; }
    [[ $(elf_uint "$f" 18 2) == 62 ]] || { echo "not an x86-64 ELF (e_machine != EM_X86_64)"; return 1; }
    if ! { phoff=$(elf_uint "$f" 32 8) && phentsize=$(elf_uint "$f" 54 2) && phnum=$(elf_uint "$f" 56 2); }; then
        echo "truncated ELF header"
        return 1
    fi
    ((phnum > 0 && phentsize >= 4)) || { echo "ELF has no program headers"; return 1; }
    for ((i = 0; i < phnum; i++)); do
        type=$(elf_uint "$f" $((phoff + i * phentsize)) 4) || { echo "truncated program headers"; return 1; }
        if ((type == 3)); then # PT_INTERP
            echo "dynamically linked (has a PT_INTERP program header)"
            return 1
        fi
    done
}

[[ -f $BIN ]] || die $EX_BADBIN "program '$BIN' not found"
[[ -r $BIN ]] || die $EX_BADBIN "program '$BIN' is not readable"
if ! why=$(elf_static_x86_64 "$BIN"); then
    die $EX_BADBIN "'$BIN' cannot run in the initramfs: $why. The guest has no libc or loader;" \
        "build statically, e.g. RUSTFLAGS='-C target-feature=+crt-static'" \
        "cargo build --release --target x86_64-unknown-linux-gnu"
fi

# ---------------------------------------------------------------- host packages
[[ $(id -u) -eq 0 ]] || die $EX_HOST "must run as root (installs Debian packages; see --help)"

APT_UPDATED=0
# Returns non-zero when the update fails (offline); callers decide whether that is fatal.
apt_update_once() {
    ((APT_UPDATED)) && return 0
    APT_UPDATED=1
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || { log "warning: apt-get update failed"; return 1; }
}

# Busybox must be the static build: the initramfs has no libc. Debian's dynamic
# `busybox` package and `busybox-static` both ship /bin/busybox and conflict.
find_static_busybox() {
    local bb
    bb=$(command -v busybox 2>/dev/null) || return 1
    elf_static_x86_64 "$bb" >/dev/null || return 1
    echo "$bb"
}

apt_install() {
    apt_update_once || die $EX_HOST "cannot install $* without package lists"
    log "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 ||
        die $EX_HOST "apt-get install $* failed"
}

need_install=0
command -v qemu-system-x86_64 >/dev/null || need_install=1
command -v cpio >/dev/null || need_install=1
find_static_busybox >/dev/null || need_install=1
if ((need_install)); then
    # Seen on the workplace machines: they come with qemu-utils 10 from bookworm-backports,
    # which Breaks qemu-system-common < 8, so installing bookworm's qemu-system-x86 7.2
    # (the version these notes were verified with) makes apt remove qemu-utils (qemu-img).
    # Say so loudly rather than let it pass in the apt noise.
    apt_update_once || die $EX_HOST "cannot install qemu-system-x86 busybox-static cpio without package lists"
    removals=$(apt-get -s install --no-install-recommends qemu-system-x86 busybox-static cpio 2>/dev/null |
        awk '$1 == "Remv" { printf " %s", $2 }')
    [[ -z $removals ]] || log "warning: installing qemu-system-x86 makes apt REMOVE:$removals"
    # --no-install-recommends: the recommends pull in a GTK GUI and firmware we do not
    # use; seabios (needed for -kernel) is a hard dependency.
    apt_install qemu-system-x86 busybox-static cpio
fi
BUSYBOX=$(find_static_busybox) || die $EX_HOST "no statically linked busybox found even after installing busybox-static"

# ---------------------------------------------------------------- kernel cache
CACHE=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/tsc-rendezvous/qemu-kvm
mkdir -p "$CACHE"

# Modules to load, in dependency order (there is no modules.dep in the .deb, and busybox
# insmod does not resolve dependencies). kvm and kvm-amd are required; irqbypass and
# ccp are loaded when the package has them (they could be built in or configured out).
readonly MODULES=(irqbypass kvm ccp kvm-amd)
readonly REQUIRED_MODULES=(kvm kvm-amd)

# The versioned package the metapackage points at, e.g. linux-image-6.1.0-57-amd64.
kernel_pkg() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}
pkg_version() {
    apt-cache show --no-all-versions "$1" 2>/dev/null | awk '$1 == "Version:" { print $2; exit }'
}

# Download + extract the kernel package into $CACHE/<pkg>_<version>/ holding vmlinuz,
# <module>.ko (uncompressed), modules.load (load order) and kernel-release.
fetch_kernel() {
    local tmp rc=0
    tmp=$(mktemp -d "$CACHE/.fetch.XXXXXX") || return 1
    fetch_kernel_into "$tmp" "$@" || rc=1
    rm -rf -- "$tmp"
    return "$rc"
}
# (Called in a condition, where `set -e` is off: every step checks its own status.)
fetch_kernel_into() {
    local tmp=$1 pkg=$2 ver=$3 dest=$4 deb x vmlinuz m f rel found
    log "downloading $pkg${ver:+=$ver} (about 70 MB, once)"
    # APT::Sandbox::User=root: apt would drop to the _apt user for the download, which
    # cannot write into a cache under root's 0700 home (it warns and falls back anyway).
    (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg${ver:+=$ver}" >&2) || return 1
    deb=$(find "$tmp" -maxdepth 1 -name '*.deb' -print -quit)
    [[ -n $deb ]] || return 1
    x=$tmp/x
    dpkg -x "$deb" "$x" || return 1
    mkdir "$tmp/out" || return 1
    vmlinuz=$(find "$x/boot" -maxdepth 1 -name 'vmlinuz-*' -print -quit 2>/dev/null)
    [[ -n $vmlinuz ]] || { log "no boot/vmlinuz-* in $pkg"; return 1; }
    cp -- "$vmlinuz" "$tmp/out/vmlinuz" || return 1
    rel=${vmlinuz##*/vmlinuz-}
    echo "$rel" >"$tmp/out/kernel-release" || return 1
    : >"$tmp/out/modules.load" || return 1
    for m in "${MODULES[@]}"; do
        # Modules may be shipped compressed (newer Debian kernels use .ko.xz); busybox
        # insmod only takes plain ELF .ko files, so decompress here.
        found=
        for f in "$x"/lib/modules/*/kernel "$x"/usr/lib/modules/*/kernel; do
            [[ -d $f ]] || continue
            found=$(find "$f" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" -o -name "$m.ko.gz" \) -print -quit)
            [[ -n $found ]] && break
        done
        if [[ -z $found ]]; then
            if [[ " ${REQUIRED_MODULES[*]} " == *" $m "* ]]; then
                log "$pkg has no $m.ko"
                return 1
            fi
            log "note: $pkg has no $m.ko (built in or not configured); skipping it"
            continue
        fi
        case $found in
            *.ko) cp -- "$found" "$tmp/out/$m.ko" ;;
            *.xz) { command -v xz >/dev/null || apt_install xz-utils; } && xz -dc -- "$found" >"$tmp/out/$m.ko" ;;
            *.zst) { command -v zstd >/dev/null || apt_install zstd; } && zstd -qdc -- "$found" >"$tmp/out/$m.ko" ;;
            *.gz) gzip -dc -- "$found" >"$tmp/out/$m.ko" ;;
        esac || { log "could not extract $found"; return 1; }
        echo "$m" >>"$tmp/out/modules.load" || return 1
    done
    rm -rf -- "$dest" && mv -- "$tmp/out" "$dest"
}

newest_cached_kernel() {
    find "$CACHE" -mindepth 2 -maxdepth 2 -name modules.load -printf '%T@ %h\n' 2>/dev/null |
        sort -rn | awk 'NR == 1 { print $2 }'
}

resolve_kernel() {
    local pkg ver dest newest attempt
    # Serialise concurrent runs sharing the cache (the fetch is not atomic otherwise).
    exec 9>"$CACHE/.lock"
    flock 9
    if ((!REFRESH)); then
        newest=$(newest_cached_kernel)
        if [[ -n $newest ]]; then
            echo "$newest"
            return 0
        fi
    fi
    for attempt in 1 2; do
        pkg=$(kernel_pkg)
        if [[ -z $pkg ]]; then
            # No package lists yet (apt-cache finds nothing before the first update).
            if ((attempt == 1)) && apt_update_once; then continue; fi
            break
        fi
        ver=$(pkg_version "$pkg")
        dest=$CACHE/${pkg}_${ver//:/%}
        if [[ -f $dest/vmlinuz && -f $dest/modules.load ]]; then
            echo "$dest"
            return 0
        fi
        if fetch_kernel "$pkg" "$ver" "$dest"; then
            echo "$dest"
            return 0
        fi
        # Stale package lists point at versions the archive has removed: update, retry.
        if ((attempt == 1 && !APT_UPDATED)) && apt_update_once; then
            continue
        fi
        break
    done
    # Offline or apt broken: fall back to whatever kernel is already cached.
    newest=$(newest_cached_kernel)
    if [[ -n $newest ]]; then
        log "warning: could not resolve/download the current kernel package; using cached $newest"
        echo "$newest"
        return 0
    fi
    return 1
}

# (resolve_kernel runs in a subshell; its cache lock goes away with it.)
KDIR=$(resolve_kernel) || die $EX_HOST "could not obtain a Debian kernel (apt-get download linux-image-*-amd64 failed)"
KREL=$(cat "$KDIR/kernel-release")

# ---------------------------------------------------------------- initramfs
if [[ -z $WORKDIR ]]; then
    WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/tsc-qemu-kvm.XXXXXX")
else
    mkdir -p -- "$WORKDIR"
fi
WORKDIR=$(cd -- "$WORKDIR" && pwd)
LOG=$WORKDIR/serial.log
QERR=$WORKDIR/qemu-stderr.txt
OUT=$WORKDIR/prog-output.txt
INITRD=$WORKDIR/initrd.gz
STAGE=$WORKDIR/initramfs
rm -rf -- "$STAGE" "$LOG" "$QERR" "$OUT" "$INITRD"
mkdir -p "$STAGE"/{bin,dev,proc,sys,tmp,lib/modules}

cp -- "$BUSYBOX" "$STAGE/bin/busybox"
# Applet symlinks made on the host from the busybox's own list (no --install at boot,
# which would need /proc/self/exe and runs slower under emulation).
while IFS= read -r applet; do
    [[ -n $applet && $applet != busybox && $applet != */* ]] || continue
    ln -sf busybox "$STAGE/bin/$applet"
done < <("$BUSYBOX" --list)
[[ -e $STAGE/bin/sh ]] || ln -s busybox "$STAGE/bin/sh"

while IFS= read -r m; do
    cp -- "$KDIR/$m.ko" "$STAGE/lib/modules/$m.ko"
done <"$KDIR/modules.load"
cp -- "$BIN" "$STAGE/prog"
chmod 0755 "$STAGE/prog"

# Single-quote a string for a POSIX shell: ' becomes '\'' . Safe for any byte but NUL
# (which cannot occur in an argument), including newlines.
shq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

{
    cat <<'EOF'
#!/bin/sh
# Generated by run-in-qemu.sh. PID 1 of the emulated guest.
export PATH=/bin HOME=/ TERM=vt100
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null # KVM's per-VM debugfs (tsc-offset)
exec </dev/console >/dev/console 2>&1
# Only KERN_EMERG/KERN_ALERT reach the console from here on, so the kernel does not
# interleave its messages with the program's output (the full log stays in dmesg).
echo "2 4 1 7" >/proc/sys/kernel/printk
# No \n -> \r\n translation on the console: program output reaches the host byte-exact.
stty -onlcr 2>/dev/null
power_off() {
    sync
    # A moment for the UART to drain what may still be queued in the tty layer before
    # the machine disappears. (No loss was seen without it, even after 2000 lines.)
    sleep 0.2
    echo o >/proc/sysrq-trigger
    sleep 30
    poweroff -f
}
fail() {
    echo "@@TSC-QEMU-SETUP-FAIL $*@@"
    dmesg | tail -n 40
    echo "@@TSC-QEMU-EXIT 97@@"
    power_off
}
EOF
    while IFS= read -r m; do
        printf 'insmod /lib/modules/%s.ko || fail "insmod %s.ko failed"\n' "$m" "$m"
    done <"$KDIR/modules.load"
    cat <<'EOF'
[ -c /dev/kvm ] || fail "/dev/kvm missing after loading the modules (no SVM in the emulated CPU?)"
echo "@@TSC-QEMU-KERNEL $(uname -r)@@"
cd /
EOF
    for e in "${ENVS[@]+"${ENVS[@]}"}"; do
        printf 'export %s\n' "$(shq "$e")"
    done
    printf 'set --'
    for a in "${PROG_ARGS[@]+"${PROG_ARGS[@]}"}"; do
        printf ' %s' "$(shq "$a")"
    done
    printf '\n'
    cat <<EOF
echo '$M_BEGIN'
# stdin from /dev/null: nothing is ever typed on the console, so a program that reads
# stdin gets EOF instead of blocking until the timeout.
/prog "\$@" </dev/null
rc=\$?
echo "@@TSC-QEMU-EXIT \$rc@@"
EOF
    if ((DMESG)); then
        printf 'echo "@@TSC-QEMU-DMESG@@"\ndmesg\n'
    fi
    echo 'power_off'
} >"$STAGE/init"
chmod 0755 "$STAGE/init"
cp -- "$STAGE/init" "$WORKDIR/init.sh" # for inspection

(cd "$STAGE" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) |
    gzip -1 >"$INITRD" || die $EX_HOST "building the initramfs failed"
rm -rf -- "$STAGE"

# ---------------------------------------------------------------- boot
# - thread=single: multi-threaded TCG hung intermittently in kvm_destroy_vm (an IPI
#   that never completes); single-threaded TCG never hung and is no slower here.
# - -cpu max: exposes SVM (and more) to the guest; kvm_amd needs it.
# - tsc=reliable: with -smp >= 2 the emulated kernel otherwise marks its TSC unstable
#   and KVM then rewrites vCPU TSC offsets behind the program's back.
# - quiet: keep the boot log short; panic=-1 + -no-reboot: a guest panic ends QEMU
#   at once instead of hanging until the timeout.
# - -display none -vga none -serial stdio -monitor none instead of -nographic: the same
#   headless machine with the serial port on stdout, but SeaBIOS then does not use the
#   serial port as its console, so the log does not start with terminal-reset escape
#   sequences (ESC c would clear the user's terminal); no monitor is multiplexed on
#   stdio either.
# - -nic none: no network is wanted, and skipping the NIC skips its option ROM.
# - stdin from /dev/null: QEMU would put a terminal on stdin into raw mode.
APPEND='console=ttyS0 quiet panic=-1 tsc=reliable'
# shellcheck disable=SC2054 # the commas are part of QEMU's option syntax
QEMU=(qemu-system-x86_64 -accel tcg,thread=single -cpu "$CPU" -smp "$SMP" -m "$MEM"
    -display none -vga none -serial stdio -monitor none -no-reboot -nic none
    -kernel "$KDIR/vmlinuz" -initrd "$INITRD" -append "$APPEND")
printf '%q ' "${QEMU[@]}" >"$WORKDIR/qemu-cmdline.txt"
echo >>"$WORKDIR/qemu-cmdline.txt"

log "kernel $KREL, smp $SMP, timeout ${TIMEOUT}s, workdir $WORKDIR"
t0=$(date +%s.%N)

# QEMU writes straight into the log file and `tail --pid` copies it to stdout; unlike
# `qemu | tee`, this keeps QEMU's pid at hand so a Ctrl-C or SIGTERM to this script
# can stop it (timeout(1) runs it in its own process group, out of the terminal's reach).
: >"$LOG"
# QEMU's own stderr goes to a file of its own so that its messages ("terminating on
# signal 15") do not end up in the program's output.
timeout -k 10 "$TIMEOUT" "${QEMU[@]}" </dev/null >>"$LOG" 2>"$QERR" &
QPID=$!
tail -s 0.2 --pid="$QPID" -n +1 -f -- "$LOG" &
TPID=$!
# shellcheck disable=SC2317 # invoked from the traps below
cleanup() {
    kill -TERM "$QPID" 2>/dev/null || true
    wait "$TPID" 2>/dev/null || true
}
trap 'cleanup; log "interrupted; stopped QEMU (log: $LOG)"; exit 130' INT
trap 'cleanup; log "terminated; stopped QEMU (log: $LOG)"; exit 143' TERM HUP

set +e
wait "$QPID"
qrc=$?
wait "$TPID"
set -e
trap - INT TERM HUP
[[ ! -s $QERR ]] || sed 's/^/qemu: /' "$QERR" >&2
t1=$(date +%s.%N)
ELAPSED=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')

# ---------------------------------------------------------------- results
# Program output: everything after the begin marker up to the exit marker, minus lines
# that look like kernel messages ("[   12.345678] ..."). If the program's last line had
# no newline, the exit marker is glued to it; keep that text, without a newline.
awk -v begin="$M_BEGIN" -v exitre="$M_EXIT_RE\r?\$" '
    !on { if ($0 == begin || $0 == begin "\r") on = 1; next }
    match($0, exitre) { printf "%s", substr($0, 1, RSTART - 1); exit }
    /^\[ *[0-9]+\.[0-9]+\] / { next }
    { print }
' "$LOG" >"$OUT"

exit_line=$(grep -aoE "$M_EXIT_RE" "$LOG" | tail -n 1 || true)
fail_line=$(grep -aoE "$M_FAIL_RE" "$LOG" | tail -n 1 || true)

if [[ -n $fail_line ]]; then
    fail_line=${fail_line#@@TSC-QEMU-SETUP-FAIL }
    die $EX_GUEST "guest setup failed: ${fail_line%@@} (kernel $KREL; log: $LOG)"
fi
if [[ -z $exit_line ]]; then
    if ((qrc == 124 || qrc == 137)); then
        die $EX_TIMEOUT "timed out after ${TIMEOUT}s without the program finishing (log: $LOG)"
    fi
    if ! grep -aqF "$M_BEGIN" "$LOG"; then
        die $EX_NOMARK "QEMU exited ($qrc) before the program started: kernel panic or QEMU error? (log: $LOG)"
    fi
    die $EX_NOMARK "QEMU exited ($qrc) without the exit marker: guest crash? (log: $LOG)"
fi
# The release the guest really ran (the cache's name for it comes from a file name).
guest_rel=$(grep -aoE '@@TSC-QEMU-KERNEL [^@]*@@' "$LOG" | tail -n 1 || true)
guest_rel=${guest_rel#@@TSC-QEMU-KERNEL }
[[ -z $guest_rel ]] || KREL=${guest_rel%@@}
rc=${exit_line#@@TSC-QEMU-EXIT }
rc=${rc%@@}
if ((qrc == 124 || qrc == 137)); then
    log "warning: the program finished (exit $rc) but the guest did not power off before the timeout"
fi
log "program exited with $rc after ${ELAPSED}s (boot + run, kernel $KREL); output: $OUT"
exit "$rc"
