//! Check 5's judge of the forced hand-off test (pure): what the guest saw of
//! every ordered pair's relative offset against KVM's exact offsets of the
//! same moment, and whether it saw the control's known move.
//!
//! Per pair the guest's exchanges bound the relative offset (the responder's
//! TSC minus the initiator's) to `[lower, upper]` under two assumptions:
//! each TSC read is ordered after the load before it, and both TSCs tick at
//! one rate during the test (see `tsc_sync::handoff`). The verdict:
//! - FAIL: an exact offset outside the guest's interval (the guest sees a
//!   relative offset KVM's exact offsets contradict beyond the bound, or a
//!   backwards step larger than the exact skew allows: the same fact), or an
//!   empty interval (no constant offset fits what the guest read).
//! - PASS: every ordered pair exercised, every interval holding the exact
//!   offset, every bound within the larger of the exact skew and the floor
//!   ([`FLOOR_NS`]), and the control seen where one was possible.
//! - UNDECIDED otherwise, with the numbers: no exact offsets, a pair not
//!   exercised, a bound too wide, a control the test could not resolve, or
//!   a control KVM accepted that did not move the exact offset (offsets
//!   that do not respond are not evidence of what the guest sees).

use serde::Serialize;
use serde_json::json;

use super::evidence::{Control, HandoffEvidence};
use super::report::{Finding, Verdict};
use crate::session::Handoff;
use crate::tsc::{OffsetSource, TscState};
use crate::units::fmt_int as n;

pub use super::judge::FLOOR_NS;

/// What the guest saw of one ordered pair, against the exact offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PairView {
    /// The initiator.
    pub a: u32,
    /// The responder.
    pub b: u32,
    /// Exchanges.
    pub exchanges: u32,
    /// The shortest round trip, the initiator's cycles.
    pub shortest_round_trip_cycles: u64,
    /// The guest's interval of the responder's TSC minus the initiator's.
    pub guest_lower_cycles: i64,
    /// Its upper end.
    pub guest_upper_cycles: i64,
    /// The interval's midpoint (the guest-seen offset).
    pub guest_offset_cycles: i64,
    /// Half its width, rounded up (the guest-seen offset's bound); `None`
    /// for an empty interval.
    pub guest_bound_cycles: Option<u64>,
    /// The bound of both directions together: this interval intersected
    /// with the reverse pair's, negated (the same offset seen the other
    /// way); `None` when empty, or the reverse pair is missing.
    pub both_directions_bound_cycles: Option<u64>,
    /// KVM's exact relative offset right after the test, when known.
    pub exact_offset_cycles: Option<i64>,
    /// The largest backwards step seen from the initiator to the responder
    /// (the responder read a TSC below the initiator's earlier read).
    pub backwards_a_to_b_cycles: u64,
    /// The largest backwards step seen from the responder to the initiator.
    pub backwards_b_to_a_cycles: u64,
}

impl PairView {
    /// How far the exact offset lies outside the guest's interval (0:
    /// inside); `None` without an exact offset.
    pub fn outside(&self) -> Option<u64> {
        let e = i128::from(self.exact_offset_cycles?);
        let (lo, hi) = (
            i128::from(self.guest_lower_cycles),
            i128::from(self.guest_upper_cycles),
        );
        let d = if e < lo {
            lo - e
        } else if e > hi {
            e - hi
        } else {
            0
        };
        Some(u64::try_from(d).unwrap_or(u64::MAX))
    }

    fn text(&self) -> String {
        let exact = self.exact_offset_cycles.map_or_else(|| "unknown".into(), n);
        let seen = match self.guest_bound_cycles {
            Some(b) => format!("{} ± {}", n(self.guest_offset_cycles), n(b)),
            None => format!(
                "nothing (its exchanges bound it to the empty [{}, {}])",
                n(self.guest_lower_cycles),
                n(self.guest_upper_cycles)
            ),
        };
        let both = self
            .both_directions_bound_cycles
            .map_or_else(String::new, |b| {
                format!(" (± {} with both directions)", n(b))
            });
        format!(
            "pair ({}, {}): the guest sees {seen}{both}, exact {exact}, shortest round trip {}",
            self.a,
            self.b,
            n(self.shortest_round_trip_cycles)
        )
    }
}

