"""The expectations of the TSC-frequency family (checks 10-13) and of the runs
at half the host's TSC rate (check --tsc-khz 0.5x, restore --tsc-khz 0.5x),
judged from the numbers the tool brought back, by what the KVM it ran on says
it can do (KVM_CAP_TSC_CONTROL in the check's environment, which must agree
with the machine's `tsc_scaling` where machines.toml states it), never by
the machine's name.

What KVM documents (arch/x86/kvm/x86.c, kvm_set_tsc_khz): a rate within its
tolerance (250 ppm) of the host's is taken unscaled; beyond it KVM scales
where it can; without scaling it refuses a lower rate and serves a higher
one by catch-up. Where KVM takes a rate and the guest's TSC does not run at
it (catch-up not served: the rate bound excludes the asked rate and holds
1), check 10's FAIL is a finding, like checks 8 and 9's (catch-up served short of the asked
rate: the bound lies below it, from the host's rate up); so is check 11's
FAIL when a vCPU's pvclock page is left at the rate it had before a live
KVM_SET_TSC_KHZ (its version unchanged).
"""

import json

FREQUENCY_IDS = ["tsc-frequency", "kvmclock-frequency", "mixed-frequency", "scaled-rendezvous"]
TOLERANCE_PPM = 250
HALF = 500_000


def _contains(rate, x):
    return bool(rate) and rate.get("lo") is not None and rate["lo"] <= x <= rate.get("hi", float("-inf"))


def scaling_of(k, env):
    """Whether KVM can scale (KVM_CAP_TSC_CONTROL of the check's environment);
    fails where the machine says otherwise."""
    caps = env.get("kvm_capabilities") or {}
    scaling = (caps.get("KVM_CAP_TSC_CONTROL") or 0) > 0
    said = k.machine.tsc_scaling
    if said is not None and said != scaling:
        k.fail("check environment", f"KVM_CAP_TSC_CONTROL {caps.get('KVM_CAP_TSC_CONTROL')}",
               f"machines.toml says {k.machine.name}'s CPU model {'has' if said else 'has no'} TSC scaling")
    return scaling


def judge_tsc_frequency(k, name, verdict, reason, vals, scaling):
    """Check 10: every probe taken or refused as documented, and its verdict the
    one its own rate bound gives; a FAIL only where KVM took a rate above the
    host's without scaling and the guest's TSC ran at the host's rate."""
    probes = vals.get("probes") or []
    if len(probes) < 3:
        k.fail(name, verdict, f"expected at least 3 rates tried (0.5x, 2x, within the tolerance), got {len(probes)}")
        return
    findings, broken = [], []
    for p in probes:
        ppm, refused, rate, pv = p.get("ratio_ppm", 0), p.get("set") is not None, p.get("rate"), p.get("verdict")
        what = f"{ppm / 1e6:g}x per {p.get('scope')}"
        within = abs(ppm - 1_000_000) <= TOLERANCE_PPM
        if not scaling and ppm < 1_000_000 and not within:
            if not refused or pv != "PASS":
                broken.append(f"{what}: without TSC scaling KVM must refuse it ({p})")
            continue
        if refused:
            broken.append(f"{what}: refused ({p.get('set')}) although KVM documents taking it")
            continue
        if p.get("reported_khz") != p.get("khz"):
            broken.append(f"{what}: KVM_GET_TSC_KHZ {p.get('reported_khz')} after setting {p.get('khz')}")
        want = 1.0 if within else ppm / 1e6
        if rate is None:
            broken.append(f"{what}: no rate measured")
        elif scaling or within:
            if not _contains(rate, want) or (want != 1.0 and _contains(rate, 1.0)) or pv != "PASS":
                broken.append(f"{what}: the guest's TSC ran at {rate}, want {want}, verdict {pv}")
        elif _contains(rate, want):
            if pv != "PASS":
                broken.append(f"{what}: served by catch-up ({rate}) but {pv}")
        elif pv == "FAIL" and 1.0 <= rate.get("hi", 0) < want:
            # Catch-up sets the TSC forward only to the master clock's snapshot
            # time, which moves only when the master clock is updated: the TSC
            # runs between the host's rate (never updated) and the asked one.
            findings.append(f"{what} taken and reported, the guest's TSC at {rate} of the host's rate")
        else:
            broken.append(f"{what}: rate {rate} holds neither {want} nor 1, verdict {pv}")
    for b in broken:
        k.fail(name, verdict, b)
    if not broken and (verdict == "FAIL") != bool(findings):
        k.fail(name, verdict, f"the probes' findings {findings} do not give this verdict: {reason}")
    for f in findings:
        k.note(f"{name} FAIL, from its evidence (catch-up not served): {f}")


