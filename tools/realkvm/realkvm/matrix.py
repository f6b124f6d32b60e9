"""`realkvm matrix`: tsc-rendezvous on real KVM across kernels and machines
(what tools/qemu-kvm/kernel-matrix.sh always did).

Builds tsc-rendezvous and its real-VM integration tests statically once,
boots each entry's kernel EXACTLY ONCE on its machine (`realkvm boot`, a
process of its own per boot) with the run runs/kernel-matrix.toml, and
judges every kernel's files by the expectations (expectations.py). Every
kernel's outputs stay in ARTEFACTS/<label>/ (default target/kernel-matrix/);
exits non-zero on any failed expectation, boot failure or timeout. The
binaries are built statically; the tests spawn tsc-rendezvous by the
absolute path compiled into them (CARGO_BIN_EXE_tsc-rendezvous), so the
binary is copied to exactly that path inside the initramfs.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import expectations, machines
from .elf import is_bzimage, static_x86_64_problem
from .errors import EX_USAGE, Fail
from .options import Opt, parse, positive_int
from .runs import RUNNER, Run

ROOT = Path(__file__).resolve().parents[3]
ENTRY = Path(__file__).resolve().parent  # python3 ENTRY runs __main__.py
TARGET = "x86_64-unknown-linux-gnu"
DEFAULT_SUITES = "bullseye,bookworm,trixie@4,trixie@bochs-tigerlake"
DEFAULT_TESTS = "kvm_run,check,kvmclock,kvm_compare,faults,signals,restore,initial_skew"
# thread=single although qemu-svm defaults to multi: multi never hung (see
# measurements.md), but it leaves the emulated vCPUs' timing to the host's scheduler,
# and the matrix asserts timing-dependent outcomes (the initial skew removed to a
# tenth by the first round; the host-thread test's skew). On a loaded 2-core host
# those failed under multi and held under single. --tcg-thread multi for truly
# parallel vCPUs (check 5 then sees hand-offs). Machines without the option ignore it.
DEFAULT_TCG = "single"
ENTRY_RE = re.compile(r"^([a-z]+(?:-[a-z]+)*)(?::([a-z0-9]+(?:-[a-z0-9]+)*))?((?:@[A-Za-z0-9][A-Za-z0-9_.-]*)*)$")

OPTS = [
    Opt("suites", ("--suites",)),
    Opt("flavour", ("--flavour", "--flavor")),
    Opt("kernel", ("--kernel",)),
    Opt("modules", ("--modules",)),
    Opt("label", ("--label",)),
    Opt("machine", ("--machine",)),
    Opt("smp", ("--smp", "--vcpus")),
    Opt("tcg_thread", ("--tcg-thread",)),
    Opt("tests", ("--tests",)),
    Opt("run", ("--run",)),
    Opt("boot_timeout", ("--boot-timeout",)),
    Opt("step_timeout", ("--step-timeout",)),
    Opt("download_timeout", ("--download-timeout",)),
    Opt("artefacts", ("--artefacts",)),
    Opt("mirror", ("--mirror",)),
    Opt("security_mirror", ("--security-mirror",)),
    Opt("refresh", ("--refresh-kernel",), value=False),
    Opt("help", ("-h", "--help"), value=False),
]

USAGE = f"""\
Usage: realkvm matrix [options]
(tools/qemu-kvm/kernel-matrix.sh is `realkvm matrix`.)

Build tsc-rendezvous and its real-VM integration tests statically, boot each kernel
once in its machine (realkvm boot), run check, run, restore and the tests inside
(runs/kernel-matrix.toml), and assert the real-KVM expectations that each kernel's
version and machine imply (realkvm/expectations.py).

