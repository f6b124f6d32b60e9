"""`realkvm boot`: run a static program or a script against a real /dev/kvm
inside an emulated machine (what tools/qemu-kvm/run-in-qemu.sh always did).

Why: the workplace machines only offer PVM's /dev/kvm, which accepts guest
and host TSC writes and then ignores them. An emulator with hardware
virtualisation (QEMU's TCG with AMD SVM, Bochs with Intel VMX) lets a stock
kernel load kvm_amd or kvm_intel, and *that* /dev/kvm has the real
TSC-offset semantics. See shared/notes/real-kvm-in-qemu.md.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tempfile
from pathlib import Path

from . import initramfs, machines, serial
from .elf import is_elf, static_x86_64_problem
from .errors import EX_BADBIN, EX_GUEST, EX_HOST, EX_NOMARK, EX_TIMEOUT, EX_USAGE, Fail, Log
from .host import Host
from .kernels import debian, tree
from .machines.base import Boot
from .options import Opt, parse, positive_int

PROG = "realkvm boot"
log = Log(PROG)

OPTS = [
    Opt("timeout", ("--timeout",)),
    Opt("smp", ("--smp",)),
    Opt("tcg_thread", ("--tcg-thread",)),
    Opt("flavour", ("--flavour", "--flavor")),
    Opt("mem", ("--mem",)),
    Opt("cpu", ("--cpu",)),
    Opt("workdir", ("--workdir",)),
    Opt("env", ("--env",), repeat=True),
    Opt("suite", ("--suite",)),
    Opt("kernel", ("--kernel",)),
    Opt("modules", ("--modules",)),
    Opt("file", ("--file",), repeat=True),
    Opt("script", ("--script",)),
    Opt("machine", ("--machine",)),
    Opt("mirror", ("--mirror",)),
    Opt("security_mirror", ("--security-mirror",)),
    Opt("dmesg", ("--dmesg",), value=False),
    Opt("refresh", ("--refresh-kernel",), value=False),
    Opt("help", ("-h", "--help"), value=False),
]

USAGE = f"""\
Usage: realkvm boot [options] [--] /path/to/static-binary [args...]
       realkvm boot [options] --script FILE [--file SRC[:DEST]]... [-- script-args...]
(tools/qemu-kvm/run-in-qemu.sh is `realkvm boot --machine qemu-svm`.)

Boot a Linux kernel in an emulated machine with hardware virtualisation
(default qemu-svm: QEMU TCG, -cpu max, AMD SVM, kvm_amd; see --machine), load
the machine's KVM module, and run inside, with a real /dev/kvm, either
  - the given statically linked x86-64 program, as /prog with the given args, or
  - with --script, a POSIX sh script run by busybox sh (as {initramfs.G_SCRIPT}, with the
    args after -- as "$@"); it can run the programs copied in with --file, so
    that one boot serves several programs.
Output goes to the serial console, which is copied to stdout and to
WORKDIR/serial.log; the program's (script's) output alone is written to
WORKDIR/prog-output.txt. Exits with the program's (script's) exit code.

