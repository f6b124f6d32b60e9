"""The expectations of the kernel matrix: what each check must say on each
kernel and machine, judged from what the guests brought back.

Usage: realkvm judge ARTEFACT_DIR KERNEL [KERNEL...]

ARTEFACT_DIR/KERNEL/ holds one boot's files (see runs/kernel-matrix.toml and
realkvm/guest/run-steps.sh) plus boot.txt (boot_rc, boot_seconds, qemu_seconds,
expected_release, smp, machine, ...); KERNEL is the matrix's label of the boot (a
Debian suite such as bookworm or sid, a suite with a flavour, machine or CPU count
such as trixie-smp4, or a --kernel's label). Every expectation is asserted per kernel
by the version that its guest reported, never by its name: a kernel newer than any
named below is expected to behave like the newest. What depends on the machine
(the KVM flavour, svm or vmx, and its module) comes from machines.toml by the
machine boot.txt names (qemu-svm when it names none).
A mismatch prints one line naming the kernel, the check, the verdict seen and the
reason. At the end one summary table over all kernels; the exit code is 0
only when every expectation of every kernel held. Also writes
ARTEFACT_DIR/summary.json and ARTEFACT_DIR/failures.txt.

Standard library only.
"""

import json
import os
import re
import sys
import xml.etree.ElementTree as ET

from . import frequency_expectations as freq
from . import machines, rederive
from . import variants as vdata
from .errors import Fail

# Linux 5.10 (commit 0c899c25): guest IA32_TSC writes are no longer snapped to one
# offset by the one-second matching; the oldest kernel whose expectations are encoded.
OLDEST_KNOWN = (5, 10)
# KVM_VCPU_TSC_OFFSET exists from Linux 5.16; before it the exact offsets come from
# KVM's debugfs (the guest's /init mounts it).
TSC_OFFSET_ATTR_SINCE = (5, 16)
# Linux 6.7, commit bf328e22: a VM's first host (user-space) IA32_TSC write is no longer
# matched against the offsets KVM gave the vCPUs at creation. From it, restore's msr
# methods never end with a creation offset, and msr's vCPU 0 keeps what it wrote;
# before it, which happens depends on the VM's age at the write (not asserted).
FIRST_HOST_WRITE_TAKEN_SINCE = (6, 7)
# Every variant, as `run --variant all` runs them.
ALL_VARIANTS = ("xen-4.15", "xen-6ca022a1", "xen-head", "xen-rfc-v3", "xen-std", "linux-tsc-sync")
CHECK_IDS = [
    "same-start",
    "tsc-msrs",
    "adjust-equals-offset",
    "writes-honoured",
    "warp",
    "skew-threshold",
    "save-restore",
    "kvmclock-continuity",
    "master-clock",
] + freq.FREQUENCY_IDS
N_CHECKS = len(CHECK_IDS)
# The checks before the frequency family, judged here one by one.
N_BASE = 9
# Variants whose rounds write no common TSC value: their run-level writes_honoured
# is null unless a compensation (linux-tsc-sync's TSC_ADJUST write) was judged.
NO_COMMON_WRITE = ("xen-std", "linux-tsc-sync")
# The restore methods and what each must do on a kernel with KVM_VCPU_TSC_OFFSET.
RESTORE_METHODS = ("documented", "msr", "msr-twice")
# The reasons that may make check 5 UNDECIDED on a correct host: the forced hand-off
# test's bound was too wide to see a warp of the measured size, or the control's move
# was within it.
WARP_UNDECIDED_REASONS = ("it could not have seen a warp of that size", "not resolved")
# Checks whose FAIL is a finding about the kernel (kvmclock), judged from their evidence.
CLOCK_CHECKS = ("kvmclock-continuity", "master-clock")
# What check 7 says when its bound cannot tell the method's clock shift from none (on
# one host it cannot be tested; the rest of its evidence decides).
CHECK7_SHIFT_UNTESTABLE = "the clock shift is not testable on one host"
# What check 5's control may end with on real KVM (it needs the exact offsets' move).
WARP_CONTROL_OUTCOMES = ("seen", "unresolved")
SHORT = {"PASS": "PASS", "FAIL": "FAIL", "SKIP": "SKIP", "UNDECIDED": "UNDEC"}


_STOCK = {}


def stock_declared():
    """{check number: verdicts} an unpatched KVM must give, as variants/stock.patch
    declares them (the kernel-variants' base: every variant builds on it)."""
    if not _STOCK:
        _STOCK.update(vdata.load(only=[vdata.STOCK]).expected(vdata.STOCK))
    return dict(_STOCK)


def read_kv(path):
    kv = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if "=" in line:
                    k, v = line.split("=", 1)
                    kv[k] = v
    except FileNotFoundError:
        return None
    return kv


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_json(path):
    """(document, None) or (None, why not)."""
    text = read_text(path)
    if text is None:
        return None, f"{os.path.basename(path)} did not come back"
    if not text.strip():
        return None, f"{os.path.basename(path)} is empty"
    try:
        return json.loads(text), None
    except ValueError as e:
        return None, f"{os.path.basename(path)} is not JSON ({e}); starts {text[:120]!r}"


def clip(s, n=300):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


