//! Unit tests of the kvmclock continuity judge, on readings shaped like the
//! ones measured on this machine's PVM (2,445,430 kHz) and on 6.1 in QEMU:
//! continuous, jumped ahead, fell behind, backwards, and each undecided
//! case.

use super::*;
use crate::restore::testdata::{honoured, report};

const KHZ: u32 = 2_445_430;

/// A record whose second reading (after the +0 TSC_ADJUST write) is `k`
/// ns on a page `age` ns old, version `v`; its first reading `k - 40,000`
/// ns (a page the write re-anchored by `reanchor` ns).
fn before(k: u64, age: u64, v: u32, reanchor: i64) -> ClockRecord {
    ClockRecord {
        version_before: v - 2,
        version_after: v,
        mul_before: 3_512_000_000,
        mul_after: 3_512_000_000,
        tsc_timestamp_before: 21_418_500_000_000,
        tsc_timestamp_after: 21_418_518_700_000,
        system_time_before: 1_000,
        system_time_after: k - age,
        tsc_before: 21_418_518_800_000,
        // 40 us of cycles later.
        tsc_after: 21_418_518_800_000 + 97_817,
        kvmclock_before: (k as i64 - 40_000 - reanchor) as u64,
        kvmclock_after: k,
        ..ClockRecord::default()
    }
}

/// A record whose first reading is `k` ns on a page `age` ns old, version
/// `v`, the page written at a TSC past the source's.
fn after(k: u64, age: u64, v: u32) -> ClockRecord {
    ClockRecord {
        version_before: v,
        version_after: v + 2,
        mul_before: 3_512_000_000,
        mul_after: 3_512_000_000,
        tsc_timestamp_before: 21_418_959_377_302,
        system_time_before: k - age,
        tsc_before: 21_418_960_000_000,
        kvmclock_before: k,
        ..ClockRecord::default()
    }
}

/// A host bracket like the PVM documented run's: about 178.2..180.5 ms.
fn bracket() -> Option<Elapsed> {
    let reads = |host_before, host_after| ClockReads {
        records: Vec::new(),
        host_before,
        host_after,
        kvm: Err("not sampled".into()),
    };
    elapsed(
        &reads(1_000_000_000, 1_001_909_000),
        &reads(1_437_669_000, 1_441_491_000),
        KHZ,
    )
}

/// vCPU `id`'s continuity over [`bracket`], no extra allowance, no step.
fn judged(id: u32, b: &ClockRecord, a: &ClockRecord) -> VcpuContinuity {
    continuity(id, b, a, bracket(), KHZ, 0, None)
}

#[test]
fn the_host_bracket_is_rounded_outwards() {
    let e = bracket().expect("a frequency");
    assert_eq!((e.min_cycles, e.max_cycles), (435_760_000, 441_491_000));
    // 435,760,000 cycles at 2,445,430 kHz = 178,193,610.1 ns: down; the max up.
    assert_eq!(e.min_ns, 178_193_610);
    assert_eq!(e.max_ns, 180_537_166);
    let r = ClockReads {
        records: Vec::new(),
        host_before: 0,
        host_after: 0,
        kvm: Err(String::new()),
    };
    assert_eq!(elapsed(&r, &r, 0), None, "no frequency, no time");
}

#[test]
fn a_kvmclock_that_advanced_by_the_host_time_is_continuous() {
    // PVM, documented: 63,027,887 -> 243,090,825 ns.
    let c = continuity(
        0,
        &before(63_027_887, 2_000_000, 6, 0),
        &after(243_090_825, 150_000, 10),
        bracket(),
        KHZ,
        700,
        None,
    );
    assert_eq!(c.outcome, Continuity::Continuous, "{}", c.words);
    assert_eq!(c.advance_ns, 180_062_938);
    // 1000 ppm of (180,537,166 + 2,000,000 + 150,000) ns, up, + 700 + 4.
    assert_eq!(c.allowance_ns, 182_688 + 704);
    assert!(c.page_rewritten);
    assert!(
        c.words.starts_with("continuous: advanced 180.063 ms"),
        "{}",
        c.words
    );
    // The re-anchoring before the snapshot moved kvmclock by 0 (beyond the
    // 40 us the TSC advanced, within rounding).
    assert!(c.reanchor_before_ns.abs() < 2, "{}", c.reanchor_before_ns);
    let stale = judged(
        0,
        &before(63_027_887, 2_000_000, 6, -1_234_567),
        &after(243_090_825, 150_000, 10),
    );
    assert!((stale.reanchor_before_ns + 1_234_567).abs() < 2);
}

