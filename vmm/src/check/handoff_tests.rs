//! Check 5's hand-off judge on synthetic exchanges: agreeing, contradicting,
//! too coarse, an unexercised pair, an empty interval, no exact offsets, and
//! each outcome of the control.

use tsc_contract::{HandoffResult, HANDOFF_MAGIC};

use super::*;
use crate::check::evidence::{Control, HandoffEvidence};
use crate::session::Handoff;
use crate::tsc::{OffsetSource, TscState};

/// A pair whose guest interval is `[lower, upper]`.
fn pair(a: u32, b: u32, lower: i64, upper: i64) -> HandoffResult {
    let width = upper.saturating_sub(lower).max(0);
    HandoffResult {
        magic: HANDOFF_MAGIC,
        tag: 1,
        a,
        b,
        exchanges: 10,
        reserved: 0,
        min_rtt: width.unsigned_abs(),
        max_rtt: width.unsigned_abs() * 3,
        lower,
        upper,
        best_mid: lower / 2 + upper / 2,
    }
}

/// Both directions of (0, 1) around the relative offset `theta`, each
/// interval `half` either side.
fn test(theta: i64, half: i64) -> Handoff {
    Handoff {
        exchanges: 10,
        all_pairs: true,
        pairs: vec![
            pair(0, 1, theta - half, theta + half),
            pair(1, 0, -theta - half, -theta + half),
        ],
    }
}

/// vCPU 0 at offset 0 and vCPU 1 at `rel`, exact.
fn states(rel: i64) -> Vec<TscState> {
    [0i64, rel]
        .iter()
        .map(|&o| TscState {
            offset: Some(o as u64),
            tsc_khz: 1_000_000,
            ..TscState::default()
        })
        .collect()
}

fn ev(t: Handoff, after: Vec<TscState>, control: Control) -> HandoffEvidence {
    HandoffEvidence {
        test: t,
        after,
        control,
    }
}

fn impossible() -> Control {
    Control::Impossible("this KVM has no KVM_VCPU_TSC_OFFSET".into())
}

/// Both ways of moving vCPU 1 were accepted and its exact offset stayed
/// (as PVM does).
fn unmoved() -> Control {
    Control::Unmoved(
        "KVM_VCPU_TSC_OFFSET asked vCPU 1 to move by 5,409,600 cycles and its exact offset \
         did not move"
            .into(),
    )
}

/// The control moved vCPU 1 by `delta`; the guest saw the new offset
/// `seen` ± `half`; the exact offsets moved by `exact`.
fn moved(theta: i64, delta: u64, seen: i64, half: i64, exact: Option<i64>) -> Control {
    Control::Moved {
        vcpu: 1,
        delta,
        how: "KVM_VCPU_TSC_OFFSET",
        exact_change: exact,
        test: test(seen, half),
        after: states(theta + exact.unwrap_or(0)),
    }
}

const SRC: OffsetSource = OffsetSource::KvmVcpuTscOffset;
const FLOOR: u64 = 100_000;

#[test]
fn an_agreeing_tight_view_with_the_control_seen_passes() {
    let control = moved(5_000, 1 << 20, 5_000 + (1 << 20), 300, Some(1 << 20));
    let f = judge(2, &ev(test(5_000, 300), states(5_000), control), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(f.reason.contains("±300"), "{}", f.reason);
    assert!(
        f.reason.contains("control: vCPU 1 moved by 1,048,576"),
        "{}",
        f.reason
    );
}

#[test]
fn an_exact_offset_outside_the_guests_bound_fails_naming_the_pair() {
    // The guest sees vCPU 1 about 9,000 ahead; KVM says 5,000.
    let f = judge(
        2,
        &ev(test(9_000, 300), states(5_000), impossible()),
        SRC,
        FLOOR,
    );
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(f.reason.contains("contradict by 3,700"), "{}", f.reason);
    assert!(f.reason.contains("the guest sees"), "{}", f.reason);
    assert!(
        f.reason.contains("exact 5,000") || f.reason.contains("exact -5,000"),
        "{}",
        f.reason
    );
}

#[test]
fn a_bound_wider_than_the_skew_and_the_floor_is_undecided() {
    let f = judge(
        2,
        &ev(test(5_000, 200_000), states(5_000), impossible()),
        SRC,
        FLOOR,
    );
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.contains("wider than the exact skew 5,000"),
        "{}",
        f.reason
    );
    // The same bound judges a skew larger than it.
    let f = judge(
        2,
        &ev(test(500_000, 200_000), states(500_000), impossible()),
        SRC,
        FLOOR,
    );
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
}

#[test]
fn an_unexercised_pair_is_undecided() {
    let mut t = test(0, 10);
    t.pairs[1].exchanges = 0;
    let f = judge(2, &ev(t, states(0), impossible()), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.contains("pair (1, 0) had no exchange"),
        "{}",
        f.reason
    );
    let mut t = test(0, 10);
    t.pairs.pop();
    let f = judge(2, &ev(t, states(0), impossible()), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.contains("1 of 2 pairs measured"), "{}", f.reason);
}

