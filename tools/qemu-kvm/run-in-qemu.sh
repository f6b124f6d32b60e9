#!/usr/bin/env bash
# run-in-qemu.sh — run statically linked programs against a *real* (SVM) /dev/kvm.
#
# Why this exists: the workplace machines only offer PVM's /dev/kvm, which accepts
# guest/host TSC writes and then ignores them. QEMU's TCG (pure software emulation)
# implements AMD SVM well enough that a stock Debian kernel booted under it loads
# kvm_amd, and *that* /dev/kvm has the real TSC-offset semantics. So we boot a Debian
# kernel (or one the user built) under TCG with a tiny busybox initramfs, insmod the
# KVM modules, run the program under test (or a shell script that runs several) as the
# only userspace process and report its exit code.
# See shared/notes/real-kvm-in-qemu.md for the background and measured pitfalls.
#
# Everything downloaded (private apt lists per Debian suite, kernel packages, extracted
# kernels + modules) lives in a cache directory outside the repository; the per-run
# initramfs, serial log and extracted program output live in the work directory.

set -euo pipefail

readonly PROG_NAME=run-in-qemu.sh

# Exit codes of this script other than the program's own.
readonly EX_USAGE=2      # bad command line (also: --kernel/--modules/--file/--script paths)
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

# --suite takes any Debian suite with an amd64 kernel: a release (bullseye, bookworm,
# trixie, ...; also the aliases oldstable, stable, testing), sid/unstable, experimental,
# or a backports suite (trixie-backports, ...). Which exist is the archive's business: an
# unknown name is found out by apt (no Release file) and reported with the names
# distro-info-data knows. --flavour picks linux-image-FLAVOUR (amd64, cloud-amd64,
# rt-amd64, ...); an unknown one is reported with the flavours the suite has.
readonly DEFAULT_SUITE=bookworm
readonly DEFAULT_FLAVOUR=amd64
# thread=multi needs a QEMU at least this new (older ones hung; see install_qemu).
readonly QEMU_MULTI_MIN=10
readonly SUITE_RE='^[a-z]+(-backports(-sloppy)?)?$'
readonly FLAVOUR_RE='^[a-z0-9]+(-[a-z0-9]+)*$'
readonly DEBIAN_MIRROR=http://deb.debian.org/debian
readonly DEBIAN_SECURITY=http://deb.debian.org/debian-security
readonly DEBIAN_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

# The module whose dependency closure is loaded in the guest (names use '_'; files
# may use '-' or '_').
readonly ROOT_MODULE=kvm_amd

# Guest paths: the script (--script), the directory whose files come back to the host.
readonly G_SCRIPT=/script.sh
readonly G_OUT=/out

usage() {
    cat <<EOF
Usage: $PROG_NAME [options] [--] /path/to/static-binary [args...]
       $PROG_NAME [options] --script FILE [--file SRC[:DEST]]... [-- script-args...]

Boot a Linux kernel under QEMU TCG (-cpu max, so the guest sees AMD SVM), load
kvm_amd, and run inside, with a real /dev/kvm, either
  - the given statically linked x86-64 program, as /prog with the given args, or
  - with --script, a POSIX sh script run by busybox sh (as $G_SCRIPT, with the
    args after -- as "\$@"); it can run the programs copied in with --file, so
    that one boot serves several programs.
Output goes to the serial console, which is copied to stdout and to
WORKDIR/serial.log; the program's (script's) output alone is written to
WORKDIR/prog-output.txt. The script exits with the program's (script's) exit code.

Kernel (default: the newest kernel of Debian $DEFAULT_SUITE, flavour $DEFAULT_FLAVOUR):
  --suite SUITE    boot the newest kernel of Debian SUITE: any suite with an amd64
                   kernel, e.g. bullseye, bookworm, trixie (Linux 5.10, 6.1, 6.12),
                   sid, experimental, or a backports suite such as trixie-backports
                   or bookworm-backports (default $DEFAULT_SUITE). The kernel is the one
                   linux-image-FLAVOUR points at; both packagings work (one
                   linux-image-REL package, or from 7.x an empty linux-image-REL with
                   the kernel in linux-binary-REL and the modules in
                   linux-modules-REL). The packages are found through private apt lists
                   (SUITE, and for a release SUITE-updates and SUITE-security, from
                   deb.debian.org) kept in the cache; the machine's apt sources are
                   neither used nor changed. An unknown suite is an error naming the
                   suites that exist.
  --flavour FLAVOUR, --flavor FLAVOUR
                   the kernel flavour: $DEFAULT_FLAVOUR (default), cloud-amd64, rt-amd64,
                   or whatever linux-image-FLAVOUR packages SUITE has (an unknown one
                   is an error listing them)
  --refresh-kernel update those lists and use the kernel linux-image-FLAVOUR points
                   at now, downloading it if it is not cached (default: reuse the
                   newest cached kernel of the suite and flavour without asking apt,
                   which needs no network and keeps runs on one kernel)
  --kernel BZIMAGE boot this kernel instead (e.g. arch/x86/boot/bzImage of a build
                   tree); not with --suite, --flavour or --refresh-kernel
  --modules DIR    with --kernel: where its modules are: a tree made by
                   'make modules_install INSTALL_MOD_PATH=DIR' (DIR/lib/modules/REL/),
                   a lib/modules/REL directory, or any directory holding the .ko
                   files (.ko, .ko.xz, .ko.zst, .ko.gz). Without --modules, KVM must
                   be built into the kernel.
  The modules loaded are $ROOT_MODULE and, dependencies first, everything it needs
  by the depends= fields of the modules' .modinfo sections; a dependency not found
  as a module file is taken to be built in.

Guest programs:
  --script FILE    run FILE with busybox sh instead of a program; its exit code
                   is the result. Files it writes under \$TSC_QEMU_OUT ($G_OUT) are
                   copied back to WORKDIR/out/ after it ends (base64 over the
                   serial console; meant for JSON reports, not for megabytes).
  --file SRC[:DEST] copy the file or directory SRC into the initramfs (repeatable)
                   at DEST (absolute; ending in / means "into this directory";
                   default /bin/NAME, so a script can call a copied static
                   binary by name). SRC must not contain ':'.
  --env NAME=VAL   export NAME=VAL to the program or script (repeatable)

Machine and run:
  --timeout SECS   wall-clock limit for the QEMU run, boot included (default 600;
                   package installs and the one-off kernel download come on top)
  --smp N          number of emulated CPUs (default 2)
  --tcg-thread MODE  multi or single: QEMU's TCG runs each emulated CPU on its own
                   host thread, truly in parallel (multi, the default), or all of
                   them one after another on one host thread (single: the vCPUs
                   then rarely interleave, and the guest's warp test sees few lock
                   hand-offs). multi needs QEMU >= $QEMU_MULTI_MIN (older ones hung in
                   kvm_destroy_vm): on Debian bookworm QEMU is installed from
                   bookworm-backports; with an older QEMU, multi falls back to single
  --mem MB         guest memory in MiB (default 1024)
  --cpu MODEL      QEMU -cpu model (default max; it must offer svm for kvm_amd)
  --workdir DIR    where to put initrd.gz, serial.log, prog-output.txt, out/,
                   run-info.txt (default: a new mktemp directory under \${TMPDIR:-/tmp})
  --dmesg          print the guest kernel log after the program has exited
  -h, --help       show this text

