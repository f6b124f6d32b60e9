"""The commands' argument handling, without booting anything: every case
asserts an exit code and a phrase of the error message, so a command that
stopped rejecting bad input (or started rejecting good input) fails here.
These are the cases of the former tools/qemu-kvm/selftest.sh, run through the
thin bash entry points (so those are tested too), plus the machines'.

The unknown-suite and unknown-flavour cases ask Debian's archive (the private
apt lists of `realkvm boot`, a few MB): they run as root unless
REALKVM_TESTS_OFFLINE is set.
"""

import os
import tempfile
import unittest
from pathlib import Path

import support

RQ = ["bash", str(support.QEMU_KVM / "run-in-qemu.sh")]
KM = ["bash", str(support.QEMU_KVM / "kernel-matrix.sh")]
BK = ["bash", str(support.QEMU_KVM / "build-kernel.sh")]
SOAK = ["bash", str(support.QEMU_KVM / "mttcg-soak.sh")]
REALKVM = ["python3", str(support.ENTRY)]


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="realkvm-cli."))
        self.addCleanup(lambda: __import__("shutil").rmtree(self.tmp, ignore_errors=True))
        self.prog = self.tmp / "prog"
        self.prog.write_bytes(b"\x7fELF")  # never run: every case fails before the program matters
        self.fake = self.tmp / "bzImage"
        support.bzimage(self.fake)

    def expect(self, code, phrase, cmd):
        rc, out = support.run([str(c) for c in cmd])
        self.assertEqual(rc, code, f"{cmd}: expected exit {code}, got {rc}:\n{out[-2000:]}")
        self.assertIn(phrase, out, f"{cmd}: no '{phrase}' in:\n{out[-2000:]}")
        return out


class RunInQemu(Case):
    def test_run_in_qemu_malformed_suite(self):
        self.expect(2, "is not a Debian suite name", RQ + ["--suite", "Sid!", self.prog])

    def test_run_in_qemu_malformed_flavour(self):
        self.expect(2, "is not a kernel flavour name", RQ + ["--suite", "sid", "--flavour", "AMD 64", self.prog])

    def test_run_in_qemu_flavor_is_flavour(self):
        self.expect(2, "is not a kernel flavour name", RQ + ["--flavor", "_", self.prog])

    def test_run_in_qemu_suite_with_kernel(self):
        self.expect(2, "exclude each other", RQ + ["--suite", "sid", "--kernel", self.fake, self.prog])

    def test_run_in_qemu_flavour_with_kernel(self):
        self.expect(2, "does nothing with --kernel", RQ + ["--flavour", "rt-amd64", "--kernel", self.fake, self.prog])

    def test_run_in_qemu_modules_without_kernel(self):
        self.expect(2, "--modules needs --kernel", RQ + ["--modules", self.tmp, self.prog])

    def test_run_in_qemu_kernel_not_a_bzimage(self):
        self.expect(2, "is not a bzImage", RQ + ["--kernel", self.prog, self.prog])

    def test_run_in_qemu_missing_modules_dir(self):
        self.expect(2, "does not exist", RQ + ["--kernel", self.fake, "--modules", self.tmp / "nonexistent", self.prog])

    def test_run_in_qemu_modules_without_kvm_amd(self):
        self.expect(2, "no kernel modules", RQ + ["--kernel", self.fake, "--modules", self.tmp, self.prog])

    def test_run_in_qemu_modules_without_the_root_module_names_it(self):
        (self.tmp / "kvm.ko").write_bytes(support.ko(""))
        self.expect(2, "no kvm-amd.ko under", RQ + ["--kernel", self.fake, "--modules", self.tmp, self.prog])

    def test_run_in_qemu_bad_tcg_thread(self):
        self.expect(2, "--tcg-thread must be single or multi", RQ + ["--tcg-thread", "many", self.prog])

    def test_run_in_qemu_help_names_the_flavours(self):
        self.expect(0, "cloud-amd64", RQ + ["--help"])

    def test_run_in_qemu_a_value_missing(self):
        self.expect(2, "--timeout needs a value", RQ + ["--timeout"])

    def test_run_in_qemu_not_a_static_program(self):
        self.expect(3, "cannot run in the initramfs", RQ + ["--kernel", self.fake, self.prog])

    def test_run_in_qemu_bad_file_dest(self):
        self.expect(2, "is used by the initramfs itself", RQ + ["--file", f"{self.prog}:/init", self.prog])

    @unittest.skipUnless(os.geteuid() == 0 and not support.offline(), "needs root and Debian's archive")
    def test_run_in_qemu_unknown_suite_lists_the_suites(self):
        script = self.tmp / "script.sh"
        script.write_text("true\n")  # --script: gets past the program checks to apt
        self.expect(2, "Suites that exist: ", RQ + ["--suite", "nosuchsuite", "--script", script])

    @unittest.skipUnless(os.geteuid() == 0 and not support.offline(), "needs root and Debian's archive")
    def test_run_in_qemu_unknown_flavour_lists_the_flavours(self):
        script = self.tmp / "script.sh"
        script.write_text("true\n")
        self.expect(2, "Flavours there: amd64 cloud-amd64", RQ + ["--suite", "bookworm", "--flavour", "nosuch-amd64", "--script", script])


