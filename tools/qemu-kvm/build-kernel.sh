#!/usr/bin/env bash
# build-kernel.sh — build a small KVM-capable Linux kernel from Debian's linux-source
# package, for run-in-qemu.sh --kernel / kernel-matrix.sh --kernel.
#
# Why: kernel-matrix.sh must work on a kernel someone built (a patched one, a bisect
# step), not just on Debian's packaged kernels. This script is the proof that it does,
# and a starting point for "build my tree and test it": it takes the kernel source of a
# Debian suite (linux-source-X.Y, found through private apt lists as run-in-qemu.sh
# does; the machine's apt sources are not changed), configures it from `make tinyconfig`
# plus exactly what the QEMU guest needs (64-bit, SMP, serial console, initramfs,
# devtmpfs, proc/sysfs/debugfs, ELF and #! binaries, futexes and the fds Rust's std and
# KVM use, the syscalls and AF_UNIX sockets the test binaries need, ACPI for power-off,
# KVM with kvm_amd), builds bzImage and the modules, and
# installs the modules into OUT/modules (a tree --modules takes).
# Not part of CI: it takes tens of minutes on 2 cores.
set -euo pipefail

readonly PROG_NAME=build-kernel.sh
readonly DEBIAN_MIRROR=http://deb.debian.org/debian
readonly DEBIAN_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

usage() {
    cat <<EOF
Usage: $PROG_NAME [options]

Build a minimal KVM-capable kernel (bzImage + kvm/kvm_amd modules) from Debian's
linux-source-* package and print the kernel-matrix.sh command that tests it.

Options:
  --suite SUITE   Debian suite whose linux-source-* to build (default bookworm; any
                  suite with a linux-source package: trixie, sid, a backports suite)
  --source DIR    build this kernel tree instead (a git checkout or unpacked tarball;
                  it is configured in OUT/build, the tree itself stays untouched)
  --out DIR       where the source, the build and the results go (default
                  target/kernel-build under the repository); results:
                  OUT/bzImage, OUT/modules/lib/modules/REL/, OUT/build-info.txt
  --kvm MODE      m (default: kvm and kvm_amd as modules, loaded by run-in-qemu.sh)
                  or y (built in; then no --modules is needed)
  -j N            parallel jobs (default: the number of CPUs)
  --config-only   stop after writing OUT/build/.config
  -h, --help      show this text

Needs root for apt-get (it installs build-essential bc bison flex libelf-dev
libssl-dev xz-utils kmod cpio when missing).
EOF
}