Kernels:
  --suites LIST        Debian kernels to boot, comma- or space-separated; each entry
                       SUITE[:FLAVOUR][@MACHINE][@N]: any suite `realkvm boot --suite`
                       takes (bullseye, bookworm, trixie, sid, trixie-backports, ...),
                       a flavour (default: --flavour's), @MACHINE to boot it on that
                       machine of machines.toml (default: --machine's), and @N to boot
                       it with N emulated CPUs and run it with --vcpus N (default:
                       --smp's, at most the machine's max_cpus). An @ part is N when it
                       is a number, else a machine: trixie@4, trixie@bochs-tigerlake,
                       bookworm:cloud-amd64@qemu-svm@4.
                       Default: {DEFAULT_SUITES} without --kernel, none with it
  --flavour F, --flavor F  default kernel flavour of the entries (default amd64)
  --kernel BZIMAGE     also boot this kernel (e.g. a patched build's
                       arch/x86/boot/bzImage, or a tuxmake output directory); its
                       artefacts go to ARTEFACTS/LABEL/
  --modules DIR        its modules (as realkvm boot --modules: an
                       INSTALL_MOD_PATH tree, a lib/modules/REL directory or a
                       directory of .ko files); leave out if KVM is built in
  --label NAME         the --kernel entry's name in the table (default: kernel)
  --mirror URL, --security-mirror URL  Debian's archive to download from (default:
                       the one this machine's apt sources name)

Machine:
  --machine NAME       the machine of entries without @MACHINE and of --kernel
                       (default {machines.DEFAULT}); a label gets -NAME for another machine
  --smp N, --vcpus N   emulated CPUs of every boot, and vCPUs of check, run, restore
                       and the initial-skew run (default 2; an entry's @N wins)
  --tcg-thread MODE    {DEFAULT_TCG} (default) or multi: QEMU's TCG threading on the
                       machines that have it (realkvm boot --tcg-thread)

Run:
  --run NAME           the run of tools/realkvm/runs/ every boot executes (default: each
                       machine's own, machines.toml `run`: kernel-matrix on qemu-svm,
                       bochs-matrix on the Bochs machines)
  --tests LIST         integration test binaries to run inside, where the run has a test
                       step (default: {DEFAULT_TESTS}; kvm_run and check are the ones
                       the matrix must have)
  --boot-timeout SECS  limit of each emulator run, boot included (default 420; a boot
                       of N > 2 CPUs gets N/2 times as much, a machine with a
                       time_scale that many times)
  --step-timeout SECS  limit of each step inside the guest (default 120, scaled alike)
  --download-timeout SECS  extra time per boot for a one-off kernel download
                       (default 900; cached kernels need none)
  --artefacts DIR      where each kernel's outputs go (default target/kernel-matrix)
  --refresh-kernel     ask apt for each suite's current kernel (realkvm boot's)
  -h, --help           show this text

Environment: TSC_QEMU_BOOT_TIMEOUT is the default of --boot-timeout.
"""


def die(msg):
    raise Fail(EX_USAGE, msg)


def log(msg):
    print(f"kernel-matrix: {msg}", file=sys.stderr, flush=True)


@dataclass
class Entry:
    label: str
    kernel_args: list  # realkvm boot's kernel options
    machine: str
    cpus: int


def parse_entry(entry, flavour, default_machine, default_smp, smp_given, specs):
    m = ENTRY_RE.match(entry)
    bad = (f"bad --suites entry '{entry}' (want SUITE[:FLAVOUR][@MACHINE][@N], e.g. sid, "
           "trixie-backports:cloud-amd64, trixie@4, trixie@bochs-tigerlake)")
    if not m:
        die(bad)
    suite, fl = m.group(1), m.group(2) or flavour
    machine, n = None, None
    for part in [p for p in m.group(3).split("@") if p]:
        if part.isdigit():
            if n is not None:
                die(bad)
            n = int(part)
        else:
            if machine is not None:
                die(bad)
            machine = part
    machine = machine or default_machine
    if machine not in specs:
        die(f"--suites entry '{entry}': no machine '{machine}' in machines.toml (machines: {', '.join(specs)})")
    if n is None:
        # Without an explicit count, a machine that boots fewer CPUs gets what it can.
        n = default_smp if smp_given else min(default_smp, specs[machine].max_cpus)
    if not 1 <= n <= 64:
        die(f"--suites entry '{entry}': N must be from 1 to 64")
    label = suite + ("" if fl == "amd64" else f"-{fl}") + ("" if machine == machines.DEFAULT else f"-{machine}")
    label += "" if n == 2 else f"-smp{n}"
    return Entry(label, ["--suite", suite, "--flavour", fl], machine, n)


def host_profile(times_file):
    """Where a boot's host time went, from its console-times.txt (host seconds at
    which the markers and the guest runner's lines arrived): (seconds to the
    program's start, [(step, seconds)]); (None, []) without the file."""
    try:
        lines = Path(times_file).read_text().splitlines()
    except OSError:
        return None, []
    to_program, starts, steps = None, {}, []
    for line in lines:
        t, _, text = line.partition(" ")
        try:
            t = float(t)
        except ValueError:
            continue
        if text.startswith("@@TSC-QEMU-BEGIN@@") and to_program is None:
            to_program = t
        m = re.match(r"run-steps: (\S+): (exit \d+ after )?", text)
        if m and m.group(2):
            if m.group(1) in starts:
                steps.append((m.group(1), round(t - starts.pop(m.group(1)), 1)))
        elif m:
            starts[m.group(1)] = t
    return to_program, steps


def static_build(tests, stage):
    """Builds the binary and the test binaries statically with one cargo
    invocation (the tests need the binary and compile its path in); returns
    (seconds, {"@bin": path, test: path})."""
    target_dir = ROOT / "target" / "static"
    log(f"building statically linked tsc-rendezvous{' and tests (' + ' '.join(tests) + ')' if tests else ''} in {target_dir}")
    t0 = time.monotonic()
    if tests:
        cmd = ["cargo", "test", "--release", "--locked", "--target", TARGET, "--target-dir", str(target_dir)]
        for t in tests:
            cmd += ["--test", t]
        cmd += ["--no-run", "--message-format=json"]
    else:  # the binary alone
        cmd = ["cargo", "build", "--release", "--locked", "--target", TARGET, "--target-dir", str(target_dir),
               "--bin", "tsc-rendezvous", "--message-format=json"]
    env = dict(os.environ, RUSTFLAGS="-C target-feature=+crt-static")
    with open(stage / "build.json", "wb") as out:
        r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out)
    messages = []
    for line in (stage / "build.json").read_text(errors="replace").splitlines():
        try:
            messages.append(json.loads(line))
        except ValueError:
            pass
    if r.returncode != 0:
        # With --message-format=json the compiler's errors are on stdout, as JSON.
        for m in messages:
            msg = m.get("message") or {}
            if m.get("reason") == "compiler-message" and msg.get("level") in ("error", "error: internal compiler error"):
                sys.stderr.write(msg.get("rendered") or msg.get("message", "") + "\n")
        raise Fail(1, "FAILED: the static build failed (compiler errors above)")
    found = {}
    for m in messages:
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        t = m["target"]
        if "bin" in t["kind"] and t["name"] == "tsc-rendezvous":
            found["@bin"] = m["executable"]
        elif "test" in t["kind"] and t["name"] in tests:
            found[t["name"]] = m["executable"]
    missing = [n for n in ["@bin"] + tests if n not in found]
    if missing:
        raise Fail(1, f"FAILED: the build did not produce every executable: no executable for {missing} in cargo's messages")
    return time.monotonic() - t0, found


def slim(src, dst):
    """A copy without debug info (the release profile keeps some; it would triple
    the initramfs) but with symbols, so backtraces still name functions."""
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", "-o", str(dst), str(src)], check=True)
    else:
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o755)