class Machines(Case):
    def test_boot_unknown_machine(self):
        self.expect(2, "no machine 'pdp11'", REALKVM + ["boot", "--machine", "pdp11", self.prog])

    @unittest.skipIf((support.PKG_ROOT / "realkvm/machines/bochs.py").exists(), "bochs.py is here")
    def test_boot_bochs_machine_needs_its_module(self):
        self.expect(2, "machine bochs-tigerlake needs realkvm/machines/bochs.py", REALKVM + ["boot", "--machine", "bochs-tigerlake", self.prog])

    def test_boot_more_cpus_than_the_machine_boots(self):
        self.expect(2, "at most 64 CPUs", REALKVM + ["boot", "--smp", "65", self.prog])

    def test_matrix_entry_naming_an_unknown_machine(self):
        self.expect(2, "no machine 'vax'", KM + ["--suites", "trixie@vax"])

    def test_matrix_entry_with_two_cpu_counts(self):
        self.expect(2, "bad --suites entry", KM + ["--suites", "trixie@4@2"])


class KernelMatrix(Case):
    def test_kernel_matrix_bad_suites_entry(self):
        self.expect(2, "bad --suites entry", KM + ["--suites", "sid@x!"])

    def test_kernel_matrix_missing_modules_dir(self):
        self.expect(2, "is not a directory", KM + ["--kernel", self.fake, "--modules", self.tmp / "nonexistent"])

    def test_kernel_matrix_missing_kernel_file(self):
        self.expect(2, "is not a file", KM + ["--kernel", self.tmp / "nonexistent"])

    def test_kernel_matrix_kernel_not_a_bzimage(self):
        self.expect(2, "is not a bzImage", KM + ["--kernel", self.prog])

    def test_kernel_matrix_modules_without_kernel(self):
        self.expect(2, "--modules needs --kernel", KM + ["--modules", self.tmp])

    def test_kernel_matrix_bad_smp(self):
        self.expect(2, "--smp/--vcpus must be", KM + ["--vcpus", "0"])

    def test_kernel_matrix_bad_tcg_thread(self):
        self.expect(2, "--tcg-thread must be", KM + ["--tcg-thread", "x"])

    def test_kernel_matrix_a_value_missing(self):
        self.expect(2, "needs a value", KM + ["--suites"])

    def test_kernel_matrix_the_same_kernel_twice(self):
        self.expect(2, "the same kernel twice", KM + ["--suites", "sid,sid"])

    def test_kernel_matrix_unknown_option(self):
        self.expect(2, "unknown argument", KM + ["--frobnicate"])


class BuildKernelAndSoak(Case):
    def test_build_kernel_bad_kvm(self):
        self.expect(1, "--kvm must be m or y", BK + ["--kvm", "x"])

    def test_build_kernel_not_a_source_tree(self):
        self.expect(1, "is not a Linux source tree", BK + ["--source", self.tmp])

    def test_build_kernel_config_asks_for_kvm_intel_and_kvm_amd(self):
        from realkvm.kernels import build

        args = build.config_args("m")
        for opt in ("KVM", "KVM_AMD", "KVM_INTEL"):
            self.assertIn(["--module", opt], [args[i : i + 2] for i in range(len(args))])
        for opt in ("CPU_SUP_AMD", "CPU_SUP_INTEL"):
            self.assertIn(["--enable", opt], [args[i : i + 2] for i in range(len(args))])
        self.assertNotIn("KVM_INTEL", [args[i + 1] for i in range(len(args) - 1) if args[i] == "--disable"])
        config = "\n".join(f"CONFIG_{o}=y" for o in build.WANT_Y) + "\nCONFIG_KVM=m\nCONFIG_KVM_AMD=m\n"
        self.assertEqual(build.lost_options(config, "m"), ["KVM_INTEL=m"], "a kvm_intel dropped by olddefconfig fails the build")

    def test_mttcg_soak_bad_tcg_thread(self):
        self.expect(2, "must be single or multi", SOAK + ["--tcg-thread", "x"])


class MatrixEntries(unittest.TestCase):
    """SUITE[:FLAVOUR][@MACHINE][@N] and the labels of the artefact directories."""

    def parse(self, entry, smp=2, smp_given=False, machine="qemu-svm"):
        from realkvm import machines, matrix

        return matrix.parse_entry(entry, "amd64", machine, smp, smp_given, machines.specs())

    def test_labels_of_the_default_machine_are_unchanged(self):
        self.assertEqual([self.parse(e).label for e in ("bullseye", "trixie@4", "sid:cloud-amd64")],
                         ["bullseye", "trixie-smp4", "sid-cloud-amd64"])

    def test_an_entry_names_its_machine_and_cpus_in_any_order(self):
        a, b = self.parse("trixie@bochs-tigerlake@1"), self.parse("trixie@1@bochs-tigerlake")
        self.assertEqual((a.machine, a.cpus, a.label), ("bochs-tigerlake", 1, "trixie-bochs-tigerlake-smp1"))
        self.assertEqual(a, b)

    def test_a_machine_of_one_cpu_gets_one_without_a_count(self):
        e = self.parse("trixie@bochs-haswell")
        self.assertEqual((e.cpus, e.kernel_args), (1, ["--suite", "trixie", "--flavour", "amd64"]))


if __name__ == "__main__":
    unittest.main()
