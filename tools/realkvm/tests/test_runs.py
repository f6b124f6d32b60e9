"""Runs as data: the matrix's run renders into the steps file the generic
guest runner executes, and the runner (POSIX sh, run here with the host's sh)
records every step's exit code, time and limit, the probes and the records."""

import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401
from realkvm.runs import RUNNER, Run

VALUES = {
    "bin": "/t/release/tsc-rendezvous", "vcpus": "4", "out": "/out",
    "tests": [{"test": "kvm_run", "test_path": "/tests/kvm_run"}, {"test": "check", "test_path": "/tests/check"}],
}


class MatrixRun(unittest.TestCase):
    def test_the_matrix_run_has_the_steps_the_judge_reads(self):
        r = Run.load("kernel-matrix")
        self.assertEqual(r.step_names(VALUES), ["check", "run", "restore", "check_half", "restore_half", "skew", "test_kvm_run", "test_check"])
        text = r.steps_file(VALUES, 240)
        self.assertIn("limit 240\n", text)
        self.assertIn("record 'skew_args' '--vcpus 4 --rounds 3 --initial-skew 100000000'\n", text)
        self.assertIn("probe 'ktap_option' '--ktap' '/t/release/tsc-rendezvous' 'check' '--help'\n", text)
        self.assertIn("'--junit' '/out/check-junit.xml' '--ktap' '/out/check.ktap'\n", text)
        self.assertIn("step 'run' '/out/run.json' '/out/run.stderr' '/t/release/tsc-rendezvous' 'run' '--json' '--vcpus' '4' '--rounds' '20' '--kvmclock'\n", text)
        self.assertIn("step 'test_check' '/out/test-check.log' '/out/test-check.log' 'env' 'CI=1' '/tests/check' '--test-threads' '1'\n", text)
        self.assertTrue(text.endswith("record 'tests' 'kvm_run check'\n"))


    def test_the_bochs_run_keeps_to_the_steps_that_need_vmx(self):
        from realkvm import machines
        r = Run.load("bochs-matrix")
        self.assertEqual(r.step_names(VALUES), ["check", "check_half", "run", "restore", "restore_half"])
        text = r.steps_file(VALUES, 480)
        self.assertIn("'--vcpus' '2'", text, "two vCPUs whatever the CPUs emulated")
        self.assertIn("'--tsc-khz' '0.5x'", text)
        specs = machines.specs()
        self.assertEqual({n: s.run for n, s in specs.items()},
                         {"qemu-svm": "kernel-matrix", "bochs-tigerlake": "bochs-matrix",
                          "bochs-skylake-x": "bochs-matrix", "bochs-haswell": "bochs-matrix"})
        self.assertEqual(specs["bochs-tigerlake"].time_scale, 4)


class Runner(unittest.TestCase):
    def run_steps(self, run_toml, values, limit=5):
        d = Path(tempfile.mkdtemp(prefix="realkvm-run."))
        self.addCleanup(shutil.rmtree, d, True)
        (d / "run.toml").write_text(run_toml)
        out = d / "out"
        steps = d / "steps.sh"
        steps.write_text(Run.load(d / "run.toml").steps_file({**values, "out": str(out)}, limit))
        r = subprocess.run(["sh", str(RUNNER), str(steps)], env={**os.environ, "TSC_QEMU_OUT": str(out)},
                           capture_output=True, text=True, timeout=60)
        results = dict(ln.split("=", 1) for ln in (out / "results.txt").read_text().splitlines())
        return r, results, out

    def test_steps_run_in_order_with_their_outputs_and_exit_codes(self):
        toml = '''
name = "t"
require = "{sh}"
[vars]
words = ["a b", "{who}"]
[records]
said = "{words}"
[[probe]]
name = "has_x"
argv = ["{sh}", "-c", "echo here is x"]
contains = "x"
[[step]]
name = "hello"
argv = ["{sh}", "-c", "echo \\"$1\\" \\"$2\\"; echo err >&2", "-", "{words}"]
stdout = "hello.out"
stderr = "hello.err"
if_probe = "has_x"
probe_args = ["extra"]
[[step]]
foreach = "items"
name = "item_{n}"
argv = ["{sh}", "-c", "exit {n}"]
stdout = "item-{n}.log"
record = { items = "{n}" }
'''
        r, res, out = self.run_steps(toml, {"sh": shutil.which("sh"), "who": "me", "items": [{"n": "0"}, {"n": "3"}]})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)  # item_3 failed
        self.assertEqual((out / "hello.out").read_text(), "a b me\n")
        self.assertEqual((out / "hello.err").read_text(), "err\n")
        self.assertEqual((res["hello_rc"], res["item_0_rc"], res["item_3_rc"], res["item_3_timed_out"]), ("0", "0", "3", "no"))
        self.assertEqual((res["has_x"], res["said"], res["items"], res["step_timeout"], res["script_rc"]),
                         ("yes", "a b me", "0 3", "5", "1"))
        for key in ("kernel_release", "nproc", "uptime_start", "uptime_end", "total_seconds", "hello_seconds"):
            self.assertIn(key, res)

    def test_a_step_over_its_limit_and_a_missing_requirement(self):
        toml = '[[step]]\nname = "slow"\nargv = ["sleep", "30"]\nstdout = "slow.log"\n'
        r, res, _ = self.run_steps(toml, {}, limit=1)
        self.assertEqual((res["slow_timed_out"], r.returncode), ("yes", 1))
        self.assertNotEqual(res["slow_rc"], "0")
        r, res, _ = self.run_steps('require = "/nonexistent/bin"\n', {})
        self.assertEqual((r.returncode, res["error"]), (1, "no executable /nonexistent/bin"))

    @unittest.skipUnless(shutil.which("busybox"), "no busybox")
    def test_busybox_sh_parses_the_runner(self):
        self.assertEqual(subprocess.run(["busybox", "sh", "-n", str(RUNNER)]).returncode, 0)


if __name__ == "__main__":
    unittest.main()


class HostProfile(unittest.TestCase):
    def test_a_boots_host_time_is_split_into_the_boot_and_each_step(self):
        from realkvm.matrix import host_profile
        d = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, d, True)
        (d / "t").write_text("\n".join([
            "100.50 @@TSC-QEMU-KERNEL 6.12.118@@", "101.00 @@TSC-QEMU-BEGIN@@",
            "101.20 run-steps: check: /bin/tsc-rendezvous check --json", "113.70 run-steps: check: exit 1 after 0.54s",
            "113.80 run-steps: run: /bin/tsc-rendezvous run", "116.00 run-steps: run: exit 0 after 0.11s",
            "garbage line", "117.00 @@TSC-QEMU-EXIT 1@@"]) + "\n")
        self.assertEqual(host_profile(d / "t"), (101.0, [("check", 12.5), ("run", 2.2)]))
        self.assertEqual(host_profile(d / "missing"), (None, []))