def judge_kvmclock_frequency(k, name, verdict, reason, vals, scaling):
    """Check 11: a rate set on the VM before its vCPUs exist leaves pages at the
    TSC's rate and kvmclock at real time; a per-vCPU change of a running vCPU
    may FAIL only with the evidence of a page left as it was (version
    unchanged, converting at the host's rate, not the asked one)."""
    probes = vals.get("probes") or []
    if not probes:
        if verdict not in ("UNDECIDED", "SKIP"):
            k.fail(name, verdict, f"no probe with kvmclock, yet {verdict}: {reason}")
        return
    stale = []
    for p in probes:
        what = f"{p.get('ratio_ppm', 0) / 1e6:g}x per {p.get('scope')}"
        page, want = p.get("page_khz"), p.get("want_khz")
        page_ok = page is not None and want and abs(page - want) / want < 1e-5
        rate_ok = _contains(p.get("kvmclock_rate"), 1.0)
        across = p.get("across") or {}
        if p.get("scope") == "vm" or p.get("verdict") == "PASS":
            if not (page_ok and rate_ok) or p.get("verdict") != "PASS":
                k.fail(name, verdict, f"{what}: page {page} kHz (want {want}), kvmclock rate "
                       f"{p.get('kvmclock_rate')}, verdict {p.get('verdict')}")
            continue
        same_version = across.get("version_before") is not None and across.get("version_before") == across.get("version_after")
        host = (vals.get("host_khz") or 0)
        if same_version and page is not None and (not page_ok) and p.get("verdict") == "FAIL":
            stale.append(f"{what}: page still {round(page)} kHz, version {across.get('version_before')} unchanged")
        else:
            k.fail(name, verdict, f"{what}: a FAIL needs a page left as it was; {json.dumps(p)} (host {host})")
    if (verdict == "FAIL") != bool(stale) and verdict not in ("UNDECIDED",):
        k.fail(name, verdict, f"stale pages {stale} do not give this verdict: {reason}")
    if verdict == "UNDECIDED" and scaling:
        k.fail(name, verdict, f"with TSC scaling a rate off the host's is the control: {reason}")
    for s in stale:
        k.note(f"{name} FAIL, from its evidence (a live KVM_SET_TSC_KHZ left the page): {s}")


def page_khz(page):
    """The rate a pvclock page converts at, kHz: ns = ((tsc << shift) * mul) >> 32."""
    mul, shift = page.get("mul"), page.get("shift")
    if not mul or shift is None:
        return None
    return 1e6 * 2 ** 32 / (mul * 2.0 ** shift)


def judge_mixed_frequency(k, name, verdict, reason, vals, scaling=False):
    """Check 12: vCPU 1 at twice the host's rate, set before either vCPU first
    ran, so that with TSC scaling each page converts at its own vCPU's rate (a
    page left at another rate is check 11's finding, which check 12 must not
    measure again); then check 9's rules."""
    khz = vals.get("khz") or []
    if len(khz) != 2 or khz[1] != 2 * khz[0]:
        if verdict != "SKIP":
            k.fail(name, verdict, f"vCPU rates {khz}: expected vCPU 1 at twice vCPU 0's, or SKIP")
        return
    if scaling:
        pages = [page_khz(p) for p in vals.get("pages") or []]
        off = [(i, round(p or 0), want) for i, (p, want) in enumerate(zip(pages, khz))
               if p is None or abs(p - want) / want > 1e-5]
        if len(pages) != 2 or off:
            k.fail(name, verdict, f"with TSC scaling every page must convert at its vCPU's rate {khz} "
                   f"(the rates set before the vCPUs ran); pages {vals.get('pages')}, off {off}")
    k.judge_master_clock(name, verdict, reason, vals, pairs_of=2)


def judge_scaled_rendezvous(k, name, verdict, reason, vals, scaling):
    """Check 13: with TSC scaling PASS, with the unscaled estimate missing by more
    than the error bar (the control); without it SKIP naming the capability."""
    if not scaling:
        if verdict != "SKIP" or "KVM_CAP_TSC_CONTROL = 0" not in reason:
            k.fail(name, verdict, f"without TSC scaling expected SKIP naming KVM_CAP_TSC_CONTROL = 0: {reason}")
        return
    c = vals.get("control") or {}
    err = c.get("error_cycles")
    if verdict != "PASS" or err is None or abs(c.get("unscaled_miss_cycles", 0)) <= err \
            or abs(c.get("scaled_miss_cycles", err + 1)) > err or vals.get("honoured") != vals.get("wrote"):
        k.fail(name, verdict, f"expected PASS with the scaled estimate within its error bar and the unscaled one "
               f"outside it, every write honoured; values {json.dumps(vals)}: {reason}")