#[test]
fn an_empty_interval_fails_whatever_the_offsets() {
    let mut t = test(0, 10);
    t.pairs[0] = pair(0, 1, 500, -500);
    let f = judge(2, &ev(t.clone(), states(0), impossible()), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.starts_with("no constant offset fits"),
        "{}",
        f.reason
    );
    let f = judge(
        2,
        &ev(t, states(0), impossible()),
        OffsetSource::None,
        FLOOR,
    );
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
}

#[test]
fn without_exact_offsets_nothing_is_decided() {
    let none: Vec<TscState> = states(0)
        .into_iter()
        .map(|s| TscState { offset: None, ..s })
        .collect();
    let f = judge(
        2,
        &ev(test(0, 10), none, impossible()),
        OffsetSource::None,
        FLOOR,
    );
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.starts_with("no exact offsets"), "{}", f.reason);
}

#[test]
fn a_missing_control_is_said_and_does_not_stop_a_pass() {
    let f = judge(2, &ev(test(0, 300), states(0), impossible()), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(
        f.reason
            .contains("no control possible: this KVM has no KVM_VCPU_TSC_OFFSET"),
        "{}",
        f.reason
    );
    assert_eq!(f.values["control"]["outcome"], "impossible");
}

/// A move KVM accepted that left the exact offset where it was: the exact
/// offsets were shown not to respond, so a tight agreement with them is no
/// evidence of what the guest sees (the old judge passed it).
#[test]
fn a_control_the_exact_offsets_ignored_is_undecided() {
    let f = judge(2, &ev(test(0, 300), states(0), unmoved()), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.contains(
            "the exact offsets did not respond to the control: KVM_VCPU_TSC_OFFSET asked vCPU 1"
        ),
        "{}",
        f.reason
    );
    assert!(f.reason.contains("within ±300"), "{}", f.reason);
    assert_eq!(f.values["control"]["outcome"], "unmoved");
    // What the guest saw against them still fails when they contradict it.
    let f = judge(2, &ev(test(9_000, 300), states(0), unmoved()), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
}

#[test]
fn a_control_within_the_bound_is_unresolved() {
    // A move of 100 against a bound of ±300: the guest cannot tell it.
    let control = moved(0, 100, 100, 300, Some(100));
    let f = judge(2, &ev(test(0, 300), states(0), control), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.ends_with("not resolved"), "{}", f.reason);
}

#[test]
fn a_control_the_guest_did_not_see_fails() {
    // KVM moved vCPU 1 by 2^20; the guest still sees it where it was.
    let control = moved(0, 1 << 20, 0, 300, Some(1 << 20));
    let f = judge(2, &ev(test(0, 300), states(0), control), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert_eq!(f.values["control"]["outcome"], "contradicted");
}

#[test]
fn one_vcpu_is_skipped() {
    let t = Handoff {
        exchanges: 10,
        all_pairs: true,
        pairs: Vec::new(),
    };
    let f = judge(1, &ev(t, states(0)[..1].to_vec(), impossible()), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Skip, "{}", f.reason);
}

#[test]
fn pair_views_put_the_exact_offset_against_the_interval() {
    let v = pair_views(&test(5_000, 300), &states(5_000));
    assert_eq!(v[0].exact_offset_cycles, Some(5_000));
    assert_eq!(v[1].exact_offset_cycles, Some(-5_000));
    assert_eq!(
        (v[0].guest_offset_cycles, v[0].guest_bound_cycles),
        (5_000, Some(300))
    );
    assert_eq!(v[0].outside(), Some(0));
    // vCPU 1 is 5,000 ahead: handing from 1 to 0, vCPU 0 reads up to 4,700
    // below what vCPU 1 read (the rest is the round trip); handing from 0
    // to 1, vCPU 1 reads above, no step back.
    assert_eq!(v[1].backwards_a_to_b_cycles, 4_700);
    assert_eq!(v[0].backwards_a_to_b_cycles, 0);
    assert_eq!(v[0].backwards_b_to_a_cycles, 4_700);
}

/// One direction of a pair slow (a scheduler delay), the other tight: the
/// two together bound the same offset, so the tight one decides.
#[test]
fn both_directions_together_give_the_pairs_bound() {
    let mut t = test(5_000, 300);
    t.pairs[1] = pair(1, 0, -5_000 - 900_000, -5_000 + 900_000);
    let f = judge(2, &ev(t, states(5_000), impossible()), SRC, FLOOR);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    let v = pair_views(&test(5_000, 300), &states(5_000));
    assert_eq!(v[0].both_directions_bound_cycles, Some(300));
}
