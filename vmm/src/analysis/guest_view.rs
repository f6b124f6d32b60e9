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

#[cfg(test)]
mod tests {
    use tsc_contract::{HandoffResult, RoundRecord, HANDOFF_MAGIC, RECORD_MAGIC};

    use super::*;
    use crate::analysis::{analyse_round, Base, VcpuSample};
    use crate::tsc::TscState;

    /// Pair (a, b): the responder's TSC minus the initiator's in [lo, hi].
    fn pair(a: u32, b: u32, lo: i64, hi: i64) -> HandoffResult {
        HandoffResult {
            magic: HANDOFF_MAGIC,
            a,
            b,
            exchanges: 8,
            min_rtt: (hi - lo).unsigned_abs(),
            lower: lo,
            upper: hi,
            ..HandoffResult::default()
        }
    }

    /// A two-vCPU round whose exact offsets put vCPU 1 `rel` cycles ahead,
    /// its own disagreements cleared.
    fn round(rel: u64) -> RoundResult {
        let state = |offset: u64| TscState {
            offset: Some(offset),
            host_after: 100,
            tsc_khz: 1_000_000,
            ..TscState::default()
        };
        let sample = |vcpu: u32, offset: u64| VcpuSample {
            record: RoundRecord {
                magic: RECORD_MAGIC,
                vcpu,
                variant: 3,
                written: 5,
                ..RoundRecord::default()
            },
            before: state(offset),
            after: state(offset),
        };
        let samples = [sample(0, 0), sample(1, rel)];
        let mut r = analyse_round(0, "xen-head", &samples, &Base::creation(2), None);
        r.disagreements.clear();
        r
    }

    #[test]
    fn both_directions_meet_and_an_agreeing_view_adds_method_d() {
        let p = [pair(0, 1, 900, 1_100), pair(1, 0, -1_050, -950)];
        assert_eq!(relative_to_vcpu0(&p, 1), Some((950, 1_050)));
        let mut r = round(1_000);
        let bracket = r.vcpus[1].rel_offset_bracket;
        apply(&mut r, &p);
        let still: Vec<&String> = r
            .disagreements
            .iter()
            .filter(|d| !d.contains("bracketed reads"))
            .collect();
        assert!(
            still.is_empty(),
            "{:?} (bracket {bracket})",
            r.disagreements
        );
        assert_eq!(r.vcpus[1].rel_offset_guest, Some(1_000));
        assert_eq!(r.vcpus[1].rel_offset_guest_error, Some(50));
        assert_eq!(r.skew_cycles_guest, Some(1_000));
        assert_eq!(r.skew_cycles_guest_error, Some(100));
    }

    #[test]
    fn an_exact_offset_outside_the_guests_interval_disagrees() {
        let p = [pair(0, 1, 900, 1_100), pair(1, 0, -1_100, -900)];
        let mut r = round(5_000);
        apply(&mut r, &p);
        assert!(
            r.disagreements
                .iter()
                .any(|d| d.contains("5000 cycles by the exact offsets, the guest sees 1000 ± 100")),
            "{:?}",
            r.disagreements
        );
    }

    #[test]
    fn an_empty_interval_disagrees_and_gives_no_view() {
        // The two directions contradict each other: no constant offset fits.
        let p = [pair(0, 1, 900, 1_100), pair(1, 0, 900, 1_100)];
        let mut r = round(1_000);
        apply(&mut r, &p);
        assert!(
            r.disagreements
                .iter()
                .any(|d| d.contains("no constant offset fits")),
            "{:?}",
            r.disagreements
        );
        assert_eq!(r.vcpus[1].rel_offset_guest, None);
        assert_eq!(r.skew_cycles_guest, None);
    }
}