#[test]
fn a_kvmclock_that_restarted_or_lost_time_jumped_or_went_backwards() {
    // msr on PVM: the destination's kvmclock started at its creation.
    let behind = judged(
        0,
        &before(23_762_002, 1_000_000, 6, 0),
        &after(47_273_496, 190_000, 10),
    );
    match behind.outcome {
        Continuity::Jumped { min_ns, max_ns } => {
            assert!(max_ns < 0 && min_ns < max_ns, "{min_ns}..{max_ns}");
            // 23,511,494 ns advanced; 178.19..180.54 ms passed.
            assert_eq!(
                max_ns,
                23_511_494 - 178_193_610 + behind.allowance_ns as i64
            );
        }
        ref o => panic!("{o:?}"),
    }
    assert!(
        behind.words.starts_with("fell behind by"),
        "{}",
        behind.words
    );
    let ahead = judged(1, &before(63_027_887, 0, 6, 0), &after(263_090_825, 0, 10));
    assert!(
        matches!(ahead.outcome, Continuity::Jumped { min_ns, .. } if min_ns > 19_000_000),
        "{:?}",
        ahead.outcome
    );
    assert!(
        ahead.words.starts_with("jumped ahead by"),
        "{}",
        ahead.words
    );
    // msr, chained: the second destination's kvmclock restarted below the
    // first's last reading.
    let back = judged(
        0,
        &before(7_827_683_409, 500_000, 20, 0),
        &after(41_579_210, 190_000, 4),
    );
    assert_eq!(
        back.outcome,
        Continuity::Backwards {
            by_ns: 7_786_104_199
        }
    );
    assert!(
        back.words.starts_with("went backwards by 7786.104 ms"),
        "{}",
        back.words
    );
    // Backwards is decided even when the host clock was stepped.
    let stepped = continuity(
        0,
        &before(7_827_683_409, 0, 20, 0),
        &after(41_579_210, 0, 4),
        bracket(),
        KHZ,
        0,
        Some("stepped"),
    );
    assert!(matches!(stepped.outcome, Continuity::Backwards { .. }));
}

#[test]
fn readings_that_cannot_decide_are_undecided_with_why() {
    let undecided = |b: &ClockRecord, a: &ClockRecord, e, khz, stepped| match continuity(
        0, b, a, e, khz, 0, stepped,
    )
    .outcome
    {
        Continuity::Undecided { why } => why,
        o => panic!("{o:?}"),
    };
    let (b, a) = (before(63_027_887, 0, 6, 0), after(243_090_825, 0, 10));
    let mut torn = a;
    torn.version_before = 11;
    assert!(undecided(&b, &torn, bracket(), KHZ, None).contains("torn"));
    let mut blank = a;
    blank.mul_before = 0;
    assert!(undecided(&b, &blank, bracket(), KHZ, None).contains("never written"));
    // The restored VM left the page as saved: same version, anchor, time.
    let mut saved = a;
    saved.version_before = b.version_after;
    saved.tsc_timestamp_before = b.tsc_timestamp_after;
    saved.system_time_before = b.system_time_after;
    assert!(undecided(&b, &saved, bracket(), KHZ, None).contains("did not rewrite"));
    let mut ahead_of_tsc = a;
    ahead_of_tsc.tsc_before = a.tsc_timestamp_before - 5;
    assert!(undecided(&b, &ahead_of_tsc, bracket(), KHZ, None).contains("below its page"));
    assert!(undecided(&b, &a, None, 0, None).contains("no TSC frequency"));
    assert_eq!(
        undecided(&b, &a, bracket(), KHZ, Some("stepped")),
        "stepped"
    );
}

