//! Check 9's judge on synthetic views: a stable clock the guests agree
//! with, a stable clock they contradict, no master clock, pages without the
//! stable bit, and a bound too coarse to tell.

use kvm_bindings::KVM_CLOCK_TSC_STABLE;
use tsc_contract::{HandoffResult, PvclockTimeInfo, HANDOFF_MAGIC};

use super::*;
use crate::check::evidence::ClockView;
use crate::session::Handoff;
use crate::tsc::clock::ClockSample;
use crate::tsc::TscState;

fn pair(a: u32, b: u32, lower: i64, upper: i64) -> HandoffResult {
    HandoffResult {
        magic: HANDOFF_MAGIC,
        a,
        b,
        exchanges: 10,
        min_rtt: (upper - lower).unsigned_abs(),
        lower,
        upper,
        ..HandoffResult::default()
    }
}

/// A two-vCPU view whose kvmclocks differ by `diff` ns ± `half`, with
/// KVM_GET_CLOCK's flags and the pages' stable bits as given.
pub(crate) fn view(diff: i64, half: i64, flags: u32, bits: [bool; 2]) -> ClockView {
    ClockView {
        clock: Ok(ClockSample {
            flags,
            ..ClockSample::default()
        }),
        pages: bits
            .iter()
            .map(|&b| PvclockTimeInfo {
                version: 2,
                flags: u8::from(b),
                ..PvclockTimeInfo::default()
            })
            .collect(),
        // Equal exact offsets at 1 GHz (a fresh VM's, or writes that left
        // none apart): stale pages would not set the kvmclocks apart.
        states: vec![
            TscState {
                offset: Some(0),
                tsc_khz: 1_000_000,
                ..TscState::default()
            };
            2
        ],
        handoff: Handoff {
            exchanges: 10,
            all_pairs: true,
            pairs: vec![
                pair(0, 1, diff - half, diff + half),
                pair(1, 0, -diff - half, -diff + half),
            ],
        },
    }
}

pub(crate) const STABLE: u32 = KVM_CLOCK_TSC_STABLE;

#[test]
fn a_stable_clock_the_guests_agree_with_passes() {
    let f = judge(
        2,
        &view(0, 5_000, STABLE, [true; 2]),
        None,
        Some("tsc"),
        KvmFlavor::Svm,
    );
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(f.reason.contains("agree within ±5,000 ns"), "{}", f.reason);
}

#[test]
fn a_stable_clock_the_guests_contradict_fails_naming_the_pair() {
    // The vCPUs' kvmclocks are 2 ms apart, far beyond a 5 us bound.
    let fresh = view(0, 5_000, STABLE, [true; 2]);
    let f = judge(
        2,
        &view(2_000_000, 5_000, STABLE, [true; 2]),
        Some(&fresh),
        None,
        KvmFlavor::Svm,
    );
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(f.reason.contains("1,995,000 ns apart"), "{}", f.reason);
    assert!(
        f.reason
            .contains("the fresh VM: KVM_CLOCK_TSC_STABLE, every pair"),
        "{}",
        f.reason
    );
    // The details: both views, each with its flags and every pair.
    let d = f.details.join("\n");
    assert!(
        d.contains("after the rounds: KVM_CLOCK_TSC_STABLE; PVCLOCK_TSC_STABLE_BIT per vCPU 1 1"),
        "{d}"
    );
    assert!(d.contains("0,1  [1,995,000, 2,005,000]"), "{d}");
    assert!(d.contains("fresh VM: KVM_CLOCK_TSC_STABLE"), "{d}");
    assert_eq!(f.details.len(), 1 + 2 * 3, "{d}");
}

#[test]
fn a_difference_that_is_the_exact_offsets_says_the_kvmclocks_follow_the_tscs() {
    // At 1 GHz vCPU 1's TSC is 2 ms ahead of vCPU 0's, and so is its kvmclock.
    let mut v = view(2_000_000, 5_000, STABLE, [true; 2]);
    v.states[0].offset = Some(100);
    v.states[1].offset = Some(2_000_100);
    for s in &mut v.states {
        s.tsc_khz = 1_000_000;
    }
    let f = judge(2, &v, None, Some("tsc"), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.contains(
            "exact TSC offsets' difference (vCPU 0's minus vCPU 1's: -2,000,000 cycles, \
             -2,000,000 ns)"
        ),
        "{}",
        f.reason
    );
    // Offsets that do not explain it: no such words.
    v.states[1].offset = Some(100);
    let f = judge(2, &v, None, Some("tsc"), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(!f.reason.contains("follows its own TSC"), "{}", f.reason);
}

#[test]
fn no_master_clock_is_no_promise_and_says_what_is_known() {
    let f = judge(
        2,
        &view(2_000_000, 5_000, 0, [false; 2]),
        None,
        Some("hpet"),
        KvmFlavor::Svm,
    );
    assert_eq!(f.verdict, Verdict::Skip, "{}", f.reason);
    assert!(
        f.reason.contains("the host clocksource is hpet"),
        "{}",
        f.reason
    );
    assert!(f.reason.contains("apart"), "{}", f.reason);
}

#[test]
fn no_master_clock_names_the_offsets_that_differ() {
    let mut v = view(0, 5_000, 0, [false; 2]);
    v.states[0].offset = Some(5);
    v.states[1].offset = Some(5u64.wrapping_sub(1_000));
    let f = judge(2, &v, None, Some("tsc"), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Skip, "{}", f.reason);
    assert!(
        f.reason.contains("offsets differ by up to 1,000 cycles"),
        "{}",
        f.reason
    );
    // Equal offsets and a TSC clocksource: nothing measured explains it.
    v.states[1].offset = Some(5);
    let f = judge(2, &v, None, Some("tsc"), KvmFlavor::Svm);
    assert!(f.reason.contains("not measurable here"), "{}", f.reason);
}

#[test]
fn a_page_without_the_stable_bit_is_undecided() {
    let f = judge(
        2,
        &view(0, 5_000, STABLE, [true, false]),
        None,
        None,
        KvmFlavor::Svm,
    );
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.contains("vCPU(s) 1's pages lack"), "{}", f.reason);
}

