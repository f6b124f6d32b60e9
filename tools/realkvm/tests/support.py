"""Shared by the tests: the import path, the repository's paths, helpers."""

import os
import struct
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PKG_ROOT = HERE.parent  # tools/realkvm
REPO = PKG_ROOT.parents[1]
QEMU_KVM = REPO / "tools" / "qemu-kvm"
ENTRY = PKG_ROOT / "realkvm"  # python3 ENTRY runs realkvm/__main__.py
if str(PKG_ROOT) not in sys.path:
    sys.path.insert(0, str(PKG_ROOT))


def run(cmd, **kw):
    """(exit code, stdout + stderr) of a command with no stdin."""
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    return r.returncode, r.stdout


def elf_with_sections(sections):
    """A minimal ELF64 little-endian x86-64 relocatable file holding the given
    {name: bytes} sections (what a .ko is, as far as .modinfo goes)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in sections) + b".shstrtab\0"
    body = b""
    offsets = []
    at = 64
    for data in sections.values():
        offsets.append((at + len(body), len(data)))
        body += data
    shstr_off = 64 + len(body)
    body += names
    shoff = 64 + len(body)
    shoff += -shoff % 8
    body += b"\0" * (shoff - 64 - len(body))
    shnum = len(sections) + 2
    hdr = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    hdr += struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, shnum, shnum - 1)
    shdrs = b"\0" * 64
    name_at = 1
    for (name, _), (off, size) in zip(sections.items(), offsets):
        shdrs += struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, off, size, 0, 0, 1, 0)
        name_at += len(name) + 1
    shdrs += struct.pack("<IIQQQQIIQQ", name_at, 3, 0, 0, shstr_off, len(names), 0, 0, 1, 0)
    return hdr + body + shdrs


def ko(depends="", vermagic="6.12.0-test SMP preempt mod_unload modversions ", name=""):
    info = b"".join(
        x.encode() + b"\0"
        for x in ([f"name={name}"] if name else []) + [f"depends={depends}", f"vermagic={vermagic}", "license=GPL"]
    )
    return elf_with_sections({".text": b"\x90" * 8, ".modinfo": info})


def bzimage(path, release=""):
    """A file the boot-protocol check takes for a bzImage ("HdrS" at 0x202),
    announcing `release` when given."""
    data = bytearray(1024)
    data[0x202:0x206] = b"HdrS"
    if release:
        text = f"{release} (test@host) #1 SMP".encode() + b"\0"
        data[0x20E:0x210] = struct.pack("<H", 0x100)
        data[0x300 : 0x300 + len(text)] = text
    Path(path).write_bytes(bytes(data))


def offline():
    return os.environ.get("REALKVM_TESTS_OFFLINE", "") not in ("", "0")
