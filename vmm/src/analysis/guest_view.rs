//! The fourth method: each vCPU's offset relative to vCPU 0 as the guest
//! itself sees it, from the forced hand-off test run right after the round
//! (`run --guest-view`). Pair (0, k) bounds vCPU k's TSC minus vCPU 0's,
//! pair (k, 0) bounds its negation; the intersection is what the guest saw,
//! a sound interval under the test's assumptions (each TSC read ordered after
//! the load before it, both TSCs ticking at one rate: see
//! `tsc_sync::handoff`). It is cross-checked against the exact offsets (b)
//! and the bracketed reads (c) of the same moment.

use tsc_contract::HandoffResult;

use super::arith::spread;
use super::round::RoundResult;

/// vCPU `k`'s offset relative to vCPU 0 as the guest saw it:
/// `(lower, upper)`, empty when `lower > upper`; `None` when neither pair
/// was measured.
pub fn relative_to_vcpu0(pairs: &[HandoffResult], k: u32) -> Option<(i128, i128)> {
    let mut out: Option<(i128, i128)> = None;
    let mut meet = |lo: i128, hi: i128| {
        out = Some(match out {
            Some((l, h)) => (l.max(lo), h.min(hi)),
            None => (lo, hi),
        });
    };
    for p in pairs.iter().filter(|p| p.exchanges > 0) {
        let (lo, hi) = (i128::from(p.lower), i128::from(p.upper));
        if (p.a, p.b) == (0, k) {
            meet(lo, hi);
        } else if (p.a, p.b) == (k, 0) {
            meet(-hi, -lo);
        }
    }
    out
}

/// Adds the guest's view to an analysed round: every vCPU's guest-seen
/// relative offset (the interval's midpoint) and its bound (half the
/// interval, rounded up), the guest-seen skew, and a disagreement wherever
/// the guest's interval is empty or excludes what the exact offsets or the
/// bracketed reads say.
pub fn apply(result: &mut RoundResult, pairs: &[HandoffResult]) {
    for v in result.vcpus.iter_mut() {
        let (lo, hi) = if v.id == 0 {
            (0, 0)
        } else {
            match relative_to_vcpu0(pairs, v.id) {
                Some(x) => x,
                None => continue,
            }
        };
        if lo > hi {
            result.disagreements.push(format!(
                "vCPU {}: no constant offset fits the guest's exchanges with vCPU 0 ({lo} > {hi})",
                v.id
            ));
            continue;
        }
        let mid = lo + (hi - lo).div_euclid(2);
        let bound = (hi - lo + 1) / 2;
        v.rel_offset_guest = i64::try_from(mid).ok();
        v.rel_offset_guest_error = u64::try_from(bound).ok();
        if let Some(exact) = v.rel_offset_attr.map(i128::from) {
            if exact < lo || exact > hi {
                result.disagreements.push(format!(
                    "vCPU {}: relative offset is {exact} cycles by the exact offsets, the guest \
                     sees {mid} ± {bound}",
                    v.id
                ));
            }
        }
        let (c, e) = (
            i128::from(v.rel_offset_bracket),
            i128::from(v.rel_offset_bracket_error),
        );
        if c + e < lo || c - e > hi {
            result.disagreements.push(format!(
                "vCPU {}: relative offset is {c} ± {e} cycles by bracketed reads, the guest sees \
                 {mid} ± {bound}",
                v.id
            ));
        }
    }
    let seen: Option<Vec<i64>> = result.vcpus.iter().map(|v| v.rel_offset_guest).collect();
    if let Some(seen) = seen {
        result.skew_cycles_guest = Some(spread(seen));
        let err = result
            .vcpus
            .iter()
            .filter_map(|v| v.rel_offset_guest_error)
            .max()
            .unwrap_or(0);
        result.skew_cycles_guest_error = Some(err.saturating_mul(2));
    }
}
