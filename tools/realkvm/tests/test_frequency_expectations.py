"""The frequency family's expectations (checks 10-13, the runs at 0.5x): each
judged from the numbers by what the KVM says it can do, a FAIL accepted only
where its evidence is the finding it names."""

import unittest

import support  # noqa: F401
from realkvm import expectations, machines
from realkvm import frequency_expectations as freq


def kernel(machine="qemu-svm"):
    k = expectations.Kernel("/nonexistent", "t", machines.spec(machine))
    k.release = "6.12.118"
    return k


def probe(scope, ppm, khz, rate=None, verdict="PASS", refused=False):
    return {"scope": scope, "ratio_ppm": ppm, "khz": khz, "set": "Invalid argument" if refused else None,
            "reported_khz": None if refused else khz, "rate": rate, "verdict": verdict}


HOST = 2_000_000


def svm_probes(two_x_rate, two_x_verdict):
    return [probe("vcpu", 500_000, HOST // 2, refused=True),
            probe("vcpu", 2_000_000, 2 * HOST, two_x_rate, two_x_verdict),
            probe("vcpu", 1_000_125, HOST + 250, {"lo": 0.99, "hi": 1.01})]


def vmx_probes():
    return [probe("vcpu", 500_000, HOST // 2, {"lo": 0.4999, "hi": 0.5001}),
            probe("vcpu", 2_000_000, 2 * HOST, {"lo": 1.9994, "hi": 2.0006}),
            probe("vcpu", 1_000_125, HOST + 250, {"lo": 0.9997, "hi": 1.0003}),
            probe("vm", 500_000, HOST // 2, {"lo": 0.4999, "hi": 0.5001}),
            probe("vm", 2_000_000, 2 * HOST, {"lo": 1.9994, "hi": 2.0006})]


class TscFrequency(unittest.TestCase):
    def test_a_scaling_kvm_must_run_every_rate(self):
        k = kernel("bochs-tigerlake")
        freq.judge_tsc_frequency(k, "c10", "PASS", "", {"probes": vmx_probes()}, True)
        self.assertEqual(k.failures, [])
        p = vmx_probes()
        p[0] = probe("vcpu", 500_000, HOST // 2, refused=True)
        k = kernel("bochs-tigerlake")
        freq.judge_tsc_frequency(k, "c10", "FAIL", "", {"probes": p}, True)
        self.assertTrue(any("refused" in f and "documents taking it" in f for f in k.failures), k.failures)

    def test_catch_up_not_served_is_a_finding_and_nothing_else_is(self):
        k = kernel()
        freq.judge_tsc_frequency(k, "c10", "FAIL", "", {"probes": svm_probes({"lo": 0.99, "hi": 1.01}, "FAIL")}, False)
        self.assertEqual(k.failures, [])
        self.assertTrue(any("catch-up not served" in n for n in k.notes), k.notes)
        # The same rate with a PASS is a judge that looked away.
        k = kernel()
        freq.judge_tsc_frequency(k, "c10", "PASS", "", {"probes": svm_probes({"lo": 0.99, "hi": 1.01}, "PASS")}, False)
        self.assertNotEqual(k.failures, [])
        # Served part of the way (master-clock updates now and then): a finding too.
        k = kernel()
        freq.judge_tsc_frequency(k, "c10", "FAIL", "", {"probes": svm_probes({"lo": 1.15, "hi": 1.19}, "FAIL")}, False)
        self.assertEqual(k.failures, [])
        # Slower than the host's rate is no catch-up at all.
        k = kernel()
        freq.judge_tsc_frequency(k, "c10", "FAIL", "", {"probes": svm_probes({"lo": 0.5, "hi": 0.6}, "FAIL")}, False)
        self.assertNotEqual(k.failures, [])
        # Catch-up served: PASS.
        k = kernel()
        freq.judge_tsc_frequency(k, "c10", "PASS", "", {"probes": svm_probes({"lo": 1.99, "hi": 2.01}, "PASS")}, False)
        self.assertEqual(k.failures, [])

    def test_a_lower_rate_taken_without_scaling_fails(self):
        p = svm_probes({"lo": 0.99, "hi": 1.01}, "FAIL")
        p[0] = probe("vcpu", 500_000, HOST // 2, {"lo": 0.99, "hi": 1.01})
        k = kernel()
        freq.judge_tsc_frequency(k, "c10", "FAIL", "", {"probes": p}, False)
        self.assertTrue(any("must refuse it" in f for f in k.failures), k.failures)


class KvmclockFrequency(unittest.TestCase):
    def clock(self, scope, page, want, verdict, same_version=True):
        return {"scope": scope, "ratio_ppm": 500_000, "page_khz": page, "want_khz": want,
                "kvmclock_rate": {"lo": 0.9987, "hi": 1.0013} if verdict == "PASS" else {"lo": 0.4994, "hi": 0.5006},
                "across": {"version_before": 2, "version_after": 2 if same_version else 4}, "verdict": verdict}

    def test_a_page_left_by_a_live_change_is_the_finding(self):
        k = kernel("bochs-tigerlake")
        probes = [self.clock("vcpu", 2_419_200.0, 1_209_600, "FAIL"), self.clock("vm", 1_209_600.0, 1_209_600, "PASS")]
        freq.judge_kvmclock_frequency(k, "c11", "FAIL", "", {"probes": probes}, True)
        self.assertEqual(k.failures, [])
        self.assertTrue(any("left the page" in n for n in k.notes), k.notes)

    def test_a_per_vm_page_at_the_wrong_rate_or_an_updated_page_that_fails_is_broken(self):
        k = kernel("bochs-tigerlake")
        probes = [self.clock("vm", 2_419_200.0, 1_209_600, "FAIL")]
        freq.judge_kvmclock_frequency(k, "c11", "FAIL", "", {"probes": probes}, True)
        self.assertNotEqual(k.failures, [])
        k = kernel("bochs-tigerlake")
        probes = [self.clock("vcpu", 2_419_200.0, 1_209_600, "FAIL", same_version=False)]
        freq.judge_kvmclock_frequency(k, "c11", "FAIL", "", {"probes": probes}, True)
        self.assertTrue(any("a FAIL needs a page left as it was" in f for f in k.failures), k.failures)


class MixedFrequency(unittest.TestCase):
    """Recorded pages of check 12 under Bochs 'tigerlake' (2,419,200 kHz host)."""
    AT_HOST = {"flags": 1, "mul": 3550733544, "shift": -1}
    AT_TWICE = {"flags": 1, "mul": 3550733544, "shift": -2}

    def vals(self, pages):
        return {"khz": [2_419_200, 4_838_400], "pages": pages}

    def test_the_page_rate_is_read_from_mul_and_shift(self):
        self.assertAlmostEqual(freq.page_khz(self.AT_HOST), 2_419_200, delta=0.01)
        self.assertAlmostEqual(freq.page_khz(self.AT_TWICE), 4_838_400, delta=0.01)
        self.assertIsNone(freq.page_khz({"mul": 0, "shift": 0}))

    def test_with_scaling_each_page_converts_at_its_vcpus_rate(self):
        k = kernel("bochs-tigerlake")
        k.judge_master_clock = lambda *a, **kw: None
        freq.judge_mixed_frequency(k, "c12", "PASS", "", self.vals([self.AT_HOST, self.AT_TWICE]), True)
        self.assertEqual(k.failures, [])
        # vCPU 1's page left at the host's rate: the rate was changed after
        # the vCPU ran (check 11's finding), not what check 12 measures.
        k = kernel("bochs-tigerlake")
        k.judge_master_clock = lambda *a, **kw: None
        freq.judge_mixed_frequency(k, "c12", "FAIL", "", self.vals([self.AT_HOST, self.AT_HOST]), True)
        self.assertTrue(any("every page must convert at its vCPU's rate" in f for f in k.failures), k.failures)
        # Without scaling the pages convert at the host's rate: no rule.
        k = kernel()
        k.judge_master_clock = lambda *a, **kw: None
        freq.judge_mixed_frequency(k, "c12", "PASS", "", self.vals([self.AT_HOST, self.AT_HOST]), False)
        self.assertEqual(k.failures, [])


class ScaledRendezvous(unittest.TestCase):
    def test_without_scaling_a_skip_naming_the_capability(self):
        k = kernel()
        freq.judge_scaled_rendezvous(k, "c13", "SKIP", "KVM cannot scale the TSC here (KVM_CAP_TSC_CONTROL = 0): ...", {}, False)
        self.assertEqual(k.failures, [])
        k = kernel("bochs-tigerlake")
        vals = {"honoured": 40, "wrote": 40, "control": {"unscaled_miss_cycles": -3_412_950, "scaled_miss_cycles": -1, "error_cycles": 1_167}}
        freq.judge_scaled_rendezvous(k, "c13", "PASS", "", vals, True)
        self.assertEqual(k.failures, [])
        vals["control"]["unscaled_miss_cycles"] = 100
        freq.judge_scaled_rendezvous(k, "c13", "PASS", "", vals, True)
        self.assertEqual(len(k.failures), 1)


class HalfRate(unittest.TestCase):
    def test_without_scaling_both_runs_are_refused_naming_the_capability(self):
        k = kernel()
        msg = "error: KVM_SET_TSC_KHZ(1298063 kHz) on vCPU 0 failed: this KVM cannot scale the TSC (KVM_CAP_TSC_CONTROL = 0)"
        self.assertEqual(freq.judge_check_half(k, None, "2", msg, False), "refused")
        self.assertEqual(freq.judge_restore_half(k, None, "2", msg, False), "refused")
        self.assertEqual(k.failures, [])
        freq.judge_check_half(k, None, "0", "", False)
        self.assertEqual(len(k.failures), 1)

    def test_a_scaled_restore_misses_by_half_the_host_time_taken_literally(self):
        doc = {"methods": [{"method": "documented", "completed": True, "skew_before_cycles": 10_450,
                            "skew_after_cycles": 10_450,
                            "clock": {"source": {"host_tsc": 4_360_746_024}, "destination": {"host_tsc": 4_632_966_430},
                                      "literal_miss_cycles": -136_110_203}}]}
        k = kernel("bochs-tigerlake")
        self.assertIn("literal miss -136110203", freq.judge_restore_half(k, doc, "0", "", True))
        self.assertEqual(k.failures, [])
        doc["methods"][0]["clock"]["literal_miss_cycles"] = 0
        freq.judge_restore_half(k, doc, "0", "", True)
        self.assertEqual(len(k.failures), 1)

    def test_the_machine_and_the_capability_must_agree(self):
        k = kernel("bochs-tigerlake")
        self.assertFalse(freq.scaling_of(k, {"kvm_capabilities": {"KVM_CAP_TSC_CONTROL": 0}}))
        self.assertIn("has TSC scaling", k.failures[0])


if __name__ == "__main__":
    unittest.main()
