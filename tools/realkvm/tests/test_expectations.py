"""The expectations follow the version the guest reported and the machine the
boot ran on."""

import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401
from realkvm import expectations, machines


def kernel(rel, machine=None):
    k = expectations.Kernel("/nonexistent", "t", machine)
    k.release = rel
    return k


class Gates(unittest.TestCase):
    def test_version_gates(self):
        cases = [  # release, has KVM_VCPU_TSC_OFFSET, first host TSC write taken (6.7, bf328e22)
            ("5.10.0-46-amd64", False, False),
            ("5.15.0", False, False),
            ("5.16.0", True, False),
            ("6.1.0-57-amd64", True, False),
            ("6.7.0", True, True),
            ("6.12.118+deb13-amd64", True, True),
            ("7.3.4+deb13-amd64", True, True),
            ("12.0.0-rc1", True, True),  # newer than anything known: like the newest
        ]
        bad = [(r, a, f) for r, a, f in cases if (kernel(r).has_offset_attr(), kernel(r).first_host_write_taken()) != (a, f)]
        self.assertEqual(bad, [])
        self.assertIsNone(kernel("garbage").version())
        self.assertEqual(kernel("5.10.0").expected_offset_source(), "debugfs")
        self.assertEqual(kernel("6.1.0").expected_offset_source(), "kvm_vcpu_tsc_offset")


class ByMachine(unittest.TestCase):
    def test_the_kvm_flavour_expected_is_the_machines_vendor(self):
        env = {"kvm_flavor": "vmx", "offset_source": "kvm_vcpu_tsc_offset", "kernel_release": "6.12.0"}
        vmx = kernel("6.12.0", machines.spec("bochs-tigerlake"))
        vmx.judge_env("check", env)
        self.assertEqual(vmx.failures, [])
        svm = kernel("6.12.0")
        svm.judge_env("check", env)
        self.assertEqual(len(svm.failures), 1)
        self.assertIn("expected svm (kvm_amd inside qemu-svm)", svm.failures[0])

    def test_a_boot_without_results_names_the_machines_module(self):
        art = Path(tempfile.mkdtemp())
        (art / "k").mkdir()
        (art / "k/boot.txt").write_text("boot_rc=97\nmachine=bochs-haswell\n")
        k = expectations.Kernel(str(art), "k")
        k.judge()
        self.assertIn("kvm_intel did not load", k.failures[0])

    def test_judge_writes_the_summary_files_and_fails_on_a_failed_boot(self):
        art = Path(tempfile.mkdtemp())
        (art / "bookworm").mkdir()
        (art / "bookworm/boot.txt").write_text("boot_rc=124\n")
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(expectations.main(["judge", str(art), "bookworm"]), 1)
        self.assertIn("FAILED (1)", out.getvalue())
        summary = json.loads((art / "summary.json").read_text())
        self.assertEqual((summary[0]["kernel"], summary[0]["machine"]), ("bookworm", "qemu-svm"))
        self.assertIn("the boot timed out", (art / "failures.txt").read_text())


if __name__ == "__main__":
    unittest.main()
