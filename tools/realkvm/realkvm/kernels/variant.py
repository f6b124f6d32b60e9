"""Kernel variants' KVM modules, rebuilt from one base kernel.

The base is a `realkvm build-kernel` output directory (OUT/bzImage,
OUT/modules, OUT/build with its .config, OUT/build-info.txt naming the source
tree). A variant changes only KVM's modules, so its bzImage is the base's and
only kvm.ko, kvm-amd.ko and kvm-intel.ko are rebuilt: its patches (base first)
are applied to the source tree, `make modules` rebuilds what they touch, the
three modules are copied out, and the patches are taken back out. The source
tree is the base's own, so at most one variant builds at a time (a lock), and
a build that was cut off is undone before the next (the patches applied are
recorded in the tree). Each variant's modules are cached by a digest of its
patches and the base's build, so an unchanged variant is built once.
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import Fail

# What a variant's module directory holds: KVM's modules, as the build names them.
KVM_KO = ("kvm.ko", "kvm-amd.ko", "kvm-intel.ko")
APPLIED = ".realkvm-variant-applied"


class Base:
    """A build-kernel output directory, checked to be complete."""

    def __init__(self, out):
        self.out = Path(out).resolve()
        self.image = self.out / "bzImage"
        self.modules = self.out / "modules"
        self.build = self.out / "build"
        info = {}
        try:
            for line in (self.out / "build-info.txt").read_text().splitlines():
                k, _, v = line.partition("=")
                info[k] = v
        except OSError:
            raise Fail(2, f"{self.out} is no finished build-kernel output (no build-info.txt)") from None
        self.info = info
        self.release = info.get("kernel_release", "")
        if info.get("kvm") != "m":
            raise Fail(2, f"{self.out}: KVM is built in (kvm={info.get('kvm')}); variants need it as modules (build-kernel --kvm m)")
        src = info.get("source_dir") or (os.path.realpath(self.build / "source") if (self.build / "source").exists() else "")
        self.source = Path(src) if src else None
        for p, what in ((self.image, "bzImage"), (self.build / ".config", "build/.config"), (self.modules, "modules")):
            if not p.exists():
                raise Fail(2, f"{self.out}: no {what}: an unfinished build-kernel output")
        if self.source is None or not (self.source / "Makefile").is_file():
            raise Fail(2, f"{self.out}: its source tree ({src or 'not named'}) is gone; build the base again")

    def digest(self):
        h = hashlib.sha256()
        h.update((self.build / ".config").read_bytes())
        h.update(self.release.encode())
        h.update(str(self.image.stat().st_mtime_ns).encode())
        return h.hexdigest()[:16]

    def stock_modules(self):
        """The base's own kvm*.ko (the stock variant), found in OUT/modules."""
        found = {}
        for dirpath, _d, files in os.walk(self.modules):
            for f in files:
                if f in KVM_KO:
                    found[f] = Path(dirpath) / f
        return found


def _patch(source, diff, reverse=False, dry=False):
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as t:
        t.write(diff)
    try:
        cmd = ["patch", "-p1", "--batch", "--forward" if not reverse else "--reverse", "-d", str(source), "-i", t.name]
        if dry:
            cmd.append("--dry-run")
        r = subprocess.run(cmd, capture_output=True, text=True)
        return r.returncode, (r.stdout + r.stderr).strip()
    finally:
        os.unlink(t.name)


def _undo_leftover(source, log):
    """Take out the patches a build that was cut off left in the tree."""
    rec = source / APPLIED
    if not rec.exists():
        return
    names = [n for n in rec.read_text().split("\n\0\n") if n.strip()]
    for diff in reversed(names):
        rc, out = _patch(source, diff, reverse=True)
        if rc:
            raise Fail(1, f"{source} holds a variant's patch that a cut-off build left and that does not come out: {out[-400:]}")
    rec.unlink()
    log(f"took out {len(names)} patch(es) a cut-off variant build had left in {source}")


def build(base, variants, name, cache, jobs, log):
    """The directory holding `name`'s kvm.ko, kvm-amd.ko and kvm-intel.ko
    (built, or from the cache). Raises Fail naming the variant and what failed."""
    dest = Path(cache) / f"{name}-{base.digest()}-{variants.key(name)}"
    if (dest / "done").exists():
        return dest
    stack = variants.stack(name)
    if not stack:  # stock: the base's own modules
        found = base.stock_modules()
        missing = [k for k in KVM_KO if k not in found]
        if missing:
            raise Fail(1, f"the base {base.out} has no {' '.join(missing)} in its modules")
        dest.mkdir(parents=True, exist_ok=True)
        for k in KVM_KO:
            shutil.copyfile(found[k], dest / k)
        (dest / "done").write_text(f"variant={name}\nstock=1\n")
        return dest
    lock_path = base.out / ".variant-build.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _undo_leftover(base.source, log)
        applied = []
        try:
            for i, v in enumerate(stack):
                # Each patch is tried (--dry-run) on the tree as the ones before it left it.
                rc, out = _patch(base.source, v.diff, dry=True)
                if rc:
                    on = f"on top of {stack[i - 1].name}" if i else "to"
                    raise Fail(1, f"variant {name}: {v.path.name} does not apply {on} {base.source}: {out[-600:]}")
                (base.source / APPLIED).write_text("\n\0\n".join([d.diff for d in stack[: i + 1]]))
                rc, out = _patch(base.source, v.diff)
                if rc:
                    raise Fail(1, f"variant {name}: {v.path.name} failed to apply: {out[-600:]}")
                applied.append(v)
            t0 = time.monotonic()
            logf = dest.with_suffix(".build.log")
            logf.parent.mkdir(parents=True, exist_ok=True)
            with open(logf, "w") as f:
                r = subprocess.run(["make", "-C", str(base.source), f"O={base.build}", "ARCH=x86_64", f"-j{jobs}", "modules"],
                                   stdout=f, stderr=subprocess.STDOUT)
            if r.returncode:
                tail = "".join(logf.read_text(errors="replace").splitlines(True)[-25:])
                raise Fail(1, f"variant {name}: the KVM modules did not build (log {logf}):\n{tail}")
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for k in KVM_KO:
                src = base.build / "arch/x86/kvm" / k
                if not src.is_file():
                    raise Fail(1, f"variant {name}: the build made no {src}")
                shutil.copyfile(src, tmp / k)
            (tmp / "done").write_text(f"variant={name}\npatches={' '.join(v.name for v in stack)}\n"
                                      f"build_seconds={time.monotonic() - t0:.1f}\n")
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
            log(f"built {name}'s KVM modules in {time.monotonic() - t0:.0f}s ({' + '.join(v.name for v in stack)})")
        finally:
            for v in reversed(applied):
                rc, out = _patch(base.source, v.diff, reverse=True)
                if rc:
                    raise Fail(1, f"variant {name}: {v.path.name} did not come out of {base.source} again: {out[-400:]}")
            (base.source / APPLIED).unlink(missing_ok=True)
    return dest
