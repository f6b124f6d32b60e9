"""`realkvm variants`: the tool on kernels whose KVM was changed on purpose.

Builds the base kernel once (`build-kernel`, cached outside the repository),
rebuilds only the KVM modules per variant (realkvm/kernels/variant.py), boots
each machine ONCE with the base kernel and loads every variant's modules in
turn (runs/variants.toml), and judges every variant's verdicts against what
its file declares (realkvm/variant_judge.py). A variant that wedges the guest
costs its own boot only: the variants after it get a boot of their own.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import machines, variant_judge
from . import variants as vdata
from .errors import EX_USAGE, Fail
from .kernels import build as kbuild
from .kernels import variant as kvariant
from .kernels.debian import SUITE_RE, cache_dir
from .matrix import ENTRY, slim, static_build
from .options import Opt, parse, positive_int
from .runs import RUNNER, Run

ROOT = Path(__file__).resolve().parents[3]
GUEST_BIN = "/opt/tsc-rendezvous"
DEFAULT_MACHINES = "qemu-svm"

OPTS = [
    Opt("suite", ("--suite",)),
    Opt("base", ("--base",)),
    Opt("machines", ("--machines", "--machine")),
    Opt("variants", ("--variants",)),
    Opt("smp", ("--smp", "--vcpus")),
    Opt("boot_timeout", ("--boot-timeout",)),
    Opt("step_timeout", ("--step-timeout",)),
    Opt("artefacts", ("--artefacts",)),
    Opt("dir", ("--dir",)),
    Opt("no_build", ("--no-build",), value=False),
    Opt("mirror", ("--mirror",)),
    Opt("security_mirror", ("--security-mirror",)),
    Opt("help", ("-h", "--help"), value=False),
]

USAGE = f"""\
Usage: realkvm variants [options]