/// Every pair of `test` against the exact offsets in `after` (read right
/// after it).
pub fn pair_views(test: &Handoff, after: &[TscState]) -> Vec<PairView> {
    let exact = |k: u32| after.get(k as usize).and_then(|s| s.offset);
    let both = |a: u32, b: u32, lo: i128, hi: i128| -> Option<u64> {
        let r = test.pairs.iter().find(|r| (r.a, r.b) == (b, a))?;
        let (lo, hi) = (lo.max(-i128::from(r.upper)), hi.min(-i128::from(r.lower)));
        (hi >= lo).then(|| u64::try_from((hi - lo + 1) / 2).unwrap_or(u64::MAX))
    };
    test.pairs
        .iter()
        .map(|r| {
            let (lo, hi) = (i128::from(r.lower), i128::from(r.upper));
            let width = hi - lo;
            let mid = lo + width.div_euclid(2);
            PairView {
                a: r.a,
                b: r.b,
                exchanges: r.exchanges,
                shortest_round_trip_cycles: r.min_rtt,
                guest_lower_cycles: r.lower,
                guest_upper_cycles: r.upper,
                guest_offset_cycles: i64::try_from(mid).unwrap_or(r.best_mid),
                guest_bound_cycles: (width >= 0)
                    .then(|| u64::try_from((width + 1) / 2).unwrap_or(u64::MAX)),
                both_directions_bound_cycles: both(r.a, r.b, lo, hi),
                exact_offset_cycles: match (exact(r.b), exact(r.a)) {
                    (Some(b), Some(a)) => Some(b.wrapping_sub(a) as i64),
                    _ => None,
                },
                backwards_a_to_b_cycles: r.upper.min(0).unsigned_abs(),
                backwards_b_to_a_cycles: r.lower.max(0).unsigned_abs(),
            }
        })
        .collect()
}

/// The exact skew (spread of the exact offsets) in `after`, when known.
fn exact_skew(after: &[TscState]) -> Option<u64> {
    let o: Option<Vec<u64>> = after.iter().map(|s| s.offset).collect();
    let o = o?;
    let base = *o.first()?;
    Some(crate::analysis::spread(
        o.iter().map(|&x| x.wrapping_sub(base) as i64),
    ))
}

/// What the control showed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControlOutcome {
    /// The guest saw the move, within its bound, and could tell it from none.
    Seen,
    /// The move was made but is within the guest's bound: not resolved.
    Unresolved,
    /// The guest saw a change KVM's offsets contradict.
    Contradicted,
    /// A move was asked for and KVM accepted it, but the exact offset did
    /// not move (why is in the text): the exact offsets do not respond.
    Unmoved,
    /// No control was possible on this host (why is in the text).
    Impossible,
    /// The move was made, but without exact offsets nothing tells whether
    /// it took effect.
    Unverifiable,
}

