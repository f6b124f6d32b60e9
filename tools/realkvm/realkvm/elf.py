"""What the harness reads from ELF files and bzImages, without binutils.

- `static_x86_64_problem(path)`: why a program cannot run in the initramfs
  (no libc, no loader there), or None for a static x86-64 ELF.
- `section(data, name)`: one section's bytes (modules' `.modinfo`).
- `is_bzimage(path)`, `bzimage_release(path)`: the x86 boot protocol's
  header of a kernel image and the release it announces.
"""

import re
import struct

PT_INTERP = 3
EM_X86_64 = 62


def _read(path, n=None):
    with open(path, "rb") as f:
        return f.read() if n is None else f.read(n)


def static_x86_64_problem_of(data):
    """None if `data` is a 64-bit little-endian x86-64 ELF without a PT_INTERP
    program header (static or static-pie), else why not."""
    if data[:6] != b"\x7fELF\x02\x01":
        return "not a 64-bit little-endian ELF file"
    if len(data) < 64:
        return "truncated ELF header"
    if struct.unpack_from("<H", data, 18)[0] != EM_X86_64:
        return "not an x86-64 ELF (e_machine != EM_X86_64)"
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    if phnum == 0 or phentsize < 4:
        return "ELF has no program headers"
    for i in range(phnum):
        at = phoff + i * phentsize
        if at + 4 > len(data):
            return "truncated program headers"
        if struct.unpack_from("<I", data, at)[0] == PT_INTERP:
            return "dynamically linked (has a PT_INTERP program header)"
    return None


def static_x86_64_problem(path):
    # The program headers are near the start; 64 KiB covers any real layout.
    return static_x86_64_problem_of(_read(path, 1 << 16))


def is_elf(path):
    try:
        return _read(path, 4) == b"\x7fELF"
    except OSError:
        return False


def section(data, name):
    """The bytes of section `name` of the ELF64 little-endian image `data`,
    or None when it has no such section."""
    if data[:6] != b"\x7fELF\x02\x01" or len(data) < 64:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 40)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
    if shoff == 0 or shnum == 0 or shentsize < 64 or shoff + shnum * shentsize > len(data):
        raise ValueError("no section headers")

    def header(i):
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size
        return struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)

    strtab = header(shstrndx)
    names = data[strtab[4] : strtab[4] + strtab[5]]
    want = name.encode()
    for i in range(shnum):
        h = header(i)
        end = names.find(b"\0", h[0])
        if names[h[0] : end if end >= 0 else None] == want:
            if h[4] + h[5] > len(data):
                raise ValueError(f"section {name} runs past the end of the file")
            return data[h[4] : h[4] + h[5]]
    return None


def is_bzimage(path):
    """The x86 boot protocol's "HdrS" signature at 0x202: a kernel that
    QEMU's -kernel (and a boot loader) can boot."""
    try:
        with open(path, "rb") as f:
            f.seek(0x202)
            return f.read(4) == b"HdrS"
    except OSError:
        return False


def bzimage_release(path):
    """The release ("6.1.0-28-amd64") a bzImage announces: the setup header's
    kernel_version field (0x20e) points, relative to 0x200, at "RELEASE
    (builder) #1 SMP ...". "" when the header has no such string."""
    try:
        with open(path, "rb") as f:
            f.seek(0x20E)
            raw = f.read(2)
            if len(raw) < 2:
                return ""
            ptr = struct.unpack("<H", raw)[0]
            if ptr == 0:
                return ""
            f.seek(ptr + 0x200)
            s = f.read(256)
    except OSError:
        return ""
    s = s.split(b"\0", 1)[0].decode("ascii", "replace").split("\n", 1)[0].split(" ", 1)[0]
    return s if re.match(r"^[0-9]+\.[0-9]+", s) else ""