#[test]
fn the_allowance_is_ntp_over_the_interval_and_the_pages_ages() {
    assert_eq!(allowance(0, (0, 0), 0), ROUNDING_NS);
    assert_eq!(allowance(1_000_000, (0, 0), 0), 1_000 + ROUNDING_NS);
    assert_eq!(
        allowance(1_000_000, (2_000_000, 3_000_000), 50),
        6_000 + 50 + ROUNDING_NS
    );
}

#[test]
fn the_documented_clock_gives_its_set_clock_time_and_a_stepped_clock() {
    let run = honoured(0);
    let src = run.snapshot.as_ref().and_then(|s| s.clock);
    let (extra, stepped) = documented_clock(run.trace.as_ref(), src.as_ref(), 2_000_000);
    // KVM_SET_CLOCK took 1,000 cycles at 2 GHz.
    assert_eq!((extra, stepped), (500, None));
    let mut trace = run.trace.clone();
    if let Some(Trace::Documented(d)) = trace.as_mut() {
        if let Some(dst) = d.destination.as_mut() {
            dst.realtime_ns += 10_000_000_000;
        }
    }
    let (_, stepped) = documented_clock(trace.as_ref(), src.as_ref(), 2_000_000);
    assert!(stepped.is_some_and(|s| s.contains("the host clock was stepped")));
    let msr = crate::restore::testdata::msr(&run);
    assert_eq!(
        documented_clock(msr.trace.as_ref(), src.as_ref(), 2_000_000),
        (0, None)
    );
}

#[test]
fn a_restore_clock_report_has_every_vcpu_and_the_host_clocks() {
    let r = report(&honoured(0));
    let c = r.kvmclock.as_ref().expect("measured");
    assert_eq!(c.continuity.len(), 2);
    assert!(c
        .continuity
        .iter()
        .all(|v| v.outcome == Continuity::Continuous));
    let h = &c.host;
    assert_eq!(h.kvmclock_advance_ns, h.realtime_advance_ns);
    assert!(h.elapsed.is_some() && h.realtime_stepped.is_none());
    assert!(c
        .continuity_outcome
        .as_deref()
        .is_some_and(|w| w.starts_with("every vCPU's kvmclock ran on")));
    let mut v = c.continuity.clone();
    v[1].outcome = Continuity::Backwards { by_ns: 1 };
    v[1].words = "went backwards".into();
    assert_eq!(
        outcome_words(&v).as_deref(),
        Some(format!("vCPU 0: {}; vCPU 1: went backwards", v[0].words).as_str())
    );
    assert_eq!(outcome_words(&[]), None);
    let p = page_of(3, &before(5_000, 0, 6, 0), true);
    assert_eq!((p.id, p.version, p.system_time), (3, 6, 5_000));
}

/// At a scaled rate the host time between the readings is in ns at the
/// host's 2 GHz (199,960,000..199,980,000 host cycles: 99.98..99.99 ms),
/// so kvmclock, which keeps the host's time, is continuous at 0.5 and 2;
/// at the guest's rate the host time would read 200 ms or 50 ms, and
/// kvmclock would seem to have lost or gained 100 ms or 50 ms.
#[test]
fn a_scaled_restores_kvmclock_is_judged_against_host_time_at_the_hosts_rate() {
    for khz in [1_000_000, 4_000_000] {
        let r = report(&crate::restore::testdata::honoured_at(0, khz));
        let c = r.kvmclock.expect("measured");
        let e = c.host.elapsed.expect("a bracket");
        assert_eq!((e.min_ns, e.max_ns), (99_980_000, 99_990_000), "{khz}");
        assert!(
            c.continuity
                .iter()
                .all(|v| v.outcome == Continuity::Continuous),
            "{khz}: {:?}",
            c.continuity_outcome
        );
    }
}