/// The control's outcome and its words, from the views before and after.
fn control_outcome(
    control: &Control,
    before: &[PairView],
    floor: u64,
) -> (ControlOutcome, String, serde_json::Value) {
    let (vcpu, delta, how, exact_change, test, after) = match control {
        Control::Unmoved(why) => {
            let v = json!({ "outcome": ControlOutcome::Unmoved, "why": why });
            return (
                ControlOutcome::Unmoved,
                format!("the exact offsets did not respond to the control: {why}"),
                v,
            );
        }
        Control::Impossible(why) => {
            let v = json!({ "outcome": ControlOutcome::Impossible, "why": why });
            return (
                ControlOutcome::Impossible,
                format!("no control possible: {why}"),
                v,
            );
        }
        Control::Moved {
            vcpu,
            delta,
            how,
            exact_change,
            test,
            after,
        } => (*vcpu, *delta, *how, *exact_change, test, after),
    };
    let now = pair_views(test, after);
    let pair = |views: &[PairView]| views.iter().find(|p| p.a == 0 && p.b == vcpu).copied();
    let (Some(b), Some(a)) = (pair(before), pair(&now)) else {
        let v = json!({ "outcome": ControlOutcome::Unverifiable, "vcpu": vcpu });
        return (
            ControlOutcome::Unverifiable,
            format!("the control's pair (0, {vcpu}) was not measured"),
            v,
        );
    };
    // The change the guest saw lies in [after.lo - before.hi, after.hi - before.lo].
    let lo = i128::from(a.guest_lower_cycles) - i128::from(b.guest_upper_cycles);
    let hi = i128::from(a.guest_upper_cycles) - i128::from(b.guest_lower_cycles);
    let contradicted = now.iter().any(|p| p.outside().is_some_and(|x| x > 0));
    // The known move: the exact offsets' change where they tell it.
    let outcome = match exact_change.map(i128::from) {
        _ if contradicted => ControlOutcome::Contradicted,
        None => ControlOutcome::Unverifiable,
        Some(e) if !(lo <= e && e <= hi) => ControlOutcome::Contradicted,
        Some(_) if lo <= 0 && 0 <= hi => ControlOutcome::Unresolved,
        Some(_) => ControlOutcome::Seen,
    };
    let words = format!(
        "control: vCPU {vcpu} moved by {} cycles through {how} ({}); the guest saw pair (0, \
         {vcpu}) change by {}..{}",
        n(delta),
        match exact_change {
            Some(e) => format!("exact offsets moved by {}", n(e)),
            None => "no exact offsets to confirm it".into(),
        },
        n(i64::try_from(lo).unwrap_or(i64::MIN)),
        n(i64::try_from(hi).unwrap_or(i64::MAX))
    );
    let v = json!({
        "outcome": outcome,
        "vcpu": vcpu,
        "delta_cycles": delta,
        "method": how,
        "exact_change_cycles": exact_change,
        "guest_change_lower_cycles": i64::try_from(lo).ok(),
        "guest_change_upper_cycles": i64::try_from(hi).ok(),
        "floor_cycles": floor,
        "pairs_after": now,
    });
    (outcome, words, v)
}

