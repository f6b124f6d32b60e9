//! Unit tests of the master-clock, exact-skew and keeps judges, with values
//! shaped like the ones measured on PVM and on 6.1 / 6.12 in QEMU.

use super::*;
use crate::restore::testdata::{honoured, report};
use crate::restore::testdata_clock::{agreeing, clock_after_at, sample};
use crate::session::Handoff;

fn pages(bits: &[bool]) -> Vec<PageReport> {
    bits.iter()
        .enumerate()
        .map(|(i, &b)| PageReport {
            id: i as u32,
            version: 10,
            flags: u8::from(b),
            tsc_stable_bit: b,
            ..PageReport::default()
        })
        .collect()
}

fn split() -> Handoff {
    // 6.1 after a rendezvous: vCPU 1's kvmclock 1.2 ms ahead of vCPU 0's.
    let mut h: Handoff = agreeing();
    h.pairs[0].lower = 1_180_000;
    h.pairs[0].upper = 1_240_000;
    h.pairs[1].lower = -1_250_000;
    h.pairs[1].upper = -1_170_000;
    h
}

#[test]
fn the_master_clock_is_kept_off_broken_or_undecided() {
    let stable = Ok(sample(1, true));
    let off = Ok(sample(1, false));
    let agree = agreeing();
    let (m, w) = master_clock(&stable, &pages(&[true, true]), Some(&agree), None, 2);
    assert_eq!(m, MasterClock::Kept, "{w}");
    assert!(w.contains("agree within ±5,000 ns"), "{w}");
    let (m, w) = master_clock(&off, &pages(&[false, false]), Some(&agree), None, 2);
    assert_eq!(m, MasterClock::Off, "{w}");
    assert!(w.contains("PVCLOCK_TSC_STABLE_BIT per vCPU 0 0"), "{w}");
    // Off is off even when the guests' kvmclocks differ: no promise.
    assert_eq!(
        master_clock(&off, &pages(&[false; 2]), Some(&split()), None, 2).0,
        MasterClock::Off
    );
    let (m, w) = master_clock(&stable, &pages(&[true, true]), Some(&split()), None, 2);
    assert_eq!(m, MasterClock::Broken, "{w}");
    assert!(
        w.contains("vCPUs 0 and 1 see kvmclocks 1,180,000 ns apart"),
        "{w}"
    );
    let undecided = |c: &Result<ClockSample, String>, p: &[PageReport], a: Option<&Handoff>| {
        match master_clock(c, p, a, None, 2).0 {
            MasterClock::Undecided { why } => why,
            m => panic!("{m:?}"),
        }
    };
    assert!(undecided(&Err("EINVAL".into()), &pages(&[true; 2]), Some(&agree)).contains("EINVAL"));
    assert!(undecided(&stable, &pages(&[true, false]), Some(&agree)).contains("vCPU(s) 1's"));
    assert!(undecided(&stable, &[], Some(&agree)).contains("no kvmclock pages"));
    assert!(undecided(&stable, &pages(&[true; 2]), None).contains("did not run"));
    // One vCPU needs no hand-off test.
    assert_eq!(
        master_clock(&stable, &pages(&[true]), None, None, 1).0,
        MasterClock::Kept
    );
}

/// "Master clock kept" needs agreement that could have seen a broken
/// promise: the old judge said kept with no pair measured (bound 0) and
/// with a bound of any width.
#[test]
fn kept_needs_pairs_and_a_bound_that_could_see_a_difference() {
    let stable = Ok(sample(1, true));
    let why = |h: &Handoff, rel: Option<&[Option<f64>]>| match master_clock(
        &stable,
        &pages(&[true, true]),
        Some(h),
        rel,
        2,
    ) {
        (MasterClock::Undecided { why }, _) => why,
        (m, w) => panic!("{m:?}: {w}"),
    };
    let mut none = agreeing();
    none.pairs.clear();
    assert!(why(&none, None).contains("measured no pair"));
    let mut wide = agreeing();
    for p in &mut wide.pairs {
        (p.lower, p.upper) = (-2_000_000, 2_000_000);
    }
    assert!(why(&wide, None).contains("wider than the 100,000 ns floor"));
    // Offsets 54 us apart: ±5 us agreement excludes stale pages (kept),
    // ±90 us does not.
    let rel = [Some(0.0), Some(54_000.0)];
    let (m, w) = master_clock(
        &stable,
        &pages(&[true; 2]),
        Some(&agreeing()),
        Some(&rel),
        2,
    );
    assert_eq!(m, MasterClock::Kept, "{w}");
    let mut loose = agreeing();
    for p in &mut loose.pairs {
        (p.lower, p.upper) = (-90_000, 90_000);
    }
    assert!(why(&loose, Some(&rel)).contains("stale pvclock pages"));
}

#[test]
fn the_exact_skew_is_kept_lost_or_unknown() {
    let saved = [Some(0), Some(-13_540_489)];
    assert_eq!(skew_kept(&saved, &[&saved, &saved]), SkewKept::Kept);
    // msr on 6.1: every vCPU snapped to one offset.
    assert_eq!(
        skew_kept(&saved, &[&saved, &[Some(0), Some(0)]]),
        SkewKept::Lost {
            vcpu: 1,
            saved: -13_540_489,
            now: 0
        }
    );
    assert!(matches!(
        skew_kept(&saved, &[&[Some(0), None]]),
        SkewKept::Unknown { .. }
    ));
    assert!(matches!(
        skew_kept(&[None, None], &[]),
        SkewKept::Unknown { .. }
    ));
    assert!(matches!(skew_kept(&[], &[]), SkewKept::Unknown { .. }));
    assert_eq!(
        relative(&[Some(5), Some(2), None]),
        [Some(0), Some(-3), None]
    );
    assert_eq!(relative(&[None, Some(2)]), [None, None]);
}

