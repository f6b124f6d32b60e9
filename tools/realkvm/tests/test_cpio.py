"""The cpio newc writer: read back by its own reader and extracted by GNU
cpio and busybox cpio (where present) to the same files, modes and links."""

import gzip
import io
import os
import shutil
import stat
import subprocess
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401
from realkvm import cpio

ENTRIES = [
    ("dir", "bin", 0o755, None),
    ("file", "bin/busybox", 0o755, b"\x7fELF" + bytes(range(256)) * 3),
    ("link", "bin/sh", None, "busybox"),
    ("dir", "lib", 0o755, None),
    ("dir", "lib/modules", 0o700, None),
    ("file", "lib/modules/kvm-intel.ko", 0o644, b"x" * 4097),
    ("file", "empty", 0o600, b""),
    ("file", "init", 0o755, b"#!/bin/sh\necho hi\n"),
]


def archive():
    buf = io.BytesIO()
    w = cpio.Writer(buf)
    for kind, name, mode, data in ENTRIES:
        if kind == "dir":
            w.directory(name, mode)
        elif kind == "file":
            w.file(name, data, mode)
        else:
            w.symlink(name, data)
    w.close()
    return buf.getvalue()


class Cpio(unittest.TestCase):
    def test_round_trip_with_its_reader(self):
        data = archive()
        self.assertEqual(len(data) % 512, 0)
        got = cpio.read(data)
        self.assertEqual([n for n, _m, _b in got], [e[1] for e in ENTRIES])
        for (name, mode, body), (kind, _n, perm, content) in zip(got, ENTRIES):
            if kind == "file":
                self.assertEqual((body, stat.S_IMODE(mode), stat.S_ISREG(mode)), (content, perm, True), name)
            elif kind == "link":
                self.assertEqual((body.decode(), stat.S_ISLNK(mode)), (content, True))

    def extract_with(self, cmd):
        d = Path(tempfile.mkdtemp(prefix="realkvm-cpio."))
        self.addCleanup(shutil.rmtree, d, True)
        r = subprocess.run(cmd, input=gzip.decompress(gzip.compress(archive())), cwd=d, capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for kind, name, perm, content in ENTRIES:
            p = d / name
            if kind == "file":
                self.assertEqual(p.read_bytes(), content, name)
                self.assertEqual(stat.S_IMODE(p.stat().st_mode), perm, name)
            elif kind == "link":
                self.assertEqual(os.readlink(p), content)
            else:
                self.assertTrue(p.is_dir())

    @unittest.skipUnless(shutil.which("cpio"), "no GNU cpio")
    def test_gnu_cpio_extracts_it(self):
        self.extract_with(["cpio", "-idm", "--quiet", "--no-absolute-filenames"])

    @unittest.skipUnless(shutil.which("busybox"), "no busybox")
    def test_busybox_cpio_extracts_it(self):
        self.extract_with(["busybox", "cpio", "-idm"])

    def test_a_name_twice_is_refused(self):
        w = cpio.Writer(io.BytesIO())
        w.directory("bin")
        with self.assertRaises(ValueError):
            w.directory("bin")


if __name__ == "__main__":
    unittest.main()
