"""Kernel modules: find them, read their .modinfo, load order of a closure.

busybox insmod takes plain .ko files in the order given, and neither a
Debian kernel package nor a build tree's .ko files come with a modules.dep
the guest could use. So the harness takes the machine's root module
(`kvm_amd`, `kvm_intel`) and, dependencies first, every module its
`.modinfo` `depends=` names, recursively; a dependency without a module file
is taken to be built in. Module names use '_'; files may use '-' or '_'.
"""

import gzip
import lzma
import os
import shutil
import subprocess
from pathlib import Path

from .elf import section

SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")


def norm(name):
    return name.replace("-", "_")


def module_name(filename):
    """"kvm-amd.ko.xz" -> "kvm_amd"; None for a file that is no module."""
    for suf in SUFFIXES:
        if filename.endswith(suf):
            return norm(filename[: -len(suf)])
    return None


def module_files(directory):
    """{name: path} of every module file under `directory` (the first one in
    sorted path order when a name occurs twice), and the duplicates seen."""
    found, dups = {}, []
    paths = []
    for dirpath, _dirs, files in os.walk(directory):
        for f in files:
            if module_name(f) is not None:
                paths.append(os.path.join(dirpath, f))
    for p in sorted(paths):
        name = module_name(os.path.basename(p))
        if name in found:
            dups.append((name, found[name], p))
            continue
        found[name] = Path(p)
    return found, dups


def unpack(path):
    """The plain ELF bytes of a module file (.ko, .ko.xz, .ko.gz, .ko.zst)."""
    p = str(path)
    with open(p, "rb") as f:
        raw = f.read()
    if p.endswith(".ko"):
        return raw
    if p.endswith(".ko.xz"):
        return lzma.decompress(raw)
    if p.endswith(".ko.gz"):
        return gzip.decompress(raw)
    if p.endswith(".ko.zst"):
        # No zstd in Python's standard library before 3.14: the zstd tool.
        if shutil.which("zstd") is None:
            raise ModuleError(f"{p}: needs the zstd program to unpack (apt-get install zstd)")
        return subprocess.run(["zstd", "-qdc", "--", p], check=True, capture_output=True).stdout
    raise ModuleError(f"{p} is not a module file")


class ModuleError(Exception):
    pass


def modinfo(data):
    """{key: [values]} of a module's .modinfo section (NUL-separated
    key=value strings)."""
    sec = section(data, ".modinfo")
    if sec is None:
        raise ModuleError("no .modinfo section")
    info = {}
    for item in sec.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            info.setdefault(k.decode("ascii", "replace"), []).append(v.decode("utf-8", "replace"))
    return info


def closure(files, root, release="", log=None):
    """The load order (dependencies first) of `root` and what it needs.
    `files` is {name: path}; returns [(name, path, elf bytes)]. `release`,
    when given, must equal every module's vermagic release (insmod would
    refuse another). Raises ModuleError saying why it cannot."""
    order, state = [], {}

    def add(name, chain):
        if state.get(name) == "loaded":
            return
        if state.get(name) == "active":
            raise ModuleError(f"module dependency cycle: {' -> '.join(chain + [name])}")
        path = files.get(name)
        if path is None:
            if log:
                log(f"note: module {name} (needed by {chain[-1] if chain else '?'}) is not a module file here; assuming it is built in")
            state[name] = "loaded"
            return
        state[name] = "active"
        try:
            data = unpack(path)
            info = modinfo(data)
        except (OSError, ValueError, lzma.LZMAError, subprocess.CalledProcessError, ModuleError) as e:
            raise ModuleError(f"cannot read the .modinfo section of {path}: {e}") from None
        vermagic = (info.get("vermagic") or [""])[0].split(" ", 1)[0]
        if release and vermagic and vermagic != release:
            raise ModuleError(f"module {path} was built for kernel {vermagic}, but the kernel is {release} (insmod would refuse it)")
        deps = (info.get("depends") or [""])[0]
        for d in deps.split(","):
            if d:
                add(norm(d), chain + [name])
        order.append((name, path, data))
        state[name] = "loaded"

    add(norm(root), [])
    return order


def base_name(path):
    """"/x/kvm-amd.ko.xz" -> "kvm-amd" (the file's own spelling)."""
    b = os.path.basename(str(path))
    for suf in SUFFIXES:
        if b.endswith(suf):
            return b[: -len(suf)]
    return b