/// Check 5 from the forced hand-off test on `vcpus` vCPUs, the offsets'
/// `source`, and `floor` (the [`FLOOR_NS`] in cycles; 0 when the frequency
/// is unknown).
pub fn judge(vcpus: u32, ev: &HandoffEvidence, source: OffsetSource, floor: u64) -> Finding {
    let views = pair_views(&ev.test, &ev.after);
    let skew = if source.exact() {
        exact_skew(&ev.after)
    } else {
        None
    };
    let (control, control_words, control_values) = control_outcome(&ev.control, &views, floor);
    let mut f = Finding::skip("one vCPU: no pair to hand off between")
        .with("pairs", &views)
        .with("exchanges_per_pair", ev.test.exchanges)
        .with("every_ordered_pair", ev.test.all_pairs)
        .with("exact_skew_cycles", skew)
        .with("floor_cycles", floor)
        .with("offset_source", source)
        .with("control", control_values);
    if vcpus < 2 {
        return f;
    }
    if let Some((verdict, reason)) = unusable(vcpus, ev.test.all_pairs, &views) {
        f.set(verdict, reason);
        return f;
    }
    let worst_outside = views
        .iter()
        .filter_map(|p| Some((p.outside()?, p)))
        .max_by_key(|(d, _)| *d);
    let (Some(skew), Some((outside, _))) = (skew, worst_outside) else {
        let widest = widest(&views);
        f.set(
            Verdict::Undecided,
            format!(
                "no exact offsets ({}) to compare the guest's view with; widest {}",
                source.short(),
                widest.map_or_else(String::new, PairView::text)
            ),
        );
        return f;
    };
    if outside > 0 {
        let p = worst_outside.map(|(_, p)| p.text()).unwrap_or_default();
        f.set(
            Verdict::Fail,
            format!(
                "the guest sees a relative offset KVM's exact offsets ({}) contradict by {} \
                 cycles beyond its bound: {p}",
                source.short(),
                n(outside)
            ),
        );
        return f;
    }
    if control == ControlOutcome::Contradicted {
        f.set(
            Verdict::Fail,
            format!("{control_words}: KVM's exact offsets contradict what the guest saw"),
        );
        return f;
    }
    let limit = skew.max(floor);
    let worst = widest(&views);
    let bound = worst.map_or(0, bound_of);
    let worst_text = worst.map_or_else(String::new, PairView::text);
    if bound > limit {
        f.set(
            Verdict::Undecided,
            format!(
                "the guest's bound ±{} is wider than the exact skew {} and the floor {} \
                 (100 us): it could not have seen a warp of that size; worst {worst_text}",
                n(bound),
                n(skew),
                n(floor)
            ),
        );
        return f;
    }
    if control == ControlOutcome::Unmoved {
        f.set(
            Verdict::Undecided,
            format!(
                "every pair agrees with the exact offsets ({}) within ±{}, but {control_words}: \
                 offsets that do not follow a move KVM accepted are not shown to describe the \
                 TSCs the guest reads, so their agreement with its view shows nothing; worst \
                 {worst_text}",
                source.short(),
                n(bound)
            ),
        );
        return f;
    }
    if matches!(
        control,
        ControlOutcome::Unresolved | ControlOutcome::Unverifiable
    ) {
        f.set(
            Verdict::Undecided,
            format!(
                "every pair agrees with the exact offsets, but the {control_words}: not resolved"
            ),
        );
        return f;
    }
    f.set(
        Verdict::Pass,
        format!(
            "every ordered pair ({} pairs, {} exchanges each) sees the exact offsets ({}) \
             within ±{} <= max(skew {}, floor {}); worst {worst_text}; {control_words}",
            views.len(),
            ev.test.exchanges,
            source.short(),
            n(bound),
            n(skew),
            n(floor)
        ),
    );
    f
}

/// What makes the test unusable before any comparison: a pair not
/// exercised (UNDECIDED), an empty interval (FAIL: no constant offset fits).
fn unusable(vcpus: u32, all: bool, views: &[PairView]) -> Option<(Verdict, String)> {
    let expected = tsc_contract::handoff::pairs(vcpus, all).unwrap_or(0) as usize;
    let unexercised = views.iter().find(|p| p.exchanges == 0);
    if views.len() < expected || unexercised.is_some() {
        let which = unexercised.map_or_else(
            || format!("{} of {expected} pairs measured", views.len()),
            |p| format!("pair ({}, {}) had no exchange", p.a, p.b),
        );
        return Some((
            Verdict::Undecided,
            format!("not every ordered pair was exercised: {which}"),
        ));
    }
    let p = views.iter().find(|p| p.guest_bound_cycles.is_none())?;
    Some((
        Verdict::Fail,
        format!(
            "no constant offset fits what the guest read: {} (its TSC went back by {} from \
             vCPU {} to {} and by {} the other way)",
            p.text(),
            n(p.backwards_a_to_b_cycles),
            p.a,
            p.b,
            n(p.backwards_b_to_a_cycles)
        ),
    ))
}

/// The pair with the widest bound, both directions together where the
/// reverse pair was measured.
fn widest(views: &[PairView]) -> Option<&PairView> {
    views.iter().max_by_key(|p| bound_of(p))
}

/// A pair's bound: both directions together where known, else its own.
fn bound_of(p: &PairView) -> u64 {
    p.both_directions_bound_cycles
        .or(p.guest_bound_cycles)
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
#[path = "handoff_tests.rs"]
mod tests;
