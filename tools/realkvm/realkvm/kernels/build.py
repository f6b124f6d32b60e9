"""`realkvm build-kernel`: a small KVM-capable kernel from Debian's
linux-source package (or a tree), for `boot --kernel` / `matrix --kernel`
(what tools/qemu-kvm/build-kernel.sh always did).

It takes the kernel source of a Debian suite (linux-source-X.Y, found through
private apt lists as the Debian kernels are; the machine's apt sources are
not changed), configures it from `make tinyconfig` plus exactly what the
guest needs (64-bit, SMP, serial console, initramfs, devtmpfs,
proc/sysfs/debugfs, ELF and #! binaries, futexes and the fds Rust's std and
KVM use, the syscalls and AF_UNIX sockets the test binaries need, ACPI for
power-off, both CPU vendors, KVM with kvm_amd and kvm_intel, so that one
kernel serves the SVM and the VMX machines), builds bzImage and the modules,
and installs the modules into OUT/modules (a tree --modules takes). Not part
of CI: it takes tens of minutes on 2 cores.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

from .. import apt
from ..errors import Fail, Log
from ..host import Host
from ..options import Opt, parse, positive_int
from .debian import SUITE_RE, cache_dir

PROG = "realkvm build-kernel"
log = Log(PROG)
ROOT = Path(__file__).resolve().parents[4]
DEPS = ["build-essential", "bc", "bison", "flex", "libelf-dev", "libssl-dev", "xz-utils", "kmod", "cpio"]

# What the guest uses, and why.
WANT_Y = [
    "64BIT", "SMP", "X86_TSC",  # a 64-bit SMP guest (check runs 2-4 vCPUs); TSC as clocksource
    "PRINTK", "PRINTK_TIME", "TTY", "SERIAL_8250", "SERIAL_8250_CONSOLE",  # console=ttyS0
    "BLK_DEV_INITRD", "RD_GZIP",  # the gzip'd cpio initramfs
    "DEVTMPFS", "DEVTMPFS_MOUNT", "PROC_FS", "SYSFS", "TMPFS", "SHMEM",  # /dev (kvm, console), /proc, /sys
    "DEBUG_FS",  # KVM's per-VM files (exact offsets on kernels without KVM_VCPU_TSC_OFFSET)
    "BINFMT_ELF", "BINFMT_SCRIPT",  # static programs, #! scripts (/init)
    "MULTIUSER", "FUTEX", "EPOLL", "EVENTFD", "SIGNALFD", "TIMERFD", "POSIX_TIMERS", "FILE_LOCKING",  # std, KVM fds
    "HIGH_RES_TIMERS", "MAGIC_SYSRQ",  # KVM's timers; power-off via sysrq-trigger
    "PCI", "ACPI",  # ACPI is what powers the emulated machine off
    "MODULES", "MODULE_UNLOAD",  # insmod of kvm.ko / kvm-amd.ko / kvm-intel.ko
    "CPU_SUP_AMD", "CPU_SUP_INTEL",  # QEMU -cpu max is an AMD CPU, Bochs' models Intel ones
    "VIRTUALIZATION",
    # System calls and AF_UNIX sockets that static glibc/Rust programs may take for
    # granted and tinyconfig leaves out (kept because the kernel that passed the
    # matrix had them).
    "NET", "UNIX", "ADVISE_SYSCALLS", "MEMBARRIER", "RSEQ", "AIO", "KCMP", "SYSVIPC", "FHANDLE", "CROSS_MEMORY_ATTACH",
]
KVM_OPTIONS = ["KVM", "KVM_AMD", "KVM_INTEL"]

OPTS = [
    Opt("suite", ("--suite",)),
    Opt("source", ("--source",)),
    Opt("out", ("--out",)),
    Opt("kvm", ("--kvm",)),
    Opt("jobs", ("-j",)),
    Opt("mirror", ("--mirror",)),
    Opt("security_mirror", ("--security-mirror",)),
    Opt("config_only", ("--config-only",), value=False),
    Opt("help", ("-h", "--help"), value=False),
]

USAGE = """\
Usage: realkvm build-kernel [options]
(tools/qemu-kvm/build-kernel.sh is `realkvm build-kernel`.)

Build a minimal KVM-capable kernel (bzImage + kvm, kvm_amd and kvm_intel modules)
from Debian's linux-source-* package and print the matrix command that tests it.
One such kernel serves the SVM machine (qemu-svm) and the VMX ones (bochs-*).

Options:
  --suite SUITE   Debian suite whose linux-source-* to build (default bookworm; any
                  suite with a linux-source package: trixie, sid, a backports suite)
  --source DIR    build this kernel tree instead (a git checkout or unpacked tarball;
                  it is configured in OUT/build, the tree itself stays untouched)
  --out DIR       where the source, the build and the results go (default
                  target/kernel-build under the repository); results:
                  OUT/bzImage, OUT/modules/lib/modules/REL/, OUT/build-info.txt
  --kvm MODE      m (default: kvm, kvm_amd and kvm_intel as modules, loaded by
                  realkvm boot) or y (built in; then no --modules is needed)
  -j N            parallel jobs (default: the number of CPUs)
  --mirror URL, --security-mirror URL  Debian's archive to download from (default:
                  the one this machine's apt sources name)
  --config-only   stop after writing OUT/build/.config
  -h, --help      show this text

