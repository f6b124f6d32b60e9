"""A kernel someone built: a bzImage and, unless KVM is built in, its modules.

`--modules DIR` is a tree made by `make modules_install INSTALL_MOD_PATH=DIR`
(DIR/lib/modules/REL/), a lib/modules/REL directory, or any directory holding
the .ko files (.ko, .ko.xz, .ko.zst, .ko.gz). `--kernel` may also be the
output directory of tuxmake (its metadata.json, bzImage and modules.tar.xz):
then the modules come from its tarball unless `--modules` says otherwise.
"""

import json
import os
import tarfile
import tempfile
from pathlib import Path

from .. import modules as mods
from ..elf import bzimage_release, is_bzimage
from ..errors import EX_USAGE, Fail
from . import Resolved


def tuxmake_output(path):
    """(bzImage, modules.tar.xz or None) of a tuxmake output directory, or None
    when `path` is not one (no metadata.json naming a kernel that is there)."""
    p = Path(path)
    meta = p / "metadata.json"
    if not (p.is_dir() and meta.is_file()):
        return None
    try:
        data = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    artifacts = (data.get("results") or {}).get("artifacts") or {}
    kernel, modules = artifacts.get("kernel") or [], artifacts.get("modules") or []
    if not kernel or not (p / kernel[0]).is_file():
        return None
    tarball = p / modules[0] if modules else None
    return p / kernel[0], (tarball if tarball is not None and tarball.is_file() else None)


def unpack_modules(tarball):
    """The modules of a tuxmake modules.tar.xz, unpacked into a directory of
    their own (only regular files under lib/modules/ are taken)."""
    out = Path(tempfile.mkdtemp(prefix="realkvm-modules."))
    try:
        with tarfile.open(tarball, "r:xz") as t:
            members = [m for m in t.getmembers() if m.isfile() and "lib/modules/" in m.name
                       and not m.name.startswith("/") and ".." not in Path(m.name).parts]
            t.extractall(out, members=members, filter="data")
    except (OSError, tarfile.TarError) as e:
        raise Fail(EX_USAGE, f"--kernel: cannot unpack {tarball}: {e}") from None
    return out


def check_image(path, opt="--kernel"):
    """The absolute path of a bootable bzImage, or Fail(EX_USAGE) saying why not."""
    p = Path(path)
    if not p.exists():
        raise Fail(EX_USAGE, f"{opt} '{path}' does not exist")
    if not p.is_file():
        raise Fail(EX_USAGE, f"{opt} '{path}' is not a file (want e.g. arch/x86/boot/bzImage)")
    if not os.access(p, os.R_OK):
        raise Fail(EX_USAGE, f"{opt} '{path}' is not readable")
    if not is_bzimage(p):
        raise Fail(
            EX_USAGE,
            f"{opt} '{path}' is not a bzImage (no 'HdrS' boot header; vmlinux ELF files do not boot with -kernel; "
            "use arch/x86/boot/bzImage)",
        )
    return p.resolve()


def module_dir(path, release, root_module):
    """The directory of the modules under --modules PATH for a kernel of
    `release` ("" when unknown), checked to hold `root_module`."""
    p = Path(path)
    if not p.exists():
        raise Fail(EX_USAGE, f"--modules '{path}' does not exist")
    if not p.is_dir():
        raise Fail(EX_USAGE, f"--modules '{path}' is not a directory")
    p = p.resolve()
    lib = p / "lib/modules"
    if lib.is_dir():
        rels = sorted(d.name for d in lib.iterdir() if d.is_dir())
        if release and (lib / release).is_dir():
            p = lib / release
        elif len(rels) == 1:
            p = lib / rels[0]
        elif not rels:
            raise Fail(EX_USAGE, f"--modules: '{lib}' has no release directories")
        else:
            raise Fail(
                EX_USAGE,
                f"--modules: '{lib}' has several releases ({' '.join(rels)}) and none is the kernel's "
                f"({release or 'release unknown'}); pass the right lib/modules/REL directory",
            )
    files, _ = mods.module_files(p)
    if not files:
        raise Fail(EX_USAGE, f"--modules: no kernel modules (.ko, .ko.xz, .ko.zst, .ko.gz) under '{p}'")
    if mods.norm(root_module) not in files:
        dashed = root_module.replace("_", "-")
        raise Fail(
            EX_USAGE,
            f"--modules: no {dashed}.ko under '{p}' (if {root_module} is built into the kernel, leave out --modules)",
        )
    return p


class BuiltKernel:
    kind = "tree"

    def __init__(self, image, modules_dir, root_module):
        """Checks the paths (usage errors) at once, before anything else runs."""
        tux = tuxmake_output(image)
        if tux is not None:
            image, tarball = tux
            if not modules_dir and tarball is not None:
                modules_dir = str(unpack_modules(tarball))
        self.image = check_image(image)
        self.release = bzimage_release(self.image)
        self.root_module = root_module
        self.modules_dir = module_dir(modules_dir, self.release, root_module) if modules_dir else None

    def describe(self):
        return f"kernel {self.release or 'unknown'} ({self.image})"

    def resolve(self, log):
        loaded = []
        if self.modules_dir is not None:
            files, dups = mods.module_files(self.modules_dir)
            for name, first, other in dups:
                log(f"note: module {name} found twice; using {first}, not {other}")
            try:
                order = mods.closure(files, self.root_module, self.release, log)
            except mods.ModuleError as e:
                raise Fail(EX_USAGE, f"--modules '{self.modules_dir}': cannot assemble the KVM modules: {e}") from None
            loaded = [(mods.base_name(p), data) for _name, p, data in order]
            log(f"modules to load, dependencies first: {' '.join(b for b, _ in loaded)}")
        else:
            log(f"note: no --modules: assuming KVM ({self.root_module}) is built into {self.image}")
        return Resolved(self.image, self.release or "unknown", self.describe(), loaded)
