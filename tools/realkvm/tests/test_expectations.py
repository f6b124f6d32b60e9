"""The expectations follow the version the guest reported and the machine the
boot ran on."""

import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401
from realkvm import expectations, machines, rederive


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
        # Named again below the table: a log cut to its tail still says what failed.
        tail = out.getvalue().split("FAILED (1)", 1)[1]
        self.assertIn("the boot timed out", tail)
        summary = json.loads((art / "summary.json").read_text())
        self.assertEqual((summary[0]["kernel"], summary[0]["machine"]), ("bookworm", "qemu-svm"))
        self.assertIn("the boot timed out", (art / "failures.txt").read_text())


def write(vcpu, moved_ns, jump_ns):
    return {"vcpu": vcpu, "tsc_moved_ns": moved_ns, "elapsed_ns": 1e5, "kvmclock_advance_ns": 1e5 + jump_ns, "jump_ns": jump_ns}


class Declared(unittest.TestCase):
    def test_an_unpatched_kvm_must_fail_check_8_and_skip_check_7_before_5_16(self):
        self.assertEqual(kernel("6.12.0").declared_for(8), {"FAIL"})
        self.assertEqual(kernel("6.1.0").declared_for(1), {"PASS"})
        self.assertEqual(kernel("5.10.0").declared_for(7), {"SKIP"})
        self.assertNotIn("SKIP", kernel("6.1.0").declared_for(7))

    def test_the_numbers_decide_what_they_can(self):
        stale, fresh = write(0, 4e9, 4e9 - 300), write(0, 4e9, 120)
        self.assertEqual(rederive.allowed(8, {"tsc_write": [stale, fresh]}), {"FAIL"})
        self.assertIsNone(rederive.allowed(8, {"tsc_write": [fresh], "adjust_write": [fresh]}), "the tool's bound decides")
        self.assertEqual(rederive.allowed(8, {"tsc_write": [fresh], "adjust_write": [stale]}), {"FAIL"}, "the control counts")
        self.assertEqual(rederive.allowed(1, {"offsets": [5, 5], "tsc_khz": [1, 1]}), {"PASS"})
        self.assertEqual(rederive.allowed(1, {"offsets": [5, 6], "tsc_khz": [1, 1]}), {"FAIL"})
        self.assertIsNone(rederive.allowed(1, {"offsets": [None, None], "tsc_khz": [1, 1]}), "unknown offsets decide nothing")
        self.assertEqual(rederive.allowed(3, {"comparisons": 40, "mismatches": 1}), {"FAIL"})
        self.assertIsNone(rederive.allowed(3, {"comparisons": 0, "mismatches": 0}))
        inside = {"guest_lower_cycles": -10, "guest_upper_cycles": 10, "exact_offset_cycles": 3}
        outside = {**inside, "exact_offset_cycles": 11}
        self.assertEqual(rederive.allowed(5, {"pairs": [inside, outside]}), {"FAIL"})
        self.assertNotIn("FAIL", rederive.allowed(5, {"pairs": [inside]}))
        apart = {"after_rounds": {"tsc_stable": True, "pairs": [{"lower_ns": 5, "upper_ns": 9}]}}
        self.assertEqual(rederive.allowed(9, apart), {"FAIL"})
        self.assertIsNone(rederive.allowed(9, {"after_rounds": {"tsc_stable": False, "pairs": []}}))

    def test_check_8s_control_may_not_follow_the_tsc_on_an_unpatched_kvm(self):
        k = kernel("6.12.0")
        k.vcpus = 2
        k.judge_kvmclock("check 8", "FAIL", "r", {"tsc_write": [write(0, 4e9, 4e9), write(1, 4e9, 4e9)],
                                                 "adjust_write": [write(0, 4e9, 50), write(1, 4e9, 4e9)]})
        self.assertEqual(len(k.failures), 1)
        self.assertIn("control's kvmclock followed the TSC on vCPU(s) [1]", k.failures[0])
        k = kernel("6.12.0")
        k.vcpus = 2
        k.judge_kvmclock("check 8", "FAIL", "r", {"tsc_write": [write(0, 4e9, 4e9)], "adjust_write": []})
        self.assertIn("expected 2 vCPUs' IA32_TSC and TSC_ADJUST write records", k.failures[0])


if __name__ == "__main__":
    unittest.main()