def main(argv):
    try:
        return run(argv)
    except Fail as e:
        print(f"kernel-matrix: {e.message}", file=sys.stderr)
        return e.code


def run(argv):
    o, _ = parse(argv, OPTS, EX_USAGE, positional="error", unknown="unknown argument '{}' (see --help)")
    if o.get("help"):
        sys.stdout.write(USAGE)
        return 0
    boot_timeout = o.get("boot_timeout", os.environ.get("TSC_QEMU_BOOT_TIMEOUT", "420"))
    step_timeout, download_timeout = o.get("step_timeout", "120"), o.get("download_timeout", "900")
    if any(positive_int(n) is None for n in (boot_timeout, step_timeout, download_timeout)):
        die("timeouts must be positive integers (seconds)")
    boot_timeout, step_timeout, download_timeout = int(boot_timeout), int(step_timeout), int(download_timeout)
    smp_s = o.get("smp", "2")
    smp = positive_int(smp_s)
    if smp is None or smp > 64:
        die("--smp/--vcpus must be an integer from 1 to 64")
    tcg = o.get("tcg_thread", DEFAULT_TCG)
    if tcg not in ("single", "multi"):
        die("--tcg-thread must be single or multi")
    flavour = o.get("flavour", "amd64")
    if not re.match(r"^[a-z0-9]+(-[a-z0-9]+)*$", flavour):
        die(f"--flavour '{flavour}' is not a flavour name (amd64, cloud-amd64, rt-amd64, ...)")
    label = o.get("label", "kernel")
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", label):
        die("--label must be a plain name (letters, digits, . _ -)")
    specs = machines.specs()
    default_machine = o.get("machine", machines.DEFAULT)
    if default_machine not in specs:
        die(f"no machine '{default_machine}' in machines.toml (machines: {', '.join(specs)})")
    user_kernel, user_modules = o.get("kernel", ""), o.get("modules", "")
    if user_kernel:
        from .kernels.tree import tuxmake_output

        if tuxmake_output(user_kernel) is not None:
            pass  # a tuxmake output directory: realkvm boot takes its bzImage and modules
        elif not Path(user_kernel).is_file():
            die(f"--kernel '{user_kernel}' is not a file")
        # The x86 boot protocol's "HdrS" (as realkvm boot checks, but before the build).
        elif not is_bzimage(user_kernel):
            die(f"--kernel '{user_kernel}' is not a bzImage (want e.g. arch/x86/boot/bzImage)")
        user_kernel = str(Path(user_kernel).resolve())
        if user_modules:
            if not Path(user_modules).is_dir():
                die(f"--modules '{user_modules}' is not a directory")
            user_modules = str(Path(user_modules).resolve())
    elif user_modules:
        die("--modules needs --kernel")
    suites = o["suites"] if "suites" in o else ("" if user_kernel else DEFAULT_SUITES)
    suite_list = suites.replace(",", " ").split()
    test_list = o.get("tests", DEFAULT_TESTS).replace(",", " ").split()
    if not suite_list and not user_kernel:
        die("no suites and no --kernel")
    if not test_list:
        die("no test binaries")

    entries = [parse_entry(e, flavour, default_machine, smp, "smp" in o, specs) for e in suite_list]
    if user_kernel:
        n = smp if "smp" in o else min(smp, specs[default_machine].max_cpus)
        lab = label + ("" if default_machine == machines.DEFAULT else f"-{default_machine}") + ("" if n == 2 else f"-smp{n}")
        args = ["--kernel", user_kernel] + (["--modules", user_modules] if user_modules else [])
        entries.append(Entry(lab, args, default_machine, n))
    labels = [e.label for e in entries]
    dups = sorted({x for x in labels if labels.count(x) > 1})
    if dups:
        die(f"the same kernel twice: {' '.join(dups)}")
    # Every machine must take its entry's CPU count, and its emulator module must be here.
    for e in entries:
        try:
            mach = machines.load(e.machine)
        except Fail as f:
            die(f"{e.label}: {f.message}")
        ok, why = mach.accepts(e.cpus)
        if not ok:
            die(f"{e.label}: {e.cpus} CPUs: {why}")

    t_all = time.monotonic()
    art = Path(o.get("artefacts", ROOT / "target" / "kernel-matrix"))
    art.mkdir(parents=True, exist_ok=True)
    art = art.resolve()
    stage = art / ".stage"
    shutil.rmtree(stage, ignore_errors=True)
    (stage / "bin").mkdir(parents=True)

    build_seconds, exes = static_build(test_list, stage)
    binary = exes["@bin"]
    log(f"built in {build_seconds:.1f}s: {binary}")
    files = []
    if not os.access(binary, os.X_OK):
        raise Fail(1, f"FAILED: no tsc-rendezvous at {binary}")
    if static_x86_64_problem(binary):
        raise Fail(1, f"FAILED: {binary} is not statically linked")
    slim(binary, stage / "bin" / "tsc-rendezvous")
    # The tests find the binary at the absolute path cargo compiled into them.
    files.append(f"{stage / 'bin' / 'tsc-rendezvous'}:{binary}")
    tests = []
    for name in test_list:
        exe = exes[name]
        if not os.access(exe, os.X_OK):
            raise Fail(1, f"FAILED: no test binary {exe}")
        if static_x86_64_problem(exe):
            raise Fail(1, f"FAILED: test binary {exe} is not statically linked")
        if binary.encode() not in Path(exe).read_bytes():
            log(f"warning: {name} does not contain the path {binary}; its tests may not find the binary")
        slim(exe, stage / "bin" / name)
        files.append(f"{stage / 'bin' / name}:/tests/{name}")
        tests.append({"test": name, "test_path": f"/tests/{name}"})

    runs = {}
    for e in entries:
        name = o.get("run") or specs[e.machine].run
        try:
            runs[name] = runs.get(name) or Run.load(name)
        except (OSError, ValueError) as err:
            die(f"{e.label}: no usable run '{name}' ({err}); the runs are tools/realkvm/runs/*.toml")
    boot_failed = False
    for e in entries:
        the_run = runs[o.get("run") or specs[e.machine].run]
        d = art / e.label
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        # More vCPUs take longer under emulation: N > 2 gets N/2 times the limits.
        scale = max(1, (e.cpus + 1) // 2) * max(1, specs[e.machine].time_scale)
        bt, st = boot_timeout * scale, step_timeout * scale
        steps = stage / f"steps-{e.label}.sh"
        values = {"bin": binary, "vcpus": str(e.cpus), "out": "/out", "tests": tests}
        steps.write_text(the_run.steps_file(values, st))
        spec = specs[e.machine]
        machine_opts = ["--tcg-thread", tcg] if "tcg_thread" in spec.options else []
        log(f"{e.label}: booting {' '.join(e.kernel_args)} on {e.machine} with {e.cpus} CPUs{' TCG thread=' + tcg if machine_opts else ''} "
            f"(emulator limit {bt}s); console in {d}/console.log")
        cmd = [sys.executable, str(ENTRY), "boot", *e.kernel_args, *(["--refresh-kernel"] if o.get("refresh") else []),
               *(["--mirror", o["mirror"]] if o.get("mirror") else []),
               *(["--security-mirror", o["security_mirror"]] if o.get("security_mirror") else []),
               "--machine", e.machine, *machine_opts, "--smp", str(e.cpus), "--timeout", str(bt), "--workdir", str(d / "boot"),
               "--script", str(RUNNER), "--file", f"{steps}:/run/steps.sh", *[x for f in files for x in ("--file", f)],
               "--", "/run/steps.sh"]
        t0 = time.monotonic()
        with open(d / "console.log", "wb") as console:
            try:
                # The outer limit adds room for a one-off kernel download, which
                # the boot's own --timeout does not cover.
                rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                    timeout=bt + download_timeout + 15).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        secs = time.monotonic() - t0
        info = expectations.read_kv(d / "boot" / "run-info.txt") or {}
        if (d / "boot" / "out").is_dir():
            shutil.copytree(d / "boot" / "out", d, dirs_exist_ok=True)
            shutil.rmtree(d / "boot" / "out")
        (d / "boot" / "initrd.gz").unlink(missing_ok=True)
        lines = [f"boot_rc={rc}", f"boot_seconds={secs:.1f}", f"qemu_seconds={info.get('qemu_seconds', '')}", f"boot_timeout={bt}",
                 f"label={e.label}", f"kernel_args={' '.join(e.kernel_args)}", f"smp={e.cpus}", f"vcpus={e.cpus}",
                 f"tcg_thread={info.get('tcg_thread', tcg if machine_opts else '')}", f"machine={e.machine}",
                 f"run={the_run.name}", f"steps={' '.join(the_run.step_names(values))}"]
        to_program, steps_host = host_profile(d / "boot" / "console-times.txt")
        if to_program is not None:
            lines.append(f"host_seconds_to_program={to_program:.1f}")
            lines.append("host_step_seconds=" + ",".join(f"{n}:{s}" for n, s in steps_host))
        # What the host meant to boot (checked against what the guest reports) and the emulator.
        for k in ("expected_release", "qemu_version", "emulator_version"):
            if k in info:
                lines.append(f"{k}={info[k]}")
        (d / "boot.txt").write_text("".join(x + "\n" for x in lines))
        log(f"{e.label}: realkvm boot exited {rc} after {secs:.1f}s (emulator {info.get('qemu_seconds') or '?'}s)")
        if rc not in (0, 1):
            boot_failed = True
            tail = (d / "console.log").read_text(errors="replace").splitlines()[-25:]
            for line in tail:
                print(f"  {e.label}| {line}", file=sys.stderr)

    print()
    sys.stdout.flush()
    rc = expectations.main(["judge", str(art), *labels])
    shutil.rmtree(stage, ignore_errors=True)
    boots = "".join(
        f" {lab} {kv.get('boot_seconds')}s (emulator {kv.get('qemu_seconds')}s; to the program "
        f"{kv.get('host_seconds_to_program', '?')}s; steps {kv.get('host_step_seconds', '?')})"
        for lab in labels
        for kv in [expectations.read_kv(art / lab / "boot.txt") or {}]
    )
    print()
    print(f"timings: static build {build_seconds:.1f}s; boots:{boots}; total {time.monotonic() - t_all:.1f}s")
    print(f"artefacts (check JSON, run JSON, KTAP, JUnit, test logs, serial logs) per kernel: {art}/<kernel>/")
    sys.stdout.flush()
    if rc != 0 or boot_failed:
        log("FAILED: see the lines above")
        return 1
    log(f"all real-KVM expectations met on: {' '.join(labels)}")
    return 0