Needs root for apt-get (it installs build-essential bc bison flex libelf-dev
libssl-dev xz-utils kmod cpio when missing).
"""


def die(msg):
    raise Fail(1, msg)


def config_args(kvm_mode):
    """scripts/config's arguments on top of tinyconfig."""
    args = []
    for o in WANT_Y:
        args += ["--enable", o]
    args += ["--set-val", "NR_CPUS", "8"]
    # Seed the random pool from RDRAND at boot where the kernel still has this option
    # (6.1; later kernels take the boot parameter random.trust_cpu=on, which realkvm
    # boot passes).
    args += ["--enable", "RANDOM_TRUST_CPU"]
    for o in KVM_OPTIONS:
        args += ["--module" if kvm_mode == "m" else "--enable", o]
    # Not wanted: debug info (slow, huge), module signing (needs keys), Xen, SMM, SEV
    # (it would pull in the ccp driver).
    for o in ("DEBUG_INFO", "DEBUG_INFO_DWARF5", "DEBUG_INFO_BTF", "MODULE_SIG", "KVM_XEN", "KVM_SMM", "KVM_AMD_SEV"):
        args += ["--disable", o]
    args += ["--enable", "DEBUG_INFO_NONE"]
    return args


def lost_options(config_text, kvm_mode):
    """The options asked for that olddefconfig dropped (a dependency missing)."""
    have = set(config_text.splitlines())
    lost = [o for o in WANT_Y if f"CONFIG_{o}=y" not in have]
    lost += [f"{o}={kvm_mode}" for o in KVM_OPTIONS if f"CONFIG_{o}={kvm_mode}" not in have]
    return lost


def main(argv):
    try:
        return run(argv)
    except Fail as e:
        log.error(e.message)
        return e.code


def run(argv):
    split = [x for a in argv for x in (["-j", a[2:]] if a.startswith("-j") and len(a) > 2 else [a])]
    o, rest = parse(split, OPTS, 1,
                    positional="error", unknown="unknown argument '{}'")
    if o.get("help"):
        sys.stdout.write(USAGE)
        return 0
    suite, source = o.get("suite", "bookworm"), o.get("source", "")
    out = Path(o.get("out", ROOT / "target" / "kernel-build"))
    kvm = o.get("kvm", "m")
    jobs = o.get("jobs", str(os.cpu_count() or 1))
    if kvm not in ("m", "y"):
        die("--kvm must be m or y")
    if positive_int(jobs) is None:
        die("-j must be a positive integer")
    if not SUITE_RE.match(suite):
        die(f"--suite '{suite}' is not a Debian suite name")
    if source:
        if not (Path(source, "Makefile").is_file() and Path(source, "arch/x86").is_dir()):
            die(f"--source '{source}' is not a Linux source tree")
        source = Path(source).resolve()
    if os.geteuid() != 0:
        die("must run as root (apt-get)")

    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    host = Host(log, "/", o.get("mirror", ""), o.get("security_mirror", ""))
    t_start = time.monotonic()
    host.ensure(DEPS)
    t_deps = time.monotonic()

    if not source:
        source, origin = fetch_source(host, suite, out)
    else:
        origin = f"tree {source}"
    t_src = time.monotonic()

    b = out / "build"
    b.mkdir(parents=True, exist_ok=True)

    def mk(*args, **kw):
        return subprocess.run(["make", "-C", str(source), f"O={b}", "ARCH=x86_64", *args], **kw)

    log(f"configuring in {b} (tinyconfig + what the guest needs, KVM={kvm}: kvm_amd and kvm_intel)")
    with open(out / "config.log", "w") as clog:
        if mk("-s", "tinyconfig", stdout=clog, stderr=subprocess.STDOUT).returncode:
            die(f"make tinyconfig failed (see {out}/config.log)")
        subprocess.run([str(source / "scripts/config"), "--file", str(b / ".config"), *config_args(kvm)], check=True)
        if mk("-s", "olddefconfig", stdout=clog, stderr=subprocess.STDOUT).returncode:
            die(f"make olddefconfig failed (see {out}/config.log)")
    lost = lost_options((b / ".config").read_text(), kvm)
    if lost:
        die(f"the configuration lost CONFIG_{' '.join(lost)} (a dependency missing?); see {b}/.config")
    t_cfg = time.monotonic()
    if o.get("config_only"):
        log(f"configuration in {b}/.config")
        return 0

    log(f"building bzImage and modules with -j{jobs} (log: {out}/build.log)")
    with open(out / "build.log", "w") as blog:
        if mk(f"-j{jobs}", "bzImage", "modules", stdout=blog, stderr=subprocess.STDOUT).returncode:
            sys.stderr.write("".join((out / "build.log").read_text(errors="replace").splitlines(True)[-30:]))
            die(f"the kernel build failed (full log: {out}/build.log)")
        t_build = time.monotonic()
        subprocess.run(["rm", "-rf", "--", str(out / "modules")], check=True)
        if mk("-s", f"INSTALL_MOD_PATH={out / 'modules'}", "modules_install", stdout=blog, stderr=subprocess.STDOUT).returncode:
            die(f"modules_install failed (see {out}/build.log)")
    (out / "bzImage").write_bytes((b / "arch/x86/boot/bzImage").read_bytes())
    rel = (b / "include/config/kernel.release").read_text().strip()
    t_end = time.monotonic()
    config = (b / ".config").read_text().splitlines()
    info = {
        "origin": origin, "source_dir": str(source), "kernel_release": rel, "kvm": kvm, "jobs": jobs, "cpus": os.cpu_count(),
        "config_options": sum(1 for ln in config if ln.endswith(("=y", "=m"))),
        "bzimage_bytes": (out / "bzImage").stat().st_size,
        "deps_seconds": round(t_deps - t_start), "source_seconds": round(t_src - t_deps),
        "config_seconds": round(t_cfg - t_src), "build_seconds": round(t_build - t_cfg), "total_seconds": round(t_end - t_start),
    }
    (out / "build-info.txt").write_text("".join(f"{k}={v}\n" for k, v in info.items()))
    log(f"built Linux {rel} in {info['build_seconds']}s (all steps {info['total_seconds']}s): {out}/bzImage, modules in {out}/modules")
    for k, v in info.items():
        print(f"  {k}={v}", file=sys.stderr)
    matrix = Path(__file__).resolve().parents[3] / "qemu-kvm" / "kernel-matrix.sh"
    print("test it with:")
    print(f"  bash {matrix} --kernel {out}/bzImage" + (f" --modules {out}/modules" if kvm == "m" else ""))
    return 0