Exit codes: the program's (script's) own exit code (a program killed by signal N
inside the guest gives 128+N); $EX_USAGE usage error, including a missing or unusable
--kernel, --modules, --file or --script path; $EX_BADBIN program missing or not
statically linked; $EX_HOST host setup failed; $EX_GUEST a KVM module failed to load or
/dev/kvm is missing in the guest; $EX_TIMEOUT timeout; $EX_NOMARK QEMU ended without an
exit marker (guest kernel panic or QEMU error).

WORKDIR/run-info.txt has key=value lines: kernel_release, exit_code,
qemu_seconds (QEMU start to exit) and guest_uptime_start / guest_uptime_end (the
guest kernel's uptime when the program started and just before power-off).

Needs root (installs qemu-system-x86, busybox-static, cpio with apt-get when
missing; on Debian bookworm QEMU comes from bookworm-backports, which is then
added to apt's sources as /etc/apt/sources.list.d/tsc-rendezvous-bookworm-backports.sources
unless a source has it already). Kernels are cached per suite, flavour and package version in
\${XDG_CACHE_HOME:-\$HOME/.cache}/tsc-rendezvous/qemu-kvm.
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
TCG_THREAD=multi
MEM=1024
CPU=max
WORKDIR=
DMESG=0
REFRESH=0
SUITE=
FLAVOUR=
USER_KERNEL=
USER_MODULES=
SCRIPT=
ENVS=()
FILES=()
need_value() { [[ $1 -ge 2 ]] || die $EX_USAGE "$2 needs a value"; }
while (($#)); do
    case $1 in
        --timeout) need_value $# "$1"; TIMEOUT=$2; shift 2 ;;
        --timeout=*) TIMEOUT=${1#*=}; shift ;;
        --smp) need_value $# "$1"; SMP=$2; shift 2 ;;
        --smp=*) SMP=${1#*=}; shift ;;
        --tcg-thread) need_value $# "$1"; TCG_THREAD=$2; shift 2 ;;
        --tcg-thread=*) TCG_THREAD=${1#*=}; shift ;;
        --flavour | --flavor) need_value $# "$1"; FLAVOUR=$2; shift 2 ;;
        --flavour=* | --flavor=*) FLAVOUR=${1#*=}; shift ;;
        --mem) need_value $# "$1"; MEM=$2; shift 2 ;;
        --mem=*) MEM=${1#*=}; shift ;;
        --cpu) need_value $# "$1"; CPU=$2; shift 2 ;;
        --cpu=*) CPU=${1#*=}; shift ;;
        --workdir) need_value $# "$1"; WORKDIR=$2; shift 2 ;;
        --workdir=*) WORKDIR=${1#*=}; shift ;;
        --env) need_value $# "$1"; ENVS+=("$2"); shift 2 ;;
        --env=*) ENVS+=("${1#*=}"); shift ;;
        --suite) need_value $# "$1"; SUITE=$2; shift 2 ;;
        --suite=*) SUITE=${1#*=}; shift ;;
        --kernel) need_value $# "$1"; USER_KERNEL=$2; shift 2 ;;
        --kernel=*) USER_KERNEL=${1#*=}; shift ;;
        --modules) need_value $# "$1"; USER_MODULES=$2; shift 2 ;;
        --modules=*) USER_MODULES=${1#*=}; shift ;;
        --file) need_value $# "$1"; FILES+=("$2"); shift 2 ;;
        --file=*) FILES+=("${1#*=}"); shift ;;
        --script) need_value $# "$1"; SCRIPT=$2; shift 2 ;;
        --script=*) SCRIPT=${1#*=}; shift ;;
        --dmesg) DMESG=1; shift ;;
        --refresh-kernel) REFRESH=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        -*) die $EX_USAGE "unknown option '$1' (see --help)" ;;
        *) break ;; # first non-option is the program
    esac
