"""Verdicts re-derived from a check's raw numbers with the harness's own
arithmetic, not the tool's tolerances: a second opinion that the kernel
matrix and the variants' judge hold every verdict against.

Each function takes a check's `values` (check --json) and returns the set of
verdicts its numbers allow, or None where the numbers alone cannot say (the
tool's finer bounds decide there). The rules only use effects far larger than
any measurement error: a kvmclock that followed a 4 s write, offsets that
differ, an exact offset outside the interval the guest saw.
"""

# A kvmclock "followed" the TSC when its jump is within this fraction of the
# write's move (the stale-page signature: the whole move, to a few per cent).
FOLLOWED = 0.25
ANY = frozenset(("PASS", "FAIL", "UNDECIDED", "SKIP"))


def same_start(vals):
    """Check 1: every offset known and equal, every rate equal -> PASS; any differing -> FAIL."""
    offs, khz = vals.get("offsets") or [], vals.get("tsc_khz") or []
    known = [o for o in offs if o is not None]
    if len(set(known)) > 1 or len(set(k for k in khz if k is not None)) > 1:
        return frozenset({"FAIL"})
    if offs and len(known) == len(offs) and khz and None not in khz:
        return frozenset({"PASS"})
    return None


def adjust_equals_offset(vals):
    """Check 3: any mismatch between a TSC_ADJUST delta and its offset's -> FAIL; comparisons and none -> PASS."""
    comparisons, mismatches = vals.get("comparisons") or 0, vals.get("mismatches") or 0
    if mismatches:
        return frozenset({"FAIL"})
    if comparisons:
        return frozenset({"PASS"})
    return None


def warp(vals):
    """Check 5: an exact offset outside the interval the guest saw -> FAIL (the guest
    contradicts KVM); every one inside -> not FAIL (tightness is the tool's to judge)."""
    pairs = vals.get("pairs") or []
    seen = [(p.get("guest_lower_cycles"), p.get("guest_upper_cycles"), p.get("exact_offset_cycles")) for p in pairs]
    if any(None not in s and not s[0] <= s[2] <= s[1] for s in seen):
        return frozenset({"FAIL"})
    if seen and all(None not in s for s in seen):
        return ANY - {"FAIL"}
    return None


def followed(w):
    """Whether a write record shows kvmclock following the TSC: a jump within FOLLOWED of the move."""
    moved = w.get("tsc_moved_ns")
    adv, elapsed = w.get("kvmclock_advance_ns"), w.get("elapsed_ns")
    if not moved or adv is None or elapsed is None:
        return None
    jump = adv - elapsed
    return abs(jump - moved) <= FOLLOWED * abs(moved)


def kvmclock_continuity(vals):
    """Check 8: a kvmclock that followed its write's move (IA32_TSC, or the TSC_ADJUST
    control) -> FAIL; otherwise the tool's tolerance decides."""
    writes = (vals.get("tsc_write") or []) + (vals.get("adjust_write") or [])
    if any(followed(w) for w in writes):
        return frozenset({"FAIL"})
    return None


def master_clock(vals):
    """Check 9: KVM_CLOCK_TSC_STABLE with a pair's interval excluding 0 -> FAIL; with
    every pair's holding 0 -> not FAIL."""
    after = vals.get("after_rounds") or {}
    pairs = after.get("pairs") or []
    if after.get("tsc_stable") is not True or not pairs:
        return None
    if any((p.get("lower_ns") or 0) > 0 or (p.get("upper_ns") or 0) < 0 for p in pairs):
        return frozenset({"FAIL"})
    return ANY - {"FAIL"}


BY_NUMBER = {1: same_start, 3: adjust_equals_offset, 5: warp, 8: kvmclock_continuity, 9: master_clock}


def allowed(number, vals):
    """The verdicts check `number`'s values allow, or None when they cannot say."""
    f = BY_NUMBER.get(number)
    return f(vals or {}) if f else None