def judge_family(k, by_id, env, only=None):
    """Checks 10-13 of check.json (those of `only`, ids, when given); returns the
    ids whose FAIL is a finding."""
    scaling = scaling_of(k, env)
    findings = []
    judges = {
        "tsc-frequency": lambda n, v, r, vals: judge_tsc_frequency(k, n, v, r, vals, scaling),
        "kvmclock-frequency": lambda n, v, r, vals: judge_kvmclock_frequency(k, n, v, r, vals, scaling),
        "mixed-frequency": lambda n, v, r, vals: judge_mixed_frequency(k, n, v, r, vals, scaling),
        "scaled-rendezvous": lambda n, v, r, vals: judge_scaled_rendezvous(k, n, v, r, vals, scaling),
    }
    for number, cid in enumerate(FREQUENCY_IDS, 10):
        if only is not None and cid not in only:
            continue
        c = by_id.get(cid)
        name = f"check {number} {cid}"
        if c is None:
            k.verdicts[number] = "-"
            k.fail(name, "missing", "not in check.json")
            continue
        k.verdicts[number] = c.get("verdict")
        judges[cid](name, c.get("verdict"), c.get("reason", ""), c.get("values") or {})
        if c.get("verdict") == "FAIL" and cid != "scaled-rendezvous":
            findings.append(cid)
    return findings


def judge_check_half(k, doc, rc, stderr, scaling):
    """check --tsc-khz 0.5x: with scaling every check ran on VMs at half the host's
    rate (checks 1-3 and 13 PASS there); without it exit 2 naming the capability."""
    if not scaling:
        if rc != "2" or "KVM_CAP_TSC_CONTROL = 0" not in stderr:
            k.fail("check at 0.5x", f"exit {rc}", f"without TSC scaling expected exit 2 naming KVM_CAP_TSC_CONTROL = 0; stderr: {stderr}")
        return "refused"
    if doc is None:
        k.fail("check at 0.5x", f"exit {rc}", f"no JSON; stderr: {stderr}")
        return "failed"
    env = doc.get("environment") or {}
    host, khz, g = env.get("host_tsc_khz"), env.get("tsc_khz"), env.get("guest_tsc") or {}
    if not host or khz != (host + 1) // 2 or g.get("scaled") is not True:
        k.fail("check at 0.5x", f"tsc_khz {khz}", f"expected half the host's {host} kHz, scaled; guest_tsc {g}")
    verdicts = {c.get("id"): c.get("verdict") for c in doc.get("checks") or []}
    for cid in ("same-start", "tsc-msrs", "adjust-equals-offset", "scaled-rendezvous"):
        if verdicts.get(cid) != "PASS":
            k.fail("check at 0.5x", f"{cid} {verdicts.get(cid)}", "expected PASS on a scaled TSC")
    passed = sum(1 for v in verdicts.values() if v == "PASS")
    return f"{passed} of {len(verdicts)} PASS at {khz} kHz"


def judge_restore_half(k, doc, rc, stderr, scaling):
    """restore --tsc-khz 0.5x: with scaling the documented method keeps every
    relative offset bit-exact at the saved rate and vcpu.rst's formula taken
    literally would have missed by half the host time between the samples;
    without scaling exit 2 naming the capability."""
    if not scaling:
        if rc != "2" or "KVM_CAP_TSC_CONTROL = 0" not in stderr:
            k.fail("restore at 0.5x", f"exit {rc}", f"without TSC scaling expected exit 2 naming KVM_CAP_TSC_CONTROL = 0; stderr: {stderr}")
        return "refused"
    if doc is None or rc != "0":
        k.fail("restore at 0.5x", f"exit {rc}", f"expected the JSON and exit 0; stderr: {stderr}")
        return "failed"
    m = next((x for x in doc.get("methods") or [] if x.get("method") == "documented"), None)
    if m is None or not m.get("completed"):
        k.fail("restore at 0.5x", "documented", f"expected the documented method to complete: {m and m.get('error')}")
        return "failed"
    clock = m.get("clock") or {}
    src, dst = clock.get("source") or {}, clock.get("destination") or {}
    elapsed = (dst.get("host_tsc") or 0) - (src.get("host_tsc") or 0)
    miss = clock.get("literal_miss_cycles")
    before, after = m.get("skew_before_cycles"), m.get("skew_after_cycles")
    if before is None or after != before:
        k.fail("restore at 0.5x", f"skew {before} -> {after}", "the documented method keeps every relative offset bit-exact")
    if miss is None or elapsed <= 0 or abs(miss + elapsed / 2) > max(4, elapsed * 1e-6):
        k.fail("restore at 0.5x", f"literal miss {miss}", f"expected -0.5 x the {elapsed} host cycles between the samples")
    return f"kept {before}, literal miss {miss}"