Kernel (default: the newest kernel of Debian {debian.DEFAULT_SUITE}, flavour {debian.DEFAULT_FLAVOUR}):
  --suite SUITE    boot the newest kernel of Debian SUITE: any suite with an amd64
                   kernel, e.g. bullseye, bookworm, trixie (Linux 5.10, 6.1, 6.12),
                   sid, experimental, or a backports suite such as trixie-backports
                   or bookworm-backports (default {debian.DEFAULT_SUITE}). The kernel is the one
                   linux-image-FLAVOUR points at; both packagings work (one
                   linux-image-REL package, or from 7.x an empty linux-image-REL with
                   the kernel in linux-binary-REL and the modules in
                   linux-modules-REL). The packages are found through private apt lists
                   (SUITE, and for a release SUITE-updates and SUITE-security, from
                   the Debian archive this machine's apt sources name, or --mirror)
                   kept in the cache; the machine's apt sources are neither used for
                   that nor changed. An unknown suite is an error naming the suites
                   that exist.
  --flavour FLAVOUR, --flavor FLAVOUR
                   the kernel flavour: {debian.DEFAULT_FLAVOUR} (default), cloud-amd64, rt-amd64,
                   or whatever linux-image-FLAVOUR packages SUITE has (an unknown one
                   is an error listing them)
  --refresh-kernel update those lists and use the kernel linux-image-FLAVOUR points
                   at now, downloading it if it is not cached (default: reuse the
                   newest cached kernel of the suite and flavour without asking apt,
                   which needs no network and keeps runs on one kernel)
  --mirror URL     Debian's archive (the directory holding dists/) to download from,
                   instead of the one in this machine's apt sources
  --security-mirror URL  its security archive (default: the apt sources' one)
  --kernel BZIMAGE boot this kernel instead (e.g. arch/x86/boot/bzImage of a build
                   tree, or a tuxmake output directory: its bzImage, and its
                   modules.tar.xz unless --modules is given); not with --suite,
                   --flavour or --refresh-kernel
  --modules DIR    with --kernel: where its modules are: a tree made by
                   'make modules_install INSTALL_MOD_PATH=DIR' (DIR/lib/modules/REL/),
                   a lib/modules/REL directory, or any directory holding the .ko
                   files (.ko, .ko.xz, .ko.zst, .ko.gz). Without --modules, KVM must
                   be built into the kernel.
  The modules loaded are the machine's KVM module (kvm_amd, kvm_intel) and,
  dependencies first, everything it needs by the depends= fields of the modules'
  .modinfo sections; a dependency not found as a module file is taken to be built in.

Guest programs:
  --script FILE    run FILE with busybox sh instead of a program; its exit code
                   is the result. Files it writes under $TSC_QEMU_OUT ({initramfs.G_OUT}) are
                   copied back to WORKDIR/out/ after it ends (base64 over the
                   serial console; meant for JSON reports, not for megabytes).
  --file SRC[:DEST] copy the file or directory SRC into the initramfs (repeatable)
                   at DEST (absolute; ending in / means "into this directory";
                   default /bin/NAME, so a script can call a copied static
                   binary by name). SRC must not contain ':'.
  --env NAME=VAL   export NAME=VAL to the program or script (repeatable)

Machine and run:
  --machine NAME   the machine of tools/realkvm/machines.toml to boot (default
                   {machines.DEFAULT}; the bochs-* machines need realkvm/machines/bochs.py)
  --timeout SECS   wall-clock limit of the emulator, boot included (default 600;
                   package installs and the one-off kernel download come on top)
  --smp N          number of emulated CPUs (default 2; at most the machine's max_cpus)
  --mem MB         guest memory in MiB (default 1024)
  --cpu MODEL      the emulator's CPU model (default: the machine's; qemu-svm: max,
                   which must offer svm for kvm_amd)
  --tcg-thread MODE  (QEMU machines) multi or single: QEMU's TCG runs each emulated
                   CPU on its own host thread, truly in parallel (multi, the
                   default), or all of them one after another on one host thread
                   (single: the vCPUs then rarely interleave, and the guest's warp
                   test sees few lock hand-offs). multi needs QEMU >= 10 (older ones
                   hung in kvm_destroy_vm): on Debian bookworm QEMU is installed from
                   bookworm-backports; with an older QEMU, multi falls back to single
  --workdir DIR    where to put initrd.gz, serial.log, prog-output.txt, out/,
                   run-info.txt (default: a new directory under ${{TMPDIR:-/tmp}})
  --dmesg          print the guest kernel log after the program has exited
  -h, --help       show this text

Exit codes: the program's (script's) own exit code (a program killed by signal N
inside the guest gives 128+N); {EX_USAGE} usage error, including a missing or unusable
--kernel, --modules, --file or --script path and an unknown machine; {EX_BADBIN} program
missing or not statically linked; {EX_HOST} host setup failed; {EX_GUEST} a KVM module failed
to load or /dev/kvm is missing in the guest; {EX_TIMEOUT} timeout; {EX_NOMARK} the emulator ended
without an exit marker (guest kernel panic or emulator error).

WORKDIR/run-info.txt has key=value lines: kernel_release, expected_release,
exit_code, qemu_seconds (the emulator's start to exit, on any machine),
guest_uptime_start / guest_uptime_end (the guest kernel's uptime when the
program started and just before power-off), what the machine adds (qemu-svm:
qemu_version, tcg_thread), smp, machine and emulator_version.

Needs root (installs the machine's emulator, e.g. qemu-system-x86, and
busybox-static with apt-get when missing; on Debian bookworm QEMU comes from
bookworm-backports, which is then added to apt's sources, with the archive URL
apt already uses, as /etc/apt/sources.list.d/tsc-rendezvous-bookworm-backports.sources
unless a source has it already). Kernels are cached per suite, flavour and
package version in ${{XDG_CACHE_HOME:-$HOME/.cache}}/tsc-rendezvous/qemu-kvm.
Emulation is slow (~1 ms per guest exit): check KVM semantics with it, not timings.
"""


def parse_files(specs):
    """--file SRC[:DEST] -> [(src, absolute guest dest)]."""
    out = []
    for spec in specs:
        src, dest = spec, ""
        if ":" in spec:
            src, _, dest = spec.rpartition(":")
            if not dest:
                raise Fail(EX_USAGE, f"--file '{spec}': empty DEST after ':'")
        if not src:
            raise Fail(EX_USAGE, f"--file '{spec}': empty SRC")
        p = Path(src)
        if not p.exists():
            raise Fail(EX_USAGE, f"--file: '{src}' does not exist")
        if not os.access(p, os.R_OK):
            raise Fail(EX_USAGE, f"--file: '{src}' is not readable")
        if not (p.is_file() or p.is_dir()):
            raise Fail(EX_USAGE, f"--file: '{src}' is neither a file nor a directory")
        base = p.resolve().name
        if not dest:
            dest = f"/bin/{base}"
        elif dest.endswith("/"):
            dest += base
        if not dest.startswith("/"):
            raise Fail(EX_USAGE, f"--file '{spec}': DEST must be an absolute guest path")
        if "/../" in f"/{dest}/" or "/./" in f"/{dest}/":
            raise Fail(EX_USAGE, f"--file '{spec}': DEST must not contain . or .. components")
        dest = re.sub(r"/+", "/", dest).rstrip("/") or "/"
        if dest in initramfs.RESERVED or dest.startswith(initramfs.RESERVED_TREES):
            raise Fail(EX_USAGE, f"--file '{spec}': DEST {dest} is used by the initramfs itself")
        out.append((src, dest))
    return out


class Interrupted(Exception):
    def __init__(self, code, what):
        super().__init__(what)
        self.code, self.what = code, what


def _on_signal(signum, _frame):
    raise Interrupted(143, "terminated")


def main(argv, apt_root="/"):
    try:
        return run(argv, apt_root)
    except Fail as e:
        log.error(e.message)
        return e.code


def run(argv, apt_root="/"):
    o, rest = parse(argv, OPTS, EX_USAGE)
    if o.get("help"):
        sys.stdout.write(USAGE)
        return 0
    script = o.get("script", "")
    binary = ""
    if not script:
        if not rest:
            sys.stderr.write(USAGE)
            return EX_USAGE
        binary, rest = rest[0], rest[1:]
    prog_args = rest

    timeout = positive_int(o.get("timeout", "600"))
    if timeout is None:
        raise Fail(EX_USAGE, "--timeout must be a positive integer (seconds)")
    smp = positive_int(o.get("smp", "2"))
    if smp is None:
        raise Fail(EX_USAGE, "--smp must be a positive integer")
    mem = positive_int(o.get("mem", "1024"))
    if mem is None or mem < 256:
        raise Fail(EX_USAGE, "--mem must be an integer >= 256 (MiB)")
    tcg = o.get("tcg_thread")
    if tcg is not None and tcg not in ("single", "multi"):
        raise Fail(EX_USAGE, f"--tcg-thread must be single or multi (got '{tcg}')")
    envs = o.get("env", [])
    for e in envs:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", e):
            raise Fail(EX_USAGE, f"--env wants NAME=VALUE, got '{e}'")

    # The kernel choice, before the machine: its errors are about the command line.
    suite, flavour, refresh = o.get("suite", ""), o.get("flavour", ""), o.get("refresh", False)
    user_kernel, user_modules = o.get("kernel", ""), o.get("modules", "")
    if user_kernel:
        if suite:
            raise Fail(EX_USAGE, "--suite and --kernel exclude each other (--suite picks a Debian kernel)")
        if flavour:
            raise Fail(EX_USAGE, "--flavour picks a Debian kernel; it does nothing with --kernel")
        if refresh:
            raise Fail(EX_USAGE, "--refresh-kernel is for Debian kernels; it does nothing with --kernel")
    else:
        if user_modules:
            raise Fail(EX_USAGE, "--modules needs --kernel (Debian kernels bring their own modules)")
        suite, flavour = suite or debian.DEFAULT_SUITE, flavour or debian.DEFAULT_FLAVOUR
        debian.check_names(suite, flavour)

    spec = machines.spec(o.get("machine", machines.DEFAULT))
    machine = machines.load(spec.name, cpu=o.get("cpu"), options={"tcg_thread": tcg} if tcg else None)
    ok, why = machine.accepts(smp)
    if not ok:
        raise Fail(EX_USAGE, f"--smp {smp}: {why}")

    host = Host(log, apt_root, o.get("mirror", ""), o.get("security_mirror", ""))
    if user_kernel:
        kernel = tree.BuiltKernel(user_kernel, user_modules or None, spec.kvm_module)
    else:
        roots = sorted({s.kvm_module for s in machines.specs().values()})
        kernel = debian.DebianKernel(suite, flavour, spec.kvm_module, roots, host, refresh, log)

    files = parse_files(o.get("file", []))
    if script:
        p = Path(script)
        if not p.exists():
            raise Fail(EX_USAGE, f"--script '{script}' does not exist")
        if not (p.is_file() and os.access(p, os.R_OK)):
            raise Fail(EX_USAGE, f"--script '{script}' is not a readable file")
    if binary:
        p = Path(binary)
        if not p.is_file():
            raise Fail(EX_BADBIN, f"program '{binary}' not found")
        if not os.access(p, os.R_OK):
            raise Fail(EX_BADBIN, f"program '{binary}' is not readable")
        why = static_x86_64_problem(p)
        if why:
            raise Fail(
                EX_BADBIN,
                f"'{binary}' cannot run in the initramfs: {why}. The guest has no libc or loader; build statically, "
                "e.g. RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target x86_64-unknown-linux-gnu",
            )
    # Extra files are not required to be programs; warn about ELF files that cannot run.
    for src, _ in files:
        if Path(src).is_file() and is_elf(src):
            why = static_x86_64_problem(src)
            if why:
                log(f"warning: --file '{src}' is an ELF file that cannot run in the guest: {why}")

    if os.geteuid() != 0:
        raise Fail(EX_HOST, "must run as root (installs Debian packages; see --help)")

    workdir = Path(o["workdir"]) if o.get("workdir") else Path(tempfile.mkdtemp(prefix="tsc-qemu-kvm.", dir=os.environ.get("TMPDIR", "/tmp")))
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = workdir.resolve()
    paths = {k: workdir / v for k, v in (("log", "serial.log"), ("out", "prog-output.txt"), ("outdir", "out"), ("info", "run-info.txt"), ("initrd", "initrd.gz"))}
    for p in list(paths.values()) + [workdir / "init.sh"]:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()

    # The kernel first: a suite or flavour that does not exist is reported before
    # anything is installed.
    k = kernel.resolve(log)
    # The emulator: a machine's own prepare_host (QEMU: from backports where the
    # host's is too old) or a plain install of its packages.
    prepare = getattr(machine, "prepare_host", None)
    if prepare:
        prepare(host)
    else:
        host.ensure(machine.packages())
    busybox = host.static_busybox()
    if script:
        r = subprocess.run([busybox, "sh", "-n", script], capture_output=True, text=True)
        if r.returncode != 0:
            raise Fail(EX_USAGE, f"--script '{script}' is not valid busybox sh: {(r.stderr + r.stdout).strip()}")

    try:
        init = initramfs.build(
            paths["initrd"], busybox, machine, k.modules, prog=binary or None, script=script or None,
            files=files, envs=envs, args=prog_args, dmesg=o.get("dmesg", False), log=log,
        )
    except (OSError, ValueError) as e:
        raise Fail(EX_HOST, f"building the initramfs failed: {e}") from None
    (workdir / "init.sh").write_text(init)  # for inspection

    cmdline = f"{machine.cmdline()} quiet panic=-1 random.trust_cpu=on".strip()
    # quiet: a short boot log; panic=-1 (and the machine not rebooting): a guest panic
    # ends the emulator at once. random.trust_cpu=on: seed the random pool from RDRAND,
    # as Debian's kernels do by their config; a minimal kernel (tinyconfig) does not,
    # and a program that waits for the pool (Rust's getrandom fallback) blocks forever.
    boot = Boot(k.image, paths["initrd"], cmdline, smp, mem, timeout, workdir, paths["log"])
    log(f"{k.desc}, machine {spec.name} ({spec.emulator}, {spec.vendor}, cpu {machine.spec.cpu}), smp {smp}, timeout {timeout}s, workdir {workdir}")
    hide = serial.hide_file_bodies()
    # When the protocol's markers and the guest runner's lines reached the host:
    # where a boot's host time goes (boot, each step), whatever the guest's clock.
    started = time.monotonic()
    times = open(workdir / "console-times.txt", "w")

    def echo(line):
        if line.startswith(("@@TSC-QEMU-", "run-steps:")):
            times.write(f"{time.monotonic() - started:.2f} {line.rstrip()}\n")
            times.flush()
        s = hide(line)
        if s:
            sys.stdout.write(s)
            sys.stdout.flush()

    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        result = machine.boot(boot, echo)
    except KeyboardInterrupt:
        log(f"interrupted; stopped the emulator (log: {paths['log']})")
        return 130
    except Interrupted as e:
        log(f"{e.what}; stopped the emulator (log: {paths['log']})")
        return e.code
    finally:
        times.close()
        for s, h in old.items():
            signal.signal(s, h)
    return finish(result, k, spec, smp, timeout, script, paths)


def finish(result, k, spec, smp, timeout, script, paths):
    raw = paths["log"].read_bytes() if paths["log"].exists() else b""
    g = serial.parse(raw)
    paths["out"].write_bytes(g.output)
    release = g.kernel or k.release  # what the guest really ran
    rc = "" if g.exit_code is None else str(g.exit_code)
    info = [
        ("kernel_release", release), ("expected_release", k.release), ("exit_code", rc),
        ("qemu_seconds", f"{result.seconds:.1f}"), ("guest_uptime_start", g.uptime_start), ("guest_uptime_end", g.uptime_end),
    ]
    for n in result.notes:
        key, sep, val = str(n).partition("=")
        if sep and re.match(r"^[a-z_]+$", key):
            info.append((key, val))
    info += [("smp", str(smp)), ("machine", spec.name), ("emulator_version", result.emulator_version)]
    paths["info"].write_text("".join(f"{a}={b}\n" for a, b in info))

    if script:
        paths["outdir"].mkdir(exist_ok=True)
        n = serial.write_files(g.files, paths["outdir"], log)
        if g.exit_code is not None and not g.files_done:
            log(f"warning: the guest did not finish sending the files in {initramfs.G_OUT}")
        if n:
            log(f"{n} file(s) from the guest's {initramfs.G_OUT} in {paths['outdir']}")

    where = f"log: {paths['log']}"
    if g.setup_fail is not None:
        raise Fail(EX_GUEST, f"guest setup failed: {g.setup_fail} ({k.desc}; {where})")
    if g.exit_code is None:
        if result.timed_out:
            raise Fail(EX_TIMEOUT, f"timed out after {timeout}s without the program finishing ({where})")
        if not g.began:
            raise Fail(EX_NOMARK, f"the emulator exited ({result.exit_status}) before the program started: kernel panic or emulator error? ({where})")
        raise Fail(EX_NOMARK, f"the emulator exited ({result.exit_status}) without the exit marker: guest crash? ({where})")
    if result.timed_out:
        log(f"warning: the program finished (exit {rc}) but the guest did not power off before the timeout")
    what = "script" if script else "program"
    log(f"{what} exited with {rc} after {result.seconds:.1f}s (boot + run, kernel {release}); output: {paths['out']}")
    if g.uptime_start and g.uptime_end:
        log(f"guest clock: {what} started {g.uptime_start}s after kernel start, power-off at {g.uptime_end}s")
    return g.exit_code