#[test]
fn a_bound_too_coarse_to_tell_is_undecided() {
    let f = judge(
        2,
        &view(0, 500_000, STABLE, [true; 2]),
        None,
        None,
        KvmFlavor::Svm,
    );
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.contains("wider than the 100,000 ns floor"),
        "{}",
        f.reason
    );
}

/// The old judge PASSed "within ±0 ns" with no pair measured, and with no
/// page read: neither is agreement.
#[test]
fn no_pair_or_no_page_is_not_agreement() {
    let mut v = view(0, 5_000, STABLE, [true; 2]);
    v.handoff.pairs.clear();
    let f = judge(2, &v, None, Some("tsc"), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.contains("measured no pair"), "{}", f.reason);
    assert!(
        f.reason.contains("no pair's kvmclocks were measured"),
        "{}",
        f.reason
    );
    let mut v = view(0, 5_000, STABLE, [true; 2]);
    v.pages.clear();
    let f = judge(2, &v, None, Some("tsc"), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.contains("0 of the 2 vCPUs' kvmclock pages"),
        "{}",
        f.reason
    );
}

/// docs/kvmclock.md's disagreements are 54-141 us; the old 100 us floor
/// let an agreement within ±90 us PASS although it cannot exclude the
/// smaller ones. With the exact offsets 54 us apart, ±90 us is UNDECIDED,
/// ±5 us PASSes.
#[test]
fn a_pass_must_exclude_what_stale_pages_would_show() {
    let apart = |half: i64| {
        let mut v = view(0, half, STABLE, [true; 2]);
        v.states[1].offset = Some(54_162);
        v
    };
    let f = judge(2, &apart(90_000), None, Some("tsc"), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason
            .contains("stale pvclock pages (each kvmclock following its own TSC offset)"),
        "{}",
        f.reason
    );
    let f = judge(2, &apart(5_000), None, Some("tsc"), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(f.reason.contains("54,162 ns or more apart"), "{}", f.reason);
    // Without exact offsets nothing says what stale pages would show.
    let mut v = apart(5_000);
    v.states[1].offset = None;
    let f = judge(2, &v, None, Some("tsc"), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.contains("no exact offset for vCPU(s) 1"),
        "{}",
        f.reason
    );
}

/// More vCPUs than the layout holds pairs for: only vCPU 0's pairs exist,
/// and the reason says so instead of speaking of every pair.
#[test]
fn only_vcpu_0s_pairs_are_named_as_such() {
    let mut v = view(0, 5_000, STABLE, [true; 2]);
    v.pages.push(v.pages[0]);
    v.states.push(v.states[0]);
    v.handoff.all_pairs = false;
    v.handoff.pairs.push(pair(0, 2, -5_000, 5_000));
    v.handoff.pairs.push(pair(2, 0, -5_000, 5_000));
    let f = judge(3, &v, None, Some("tsc"), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(
        f.reason.contains(
            "vCPU 0's kvmclock agrees with each other vCPU's within ±5,000 ns (vCPU 0's 4 pairs"
        ),
        "{}",
        f.reason
    );
    assert!(!f.reason.contains("every pair"), "{}", f.reason);
}

#[test]
fn a_failed_get_clock_is_undecided() {
    let mut v = view(0, 5_000, STABLE, [true; 2]);
    v.clock = Err("KVM_GET_CLOCK failed: EINVAL".into());
    let f = judge(2, &v, None, None, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
}

/// One direction slow, the other tight: the tight one bounds the pair.
#[test]
fn the_tighter_direction_bounds_the_pair() {
    let mut v = view(0, 5_000, STABLE, [true; 2]);
    v.handoff.pairs[1] = pair(1, 0, -3_000_000, 3_000_000);
    let f = judge(2, &v, None, None, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
}