done
BIN=
if [[ -z $SCRIPT ]]; then
    (($# >= 1)) || { usage >&2; exit $EX_USAGE; }
    BIN=$1
    shift
fi
PROG_ARGS=("$@") # the program's arguments, or with --script the script's

[[ $TIMEOUT =~ ^[0-9]+$ && $TIMEOUT -gt 0 ]] || die $EX_USAGE "--timeout must be a positive integer (seconds)"
[[ $SMP =~ ^[0-9]+$ && $SMP -ge 1 ]] || die $EX_USAGE "--smp must be a positive integer"
[[ $MEM =~ ^[0-9]+$ && $MEM -ge 256 ]] || die $EX_USAGE "--mem must be an integer >= 256 (MiB)"
[[ $TCG_THREAD == single || $TCG_THREAD == multi ]] || die $EX_USAGE "--tcg-thread must be single or multi (got '$TCG_THREAD')"
for e in "${ENVS[@]+"${ENVS[@]}"}"; do
    [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die $EX_USAGE "--env wants NAME=VALUE, got '$e'"
done

# Kernel choice.
if [[ -n $USER_KERNEL ]]; then
    [[ -z $SUITE ]] || die $EX_USAGE "--suite and --kernel exclude each other (--suite picks a Debian kernel)"
    [[ -z $FLAVOUR ]] || die $EX_USAGE "--flavour picks a Debian kernel; it does nothing with --kernel"
    ((!REFRESH)) || die $EX_USAGE "--refresh-kernel is for Debian kernels; it does nothing with --kernel"
else
    [[ -z $USER_MODULES ]] || die $EX_USAGE "--modules needs --kernel (Debian kernels bring their own modules)"
    SUITE=${SUITE:-$DEFAULT_SUITE}
    FLAVOUR=${FLAVOUR:-$DEFAULT_FLAVOUR}
    [[ $SUITE =~ $SUITE_RE ]] ||
        die $EX_USAGE "--suite '$SUITE' is not a Debian suite name (a codename or alias such as bookworm, trixie, sid, stable, optionally with -backports)"
    [[ $FLAVOUR =~ $FLAVOUR_RE ]] ||
        die $EX_USAGE "--flavour '$FLAVOUR' is not a kernel flavour name (such as amd64, cloud-amd64, rt-amd64)"
fi

# Succeeds if $1 has the x86 boot protocol's "HdrS" signature at 0x202, i.e. is a
# bzImage that QEMU's -kernel can boot.
is_bzimage() {
    [[ $(od -An -tx1 -j514 -N4 -- "$1" 2>/dev/null | tr -d ' \n') == 48647253 ]]
}
# The release ("6.1.0-28-amd64") a bzImage announces: the setup header's kernel_version
# field (0x20e) points, relative to 0x200, at "RELEASE (builder) #1 SMP ...". Prints
# nothing when the header has no such string.
bzimage_release() {
    local f=$1 ptr s
    ptr=$(od -An -tu2 -j526 -N2 -- "$f" 2>/dev/null | tr -d ' \n')
    [[ $ptr =~ ^[0-9]+$ ]] && ((ptr > 0)) || return 0
    s=$(dd if="$f" bs=256 count=1 skip=$((ptr + 0x200)) iflag=skip_bytes status=none 2>/dev/null | tr '\0' '\n') || return 0
    s=${s%%$'\n'*}
    s=${s%% *}
    [[ ! $s =~ ^[0-9]+\.[0-9]+ ]] || echo "$s"
}

MODULE_GLOB=(-name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz')
# Files under $1 that are modules named $2 (in either spelling, '-' or '_').
find_module_file() {
    local dir=$1 name=${2//-/_} n
    n=${name//_/[-_]}
    find "$dir" -type f \( -name "$n.ko" -o -name "$n.ko.xz" -o -name "$n.ko.zst" -o -name "$n.ko.gz" \) \
        -print -quit 2>/dev/null
}

USER_KREL=
if [[ -n $USER_KERNEL ]]; then
    [[ -e $USER_KERNEL ]] || die $EX_USAGE "--kernel '$USER_KERNEL' does not exist"
    [[ -f $USER_KERNEL ]] || die $EX_USAGE "--kernel '$USER_KERNEL' is not a file (want e.g. arch/x86/boot/bzImage)"
    [[ -r $USER_KERNEL ]] || die $EX_USAGE "--kernel '$USER_KERNEL' is not readable"
    is_bzimage "$USER_KERNEL" ||
        die $EX_USAGE "--kernel '$USER_KERNEL' is not a bzImage (no 'HdrS' boot header; vmlinux ELF files do not boot with -kernel; use arch/x86/boot/bzImage)"
    USER_KERNEL=$(realpath -- "$USER_KERNEL")
    USER_KREL=$(bzimage_release "$USER_KERNEL")
    if [[ -n $USER_MODULES ]]; then
        [[ -e $USER_MODULES ]] || die $EX_USAGE "--modules '$USER_MODULES' does not exist"
        [[ -d $USER_MODULES ]] || die $EX_USAGE "--modules '$USER_MODULES' is not a directory"
        USER_MODULES=$(realpath -- "$USER_MODULES")
        # An INSTALL_MOD_PATH tree: pick lib/modules/<release of the kernel>.
        if [[ -d $USER_MODULES/lib/modules ]]; then
            rels=()
            for d in "$USER_MODULES"/lib/modules/*/; do
                [[ -d $d ]] && rels+=("$(basename -- "$d")")
            done
            if [[ -n $USER_KREL && -d $USER_MODULES/lib/modules/$USER_KREL ]]; then
                USER_MODULES=$USER_MODULES/lib/modules/$USER_KREL
            elif ((${#rels[@]} == 1)); then
                USER_MODULES=$USER_MODULES/lib/modules/${rels[0]}
            elif ((${#rels[@]} == 0)); then
                die $EX_USAGE "--modules: '$USER_MODULES/lib/modules' has no release directories"
            else
                die $EX_USAGE "--modules: '$USER_MODULES/lib/modules' has several releases (${rels[*]}) and none is the kernel's (${USER_KREL:-release unknown}); pass the right lib/modules/REL directory"
            fi
        fi
        [[ -n $(find "$USER_MODULES" -type f \( "${MODULE_GLOB[@]}" \) -print -quit 2>/dev/null) ]] ||
            die $EX_USAGE "--modules: no kernel modules (.ko, .ko.xz, .ko.zst, .ko.gz) under '$USER_MODULES'"
        [[ -n $(find_module_file "$USER_MODULES" "$ROOT_MODULE") ]] ||
            die $EX_USAGE "--modules: no ${ROOT_MODULE//_/-}.ko under '$USER_MODULES' (if kvm_amd is built into the kernel, leave out --modules)"
    fi
fi

# --file SRC[:DEST] -> FILE_SRC[i], FILE_DEST[i] (absolute guest paths).
FILE_SRC=()
FILE_DEST=()
for spec in "${FILES[@]+"${FILES[@]}"}"; do
    src=$spec
    dest=
    if [[ $spec == *:* ]]; then
        src=${spec%:*}
        dest=${spec##*:}
        [[ -n $dest ]] || die $EX_USAGE "--file '$spec': empty DEST after ':'"
    fi
    [[ -n $src ]] || die $EX_USAGE "--file '$spec': empty SRC"
    [[ -e $src ]] || die $EX_USAGE "--file: '$src' does not exist"
    [[ -r $src ]] || die $EX_USAGE "--file: '$src' is not readable"
    [[ -f $src || -d $src ]] || die $EX_USAGE "--file: '$src' is neither a file nor a directory"
    base=$(basename -- "$(realpath -- "$src")")
    if [[ -z $dest ]]; then
        dest=/bin/$base
    elif [[ $dest == */ ]]; then
        dest=$dest$base
    fi
    [[ $dest == /* ]] || die $EX_USAGE "--file '$spec': DEST must be an absolute guest path"
    [[ /$dest/ != */../* && /$dest/ != */./* ]] || die $EX_USAGE "--file '$spec': DEST must not contain . or .. components"
    dest=$(printf '%s' "$dest" | tr -s /)
    dest=${dest%/}
    case $dest in
        / | /init | /prog | "$G_SCRIPT" | /bin | /bin/sh | /bin/busybox | /lib | /lib/modules | /lib/modules/* | \
            /proc | /proc/* | /sys | /sys/* | /dev | /dev/* | "$G_OUT" | "$G_OUT"/*)
            die $EX_USAGE "--file '$spec': DEST $dest is used by the initramfs itself" ;;
    esac
    FILE_SRC+=("$src")
    FILE_DEST+=("$dest")
done

if [[ -n $SCRIPT ]]; then
    [[ -e $SCRIPT ]] || die $EX_USAGE "--script '$SCRIPT' does not exist"
    [[ -f $SCRIPT && -r $SCRIPT ]] || die $EX_USAGE "--script '$SCRIPT' is not a readable file"
fi

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

if [[ -n $BIN ]]; then
    [[ -f $BIN ]] || die $EX_BADBIN "program '$BIN' not found"
    [[ -r $BIN ]] || die $EX_BADBIN "program '$BIN' is not readable"
    if ! why=$(elf_static_x86_64 "$BIN"); then
        die $EX_BADBIN "'$BIN' cannot run in the initramfs: $why. The guest has no libc or loader;" \
            "build statically, e.g. RUSTFLAGS='-C target-feature=+crt-static'" \
            "cargo build --release --target x86_64-unknown-linux-gnu"
    fi
fi
# Extra files are not required to be programs; warn about ELF files that cannot run.
for src in "${FILE_SRC[@]+"${FILE_SRC[@]}"}"; do
    [[ -f $src && $(od -An -tx1 -N4 -- "$src" | tr -d ' \n') == 7f454c46 ]] || continue
    if ! why=$(elf_static_x86_64 "$src"); then
        log "warning: --file '$src' is an ELF file that cannot run in the guest: $why"
    fi
done

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

# Installs host tools from the machine's own apt sources.
apt_install() {
    apt_update_once || die $EX_HOST "cannot install $* without package lists"
    log "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 ||
        die $EX_HOST "apt-get install $* failed"
}

# objcopy reads the modules' .modinfo (dependencies); binutils is usually there.
command -v objcopy >/dev/null || apt_install binutils

# ---------------------------------------------------------------- modules
# Decompress (or copy) module $1 to the plain ELF file $2: busybox insmod only takes
# uncompressed .ko files, and objcopy needs them too.
unpack_module() {
    local src=$1 dst=$2
    case $src in
        *.ko) cp -- "$src" "$dst" ;;
        *.ko.xz) { command -v xz >/dev/null || apt_install xz-utils; } && xz -dc -- "$src" >"$dst" ;;
        *.ko.zst) { command -v zstd >/dev/null || apt_install zstd; } && zstd -qdc -- "$src" >"$dst" ;;
        *.ko.gz) gzip -dc -- "$src" >"$dst" ;;
        *) false ;;
    esac || { log "could not unpack $src"; return 1; }
}

# The NUL-separated key=value strings of module $1's .modinfo section, one per line.
modinfo_lines() {
    local ko=$1 sec rc=0
    sec=$(mktemp) || return 1
    objcopy -O binary --only-section=.modinfo -- "$ko" "$sec" 2>/dev/null && tr '\0' '\n' <"$sec" || rc=1
    rm -f -- "$sec"
    return "$rc"
}

declare -A MOD_FILE=() MOD_STATE=()
# add_module NAME OUTDIR RELEASE CHAIN: unpacks module NAME and, first, everything its
# depends= field names (recursively) into OUTDIR, appending each to OUTDIR/modules.load
# after its dependencies. CHAIN is the path of modules that led here (for messages).
add_module() {
    local name=$1 out=$2 rel=$3 chain=$4 f base ko info deps vermagic d
    local -a dlist=()
    case ${MOD_STATE[$name]:-} in
        loaded) return 0 ;;
        active) log "module dependency cycle: $chain -> $name"; return 1 ;;
    esac
    f=${MOD_FILE[$name]:-}
    if [[ -z $f ]]; then
        log "note: module $name (needed by ${chain##* -> }) is not a module file here; assuming it is built in"
        MOD_STATE[$name]=loaded
        return 0
    fi
    MOD_STATE[$name]=active
    base=${f##*/}
    base=${base%%.ko*}
    ko=$out/$base.ko
    unpack_module "$f" "$ko" || return 1
    info=$(modinfo_lines "$ko") || { log "cannot read the .modinfo section of $f (objcopy failed)"; return 1; }
    vermagic=$(sed -n 's/^vermagic=\([^ ]*\).*/\1/p' <<<"$info" | head -n 1)
    if [[ -n $rel && -n $vermagic && $vermagic != "$rel" ]]; then
        log "module $f was built for kernel $vermagic, but the kernel is $rel (insmod would refuse it)"
        return 1
    fi
    deps=$(awk '/^depends=/ { sub(/^depends=/, ""); print; exit }' <<<"$info")
    [[ -z $deps ]] || IFS=, read -ra dlist <<<"$deps"
    for d in "${dlist[@]+"${dlist[@]}"}"; do
        [[ -n $d ]] || continue
        add_module "${d//-/_}" "$out" "$rel" "${chain:+$chain -> }$name" || return 1
    done
    echo "$base" >>"$out/modules.load" || return 1
    MOD_STATE[$name]=loaded
}

# prepare_modules SRCDIR OUTDIR RELEASE: puts $ROOT_MODULE and its dependency closure,
# uncompressed, into OUTDIR with their load order (dependencies first) in
# OUTDIR/modules.load. RELEASE (may be empty) is checked against each module's vermagic.
prepare_modules() {
    local src=$1 out=$2 rel=$3 f base name
    MOD_FILE=()
    MOD_STATE=()
    while IFS= read -r -d '' f; do
        base=${f##*/}
        name=${base%%.ko*}
        name=${name//-/_}
        if [[ -n ${MOD_FILE[$name]:-} ]]; then
            log "note: module $name found twice; using ${MOD_FILE[$name]}, not $f"
            continue
        fi
        MOD_FILE[$name]=$f
    done < <(find "$src" -type f \( "${MODULE_GLOB[@]}" \) -print0 2>/dev/null | LC_ALL=C sort -z)
    ((${#MOD_FILE[@]})) || { log "no kernel modules under $src"; return 1; }
    [[ -n ${MOD_FILE[$ROOT_MODULE]:-} ]] || { log "no ${ROOT_MODULE//_/-}.ko under $src"; return 1; }
    mkdir -p -- "$out" && : >"$out/modules.load" || return 1
    add_module "$ROOT_MODULE" "$out" "$rel" "" || return 1
    log "modules to load, dependencies first: $(tr '\n' ' ' <"$out/modules.load")"
}

# ---------------------------------------------------------------- Debian kernel cache
CACHE=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/tsc-rendezvous/qemu-kvm
# $CACHE/apt/<suite>/: private apt sources list, lists and cache for that suite.
# $CACHE/kernels/<suite>/<flavour>/<package>_<version>/: vmlinuz, kernel-release,
# origin, modules.load and the modules named there (uncompressed).
APT_DIR=
APT_OPTS=()
# apt options that make apt use only the files under $1 (sources.list, lists, cache, an
# empty dpkg status) instead of the machine's configuration.
private_apt_opts() {
    # APT::Sandbox::User=root: apt would drop to the _apt user for downloads, which
    # cannot write into a cache under root's 0700 home (it warns and falls back anyway).
    APT_OPTS=(-o "Dir::Etc::SourceList=$1/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$1/lists" -o "Dir::Cache=$1/cache"
        -o "Dir::State::status=$1/status"
        -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
        -o APT::Architectures=amd64 -o Acquire::Languages=none -o APT::Sandbox::User=root)
}
private_apt_dirs() {
    mkdir -p -- "$1/lists/partial" "$1/cache/archives/partial" || return 1
    # An empty dpkg status: a kernel package installed on this machine must not become
    # the candidate for another suite.
    [[ -f $1/status ]] || : >"$1/status"
}
# Where a suite's packages are: a release (bookworm, stable, ...) has its point-release
# updates in SUITE-updates and its security fixes in SUITE-security; sid, experimental
# and the backports suites are one suite each.
suite_sources() {
    printf 'deb [signed-by=%s] %s %s main\n' "$DEBIAN_KEYRING" "$DEBIAN_MIRROR" "$SUITE"
    case $SUITE in
        sid | unstable | experimental | rc-buggy | *-backports | *-backports-sloppy) ;;
        *)
            printf 'deb [signed-by=%s] %s %s-updates main\n' "$DEBIAN_KEYRING" "$DEBIAN_MIRROR" "$SUITE"
            printf 'deb [signed-by=%s] %s %s-security main\n' "$DEBIAN_KEYRING" "$DEBIAN_SECURITY" "$SUITE"
            ;;
    esac
}
setup_private_apt() {
    APT_DIR=$CACHE/apt/$SUITE
    private_apt_dirs "$APT_DIR" || return 1
    [[ -f $DEBIAN_KEYRING ]] || apt_install debian-archive-keyring
    suite_sources >"$APT_DIR/sources.list" || return 1
    private_apt_opts "$APT_DIR"
}
have_private_lists() {
    [[ -n $(find "$APT_DIR/lists" -maxdepth 1 -name "*_dists_${SUITE}_main_binary-amd64_Packages*" -print -quit 2>/dev/null) ]]
}
PRIV_UPDATED=0
SUITE_MISSING=0
# Updates the private lists. Fails when the suite's own lists could not be had; a
# missing SUITE-updates or SUITE-security (a release in development has none) is fine.
# Sets SUITE_MISSING when the archive has no such suite.
private_update() {
    local errs=$APT_DIR/update-errors.txt
    PRIV_UPDATED=1
    log "updating the private package lists for Debian $SUITE ($APT_DIR)"
    DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" update -qq 2>"$errs" >&2 && return 0
    if grep -qF " $SUITE Release' does not have a Release file" "$errs"; then
        SUITE_MISSING=1
        return 1
    fi
    if have_private_lists && ! grep -q '^E: Failed to fetch\|^W: Failed to fetch\|Could not resolve' "$errs"; then
        return 0
    fi
    sed 's/^/  apt: /' "$errs" >&2
    log "warning: apt-get update for $SUITE failed"
    return 1
}

# The Debian suites that exist now, for the message about an unknown one: the newest
# five release codenames distro-info-data knows, sid and experimental, and each
# release's backports suite, kept if the archive has a Release file for it (apt
# fetches only the Release files, about 1 MB in all). Without network or distro-info
# data: the names without that check.
existing_suites() {
    local csv=/usr/share/distro-info/debian.csv dir=$CACHE/apt/.suites cand=() s out
    if [[ -r $csv ]]; then
        mapfile -t cand < <(awk -F, 'NR > 1 && $1 ~ /^[0-9]+$/ { print $3 }' "$csv" | tail -n 5)
    fi
    ((${#cand[@]})) || cand=(bullseye bookworm trixie forky)
    for s in "${cand[@]}"; do cand+=("$s-backports"); done
    cand+=(sid experimental)
    private_apt_dirs "$dir" || { echo "${cand[*]}"; return 0; }
    rm -f -- "$dir"/lists/*_InRelease
    for s in "${cand[@]}"; do
        printf 'deb [signed-by=%s] %s %s main\n' "$DEBIAN_KEYRING" "$DEBIAN_MIRROR" "$s"
    done >"$dir/sources.list"
    private_apt_opts "$dir"
    apt-get "${APT_OPTS[@]}" -o Acquire::IndexTargets::deb::Packages::DefaultEnabled=false \
        -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false \
        -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false \
        -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false \
        -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false \
        update -qq >/dev/null 2>&1 || true
    out=()
    for s in "${cand[@]}"; do
        [[ -z $(find "$dir/lists" -maxdepth 1 -name "*_dists_${s}_InRelease" -print -quit) ]] || out+=("$s")
    done
    if ((${#out[@]})); then echo "${out[*]}"; else echo "${cand[*]} (not checked: the archive did not answer)"; fi
}

# The flavours (linux-image-FLAVOUR metapackages) the suite's lists have.
suite_flavours() {
    apt-cache "${APT_OPTS[@]}" pkgnames linux-image- 2>/dev/null |
        grep -E '^linux-image-[a-z][a-z0-9-]*$' | grep -vE -- '-(dbg|template)$' |
        sed 's/^linux-image-//' | LC_ALL=C sort -u | tr '\n' ' ' | sed 's/ $//'
}

# The versioned package the metapackage points at, e.g. linux-image-6.1.0-57-amd64.
kernel_pkg() {
    apt-cache "${APT_OPTS[@]}" depends "linux-image-$FLAVOUR" 2>/dev/null |
        awk '!found && $1 ~ /^\|?Depends:$/ && $2 ~ /^linux-image-[0-9]/ { print $2; found = 1 }'
}
# The packages that hold the kernel of the versioned package $1: itself (one package
# with boot/vmlinuz-REL and lib/modules/REL), or, where it is an empty meta package
# (Debian's 7.x packaging), the linux-binary-* (usr/lib/modules/REL/vmlinuz) and
# linux-modules-* packages it depends on.
kernel_payload_pkgs() {
    local split
    split=$(apt-cache "${APT_OPTS[@]}" depends "$1" 2>/dev/null |
        awk '$1 ~ /^\|?Depends:$/ && $2 ~ /^linux-(binary|modules)-[0-9]/ { print $2 }' | LC_ALL=C sort -u)
    if [[ -n $split ]]; then echo "$split"; else echo "$1"; fi
}
pkg_version() {
    apt-cache "${APT_OPTS[@]}" show --no-all-versions "$1" 2>/dev/null | awk '!found && $1 == "Version:" { print $2; found = 1 }'
}

# Download + extract the kernel package into $dest (see the cache layout above).
fetch_kernel() {
    local tmp rc=0
    tmp=$(mktemp -d "$CACHE/.fetch.XXXXXX") || return 1
    fetch_kernel_into "$tmp" "$@" || rc=1
    rm -rf -- "$tmp"
    return "$rc"
}
# (Called in a condition, where `set -e` is off: every step checks its own status.)
fetch_kernel_into() {
    local tmp=$1 pkg=$2 ver=$3 dest=$4 p v deb x vmlinuz rel moddir d
    local -a payload=() specs=()
    mapfile -t payload < <(kernel_payload_pkgs "$pkg")
    for p in "${payload[@]}"; do
        v=$(pkg_version "$p")
        specs+=("$p${v:+=$v}")
    done
    log "downloading ${specs[*]} from Debian $SUITE (about 70-130 MB, once)"
    (cd "$tmp" && apt-get "${APT_OPTS[@]}" download -qq "${specs[@]}" >&2) || return 1
    x=$tmp/x
    for deb in "$tmp"/*.deb; do
        [[ -f $deb ]] || { log "apt-get download left no .deb"; return 1; }
        dpkg -x "$deb" "$x" || return 1
    done
    mkdir "$tmp/out" || return 1
    # boot/vmlinuz-REL (one package) or usr/lib/modules/REL/vmlinuz (linux-binary-*).
    vmlinuz=$(find "$x/boot" -maxdepth 1 -name 'vmlinuz-*' -print -quit 2>/dev/null)
    if [[ -n $vmlinuz ]]; then
        rel=${vmlinuz##*/vmlinuz-}
    else
        vmlinuz=$(find "$x/usr/lib/modules" "$x/lib/modules" -mindepth 2 -maxdepth 2 -name vmlinuz -print -quit 2>/dev/null)
        [[ -n $vmlinuz ]] || { log "no boot/vmlinuz-* nor usr/lib/modules/*/vmlinuz in ${payload[*]}"; return 1; }
        rel=${vmlinuz%/vmlinuz}
        rel=${rel##*/}
    fi
    cp -- "$vmlinuz" "$tmp/out/vmlinuz" || return 1
    echo "$rel" >"$tmp/out/kernel-release" || return 1
    moddir=
    for d in "$x/lib/modules/$rel" "$x/usr/lib/modules/$rel"; do
        [[ -d $d && -n $(find "$d" -type f \( "${MODULE_GLOB[@]}" \) -print -quit) ]] && { moddir=$d; break; }
    done
    [[ -n $moddir ]] || { log "no modules under (usr/)lib/modules/$rel in ${payload[*]}"; return 1; }
    prepare_modules "$moddir" "$tmp/out" "$rel" || return 1
    echo "$SUITE $FLAVOUR $pkg $ver (${payload[*]})" >"$tmp/out/origin" || return 1
    mkdir -p -- "${dest%/*}" && rm -rf -- "$dest" && mv -- "$tmp/out" "$dest"
}

# The newest cached kernel of $1 (a kernels/<suite>/<flavour> directory), by download time.
newest_cached_kernel() {
    find "$1" -mindepth 2 -maxdepth 2 -name modules.load -printf '%T@ %h\n' 2>/dev/null |
        sort -rn | awk 'NR == 1 { print $2 }'
}

# Prints the directory of the kernel to boot. Exits $EX_USAGE (after saying why) for a
# suite or flavour that does not exist; fails otherwise.
resolve_kernel() {
    local pkg ver dest newest attempt flavours kroot=$CACHE/kernels/$SUITE/$FLAVOUR
    # Serialise concurrent runs sharing the cache (the fetch is not atomic otherwise).
    exec 9>"$CACHE/.lock"
    flock 9
    if ((!REFRESH)); then
        newest=$(newest_cached_kernel "$kroot")
        if [[ -n $newest ]]; then
            echo "$newest"
            return 0
        fi
    fi
    setup_private_apt || return 1
    if ((REFRESH)) || ! have_private_lists; then
        private_update || true
    fi
    if ((SUITE_MISSING)); then
        rm -rf -- "$APT_DIR" # nothing worth keeping for a suite that does not exist
        log "looking up which Debian suites exist"
        die $EX_USAGE "Debian has no suite '$SUITE' (the archive has no Release file for it). Suites that exist: $(existing_suites); also the aliases oldstable, stable, testing, unstable and their -backports"
    fi
    for attempt in 1 2; do
        pkg=$(kernel_pkg)
        if [[ -z $pkg ]] && have_private_lists; then
            # Current lists without the flavour: say what there is (no update helps).
            flavours=$(suite_flavours)
            if ((PRIV_UPDATED)) || [[ -n $flavours && " $flavours " != *" $FLAVOUR "* ]]; then
                [[ -n $flavours ]] ||
                    die $EX_USAGE "Debian $SUITE has no amd64 kernel (no linux-image-* metapackage in its lists)"
                [[ " $flavours " == *" $FLAVOUR "* ]] ||
                    die $EX_USAGE "Debian $SUITE has no kernel flavour '$FLAVOUR' (no linux-image-$FLAVOUR). Flavours there: $flavours"
            fi
        fi
        if [[ -z $pkg ]]; then
            if ((attempt == 1 && !PRIV_UPDATED)) && private_update; then continue; fi
            if have_private_lists; then
                log "linux-image-$FLAVOUR of $SUITE does not point at a linux-image-* package"
            else
                log "no package lists for $SUITE (apt-get update could not fetch them: offline?)"
            fi
            break
        fi
        ver=$(pkg_version "$pkg")
        dest=$kroot/${pkg}_${ver//:/%}
        if [[ -f $dest/vmlinuz && -f $dest/modules.load ]]; then
            echo "$dest"
            return 0
        fi
        if fetch_kernel "$pkg" "$ver" "$dest"; then
            echo "$dest"
            return 0
        fi
        # Stale package lists point at versions the archive has removed: update, retry.
        if ((attempt == 1 && !PRIV_UPDATED)) && private_update; then
            continue
        fi
        break
    done
    # Offline or apt broken: fall back to whatever kernel of this suite is cached.
    newest=$(newest_cached_kernel "$kroot")
    if [[ -n $newest ]]; then
        log "warning: could not resolve/download the current $SUITE kernel package; using cached $newest"
        echo "$newest"
        return 0
    fi
    return 1
}

# ---------------------------------------------------------------- work directory
if [[ -z $WORKDIR ]]; then
    WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/tsc-qemu-kvm.XXXXXX")
else
    mkdir -p -- "$WORKDIR"
fi
WORKDIR=$(cd -- "$WORKDIR" && pwd)
LOG=$WORKDIR/serial.log
QERR=$WORKDIR/qemu-stderr.txt
OUT=$WORKDIR/prog-output.txt
OUTDIR=$WORKDIR/out
INFO=$WORKDIR/run-info.txt
INITRD=$WORKDIR/initrd.gz
STAGE=$WORKDIR/initramfs
rm -rf -- "$STAGE" "$LOG" "$QERR" "$OUT" "$OUTDIR" "$INFO" "$INITRD" "$WORKDIR/modules"

# ---------------------------------------------------------------- kernel
if [[ -n $USER_KERNEL ]]; then
    KIMAGE=$USER_KERNEL
    KREL=${USER_KREL:-unknown}
    MODDIR=$WORKDIR/modules
    mkdir -p -- "$MODDIR"
    : >"$MODDIR/modules.load"
    if [[ -n $USER_MODULES ]]; then
        prepare_modules "$USER_MODULES" "$MODDIR" "$USER_KREL" ||
            die $EX_USAGE "--modules '$USER_MODULES': cannot assemble the KVM modules (see above)"
    else
        log "note: no --modules: assuming KVM (kvm_amd) is built into $USER_KERNEL"
    fi
    KDESC="kernel $KREL ($USER_KERNEL)"
else
    mkdir -p -- "$CACHE"
    # (resolve_kernel runs in a subshell; its cache lock goes away with it.)
    krc=0
    KDIR=$(resolve_kernel) || krc=$?
    ((krc != EX_USAGE)) || exit $EX_USAGE
    ((krc == 0)) ||
        die $EX_HOST "could not obtain Debian $SUITE's $FLAVOUR kernel (apt-get download of linux-image-$FLAVOUR's packages failed)"
    KIMAGE=$KDIR/vmlinuz
    KREL=$(cat "$KDIR/kernel-release")
    MODDIR=$KDIR
    KDESC="kernel $KREL (Debian $SUITE, $FLAVOUR)"
fi

# ---------------------------------------------------------------- QEMU, busybox, cpio
# (After the kernel: a suite or flavour that does not exist is reported before anything
# is installed.)
# QEMU: thread=multi was measured reliable with Debian's QEMU 10.0 (see the notes and
# tools/qemu-kvm/measurements.md); bookworm's own 7.2 hung in kvm_destroy_vm with it. So
# on a bookworm host QEMU comes from bookworm-backports (10.x), which also keeps the
# qemu-utils 10 these machines come with (bookworm's 7.2 would make apt remove it);
# newer Debian releases have 10.x or later themselves.
qemu_major() {
    local m
    m=$(qemu-system-x86_64 --version 2>/dev/null | awk 'NR == 1 { split($4, v, "."); print v[1] + 0; exit }') || true
    echo "${m:-0}"
}
host_codename() {
    sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null | tr -d '"' || true
}
# Lets the machine's apt see SUITE-backports (default priority 100: nothing else is
# taken from it unless asked for with -t), adding a sources file of our own unless some
# source has the suite already. Idempotent.
enable_backports() {
    local c=$1 f=/etc/apt/sources.list.d/tsc-rendezvous-$1-backports.sources have=0 g
    for g in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [[ -f $g ]] && grep -qsE "^[^#]*[[:space:]]$c-backports([[:space:]]|\$)" "$g" && have=1
    done
    if ((!have)); then
        [[ -f $DEBIAN_KEYRING ]] || apt_install debian-archive-keyring
        log "adding Debian $c-backports to apt's sources ($f), for QEMU"
        printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\nSigned-By: %s\n' \
            "$DEBIAN_MIRROR" "$c" "$DEBIAN_KEYRING" >"$f" || die $EX_HOST "cannot write $f"
        APT_UPDATED=0
    fi
    apt-cache policy 2>/dev/null | grep -qF " $c-backports/main " || APT_UPDATED=0
    apt_update_once || die $EX_HOST "cannot read Debian $c-backports's package lists"
}
install_qemu() {
    local -a target=() removals
    if [[ $(host_codename) == bookworm ]]; then
        enable_backports bookworm
        target=(-t bookworm-backports)
    fi
    apt_update_once || die $EX_HOST "cannot install qemu-system-x86 without package lists"
    # Say loudly if apt would remove something (it would remove qemu-utils 10 for
    # bookworm's own QEMU 7.2) rather than let it pass in the apt noise.
    removals=$(apt-get -s install --no-install-recommends "${target[@]}" qemu-system-x86 2>/dev/null |
        awk '$1 == "Remv" { printf " %s", $2 }')
    [[ -z $removals ]] || log "warning: installing qemu-system-x86 makes apt REMOVE:$removals"
    # --no-install-recommends: the recommends pull in a GTK GUI and firmware we do not
    # use; seabios (needed for -kernel) is a hard dependency.
    apt_install "${target[@]}" qemu-system-x86
}
if ! command -v qemu-system-x86_64 >/dev/null; then
    install_qemu
elif [[ $TCG_THREAD == multi ]] && (($(qemu_major) < QEMU_MULTI_MIN)); then
    log "QEMU $(qemu_major).x is older than $QEMU_MULTI_MIN, the first whose thread=multi was measured reliable: upgrading"
    install_qemu
fi
if [[ $TCG_THREAD == multi ]] && (($(qemu_major) < QEMU_MULTI_MIN)); then
    log "warning: QEMU $(qemu_major).x hung with thread=multi before; falling back to thread=single (see --tcg-thread)"
    TCG_THREAD=single
fi
command -v cpio >/dev/null || apt_install cpio
find_static_busybox >/dev/null || apt_install busybox-static
BUSYBOX=$(find_static_busybox) || die $EX_HOST "no statically linked busybox found even after installing busybox-static"

if [[ -n $SCRIPT ]] && ! why=$("$BUSYBOX" sh -n "$SCRIPT" 2>&1); then
    die $EX_USAGE "--script '$SCRIPT' is not valid busybox sh: $why"
fi

EXPECTED_KREL=$KREL # what the host meant to boot; the guest reports what it ran

# ---------------------------------------------------------------- initramfs
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
    cp -- "$MODDIR/$m.ko" "$STAGE/lib/modules/$m.ko"
done <"$MODDIR/modules.load"
if [[ -n $BIN ]]; then
    cp -- "$BIN" "$STAGE/prog"
    chmod 0755 "$STAGE/prog"
else
    cp -- "$SCRIPT" "$STAGE$G_SCRIPT"
    chmod 0755 "$STAGE$G_SCRIPT"
fi
for i in "${!FILE_SRC[@]}"; do
    src=${FILE_SRC[i]}
    dest=$STAGE${FILE_DEST[i]}
    if [[ -L $dest ]]; then
        log "note: --file ${FILE_DEST[i]} replaces busybox's applet of that name"
        rm -f -- "$dest"
    fi
    mkdir -p -- "${dest%/*}"
    cp -R --preserve=mode -- "$src" "$dest" || die $EX_HOST "copying --file '$src' into the initramfs failed"
done

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
uptime_s() { read -r up _ </proc/uptime; echo "$up"; }
power_off() {
    echo "@@TSC-QEMU-UPTIME end $(uptime_s)@@"
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
    done <"$MODDIR/modules.load"
    cat <<'EOF'
[ -c /dev/kvm ] || fail "/dev/kvm missing after loading the modules (kvm_amd neither loaded nor built in, or no SVM in the emulated CPU?)"
echo "@@TSC-QEMU-KERNEL $(uname -r)@@"
cd /
EOF
    for e in "${ENVS[@]+"${ENVS[@]}"}"; do
        printf 'export %s\n' "$(shq "$e")"
    done
    if [[ -n $SCRIPT ]]; then
        printf 'mkdir -p %s\nexport TSC_QEMU_OUT=%s\n' "$G_OUT" "$G_OUT"
    fi
    printf 'set --'
    for a in "${PROG_ARGS[@]+"${PROG_ARGS[@]}"}"; do
        printf ' %s' "$(shq "$a")"
    done
    printf '\n'
    if [[ -n $SCRIPT ]]; then
        run_line="sh $G_SCRIPT \"\$@\" </dev/null"
    else
        run_line='/prog "$@" </dev/null'
    fi
    cat <<EOF
echo "@@TSC-QEMU-UPTIME start \$(uptime_s)@@"
echo '$M_BEGIN'
# stdin from /dev/null: nothing is ever typed on the console, so a program that reads
# stdin gets EOF instead of blocking until the timeout.
$run_line
rc=\$?
echo "@@TSC-QEMU-EXIT \$rc@@"
EOF
    if [[ -n $SCRIPT ]]; then
        # Files the script left in $G_OUT go back gzipped and base64-encoded between
        # markers, each with its md5sum so that the host can tell a complete copy from a
        # truncated one. (The console moves ~20 KB/s of base64; JSON shrinks ~10x.)
        cat <<EOF
find $G_OUT -type f | sort | while IFS= read -r f; do
    echo "@@TSC-QEMU-FILE \$(md5sum <"\$f" | cut -d' ' -f1) \${f#$G_OUT/}@@"
    gzip -c <"\$f" | base64
    echo "@@TSC-QEMU-FILE-END@@"
done
echo "@@TSC-QEMU-FILES-DONE@@"
EOF
    fi
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
# - thread=multi (default): every emulated CPU on its own host thread, so the vCPUs of
#   the KVM guests inside really run at the same time (the warp test's lock changes
#   hands tens to hundreds of times instead of once). With QEMU 7.2 it hung now and then
#   in kvm_destroy_vm; with QEMU 10.0 no hang or panic in 60 boots (measurements.md).
#   --tcg-thread single goes back to one host thread for all vCPUs.
# - -cpu max: exposes SVM (and more) to the guest; kvm_amd needs it.
# - tsc=reliable: with -smp >= 2 the emulated kernel otherwise marks its TSC unstable
#   and KVM then rewrites vCPU TSC offsets behind the program's back.
# - random.trust_cpu=on: seed the kernel's random pool from RDRAND (-cpu max has it) at
#   boot, as Debian's kernels do by their config; a minimal kernel (tinyconfig) does not,
#   and then a program that waits for the pool (Rust's getrandom fallback polls
#   /dev/random) blocks forever: nothing in this guest makes entropy.
# - quiet: keep the boot log short; panic=-1 + -no-reboot: a guest panic ends QEMU
#   at once instead of hanging until the timeout.
# - -display none -vga none -serial stdio -monitor none instead of -nographic: the same
#   headless machine with the serial port on stdout, but SeaBIOS then does not use the
#   serial port as its console, so the log does not start with terminal-reset escape
#   sequences (ESC c would clear the user's terminal); no monitor is multiplexed on
#   stdio either.
# - -nic none: no network is wanted, and skipping the NIC skips its option ROM.
# - stdin from /dev/null: QEMU would put a terminal on stdin into raw mode.
APPEND='console=ttyS0 quiet panic=-1 tsc=reliable random.trust_cpu=on'
# shellcheck disable=SC2054 # the commas are part of QEMU's option syntax
QEMU=(qemu-system-x86_64 -accel "tcg,thread=$TCG_THREAD" -cpu "$CPU" -smp "$SMP" -m "$MEM"
    -display none -vga none -serial stdio -monitor none -no-reboot -nic none
    -kernel "$KIMAGE" -initrd "$INITRD" -append "$APPEND")
printf '%q ' "${QEMU[@]}" >"$WORKDIR/qemu-cmdline.txt"
echo >>"$WORKDIR/qemu-cmdline.txt"

QEMU_VERSION=$(qemu-system-x86_64 --version 2>/dev/null | awk 'NR == 1 { print $4 }')
log "$KDESC, QEMU ${QEMU_VERSION:-?} (TCG thread=$TCG_THREAD), smp $SMP, timeout ${TIMEOUT}s, workdir $WORKDIR"
t0=$(date +%s.%N)

# QEMU writes straight into the log file and `tail --pid` copies it to stdout; unlike
# `qemu | tee`, this keeps QEMU's pid at hand so a Ctrl-C or SIGTERM to this script
# can stop it (timeout(1) runs it in its own process group, out of the terminal's reach).
: >"$LOG"
# QEMU's own stderr goes to a file of its own so that its messages ("terminating on
# signal 15") do not end up in the program's output.
timeout -k 10 "$TIMEOUT" "${QEMU[@]}" </dev/null >>"$LOG" 2>"$QERR" &
QPID=$!
# The base64 blocks of files coming back from $G_OUT are left out of that copy.
tail -s 0.2 --pid="$QPID" -n +1 -f -- "$LOG" | awk '
    /^@@TSC-QEMU-FILE [0-9a-f]+ .*@@\r?$/ { print; fflush(); hide = 1; n = 0; next }
    hide && /^@@TSC-QEMU-FILE-END@@\r?$/ { printf "(%d lines of base64 not shown)\n", n; hide = 0 }
    hide { n++; next }
    { print; fflush() }
' &
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
up_start=$(grep -aoE '@@TSC-QEMU-UPTIME start [0-9.]+@@' "$LOG" | tail -n 1 | tr -dc '0-9.' || true)
up_end=$(grep -aoE '@@TSC-QEMU-UPTIME end [0-9.]+@@' "$LOG" | tail -n 1 | tr -dc '0-9.' || true)
# The release the guest really ran (the cache's name for it comes from a file name).
guest_rel=$(grep -aoE '@@TSC-QEMU-KERNEL [^@]*@@' "$LOG" | tail -n 1 || true)
guest_rel=${guest_rel#@@TSC-QEMU-KERNEL }
[[ -z $guest_rel ]] || KREL=${guest_rel%@@}
rc=${exit_line#@@TSC-QEMU-EXIT }
rc=${rc%@@}
printf 'kernel_release=%s\nexpected_release=%s\nexit_code=%s\nqemu_seconds=%s\nguest_uptime_start=%s\nguest_uptime_end=%s\n' \
    "$KREL" "$EXPECTED_KREL" "$rc" "$ELAPSED" "$up_start" "$up_end" >"$INFO"
printf 'qemu_version=%s\ntcg_thread=%s\nsmp=%s\n' "$QEMU_VERSION" "$TCG_THREAD" "$SMP" >>"$INFO"

# Files the script wrote to $G_OUT: decode each block, keep it only if its md5 matches.
if [[ -n $SCRIPT ]]; then
    mkdir -p -- "$OUTDIR"
    blocks=$WORKDIR/.out-blocks
    rm -rf -- "$blocks"
    mkdir -p -- "$blocks"
    # Block N's base64 goes to $blocks/N, its "md5 path" header to $blocks/N.hdr.
    awk -v dir="$blocks" '
        { sub(/\r$/, "") }
        /^@@TSC-QEMU-FILE [0-9a-f]+ .*@@$/ {
            n++; on = 1; h = substr($0, 17, length($0) - 18)
            print h > (dir "/" n ".hdr"); close(dir "/" n ".hdr"); printf "" > (dir "/" n); next
        }
        /^@@TSC-QEMU-FILE-END@@$/ { if (on) close(dir "/" n); on = 0; next }
        on && /^[A-Za-z0-9+\/=]+$/ { print > (dir "/" n) }
    ' "$LOG"
    nfiles=0
    for hdr in "$blocks"/*.hdr; do
        [[ -f $hdr ]] || continue
        read -r sum path <"$hdr"
        if [[ -z $path || /$path/ == */../* || $path == /* ]]; then
            log "warning: ignoring returned file with a bad name '$path'"
            continue
        fi
        mkdir -p -- "$OUTDIR/$(dirname -- "$path")"
        if base64 -d <"${hdr%.hdr}" 2>/dev/null | gzip -dc >"$OUTDIR/$path" 2>/dev/null &&
            [[ $(md5sum <"$OUTDIR/$path" | cut -d' ' -f1) == "$sum" ]]; then
            nfiles=$((nfiles + 1))
        else
            log "warning: $G_OUT/$path came back incomplete or damaged; not kept"
            rm -f -- "$OUTDIR/$path"
        fi
    done
    rm -rf -- "$blocks"
    if [[ -n $exit_line ]] && ! grep -aqF '@@TSC-QEMU-FILES-DONE@@' "$LOG"; then
        log "warning: the guest did not finish sending the files in $G_OUT"
    fi
    ((nfiles == 0)) || log "$nfiles file(s) from the guest's $G_OUT in $OUTDIR"
fi

if [[ -n $fail_line ]]; then
    fail_line=${fail_line#@@TSC-QEMU-SETUP-FAIL }
    die $EX_GUEST "guest setup failed: ${fail_line%@@} ($KDESC; log: $LOG)"
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
if ((qrc == 124 || qrc == 137)); then
    log "warning: the program finished (exit $rc) but the guest did not power off before the timeout"
fi
what=program
[[ -z $SCRIPT ]] || what=script
log "$what exited with $rc after ${ELAPSED}s (boot + run, kernel $KREL); output: $OUT"
if [[ -n $up_start && -n $up_end ]]; then
    log "guest clock: $what started ${up_start}s after kernel start, power-off at ${up_end}s"
fi
exit "$rc"
