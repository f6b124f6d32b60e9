"""Machines as data: machines.toml's entries, the loader (and its error while
an emulator's module is absent), the QEMU machine's command line."""

import tempfile
import unittest
from pathlib import Path

import support
from realkvm import machines
from realkvm.errors import Fail
from realkvm.machines.base import Boot, Machine


class Specs(unittest.TestCase):
    def test_the_machines(self):
        s = machines.specs()
        self.assertEqual(list(s), ["qemu-svm", "bochs-tigerlake", "bochs-skylake-x", "bochs-haswell"])
        self.assertEqual((s["qemu-svm"].emulator, s["qemu-svm"].vendor, s["qemu-svm"].kvm_module, s["qemu-svm"].cpu),
                         ("qemu", "svm", "kvm_amd", "max"))
        cpus = {n: s[n].cpu for n in s if n.startswith("bochs-")}
        self.assertEqual(cpus, {"bochs-tigerlake": "tigerlake", "bochs-skylake-x": "corei7_skylake_x",
                                "bochs-haswell": "corei7_haswell_4770"})
        for n in cpus:
            self.assertEqual((s[n].emulator, s[n].vendor, s[n].kvm_module, s[n].max_cpus), ("bochs", "vmx", "kvm_intel", 1))

    def test_an_unknown_field_is_refused(self):
        p = Path(tempfile.mkdtemp()) / "m.toml"
        p.write_text('[x]\nemulator = "qemu"\nvendor = "svm"\nkvm_module = "kvm_amd"\ncpu = "max"\ncolour = "red"\n')
        with self.assertRaises(ValueError):
            machines.specs(p)


class Loader(unittest.TestCase):
    def test_qemu_svm_loads_by_its_emulator_field(self):
        m = machines.load("qemu-svm")
        self.assertIsInstance(m, Machine)
        self.assertEqual(type(m).__module__, "realkvm.machines.qemu")
        self.assertEqual(m.accepts(4), (True, ""))
        self.assertFalse(m.accepts(65)[0])

    @unittest.skipIf((support.PKG_ROOT / "realkvm/machines/bochs.py").exists(), "bochs.py is here")
    def test_a_machine_whose_module_is_absent_says_so(self):
        with self.assertRaises(Fail) as e:
            machines.load("bochs-skylake-x")
        self.assertIn("machine bochs-skylake-x needs realkvm/machines/bochs.py", e.exception.message)

    def test_options_override_only_what_the_machine_has(self):
        self.assertEqual(machines.load("qemu-svm", options={"tcg_thread": "single"}).tcg_thread, "single")
        with self.assertRaises(Fail) as e:
            machines.load("qemu-svm", options={"ips": "1000"})
        self.assertIn("has no option ips", e.exception.message)


class Qemu(unittest.TestCase):
    def test_the_console_is_followed_from_the_file_the_emulator_writes(self):
        import subprocess

        from realkvm.machines.qemu import follow

        log = Path(tempfile.mkdtemp()) / "serial.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(["sh", "-c", "echo one; sleep 0.5; printf 'two\\nthree'"], stdout=out)
            seen = []
            follow(log, proc, seen.append, poll_s=0.05)
        self.assertEqual(seen, ["one\n", "two\n", "three"])
        self.assertEqual(log.read_bytes(), b"one\ntwo\nthree")

    def test_the_command_line(self):
        m = machines.load("qemu-svm", cpu="EPYC", options={"tcg_thread": "single"})
        d = Path("/w")
        cmd = m.command(Boot(Path("/k/vmlinuz"), d / "initrd.gz", "console=ttyS0 quiet", 4, 1024, 60, d, d / "serial.log"))
        self.assertEqual(cmd[:5], ["qemu-system-x86_64", "-accel", "tcg,thread=single", "-cpu", "EPYC"])
        for a in (["-smp", "4"], ["-serial", "stdio"], ["-kernel", "/k/vmlinuz"], ["-append", "console=ttyS0 quiet"]):
            self.assertIn(a, [cmd[i : i + 2] for i in range(len(cmd))])
        self.assertIn("-no-reboot", cmd)
        self.assertEqual(m.cmdline(), "console=ttyS0 tsc=reliable")


if __name__ == "__main__":
    unittest.main()