Check tsc-rendezvous's verdicts on kernels whose KVM TSC code was changed on
purpose (tools/realkvm/variants/*.patch: the fix of the stale kvmclock page and
mutants that each break one thing): build the base kernel once, rebuild only the
KVM modules per variant, boot each machine once loading every variant's modules
in turn, run check and restore against each, and compare every check's verdict
with what the variant declares. Exits 0 only when every verdict is the declared one.

Options:
  --suite SUITE      the base kernel: Debian SUITE's linux-source built by
                     `realkvm build-kernel` (default trixie), cached in
                     {cache_dir().parent}/kernel-build/SUITE and built there when missing
  --base DIR         the base kernel: a `realkvm build-kernel --out DIR` output instead
  --no-build         fail instead of building a missing base kernel
  --machines LIST    the machines to boot, comma-separated (default {DEFAULT_MACHINES};
                     e.g. qemu-svm,bochs-tigerlake); a variant runs on the machines
                     whose vendor its Machines line names
  --variants LIST    only these variants (and their bases; default: every one)
  --dir DIR          the variants' directory (default tools/realkvm/variants)
  --smp N, --vcpus N vCPUs of check and restore, and emulated CPUs (default 2; a
                     machine that boots fewer CPUs gets what it boots, and KVM runs
                     the vCPUs there in turn)
  --boot-timeout S   limit of each boot (default 300 + 120 per variant, times the
                     machine's time_scale)
  --step-timeout S   limit of each step inside (default 180, times the time_scale)
  --artefacts DIR    outputs (default target/variants): DIR/MACHINE/VARIANT/
  --mirror URL, --security-mirror URL  Debian's archive for the base's source
  -h, --help         show this text
"""


def log(msg):
    print(f"realkvm variants: {msg}", file=sys.stderr, flush=True)


def die(msg):
    raise Fail(EX_USAGE, msg)


def main(argv):
    try:
        return run(argv)
    except (Fail, vdata.VariantError) as e:
        log(getattr(e, "message", str(e)))
        return getattr(e, "code", EX_USAGE)


def kernel_build_dir(suite):
    return cache_dir().parent / "kernel-build" / suite


def ensure_base(o, log=log):
    """The Base: --base's, or the cached build of --suite's source (built when missing)."""
    if o.get("base"):
        return kvariant.Base(o["base"])
    suite = o.get("suite", "trixie")
    if not SUITE_RE.match(suite):
        die(f"--suite '{suite}' is not a Debian suite name")
    out = kernel_build_dir(suite)
    if (out / "build-info.txt").exists() and (out / "bzImage").exists():
        return kvariant.Base(out)
    if o.get("no_build"):
        raise Fail(1, f"no base kernel in {out} and --no-build given (build it: realkvm build-kernel --suite {suite} --out {out})")
    log(f"no base kernel for {suite} yet: building one in {out} (once; tens of minutes on 2 cores)")
    args = ["--suite", suite, "--out", str(out)]
    for k, flag in (("mirror", "--mirror"), ("security_mirror", "--security-mirror")):
        if o.get(k):
            args += [flag, o[k]]
    rc = kbuild.main(args)
    if rc:
        raise Fail(1, f"build-kernel --suite {suite} failed (exit {rc})")
    return kvariant.Base(out)


def stage_modules(mod_dir, dest, root_ko):
    """kvm.ko and the root module's .ko of a variant, debug info stripped, in `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for k in ("kvm.ko", f"{root_ko}.ko"):
        slim(mod_dir / k, dest / k)


def last_begun(console):
    """The group the guest runner began last, from the console's `run-steps: NAME: modules` lines."""
    name = None
    try:
        for line in Path(console).read_text(errors="replace").splitlines():
            if line.startswith("run-steps: ") and line.endswith(": modules"):
                name = line[len("run-steps: "):-len(": modules")]
    except OSError:
        pass
    return name


def run(argv):
    o, _ = parse(argv, OPTS, EX_USAGE, positional="error", unknown="unknown argument '{}' (see --help)")
    if o.get("help"):
        sys.stdout.write(USAGE)
        return 0
    if o.get("base") and o.get("suite"):
        die("--base and --suite: give one")
    smp = positive_int(o.get("smp", "2"))
    if smp is None or smp > 64:
        die("--smp/--vcpus must be an integer from 1 to 64")
    timeouts = {}
    for k in ("boot_timeout", "step_timeout"):
        if k in o:
            timeouts[k] = positive_int(o[k])
            if timeouts[k] is None:
                die(f"--{k.replace('_', '-')} must be a positive integer (seconds)")
    specs = machines.specs()
    names = [m for m in o.get("machines", DEFAULT_MACHINES).replace(",", " ").split()]
    if not names:
        die("--machines: no machine")
    for m in names:
        if m not in specs:
            die(f"--machines: no machine '{m}' in machines.toml (machines: {', '.join(specs)})")
    only = o.get("variants", "").replace(",", " ").split()
    vdir = Path(o.get("dir", vdata.VARIANTS_DIR))
    variants = vdata.load(vdir, only or None)
    art = Path(o.get("artefacts", ROOT / "target" / "variants")).resolve()
    art.mkdir(parents=True, exist_ok=True)

    t_all = time.monotonic()
    base = ensure_base(o)
    log(f"base kernel {base.release} ({base.out}); source {base.source}")
    cache = base.out / "variants"
    mods = {}
    t0 = time.monotonic()
    unbuilt = {}
    for v in variants.in_order():
        # A variant that does not build here (its patch does not apply to this kernel,
        # or does not compile) is reported as not run; the others still run.
        broken = [b.name for b in variants.stack(v.name)[:-1] if b.name in unbuilt]
        if broken:
            unbuilt[v.name] = f"its base {broken[0]} did not build"
            continue
        try:
            mods[v.name] = kvariant.build(base, variants, v.name, cache, os.cpu_count() or 1, log)
        except Fail as e:
            unbuilt[v.name] = e.message
            log(f"{v.name}: not built: {e.message.splitlines()[0]}")
    build_variants_s = time.monotonic() - t0
    stage = art / ".stage"
    shutil.rmtree(stage, ignore_errors=True)
    (stage / "bin").mkdir(parents=True)
    build_s, exes = static_build([], stage)
    slim(exes["@bin"], stage / "bin" / "tsc-rendezvous")
    the_run = Run.load("variants")

    boots = []
    for mname in names:
        spec = specs[mname]
        cpus = min(smp, spec.max_cpus)
        mine = [v.name for v in variants.in_order() if spec.vendor in v.machines]
        todo = [x for x in mine if x not in unbuilt]
        root_ko = spec.kvm_module.replace("_", "-")
        mdir = art / mname
        shutil.rmtree(mdir, ignore_errors=True)
        mdir.mkdir(parents=True)
        for name in mine:
            if name in unbuilt:
                (mdir / name).mkdir()
                (mdir / name / "not-run.txt").write_text(f"not built for Linux {base.release}: {unbuilt[name]}\n")
        if not todo:
            log(f"{mname}: no variant to run for {spec.vendor}")
            (mdir / "machine.txt").write_text(f"machine={mname}\nvendor={spec.vendor}\nrelease={base.release}\n")
            continue
        n = 0
        wedged = []
        while todo:
            n += 1
            vstage = stage / f"{mname}-{n}" / "variants"
            for name in todo:
                stage_modules(mods[name], vstage / name, root_ko)
            scale = max(1, (cpus + 1) // 2) * max(1, spec.time_scale)
            bt = timeouts.get("boot_timeout") or (300 + 120 * len(todo)) * scale
            st = timeouts.get("step_timeout") or 180 * scale
            # The checks need two vCPUs or more; a machine with fewer CPUs runs them in turn.
            values = {"bin": GUEST_BIN, "vcpus": str(smp), "out": "/out",
                      "variants": [{"variant": name, "root_module": spec.kvm_module, "root_ko": root_ko} for name in todo]}
            steps = stage / f"steps-{mname}-{n}.sh"
            steps.write_text(the_run.steps_file(values, st))
            bdir = mdir / f"boot-{n}"
            cmd = [sys.executable, str(ENTRY), "boot", "--kernel", str(base.image), "--modules", str(base.modules),
                   "--machine", mname, "--smp", str(cpus), "--timeout", str(bt), "--workdir", str(bdir),
                   "--script", str(RUNNER), "--file", f"{steps}:/run/steps.sh",
                   "--file", f"{stage / 'bin' / 'tsc-rendezvous'}:{GUEST_BIN}", "--file", f"{vstage}:/variants",
                   "--", "/run/steps.sh"]
            if "tcg_thread" in spec.options:
                cmd[cmd.index("--smp"):cmd.index("--smp")] = ["--tcg-thread", "single"]
            log(f"{mname}: boot {n}: {len(todo)} variant(s) ({' '.join(todo)}), limit {bt}s; console {bdir}/console.log")
            t0 = time.monotonic()
            bdir.mkdir(parents=True, exist_ok=True)
            with open(bdir / "console.log", "wb") as console:
                try:
                    rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                        timeout=bt + 60).returncode
                except subprocess.TimeoutExpired:
                    rc = 124
            secs = time.monotonic() - t0
            boots.append((mname, n, rc, secs, list(todo)))
            log(f"{mname}: boot {n} exited {rc} after {secs:.0f}s")
            out = bdir / "out"
            res = variant_judge.read_kv(out / "results.txt") or {}
            done = []
            for item in values["variants"]:
                name = item["variant"]
                if (out / name).is_dir():
                    shutil.copytree(out / name, mdir / name, dirs_exist_ok=True)
                # Done: every step of its group recorded an exit code.
                if all(f"{s}_rc" in res for s in the_run.step_names({**values, "variants": [item]})):
                    done.append(name)
            (mdir / f"results-{n}.txt").write_text((out / "results.txt").read_text() if (out / "results.txt").exists() else "")
            rest = [x for x in todo if x not in done]
            if not rest:
                break
            # The boot ended before every variant ran: the one it was in wedged the
            # guest (or the boot itself failed, when none had begun).
            culprit = last_begun(bdir / "console.log")
            if culprit not in rest or n >= 1 + len(todo):
                for name in rest:
                    (mdir / name).mkdir(exist_ok=True)
                    (mdir / name / "not-run.txt").write_text(f"boot {n} exited {rc} before this variant ran (see {bdir}/console.log)\n")
                break
            wedged.append(culprit)
            (mdir / culprit).mkdir(exist_ok=True)
            (mdir / culprit / "wedged.txt").write_text(f"boot {n} (exit {rc}) ended while this variant's modules were in use\n")
            todo = [x for x in rest if x != culprit]
        (mdir / "machine.txt").write_text(f"machine={mname}\nvendor={spec.vendor}\ncpus={cpus}\nvcpus={smp}\nrelease={base.release}\n"
                                          f"wedged={' '.join(wedged)}\n")
    print()
    rc = variant_judge.main([str(art), *[m for m in names if (art / m / "machine.txt").exists()], "--dir", str(vdir),
                             *sum((["--variant", v] for v in variants.names()), [])])
    shutil.rmtree(stage, ignore_errors=True)
    print(f"\ntimings: variants' modules {build_variants_s:.0f}s; static build {build_s:.0f}s; boots: "
          + "; ".join(f"{m} #{n} exit {r} {s:.0f}s ({len(t)} variants)" for m, n, r, s, t in boots)
          + f"; total {time.monotonic() - t_all:.0f}s")
    return rc