def fetch_source(host, suite, out):
    """Debian SUITE's linux-source-X.Y, unpacked under OUT/src (once)."""
    papt = apt.PrivateApt(cache_dir() / "apt" / f"{suite}-source")
    host.ensure_keyring()
    archive = host.archive()
    # linux-source is in SUITE (and its point releases in SUITE-updates); no security lists needed.
    papt.prepare(apt.suite_sources(suite, apt.Archive(archive.mirror, "", archive.source)))
    opts = papt.opts()
    log(f"updating private package lists for Debian {suite} ({papt.dir}) from {archive.mirror}")
    if subprocess.run(["apt-get", *opts, "update", "-qq"], env=apt.env(), stdout=2).returncode:
        log(f"warning: apt-get update for {suite} reported errors")

    def query(*args):
        return subprocess.run(["apt-cache", *opts, *args], capture_output=True, text=True).stdout

    # linux-source (the metapackage) depends on the versioned linux-source-X.Y.
    pkg = ""
    for line in query("depends", "linux-source").splitlines():
        w = line.split()
        if len(w) >= 2 and w[0] in ("Depends:", "|Depends:") and w[1].startswith("linux-source-") and w[1][13:14].isdigit():
            pkg = w[1]
            break
    if not pkg:
        die(f"Debian {suite} has no linux-source package (is the suite right?)")
    ver = next((ln.split()[1] for ln in query("show", "--no-all-versions", pkg).splitlines() if ln.startswith("Version:")), "")
    srcdir = out / "src" / f"{pkg}_{ver.replace(':', '%')}"
    if not (srcdir / ".unpacked").is_file():
        subprocess.run(["rm", "-rf", "--", str(srcdir)], check=True)
        (srcdir / "deb").mkdir(parents=True)
        log(f"downloading {pkg}={ver} (about 150 MB)")
        if subprocess.run(["apt-get", *opts, "download", "-qq", f"{pkg}={ver}"], cwd=srcdir / "deb", env=apt.env(), stdout=2).returncode:
            die(f"apt-get download {pkg} failed")
        for deb in (srcdir / "deb").glob("*.deb"):
            subprocess.run(["dpkg", "-x", str(deb), str(srcdir / "x")], check=True)
        tarballs = sorted((srcdir / "x/usr/src").glob("linux-source-*.tar.*"))
        if not tarballs:
            die(f"{pkg} has no usr/src/linux-source-*.tar.*")
        log(f"unpacking {tarballs[0].name}")
        subprocess.run(["tar", "-C", str(srcdir), "-xf", str(tarballs[0])], check=True)
        subprocess.run(["rm", "-rf", "--", str(srcdir / "deb"), str(srcdir / "x")], check=True)
        (srcdir / ".unpacked").touch()
    found = sorted(p for p in srcdir.iterdir() if p.is_dir() and p.name.startswith("linux-source-"))
    if not found:
        die(f"no linux-source-* directory in {srcdir}")
    return found[0], f"Debian {suite} {pkg} {ver}"