class Kernel:
    def __init__(self, root, label, machine=None):
        self.label = label
        # The machine the boot ran on (boot.txt's, read in judge()); the default
        # keeps artefacts of before machines existed judgeable.
        self.machine = machine or machines.spec(machines.DEFAULT)
        self.dir = os.path.join(root, label)
        self.release = "?"
        self.failures = []
        self.notes = []
        self.verdicts = {}
        self.honoured = None  # run: every variant honoured and exact
        self.tests = []  # (name, ok)
        self.seconds = None
        self.qemu_seconds = None
        self.extra = []  # checks beyond the known ones: "10 id VERDICT"
        self.vcpus = None  # check's --vcpus
        self.restore = None  # "documented kept, msr snapped, ..." or a failure
        self.skew = None  # "kept by xen-std, removed by 5" / "refused" or a failure
        self.half = None  # check and restore at 0.5x: "refused" or what they kept
        self.steps = None  # the steps the boot's run declared (boot.txt), None: every one

    def fail(self, check, verdict, reason):
        self.failures.append(
            f"FAIL [{self.label} {self.release}] {check}: {verdict}: {reason}"
        )

    def note(self, text):
        self.notes.append(f"note [{self.label} {self.release}] {text}")

    # ------------------------------------------------------------------ judge
    def judge(self):
        boot = read_kv(os.path.join(self.dir, "boot.txt")) or {}
        if boot.get("machine"):
            try:
                self.machine = machines.spec(boot["machine"])
            except Fail as e:
                self.fail("machine", boot["machine"], e.message)
                return
        self.seconds = boot.get("boot_seconds")
        self.qemu_seconds = boot.get("qemu_seconds")
        res = read_kv(os.path.join(self.dir, "results.txt"))
        if res is None:
            rc = boot.get("boot_rc", "?")
            why = {
                "124": "the boot timed out",
                "125": "the emulator ended without the exit marker (guest panic or emulator error)",
                "97": f"{self.machine.kvm_module} did not load or /dev/kvm is missing in the guest",
                "4": "host setup failed (packages or kernel download)",
                "2": "realkvm boot usage error",
                "3": "a program is missing or not static",
            }.get(rc, "no results came back")
            self.fail("boot", f"exit {rc}", f"{why}; no results.txt (console: {self.dir}/console.log)")
            return
        self.release = res.get("kernel_release", "?")
        if boot.get("steps") is not None:
            self.steps = boot["steps"].split()
        self.judge_boot(boot, res)
        self.judge_kernel(boot, res)
        self.judge_check(res)
        self.judge_ktap(res)
        self.judge_junit()
        self.judge_run(res)
        self.judge_restore(res)
        if self.declared("check_half"):
            self.judge_half(res)
        if self.declared("skew"):
            self.judge_skew(res)
        if self.declared("test_"):
            self.judge_tests(res)

    def declared(self, step):
        """Whether the boot's run has `step` (a prefix ending in _ : any of them);
        artefacts from before runs said so have every step of the kernel matrix."""
        if self.steps is None:
            return step in ("skew", "test_")
        return any(s == step or (step.endswith("_") and s.startswith(step)) for s in self.steps)

    def judge_half(self, res):
        """check and restore at half the host's TSC rate (frequency_expectations)."""
        check, _ = read_json(os.path.join(self.dir, "check.json"))
        scaling = freq.scaling_of(self, (check or {}).get("environment") or {})
        parts = []
        for step, fn, judge in (("check_half", "check-half", freq.judge_check_half),
                                ("restore_half", "restore-half", freq.judge_restore_half)):
            if not self.declared(step):
                continue
            doc, _ = read_json(os.path.join(self.dir, f"{fn}.json"))
            rc, extra = self.step_rc(res, step)
            stderr = clip(read_text(os.path.join(self.dir, f"{fn}.stderr")) or "")
            parts.append(f"{step.split('_')[0]} {judge(self, doc, rc, stderr, scaling)}")
        self.half = "; ".join(parts)

    def judge_boot(self, boot, res):
        rc = boot.get("boot_rc")
        if rc is None:
            self.fail("boot", "unknown", "boot.txt has no boot_rc")
        elif rc == "124":
            self.fail("boot", "timeout", f"the boot hit its timeout ({boot.get('boot_timeout', '?')} s) after the script had started")
        elif rc != res.get("script_rc"):
            self.fail("boot", f"exit {rc}", f"realkvm boot exited {rc}, the guest script {res.get('script_rc', 'did not finish')}")

    def judge_kernel(self, boot, res):
        want = boot.get("expected_release") or ""
        if want and want != "unknown" and want != self.release:
            self.fail("kernel", self.release, f"the host booted {want} ({boot.get('kernel_args', '?')}), the guest reported {self.release}")
        v = self.version()
        if v is None:
            self.fail("kernel", self.release, "no version (MAJOR.MINOR) in the release the guest reported: the expectations depend on it")
        elif v < OLDEST_KNOWN:
            self.fail("kernel", self.release, f"older than Linux {OLDEST_KNOWN[0]}.{OLDEST_KNOWN[1]}, the oldest kernel whose expectations are encoded "
                      "(before it KVM snapped guest TSC writes to one offset)")
        if res.get("debugfs_mounted") != "yes":
            self.fail("environment", "debugfs", "debugfs is not mounted at /sys/kernel/debug in the guest")

    def declared_for(self, number):
        """The verdicts check `number` must give on this kernel: stock.patch's, with
        the version gates of what older kernels lack (check 7 SKIPs before 5.16)."""
        if number == 7 and not self.has_offset_attr():
            return frozenset({"SKIP"})
        return stock_declared().get(number)

    def version(self):
        m = re.match(r"(\d+)\.(\d+)", self.release)
        return (int(m.group(1)), int(m.group(2))) if m else None

    def has_offset_attr(self):
        v = self.version()
        return v is not None and v >= TSC_OFFSET_ATTR_SINCE

    def first_host_write_taken(self):
        v = self.version()
        return v is not None and v >= FIRST_HOST_WRITE_TAKEN_SINCE

    def expected_offset_source(self):
        v = self.version()
        if v is None:
            return None
        return "kvm_vcpu_tsc_offset" if v >= TSC_OFFSET_ATTR_SINCE else "debugfs"

    def judge_env(self, what, env):
        flavor = env.get("kvm_flavor")
        m = self.machine
        if flavor != m.vendor:
            self.fail(f"{what} environment", f"kvm_flavor {flavor}", f"expected {m.vendor} ({m.kvm_module} inside {m.name})")
        want = self.expected_offset_source()
        got = env.get("offset_source")
        if want and got != want:
            self.fail(
                f"{what} environment",
                f"offset_source {got}",
                f"expected {want} on Linux {self.release} "
                f"(KVM_VCPU_TSC_OFFSET {'exists' if want == 'kvm_vcpu_tsc_offset' else 'does not exist before 5.16'}); "
                f"tsc_offset_attr={env.get('tsc_offset_attr')}",
            )
        rel = env.get("kernel_release")
        if rel is not None and rel != self.release:
            self.fail(f"{what} environment", f"kernel_release {rel}", f"uname -r in the guest said {self.release}")

    def step_rc(self, res, name):
        rc = res.get(f"{name}_rc")
        extra = ""
        if res.get(f"{name}_timed_out") == "yes":
            extra = f" (hit the step time limit of {res.get('step_timeout', '?')} s)"
        return rc, extra

    def judge_check(self, res):
        doc, why = read_json(os.path.join(self.dir, "check.json"))
        rc, extra = self.step_rc(res, "check")
        stderr = clip(read_text(os.path.join(self.dir, "check.stderr")) or "")
        if doc is None:
            self.fail("check", f"exit {rc}{extra}", f"{why}; stderr: {stderr or '(empty)'}")
            return
        self.judge_env("check", doc.get("environment") or {})
        self.vcpus = (doc.get("options") or {}).get("vcpus")
        checks = doc.get("checks") or []
        ids = [c.get("id") for c in checks]
        if ids != CHECK_IDS:
            self.fail("check", "checks", f"expected the checks {CHECK_IDS}, got {ids}")
        by_id = {c.get("id"): c for c in checks}
        self.extra = [f"{c.get('number')} {c.get('id')} {SHORT.get(c.get('verdict'), c.get('verdict'))}"
                      for c in checks if c.get("id") not in CHECK_IDS]
        for number, cid in enumerate(CHECK_IDS[:N_BASE], 1):
            c = by_id.get(cid)
            name = f"check {number} {cid}"
            if c is None:
                self.verdicts[number] = "-"
                self.fail(name, "missing", "not in check.json")
                continue
            verdict, reason = c.get("verdict"), c.get("reason", "")
            self.verdicts[number] = verdict
            if c.get("number") != number:
                self.fail(name, verdict, f"numbered {c.get('number')} in check.json")
            allowed = self.declared_for(number)
            if allowed is not None and verdict not in allowed:
                self.fail(name, verdict, f"an unpatched KVM must give {'|'.join(sorted(allowed))} "
                          f"(tools/realkvm/variants/stock.patch): {reason}")
            numbers = rederive.allowed(number, c.get("values"))
            if numbers is not None and verdict not in numbers:
                self.fail(name, verdict, f"its numbers allow only {'|'.join(sorted(numbers))} (realkvm/rederive.py): {reason}")
            if number <= 4:
                if cid == "writes-honoured" and verdict == "UNDECIDED" and "cannot tell" in reason:
                    # Its later read decides only when its brackets are tighter
                    # than the writes' move; a loaded emulator can widen them.
                    self.note(f"check 4 UNDECIDED: {clip(reason)}")
                elif verdict != "PASS":
                    self.fail(name, verdict, f"expected PASS: {reason}")
                elif cid == "adjust-equals-offset":
                    vals = c.get("values") or {}
                    if not vals.get("comparisons") or vals.get("mismatches"):
                        self.fail(name, verdict, f"a PASS needs exact comparisons and no mismatch; values {json.dumps(vals)}")
            elif cid == "warp":
                self.judge_warp_values(name, verdict, c.get("values") or {})
                if verdict == "PASS":
                    pass
                elif verdict == "UNDECIDED":
                    if not any(r in reason for r in WARP_UNDECIDED_REASONS):
                        self.fail(
                            name,
                            verdict,
                            "UNDECIDED is accepted only when the reason says why the test could not see a warp "
                            f"({' / '.join(repr(r) for r in WARP_UNDECIDED_REASONS)}): {reason}",
                        )
                else:
                    self.fail(name, verdict, f"expected PASS or UNDECIDED: {reason}")
            elif cid == "skew-threshold":
                if verdict != "SKIP":
                    self.fail(name, verdict, f"expected SKIP (no limit given): {reason}")
            elif cid == "save-restore":
                self.judge_save_restore(name, verdict, reason, c.get("values") or {},
                                        (doc.get("environment") or {}).get("clocksource"))
            elif cid == "kvmclock-continuity":
                self.judge_kvmclock(name, verdict, reason, c.get("values") or {})
            elif cid == "master-clock":
                self.judge_master_clock(name, verdict, reason, c.get("values") or {})
        findings = freq.judge_family(self, by_id, doc.get("environment") or {})
        # A FAIL of check 8 or 9 is a finding about the kernel, asserted above to
        # follow from its evidence, as are those of the frequency family the
        # family's judges accepted; any other FAIL is an expectation broken.
        found = CLOCK_CHECKS + tuple(findings)
        other_fails = [c.get("id") for c in checks
                       if c.get("verdict") == "FAIL" and c.get("id") not in found]
        clock_fails = [c.get("id") for c in checks
                       if c.get("verdict") == "FAIL" and c.get("id") in found]
        want_rc = "1" if clock_fails and not other_fails else "0"
        if rc != want_rc:
            self.fail("check exit code", f"exit {rc}{extra}",
                      f"expected {want_rc} (FAILs of {clock_fails or 'no'} clock checks); stderr: {stderr or '(empty)'}")
        if doc.get("ok") is not (want_rc == "0"):
            self.fail("check ok", f"ok {doc.get('ok')}", f"expected ok {want_rc == '0'}; counts "
                      f"{json.dumps(doc.get('counts'))}; incomplete: {doc.get('incomplete')}")
        for cid in clock_fails:
            self.note(f"{cid} FAIL, from its evidence: {clip(by_id[cid].get('reason', ''), 400)}")

    def judge_save_restore(self, name, verdict, reason, vals, clocksource):
        """Check 7 from 5.16 (KVM_VCPU_TSC_OFFSET): with a TSC clocksource PASS, every
        relative offset kept bit-exact, and the clock shift reported as not testable on
        one host when its bound cannot tell the method's shift from none; with another
        clocksource anything but FAIL. Before 5.16 SKIP naming what is missing."""
        if not self.has_offset_attr():
            if verdict != "SKIP" or "KVM_VCPU_TSC_OFFSET" not in reason or "KVM_CLOCK_REALTIME" not in reason:
                self.fail(name, verdict, "expected SKIP naming KVM_VCPU_TSC_OFFSET and KVM_CLOCK_REALTIME "
                          f"(Linux {self.release} lacks them): {reason}")
            return
        if clocksource != "tsc":
            if verdict == "FAIL":
                self.fail(name, verdict, f"expected no FAIL (clocksource {clocksource}): {reason}")
            else:
                self.note(f"check 7 {verdict} with clocksource {clocksource}: {clip(reason)}")
            return
        if verdict != "PASS":
            self.fail(name, verdict, f"expected PASS (clocksource tsc): {reason}")
            return
        moved = [v for v in vals.get("vcpus") or []
                 if v.get("relative_offset_after") != v.get("relative_offset_before")]
        if moved:
            self.fail(name, verdict, f"a relative offset changed across the restore: {json.dumps(moved)[:300]}")
        if vals.get("clock_shift_tested") is False and CHECK7_SHIFT_UNTESTABLE not in reason:
            self.fail(name, verdict, f"the clock shift was not tested, and the reason must say so: {reason}")

    def judge_kvmclock(self, name, verdict, reason, vals):
        """Check 8 on real KVM: one record per vCPU for the IA32_TSC write and for the
        TSC_ADJUST control, each advance and elapsed time consistent with the jump
        reported. The verdict is held to the declaration and to what the numbers allow
        (judge_check); here only the records' completeness and the control: a guest
        TSC_ADJUST write requests a clock update (d9130a2dfdd4, in every kernel of the
        matrix), so on an unpatched KVM the control's kvmclock must not follow its move."""
        writes = vals.get("tsc_write") or []
        control = vals.get("adjust_write") or []
        n = self.vcpus or 2
        if len(writes) != n or len(control) != n:
            self.fail(name, verdict, f"expected {n} vCPUs' IA32_TSC and TSC_ADJUST write records, got "
                      f"{len(writes)} and {len(control)}")
            return
        for w in writes + control:
            adv, el, jump = w.get("kvmclock_advance_ns"), w.get("elapsed_ns"), w.get("jump_ns")
            if None in (adv, el, jump) or abs(jump - (adv - el)) > 1.0 or not w.get("tsc_moved_ns"):
                self.fail(name, verdict, f"a record without a move of the TSC or with a jump that is not its advance "
                          f"minus the time that passed: {json.dumps(w)}")
                return
        followed = [w.get("vcpu") for w in control if rederive.followed(w)]
        if followed:
            self.fail(name, verdict, f"the TSC_ADJUST control's kvmclock followed the TSC on vCPU(s) {followed}: "
                      "that write requests a clock update on every kernel of the matrix")
        self.note(f"check 8: IA32_TSC writes' kvmclock followed the TSC on vCPU(s) "
                  f"{[w.get('vcpu') for w in writes if rederive.followed(w)]}, versions "
                  f"{[w.get('version') for w in writes]}; the TSC_ADJUST control ran on")

    def judge_master_clock(self, name, verdict, reason, vals, pairs_of=None):
        """Check 9 on real KVM: every ordered pair measured, and the verdict the flags and
        the pairs give: no KVM_CLOCK_TSC_STABLE: SKIP; stable and a pair's interval
        excluding 0: FAIL; PASS only with every interval holding 0."""
        after = vals.get("after_rounds") or {}
        pairs = after.get("pairs") or []
        n = pairs_of or self.vcpus or 2
        if len(pairs) != n * (n - 1):
            self.fail(name, verdict, f"expected {n * (n - 1)} ordered pairs of kvmclocks, got {len(pairs)}")
            return
        apart = [p for p in pairs if p.get("lower_ns", 0) > 0 or p.get("upper_ns", 0) < 0]
        if after.get("tsc_stable") is not True:
            if verdict != "SKIP":
                self.fail(name, verdict, f"no KVM_CLOCK_TSC_STABLE must be SKIP: {reason}")
        elif apart and verdict != "FAIL":
            self.fail(name, verdict, f"stable, and pairs {apart} differ: must be FAIL: {reason}")
        elif not apart and verdict == "FAIL":
            self.fail(name, verdict, f"no pair differs, yet FAIL: {reason}")
        fresh = vals.get("fresh") or {}
        self.note(f"{name}: after the rounds stable={after.get('tsc_stable')}, pairs apart "
                  f"{[(p.get('a'), p.get('b'), p.get('lower_ns'), p.get('upper_ns')) for p in apart]}; "
                  f"fresh VM stable={fresh.get('tsc_stable')}")

    def judge_warp_values(self, name, verdict, vals):
        """Check 5's evidence on real KVM, whatever its verdict: every ordered pair was
        exercised, every exact relative offset lies in the interval the guest saw (the
        guest never contradicts KVM), and the control moved the exact offset and was
        seen or honestly unresolved."""
        pairs = vals.get("pairs") or []
        n = self.vcpus or 2
        if len(pairs) != n * (n - 1):
            self.fail(name, verdict, f"expected {n * (n - 1)} ordered pairs, got {len(pairs)}")
        for p in pairs:
            lo, hi, exact = p.get("guest_lower_cycles"), p.get("guest_upper_cycles"), p.get("exact_offset_cycles")
            if exact is None:
                self.fail(name, verdict, f"pair {p.get('a')},{p.get('b')}: no exact offset on real KVM")
            elif lo is None or hi is None or not lo <= exact <= hi:
                self.fail(name, verdict, f"pair {p.get('a')},{p.get('b')}: the exact offset {exact} is outside "
                          f"the guest's [{lo}, {hi}]")
        outcome = (vals.get("control") or {}).get("outcome")
        if outcome not in WARP_CONTROL_OUTCOMES:
            self.fail(name, verdict, f"control {outcome!r}, expected one of {WARP_CONTROL_OUTCOMES}: "
                      f"{json.dumps(vals.get('control'))}")

    def judge_ktap(self, res):
        path = os.path.join(self.dir, "check.ktap")
        text = read_text(path)
        if text is None:
            if res.get("ktap_option") == "yes":
                self.fail("check KTAP", "missing", "the binary has check --ktap, but no check.ktap came back")
            else:
                self.note("this tsc-rendezvous has no check --ktap yet: ran without it, no KTAP to check")
            return
        lines = text.splitlines()
        if not lines or lines[0].strip() != "KTAP version 1":
            self.fail("check KTAP", "header", f"does not start with 'KTAP version 1': {lines[0] if lines else '(empty file)'!r}")
        plans = [ln for ln in lines if re.match(r"^\s*\d+\.\.\d+\s*$", ln)]
        if [p.strip() for p in plans] != [f"1..{N_CHECKS}"]:
            self.fail("check KTAP", "plan", f"expected one plan line '1..{N_CHECKS}', got {plans}")
        results = [ln for ln in lines if re.match(r"^(ok|not ok) \d+\b", ln)]
        if len(results) != N_CHECKS:
            self.fail("check KTAP", "results", f"expected {N_CHECKS} result lines, got {len(results)}: {results}")
        # Each result line agrees with check.json: PASS "ok", SKIP/UNDECIDED "ok ... # SKIP",
        # FAIL "not ok".
        for ln in results:
            m = re.match(r"^(ok|not ok) (\d+) ?([^#]*?)\s*(#.*)?$", ln)
            if not m:
                continue
            num, desc, directive = int(m.group(2)), m.group(3).strip(), (m.group(4) or "")
            skip = bool(re.match(r"#\s*SKIP\b", directive, re.I))
            verdict = self.verdicts.get(num)
            want = {"PASS": ("ok", False), "SKIP": ("ok", True), "UNDECIDED": ("ok", True), "FAIL": ("not ok", False)}.get(verdict)
            if 1 <= num <= N_CHECKS and desc != CHECK_IDS[num - 1]:
                self.fail("check KTAP", f"result {num}", f"names {desc!r}, expected {CHECK_IDS[num - 1]!r}: {ln}")
            if want and (m.group(1), skip) != want:
                self.fail("check KTAP", f"result {num}", f"disagrees with check.json verdict {verdict}: {ln}")

    def judge_junit(self):
        path = os.path.join(self.dir, "check-junit.xml")
        if not os.path.exists(path):
            self.fail("check JUnit", "missing", "check-junit.xml did not come back")
            return
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as e:
            self.fail("check JUnit", "malformed", str(e))
            return
        cases = root.findall(".//testcase")
        if len(cases) != N_CHECKS:
            self.fail("check JUnit", "testcases", f"expected {N_CHECKS} testcases, got {len(cases)}")

    def judge_run(self, res):
        doc, why = read_json(os.path.join(self.dir, "run.json"))
        rc, extra = self.step_rc(res, "run")
        stderr = clip(read_text(os.path.join(self.dir, "run.stderr")) or "")
        if doc is None:
            self.honoured = False
            self.fail("run", f"exit {rc}{extra}", f"{why}; stderr: {stderr or '(empty)'}")
            return
        self.judge_env("run", doc.get("host") or {})
        ok = True
        runs = doc.get("runs") or []
        variants = [r.get("variant") for r in runs]
        if not runs or len(set(variants)) != len(variants):
            ok = False
            self.fail("run", "variants", f"expected one run per variant (run's default: all), got {variants}")
        for run in runs:
            v = run.get("variant")
            rounds = run.get("rounds") or []
            want_rounds = doc.get("rounds_per_variant")
            if len(rounds) != want_rounds:
                ok = False
                self.fail(f"run {v}", "rounds", f"{len(rounds)} rounds of {want_rounds}")
            if v in NO_COMMON_WRITE:
                # No common write: nothing to honour unless a vCPU wrote (a
                # compensation), and every write there must have been honoured.
                wrote = [(r.get("round"), c.get("id"), c.get("write_honoured"))
                         for r in rounds for c in (r.get("vcpus") or []) if c.get("wrote")]
                if v == "xen-std" and wrote:
                    ok = False
                    self.fail(f"run {v}", "wrote", f"the std rendezvous writes nothing, yet: {wrote[:4]}")
                bad = [w for w in wrote if w[2] is not True]
                if bad or run.get("writes_honoured") not in (None, True) or (not wrote and run.get("writes_honoured") is not None):
                    ok = False
                    self.fail(f"run {v}", f"writes_honoured {json.dumps(run.get('writes_honoured'))}",
                              f"expected null without writes, true with them; writes {wrote[:4]}")
            elif run.get("writes_honoured") is not True:
                ok = False
                per_round = [r.get("writes_honoured") for r in rounds]
                self.fail(f"run {v}", f"writes_honoured {json.dumps(run.get('writes_honoured'))}",
                          f"expected true; per round {per_round}; notes {run.get('notes')}")
            inexact = []
            for r in rounds:
                for c in r.get("vcpus") or []:
                    if c.get("offset_delta") is None or c.get("offset_delta") != c.get("tsc_adjust_delta"):
                        inexact.append((r.get("round"), c.get("id"), c.get("offset_delta"), c.get("tsc_adjust_delta")))
            if inexact:
                ok = False
                shown = "; ".join(f"round {a} vCPU {b}: offset_delta {c} tsc_adjust_delta {d}" for a, b, c, d in inexact[:4])
                self.fail(f"run {v}", "offset_delta != tsc_adjust_delta",
                          f"{len(inexact)} vCPU-rounds differ, e.g. {shown}")
            if v not in NO_COMMON_WRITE:
                ok = self.judge_run_kvmclock(v, rounds) and ok
            dis = [(r.get("round"), d) for r in rounds for d in (r.get("disagreements") or [])]
            summ = run.get("summary") or {}
            if dis or summ.get("rounds_with_disagreements"):
                ok = False
                self.fail(f"run {v}", "disagreements",
                          f"{summ.get('rounds_with_disagreements')} rounds with disagreements, e.g. "
                          f"{clip('; '.join(f'round {a}: {d}' for a, d in dis[:3]))} "
                          f"(first: {summ.get('first_disagreements')})")
        if rc != "0":
            ok = False
            self.fail("run exit code", f"exit {rc}{extra}", f"expected 0; stderr: {stderr or '(empty)'}")
        self.honoured = ok

    def judge_run_kvmclock(self, v, rounds):
        """`run --kvmclock` (the matrix passes it): every round of a writing variant
        has every vCPU's kvmclock across its write, its jump the advance minus the time
        that passed; how many followed the TSC (within 5 % of the move) is noted."""
        n = self.vcpus or 2
        missing = [r.get("round") for r in rounds
                   if len(((r.get("kvmclock") or {}).get("vcpus")) or []) != n]
        if missing:
            self.fail(f"run {v}", "kvmclock", f"rounds {missing[:5]} lack a kvmclock reading per vCPU")
            return False
        followed = total = 0
        for r in rounds:
            for j in r["kvmclock"]["vcpus"]:
                jump, moved, adv, el = (j.get("jump_ns"), j.get("tsc_moved_ns"),
                                        j.get("kvmclock_advance_ns"), j.get("elapsed_ns"))
                if None in (jump, moved, adv, el) or abs(jump - (adv - el)) > 1.0:
                    self.fail(f"run {v}", "kvmclock", f"round {r.get('round')}: inconsistent {json.dumps(j)}")
                    return False
                total += 1
                followed += bool(moved) and abs(jump - moved) <= 0.05 * abs(moved)
        self.note(f"run --kvmclock {v}: kvmclock followed the TSC in {followed} of {total} writes")
        return True

    def judge_restore(self, res):
        doc, why = read_json(os.path.join(self.dir, "restore.json"))
        rc, extra = self.step_rc(res, "restore")
        stderr = clip(read_text(os.path.join(self.dir, "restore.stderr")) or "")
        if doc is None:
            self.restore = "failed"
            self.fail("restore", f"exit {rc}{extra}", f"{why}; stderr: {stderr or '(empty)'}")
            return
        if rc != "0":
            self.fail("restore exit code", f"exit {rc}{extra}", f"expected 0; stderr: {stderr or '(empty)'}")
        if doc.get("schema") != "tsc-rendezvous/restore/v1":
            self.fail("restore", "schema", f"schema {doc.get('schema')!r}")
        self.judge_env("restore", doc.get("host") or {})
        methods = {m.get("method"): m for m in doc.get("methods") or []}
        summary = []
        for name in RESTORE_METHODS:
            m = methods.get(name)
            label = f"restore {name}"
            if m is None:
                self.fail(label, "missing", f"not in restore.json (methods: {sorted(methods)})")
                continue
            if name == "documented" and not self.has_offset_attr():
                reason = m.get("not_run_reason") or ""
                if m.get("ran") is not False or "KVM_VCPU_TSC_OFFSET" not in reason:
                    self.fail(label, f"ran {m.get('ran')}", f"Linux {self.release} lacks KVM_VCPU_TSC_OFFSET: expected not run, naming it; reason {reason!r}")
                summary.append(f"{name} not run")
                continue
            if m.get("ran") is not True or m.get("completed") is not True:
                self.fail(label, f"ran {m.get('ran')} completed {m.get('completed')}",
                          f"expected to run and complete; step {m.get('failed_step')}: {m.get('error')}")
                continue
            vcpus = m.get("vcpus") or []
            pio = [c.get("pio") for c in vcpus]
            if any(p != "completed" for p in pio):
                self.fail(label, "pio", f"on VMX/SVM every pending port I/O is completed before the snapshot; got {pio}")
            before, after = m.get("skew_before_cycles"), m.get("skew_after_cycles")
            if name == "documented":
                fates = [c.get("offset_fate") for c in vcpus]
                if before is None or after != before or any(f != "as-written" for f in fates):
                    self.fail(label, f"skew {before} -> {after}", f"expected every relative offset kept bit-exact, every offset as written; fates {fates}")
                summary.append(f"{name} kept {before}")
            else:
                rel = [c.get("relative_offset_after") for c in vcpus]
                if any(r != 0 for r in rel):
                    self.fail(label, f"relative offsets {rel}", "KVM's one-second matching snaps host IA32_TSC writes to one offset: expected all 0")
                fates = [c.get("offset_fate") for c in vcpus]
                first = "as-written" if name == "msr" else "vcpu0-first-write"
                taken = [first] + ["vcpu0-offset"] * (len(fates) - 1)
                if self.first_host_write_taken():
                    # From 6.7 (bf328e22) the VM's first host IA32_TSC write is
                    # not matched against the creation offsets: vCPU 0's write is
                    # taken and the others are matched to it.
                    # msr-twice's second write of vCPU 0 is itself matched to
                    # the first or taken, by its timing (KVM's one-second window).
                    firsts = (["as-written"],) if name == "msr" else (["as-written"], ["vcpu0-first-write"])
                    if fates[1:] != taken[1:] or fates[:1] not in firsts:
                        self.fail(label, f"offset fates {fates}",
                                  f"from Linux 6.7 (commit bf328e22) the VM's first host IA32_TSC write is not "
                                  f"matched against the creation offsets: expected vCPU 0 "
                                  f"{' or '.join(f[0] for f in firsts)}, the others vcpu0-offset")
                else:
                    # Before 6.7 it depends on the VM's age at the write: either
                    # every vCPU keeps its creation offset (the guest loses the
                    # source VM's lifetime: vCPU 0 advanced less than the host
                    # time), or vCPU 0's write is taken as from 6.7.
                    kept = all(f == "kept-creation-offset" for f in fates)
                    lost = ((vcpus[0].get("advance_minus_host") or [0, 0])[1] or 0) < 0 if vcpus else False
                    if kept and lost:
                        self.note(f"{label}: every vCPU kept its creation offset (the VM was young; before 6.7)")
                    elif fates[1:] == taken[1:] and fates[:1] in (["as-written"], ["vcpu0-first-write"]):
                        self.note(f"{label}: vCPU 0's write taken ({fates[0]}), the others matched to it (before 6.7)")
                    else:
                        self.fail(label, f"offset fates {fates}",
                                  f"before Linux 6.7 expected every vCPU to keep its creation offset with vCPU 0 "
                                  f"behind the host time, or vCPU 0 as-written or vcpu0-first-write and the others "
                                  f"vcpu0-offset")
                summary.append(f"{name} {before}->{after}")
        self.restore = "; ".join(summary)

    def judge_skew(self, res):
        """`run --initial-skew`: refused (exit 2, naming KVM_VCPU_TSC_OFFSET) without the
        attribute; with it, set exactly, kept to the cycle by xen-std and removed by
        every variant that writes."""
        rc, extra = self.step_rc(res, "skew")
        if rc is None:
            self.fail("initial skew", "not run", "results.txt has no skew step")
            return
        stderr = clip(read_text(os.path.join(self.dir, "skew.stderr")) or "")
        if not self.has_offset_attr():
            if rc != "2" or "KVM_VCPU_TSC_OFFSET" not in stderr:
                self.fail("initial skew", f"exit {rc}{extra}",
                          f"Linux {self.release} lacks KVM_VCPU_TSC_OFFSET: expected exit 2 naming it; stderr: {stderr or '(empty)'}")
            self.skew = "refused (no attr)"
            return
        doc, why = read_json(os.path.join(self.dir, "skew.json"))
        if rc != "0" or doc is None:
            self.skew = "failed"
            self.fail("initial skew", f"exit {rc}{extra}", f"expected 0 and a report; {why or ''}; stderr: {stderr or '(empty)'}")
            return
        m = re.search(r"--initial-skew[ =](\d+)", res.get("skew_args") or "")
        if m is None:
            self.fail("initial skew", "args", f"results.txt does not say what skew was asked (skew_args {res.get('skew_args')!r})")
            return
        want = int(m.group(1))
        asked = (doc.get("host") or {}).get("initial_skew_cycles")
        if asked != want:
            self.fail("initial skew", f"initial_skew_cycles {asked!r}", f"expected the {want} cycles asked for")
            return
        runs = doc.get("runs") or []
        names = [r.get("variant") for r in runs]
        if sorted(names) != sorted(ALL_VARIANTS):
            self.fail("initial skew", "variants", f"expected one run of each of {ALL_VARIANTS}, got {names}")
        removed = 0
        m = re.search(r"--rounds[ =](\d+)", res.get("skew_args") or "")
        want_rounds = int(m.group(1)) if m else doc.get("rounds_per_variant")
        for run in runs:
            name = run.get("variant")
            skews = [r.get("skew_cycles") for r in run.get("rounds") or []]
            if len(skews) != want_rounds or any(not isinstance(x, int) for x in skews):
                self.fail("initial skew", name, f"expected {want_rounds} rounds with skews: {skews}")
                continue
            if name == "xen-std":
                if any(x != want for x in skews):
                    self.fail("initial skew", "xen-std", f"writes no TSC: expected every round's skew {want}; got {skews}")
            elif skews[0] >= want // 2:
                # The writes replace the skew by their own (the time between the
                # vCPUs' writes: under emulation up to a time slice); what must not
                # survive is the initial skew.
                self.fail("initial skew", name, f"expected its first round to remove the {want} cycles (leave less "
                          f"than half); left {skews[0]}")
            else:
                removed += 1
        self.skew = f"xen-std kept {want}, {removed} of {len(ALL_VARIANTS) - 1} removed"

    def judge_tests(self, res):
        names = (res.get("tests") or "").split()
        if not names:
            self.fail("tests", "none", "no integration test binary ran")
        for name in names:
            rc, extra = self.step_rc(res, f"test_{name}")
            log = read_text(os.path.join(self.dir, f"test-{name}.log"))
            label = f"test {name}"
            if log is None:
                self.tests.append((name, False))
                self.fail(label, f"exit {rc}{extra}", f"test-{name}.log did not come back")
                continue
            summary = re.findall(r"^test result: (\w+)\. (\d+) passed; (\d+) failed;.*$", log, re.M)
            failed_names = re.findall(r"^test (\S+) \.\.\. FAILED", log, re.M)
            ok = (
                rc == "0"
                and bool(summary)
                and all(s[0] == "ok" and s[2] == "0" for s in summary)
                and sum(int(s[1]) for s in summary) > 0
                and "test result: ok" in log
            )
            self.tests.append((name, ok))
            if not ok:
                if summary:
                    what = "; ".join(f"{s[0]}. {s[1]} passed; {s[2]} failed" for s in summary)
                else:
                    what = "no 'test result:' line"
                panics = re.findall(r"^thread '.*' panicked at .*\n.*$", log, re.M)
                self.fail(label, f"exit {rc}{extra}",
                          f"expected 'test result: ok' with 0 failed and some passed; got {what}; "
                          f"failed: {failed_names or '-'}; {clip(' | '.join(panics[:3]), 600) if panics else 'log: ' + clip(log[-400:])}")

    # ------------------------------------------------------------------ report
    def row(self):
        cells = [self.label, self.release]
        for n in range(1, N_CHECKS + 1):
            cells.append(SHORT.get(self.verdicts.get(n), self.verdicts.get(n) or "-"))
        cells.append({True: "yes", False: "no", None: "-"}[self.honoured])
        if self.tests:
            good = sum(1 for _, ok in self.tests if ok)
            cells.append(f"{good}/{len(self.tests)}")
        else:
            cells.append("-")
        cells.append(self.restore or "-")
        cells.append(self.half or "-")
        cells.append(self.skew or "-")
        cells.append(self.seconds or "-")
        cells.append(", ".join(self.extra) or "-")
        cells.append("ok" if not self.failures else f"FAILED ({len(self.failures)})")
        return cells


