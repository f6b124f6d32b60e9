"""A cpio "newc" archive writer (the format the kernel unpacks as initramfs).

Entries are added in order; every parent directory must be added before its
children (the kernel creates what it reads, in order). Owners are 0:0,
modification times 0, so the same inputs give the same bytes.
"""

import stat

MAGIC = b"070701"
TRAILER = "TRAILER!!!"


class Writer:
    def __init__(self, f):
        self.f = f
        self.ino = 0
        self.names = set()

    def _entry(self, name, mode, data=b"", nlink=1):
        name = name.lstrip("/") or "."
        if name in self.names and name != TRAILER:
            raise ValueError(f"cpio: {name} added twice")
        self.names.add(name)
        self.ino += 1
        encoded = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
        header = MAGIC + b"".join(b"%08X" % v for v in fields)
        self.f.write(header + encoded)
        self.f.write(b"\0" * (-(len(header) + len(encoded)) % 4))
        self.f.write(data)
        self.f.write(b"\0" * (-len(data) % 4))

    def directory(self, name, perm=0o755):
        self._entry(name, stat.S_IFDIR | perm, nlink=2)

    def file(self, name, data, perm=0o644):
        self._entry(name, stat.S_IFREG | perm, data)

    def symlink(self, name, target):
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def close(self):
        self._entry(TRAILER, 0, nlink=1)
        # The kernel reads whole blocks; pad like cpio(1) does, to 512 bytes.
        at = self.f.tell() if hasattr(self.f, "tell") else None
        if at is not None:
            self.f.write(b"\0" * (-at % 512))


def read(data):
    """[(name, mode, bytes)] of a newc archive, up to its trailer (for tests
    and inspection)."""
    out, at = [], 0
    while True:
        if data[at : at + 6] != MAGIC:
            raise ValueError(f"cpio: no newc header at {at}")
        v = [int(data[at + 6 + 8 * i : at + 14 + 8 * i], 16) for i in range(13)]
        namesize, filesize, mode = v[11], v[6], v[1]
        name_at = at + 110
        name = data[name_at : name_at + namesize - 1].decode()
        at = name_at + namesize
        at += -at % 4
        body = data[at : at + filesize]
        at += filesize
        at += -at % 4
        if name == TRAILER:
            return out
        out.append((name, mode, body))