#[test]
fn which_property_a_method_keeps() {
    let lost = || SkewKept::Lost {
        vcpu: 1,
        saved: -300,
        now: 0,
    };
    let unknown = || SkewKept::Unknown { why: "x".into() };
    let cases = [
        (SkewKept::Kept, MasterClock::Kept, Kept::Both),
        (SkewKept::Kept, MasterClock::Off, Kept::ExactSkew),
        (SkewKept::Kept, MasterClock::Broken, Kept::ExactSkew),
        (lost(), MasterClock::Kept, Kept::MasterClock),
        (lost(), MasterClock::Off, Kept::Neither),
        (unknown(), MasterClock::Kept, Kept::Undecided),
        (
            SkewKept::Kept,
            MasterClock::Undecided { why: "y".into() },
            Kept::Undecided,
        ),
    ];
    for (skew, master, want) in cases {
        let k = kept_after(1, skew.clone(), Some(300), 2, master.clone());
        assert_eq!(k.keeps, want, "{skew:?} {master:?}: {}", k.words);
        assert!(k.words.starts_with("after one restore: "), "{}", k.words);
    }
    let k = kept_after(2, SkewKept::Kept, Some(300), 2, MasterClock::Off);
    assert!(
        k.words
            == "after two restores: kept the exact skew (300 cycles, every relative offset \
                bit-exact); lost the master clock (no KVM_CLOCK_TSC_STABLE)",
        "{}",
        k.words
    );
    // PVM: the offsets never held a skew, so keeping it says nothing.
    let k = kept_after(1, SkewKept::Kept, Some(0), 2, MasterClock::Kept);
    assert!(
        k.skew_trivial && k.words.contains("trivially"),
        "{}",
        k.words
    );
    assert!(kept_after(1, SkewKept::Kept, None, 1, MasterClock::Kept).skew_trivial);
}

#[test]
fn the_clock_after_report_and_the_chain_agree_with_the_measurement() {
    let r = report(&honoured(0));
    let k = r.keeps.as_ref().expect("keeps");
    assert_eq!(k.after_one.keeps, Kept::ExactSkew, "{}", k.after_one.words);
    let two = k.after_two.as_ref().expect("a chained restore");
    assert_eq!(two.keeps, Kept::ExactSkew, "{}", two.words);
    let c = r.chain.as_ref().expect("chain");
    assert!(c.completed);
    assert_eq!(c.skew_saved_cycles, c.skew_after_cycles);
    assert_eq!(c.skew_after_cycles, r.skew_before_cycles);
    let a = r
        .kvmclock
        .as_ref()
        .and_then(|c| c.after.as_ref())
        .expect("after");
    assert_eq!(
        (a.tsc_stable, a.master_clock.clone()),
        (Some(false), MasterClock::Off)
    );
    assert_eq!(a.relative_offsets, [Some(0), Some(-300)]);
    assert_eq!(a.pairs.len(), 2);
    // A stable VM whose pages carry the bit keeps the master clock when
    // its pairs' agreement excludes what stale pages would show (the
    // offsets 300 cycles, 150 ns, apart): within ±50 ns, not ±5,000 ns.
    let states = honoured(0).after.unwrap_or_default();
    let loose = clock_after(&clock_after_at(1_000, &states, true), 2);
    assert!(
        matches!(loose.master_clock, MasterClock::Undecided { .. }),
        "{}",
        loose.words
    );
    let mut tight = clock_after_at(1_000, &states, true);
    for p in tight.handoff.iter_mut().flat_map(|h| h.pairs.iter_mut()) {
        (p.lower, p.upper) = (-50, 50);
    }
    let stable = clock_after(&tight, 2);
    assert_eq!(stable.master_clock, MasterClock::Kept, "{}", stable.words);
    assert_eq!(
        stable.flags,
        [
            "KVM_CLOCK_TSC_STABLE",
            "KVM_CLOCK_REALTIME",
            "KVM_CLOCK_HOST_TSC"
        ]
    );
}

/// 6.1 and the documented method: the restored VM has no master clock, so
/// its KVM_GET_CLOCK lacks real time and the host TSC and the method cannot
/// restore it again. Nothing is said after two restores, and why.
#[test]
fn a_chain_the_method_cannot_do_says_why_instead_of_after_two() {
    let mut run = honoured(0);
    if let Some(c) = run.chain.as_mut() {
        c.trace = None;
        c.after = None;
        c.clock_first = None;
        c.first = None;
        c.clock_after = None;
        c.not_possible = Some("KVM_GET_CLOCK on the restored VM returned flags 0x0".into());
    }
    let mut r = crate::restore::MethodReport::from_run(&run, &crate::restore::testdata::options());
    let k = r.keeps.take().expect("keeps");
    assert_eq!(k.after_two, None);
    assert_eq!(
        k.after_two_why_not.as_deref(),
        Some("KVM_GET_CLOCK on the restored VM returned flags 0x0")
    );
    let c = r.chain.as_ref().expect("chain");
    assert!(!c.completed && c.not_possible.is_some());
    assert_eq!(c.skew_after_cycles, None);
}