def table(rows):
    head = ["kernel", "release"] + [str(n) for n in range(1, N_CHECKS + 1)] + [
        "run honoured", "tests ok", "restore (skew cycles)", "at 0.5x", "initial skew", "seconds", "other checks", "result"]
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root, suites = argv[1], argv[2:]
    kernels = []
    for s in suites:
        k = Kernel(root, s)
        k.judge()
        kernels.append(k)
    failures = [f for k in kernels for f in k.failures]
    for k in kernels:
        for n in k.notes:
            print(n)
    for f in failures:
        print(f)
    print()
    print("checks: " + ", ".join(f"{n} {c}" for n, c in enumerate(CHECK_IDS, 1)))
    print(table([k.row() for k in kernels]))
    try:
        with open(os.path.join(root, "failures.txt"), "w") as f:
            f.write("".join(x + "\n" for x in failures))
        with open(os.path.join(root, "summary.json"), "w") as f:
            json.dump(
                [
                    {
                        "kernel": k.label,
                        "machine": k.machine.name,
                        "release": k.release,
                        "verdicts": {CHECK_IDS[n - 1]: k.verdicts.get(n) for n in range(1, N_CHECKS + 1)},
                        "restore": k.restore,
                        "at_half_rate": k.half,
                        "initial_skew": k.skew,
                        "other_checks": k.extra,
                        "run_honoured": k.honoured,
                        "tests": dict(k.tests),
                        "boot_seconds": k.seconds,
                        "qemu_seconds": k.qemu_seconds,
                        "failures": k.failures,
                        "notes": k.notes,
                    }
                    for k in kernels
                ],
                f,
                indent=2,
            )
            f.write("\n")
    except OSError as e:
        print(f"warning: could not write the summary files: {e}", file=sys.stderr)
    if failures:
        # Again below the table, so that a log cut to its tail still names them.
        print("\nthe expectations that failed (also in failures.txt):")
        for f in failures:
            print(f"  {clip(f, 600)}")
        print(f"\n{len(failures)} expectation(s) failed on {sum(1 for k in kernels if k.failures)} of {len(kernels)} kernel(s)")
        return 1
    print(f"\nevery expectation held on all {len(kernels)} kernel(s)")
    return 0