log() { printf '%s: %s\n' "$PROG_NAME" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
SUITE=bookworm
SOURCE=
OUT=$root/target/kernel-build
KVM_MODE=m
JOBS=$(nproc)
CONFIG_ONLY=0
while (($#)); do
    case $1 in
        --suite) [[ $# -ge 2 ]] || die "$1 needs a value"; SUITE=$2; shift 2 ;;
        --source) [[ $# -ge 2 ]] || die "$1 needs a value"; SOURCE=$2; shift 2 ;;
        --out) [[ $# -ge 2 ]] || die "$1 needs a value"; OUT=$2; shift 2 ;;
        --kvm) [[ $# -ge 2 ]] || die "$1 needs a value"; KVM_MODE=$2; shift 2 ;;
        -j) [[ $# -ge 2 ]] || die "$1 needs a value"; JOBS=$2; shift 2 ;;
        -j*) JOBS=${1#-j}; shift ;;
        --config-only) CONFIG_ONLY=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument '$1'" ;;
    esac
done
[[ $KVM_MODE == m || $KVM_MODE == y ]] || die "--kvm must be m or y"
[[ $JOBS =~ ^[0-9]+$ && $JOBS -ge 1 ]] || die "-j must be a positive integer"
[[ $SUITE =~ ^[a-z]+(-backports(-sloppy)?)?$ ]] || die "--suite '$SUITE' is not a Debian suite name"
if [[ -n $SOURCE ]]; then
    [[ -f $SOURCE/Makefile && -d $SOURCE/arch/x86 ]] || die "--source '$SOURCE' is not a Linux source tree"
    SOURCE=$(realpath -- "$SOURCE")
fi
[[ $(id -u) -eq 0 ]] || die "must run as root (apt-get)"

mkdir -p -- "$OUT"
OUT=$(realpath -- "$OUT")
now() { date +%s; }
t_start=$(now)

# ---------------------------------------------------------------- build dependencies
deps=(build-essential bc bison flex libelf-dev libssl-dev xz-utils kmod cpio)
missing=()
for p in "${deps[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || log "warning: apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
        die "apt-get install ${missing[*]} failed"
fi
t_deps=$(now)

# ---------------------------------------------------------------- source
if [[ -z $SOURCE ]]; then
    CACHE=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/tsc-rendezvous/qemu-kvm
    APT_DIR=$CACHE/apt/$SUITE-source
    mkdir -p -- "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
    [[ -f $APT_DIR/status ]] || : >"$APT_DIR/status"
    printf 'deb [signed-by=%s] %s %s main\n' "$DEBIAN_KEYRING" "$DEBIAN_MIRROR" "$SUITE" >"$APT_DIR/sources.list"
    case $SUITE in
        sid | unstable | experimental | *-backports*) ;;
        *) printf 'deb [signed-by=%s] %s %s-updates main\n' "$DEBIAN_KEYRING" "$DEBIAN_MIRROR" "$SUITE" >>"$APT_DIR/sources.list" ;;
    esac
    APT_OPTS=(-o "Dir::Etc::SourceList=$APT_DIR/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache"
        -o "Dir::State::status=$APT_DIR/status"
        -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
        -o APT::Architectures=amd64 -o Acquire::Languages=none -o APT::Sandbox::User=root)
    log "updating private package lists for Debian $SUITE ($APT_DIR)"
    apt-get "${APT_OPTS[@]}" update -qq >&2 || log "warning: apt-get update for $SUITE reported errors"
    # linux-source (the metapackage) depends on the versioned linux-source-X.Y.
    src_pkg=$(apt-cache "${APT_OPTS[@]}" depends linux-source 2>/dev/null |
        awk '$1 ~ /^\|?Depends:$/ && $2 ~ /^linux-source-[0-9]/ { print $2; exit }')
    [[ -n $src_pkg ]] || die "Debian $SUITE has no linux-source package (is the suite right?)"
    src_ver=$(apt-cache "${APT_OPTS[@]}" show --no-all-versions "$src_pkg" | awk '$1 == "Version:" { print $2; exit }')
    srcdir=$OUT/src/${src_pkg}_${src_ver//:/%}
    if [[ ! -f $srcdir/.unpacked ]]; then
        rm -rf -- "$srcdir"
        mkdir -p -- "$srcdir/deb"
        log "downloading $src_pkg=$src_ver (about 150 MB)"
        (cd "$srcdir/deb" && apt-get "${APT_OPTS[@]}" download -qq "$src_pkg=$src_ver" >&2) || die "apt-get download $src_pkg failed"
        dpkg -x "$srcdir"/deb/*.deb "$srcdir/x"
        tarball=$(find "$srcdir/x/usr/src" -maxdepth 1 -name 'linux-source-*.tar.*' -print -quit)
        [[ -n $tarball ]] || die "$src_pkg has no usr/src/linux-source-*.tar.*"
        log "unpacking $(basename -- "$tarball")"
        tar -C "$srcdir" -xf "$tarball"
        rm -rf -- "$srcdir/deb" "$srcdir/x"
        touch "$srcdir/.unpacked"
    fi
    SOURCE=$(find "$srcdir" -mindepth 1 -maxdepth 1 -type d -name 'linux-source-*' -print -quit)
    [[ -n $SOURCE ]] || die "no linux-source-* directory in $srcdir"
    origin="Debian $SUITE $src_pkg $src_ver"
else
    origin="tree $SOURCE"
fi
t_src=$(now)

# ---------------------------------------------------------------- configuration
B=$OUT/build
mkdir -p -- "$B"
mk() { make -C "$SOURCE" O="$B" ARCH=x86_64 "$@"; }
log "configuring in $B (tinyconfig + what the QEMU guest needs, KVM=$KVM_MODE)"
mk -s tinyconfig >"$OUT/config.log" 2>&1 || die "make tinyconfig failed (see $OUT/config.log)"
# What the guest of run-in-qemu.sh uses, and why:
want_y=(
    64BIT SMP X86_TSC # a 64-bit SMP guest (check runs 2-4 vCPUs); TSC as clocksource
    PRINTK PRINTK_TIME TTY SERIAL_8250 SERIAL_8250_CONSOLE # console=ttyS0
    BLK_DEV_INITRD RD_GZIP # the gzip'd cpio initramfs
    DEVTMPFS DEVTMPFS_MOUNT PROC_FS SYSFS TMPFS SHMEM # /dev (kvm, console), /proc, /sys
    DEBUG_FS # KVM's per-VM files (exact offsets on kernels without KVM_VCPU_TSC_OFFSET)
    BINFMT_ELF BINFMT_SCRIPT # static programs, #! scripts (/init)
    MULTIUSER FUTEX EPOLL EVENTFD SIGNALFD TIMERFD POSIX_TIMERS FILE_LOCKING # std, KVM fds
    HIGH_RES_TIMERS MAGIC_SYSRQ # KVM's timers; power-off via sysrq-trigger
    PCI ACPI # ACPI is what powers the QEMU machine off
    MODULES MODULE_UNLOAD # insmod of kvm.ko / kvm-amd.ko
    CPU_SUP_AMD # the emulated CPU is an AMD one (-cpu max)
    VIRTUALIZATION
    # System calls and AF_UNIX sockets that static glibc/Rust programs may take for
    # granted and tinyconfig leaves out. (Added while chasing the test binaries' hang,
    # whose cause turned out to be the random pool: run-in-qemu.sh boots with
    # random.trust_cpu=on. Kept because the kernel that passed the matrix had them.)
    NET UNIX ADVISE_SYSCALLS MEMBARRIER RSEQ AIO KCMP SYSVIPC FHANDLE CROSS_MEMORY_ATTACH
)
args=()
for o in "${want_y[@]}"; do args+=(--enable "$o"); done
args+=(--set-val NR_CPUS 8)
# Seed the random pool from RDRAND at boot where the kernel still has this option (6.1;
# later kernels take the boot parameter random.trust_cpu=on, which run-in-qemu.sh passes).
args+=(--enable RANDOM_TRUST_CPU)
if [[ $KVM_MODE == m ]]; then
    args+=(--module KVM --module KVM_AMD)
else
    args+=(--enable KVM --enable KVM_AMD)
fi
# Not wanted: debug info (slow, huge), module signing (needs keys), Intel's KVM, SEV
# (it would pull in the ccp driver).
args+=(--disable DEBUG_INFO --disable DEBUG_INFO_DWARF5 --disable DEBUG_INFO_BTF --disable MODULE_SIG
    --disable KVM_INTEL --disable KVM_XEN --disable KVM_SMM --disable KVM_AMD_SEV --enable DEBUG_INFO_NONE)
"$SOURCE/scripts/config" --file "$B/.config" "${args[@]}"
mk -s olddefconfig >>"$OUT/config.log" 2>&1 || die "make olddefconfig failed (see $OUT/config.log)"
# Every option asked for must have survived olddefconfig (a dependency it lacks drops it).
lost=()
for o in "${want_y[@]}"; do
    grep -qx "CONFIG_$o=y" "$B/.config" || lost+=("$o")
done
for o in KVM KVM_AMD; do
    grep -qx "CONFIG_$o=$KVM_MODE" "$B/.config" || lost+=("$o=$KVM_MODE")
done
((${#lost[@]} == 0)) || die "the configuration lost CONFIG_${lost[*]} (a dependency missing?); see $B/.config"
t_cfg=$(now)
((!CONFIG_ONLY)) || { log "configuration in $B/.config"; exit 0; }

# ---------------------------------------------------------------- build
log "building bzImage and modules with -j$JOBS (log: $OUT/build.log)"
if ! mk -j"$JOBS" bzImage modules >"$OUT/build.log" 2>&1; then
    tail -n 30 "$OUT/build.log" >&2
    die "the kernel build failed (full log: $OUT/build.log)"
fi
t_build=$(now)
rm -rf -- "$OUT/modules"
mk -s INSTALL_MOD_PATH="$OUT/modules" modules_install >>"$OUT/build.log" 2>&1 || die "modules_install failed (see $OUT/build.log)"
cp -- "$B/arch/x86/boot/bzImage" "$OUT/bzImage"
rel=$(cat "$B/include/config/kernel.release")
t_end=$(now)

{
    echo "origin=$origin"
    echo "kernel_release=$rel"
    echo "kvm=$KVM_MODE"
    echo "jobs=$JOBS"
    echo "cpus=$(nproc)"
    echo "config_options=$(grep -c '=[ym]$' "$B/.config")"
    echo "bzimage_bytes=$(stat -c %s "$OUT/bzImage")"
    echo "deps_seconds=$((t_deps - t_start))"
    echo "source_seconds=$((t_src - t_deps))"
    echo "config_seconds=$((t_cfg - t_src))"
    echo "build_seconds=$((t_build - t_cfg))"
    echo "total_seconds=$((t_end - t_start))"
} >"$OUT/build-info.txt"
log "built Linux $rel in $((t_build - t_cfg))s (all steps $((t_end - t_start))s): $OUT/bzImage, modules in $OUT/modules"
sed 's/^/  /' "$OUT/build-info.txt" >&2
echo "test it with:"
if [[ $KVM_MODE == m ]]; then
    echo "  bash $here/kernel-matrix.sh --kernel $OUT/bzImage --modules $OUT/modules"
else
    echo "  bash $here/kernel-matrix.sh --kernel $OUT/bzImage"
fi
