"""The initramfs: busybox and its applets, the modules in load order, the
program or script, the --file copies, and an /init written from the machine
(its module, its vendor, its power-off delay)."""

import gzip
import stat
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401
from realkvm import cpio, initramfs, machines


class FakeMachine:
    def __init__(self, name):
        self.spec = machines.spec(name)
        self.power_off_delay_s = 3.0


class Build(unittest.TestCase):
    def setUp(self):
        self.d = Path(tempfile.mkdtemp(prefix="realkvm-initrd."))
        self.busybox = self.d / "busybox"
        self.busybox.write_text("#!/bin/sh\nprintf 'sh\\nls\\ninsmod\\nbusybox\\n'\n")
        self.busybox.chmod(0o755)

    def build(self, machine, **kw):
        path = self.d / "initrd.gz"
        notes = []
        init = initramfs.build(path, str(self.busybox), machine, [("irqbypass", b"A"), ("kvm", b"B"), ("kvm-intel", b"C")],
                               log=notes.append, **kw)
        entries = {n: (m, b) for n, m, b in cpio.read(gzip.decompress(path.read_bytes()))}
        return init, entries, notes

    def test_a_script_with_files_on_a_vmx_machine(self):
        script = self.d / "s.sh"
        script.write_text("echo hi\n")
        tool = self.d / "tool"
        tool.write_bytes(b"tool")
        tool.chmod(0o750)
        tree = self.d / "tree"
        (tree / "sub").mkdir(parents=True)
        (tree / "sub/x.txt").write_text("x")
        init, e, notes = self.build(FakeMachine("bochs-tigerlake"), script=str(script),
                                    files=[(str(tool), "/bin/ls"), (str(tree), "/data")], envs=["A=b c"], args=["it's"])
        self.assertEqual(e["lib/modules/kvm-intel.ko"][1], b"C")
        self.assertEqual(e["bin/ls"][1], b"tool")
        self.assertEqual(stat.S_IMODE(e["bin/ls"][0]), 0o750)
        self.assertIn("replaces busybox's applet", notes[0])
        self.assertEqual(e["data/sub/x.txt"][1], b"x")
        self.assertTrue(stat.S_ISLNK(e["bin/sh"][0]))
        self.assertEqual(e["init"][1].decode(), init)
        lines = init.splitlines()
        self.assertEqual([ln.split()[1] for ln in lines if ln.startswith("insmod")],
                         ["/lib/modules/irqbypass.ko", "/lib/modules/kvm.ko", "/lib/modules/kvm-intel.ko"])
        self.assertIn("kvm_intel neither loaded nor built in, or no VMX in the emulated CPU?", init)
        self.assertIn("    sleep 3\n", init)
        self.assertIn("export 'A=b c'", lines)
        self.assertIn("set -- 'it'\\''s'", lines)
        self.assertIn('sh /script.sh "$@" </dev/null', lines)
        self.assertIn('echo "@@TSC-QEMU-FILES-DONE@@"', lines)
        names = [n for n, _m, _b in cpio.read(gzip.decompress((self.d / "initrd.gz").read_bytes()))]
        self.assertEqual(names, sorted(names, key=str.encode), "parents before children, in byte order")

    def test_a_program_on_the_svm_machine(self):
        prog = self.d / "prog"
        prog.write_bytes(b"\x7fELF")
        init, e, _ = self.build(machines.load("qemu-svm"), prog=str(prog), dmesg=True)
        self.assertEqual(stat.S_IMODE(e["prog"][0]), 0o755)
        self.assertIn("kvm_amd neither loaded", init)
        self.assertIn("    sleep 0.2\n", init)
        self.assertIn('/prog "$@" </dev/null', init)
        self.assertNotIn("TSC-QEMU-FILES-DONE", init)
        self.assertIn('echo "@@TSC-QEMU-DMESG@@"\ndmesg\n', init)


if __name__ == "__main__":
    unittest.main()
