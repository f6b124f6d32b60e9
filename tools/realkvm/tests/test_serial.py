"""The serial protocol: the exit marker (also glued to a last line without a
newline), the program's output without kernel messages, files back with
their md5, a truncated or damaged file rejected, the console filter."""

import base64
import gzip
import hashlib
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401
from realkvm import serial


def block(path, data, cut=0, md5=None, end=True):
    b64 = base64.encodebytes(gzip.compress(data)).decode().splitlines()
    if cut:
        b64 = b64[:-cut]
    lines = [f"@@TSC-QEMU-FILE {md5 or hashlib.md5(data).hexdigest()} {path}@@", *b64]
    return lines + (["@@TSC-QEMU-FILE-END@@"] if end else [])


class Parse(unittest.TestCase):
    def test_exit_marker_output_and_markers(self):
        log = "\n".join([
            "SeaBIOS noise", "[    0.000000] Linux version 6.1.0", "@@TSC-QEMU-KERNEL 6.1.0-57-amd64@@",
            "@@TSC-QEMU-UPTIME start 3.25@@", "@@TSC-QEMU-BEGIN@@", "line one", "[   12.345678] kvm: a kernel message",
            "last line without newline@@TSC-QEMU-EXIT 3@@", "@@TSC-QEMU-UPTIME end 9.50@@", "",
        ]).encode()
        g = serial.parse(log)
        self.assertEqual((g.exit_code, g.kernel, g.uptime_start, g.uptime_end, g.began, g.setup_fail),
                         (3, "6.1.0-57-amd64", "3.25", "9.50", True, None))
        self.assertEqual(g.output, b"line one\nlast line without newline")

    def test_output_ending_in_a_newline(self):
        g = serial.parse(b"@@TSC-QEMU-BEGIN@@\r\na\nb\n@@TSC-QEMU-EXIT 0@@\n")
        self.assertEqual((g.output, g.exit_code), (b"a\nb\n", 0))

    def test_no_exit_marker_and_a_setup_failure(self):
        g = serial.parse(b"boot\n@@TSC-QEMU-SETUP-FAIL insmod kvm-intel.ko failed@@\n@@TSC-QEMU-EXIT 97@@\n")
        self.assertEqual((g.setup_fail, g.exit_code, g.began), ("insmod kvm-intel.ko failed", 97, False))
        g = serial.parse(b"@@TSC-QEMU-BEGIN@@\nKernel panic - not syncing\n")
        self.assertEqual((g.exit_code, g.began), (None, True))

    def test_files_back_complete_truncated_damaged_and_badly_named(self):
        good, big = b'{"ok": true}\n', bytes(range(256)) * 200
        lines = (["@@TSC-QEMU-EXIT 0@@"] + block("check.json", good) + block("sub/big.bin", big, cut=3)
                 + block("other.json", good, md5="0" * 32) + block("../escape", good) + ["@@TSC-QEMU-FILES-DONE@@"])
        g = serial.parse(("\n".join(lines) + "\n").encode())
        self.assertTrue(g.files_done)
        by = {f.path: f for f in g.files}
        self.assertEqual(by["check.json"].data, good)
        self.assertIsNone(by["sub/big.bin"].data, "a truncated file is not kept")
        self.assertIsNone(by["other.json"].data)
        self.assertIn("md5", by["other.json"].why)
        self.assertIn("bad name", by["../escape"].why)
        out = Path(tempfile.mkdtemp())
        warned = []
        self.assertEqual(serial.write_files(g.files, out, warned.append), 1)
        self.assertEqual((out / "check.json").read_bytes(), good)
        self.assertFalse((out / "sub/big.bin").exists())
        self.assertEqual(len(warned), 3)

    def test_a_file_cut_off_before_its_end_marker(self):
        data = bytes(range(256)) * 100
        g = serial.parse(("\n".join(block("x.json", data, cut=2, end=False)) + "\n").encode())
        self.assertIsNone(g.files[0].data)
        self.assertIn("end marker is missing", g.files[0].why)
        g = serial.parse(("\n".join(block("x.json", data, end=False)) + "\n").encode())
        self.assertEqual(g.files[0].data, data, "complete and its md5 right: kept, as before")
        self.assertFalse(g.files_done)

    def test_the_console_copy_hides_the_base64(self):
        f = serial.hide_file_bodies()
        shown = [f(x + "\n") for x in ["before"] + block("a.json", b"x" * 3000) + ["after"]]
        self.assertEqual("".join(shown).splitlines()[0], "before")
        self.assertIn("lines of base64 not shown", "".join(shown))
        self.assertEqual("".join(shown).splitlines()[-1], "after")


if __name__ == "__main__":
    unittest.main()
