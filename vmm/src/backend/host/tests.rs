//! The host backend on skews set on purpose: what each algorithm does with
//! them, checked through the same analysis the reports use. Relations only:
//! no cycle count of this machine is assumed.

use std::time::{Duration, Instant};

use tsc_contract::Variant;

use super::HostBackend;
use crate::analysis::RoundResult;
use crate::error::{Failure, RunError};
use crate::options::{Backend, RunOptions};
use crate::run::{driver, Listed, Schedule};

/// A skew far larger than anything a round or the host scheduler can add
/// (2^36 cycles: tens of seconds at any TSC frequency).
const SKEW: u64 = 1 << 36;

fn opts(vcpus: u32, schedule: Vec<Variant>) -> RunOptions {
    RunOptions {
        backend: Backend::Host,
        vcpus,
        schedule,
        timeout: Duration::from_secs(300),
        ..RunOptions::default()
    }
}

#[allow(clippy::result_large_err)]
fn run_from(o: &RunOptions, offsets: &[u64]) -> Result<Vec<RoundResult>, Failure> {
    let mut rounds = Vec::new();
    let mut schedule = Listed::new(&o.schedule);
    let mut backend =
        HostBackend::start(o, offsets, schedule.max_rounds()).map_err(Failure::early)?;
    let first = schedule.next_variant();
    driver::drive(&mut backend, o, first, &mut schedule, &mut |r| {
        rounds.push(r);
        Ok(())
    })?;
    Ok(rounds)
}

fn ok(o: &RunOptions, offsets: &[u64]) -> Vec<RoundResult> {
    run_from(o, offsets).unwrap_or_else(|f| panic!("the run failed: {f}"))
}

/// The exact relative offset of thread `k` after round `r`.
fn rel(r: &RoundResult, k: usize) -> i64 {
    r.vcpus[k]
        .rel_offset_attr
        .unwrap_or_else(|| panic!("no exact offset"))
}

/// Xen's TSC rendezvous removes a skew it is given: thread 1 starts far
/// ahead; after one round every thread's TSC was written with one value,
/// and what is left is the spread of the writes' moments, far below the
/// skew. The std rendezvous leaves the skew exactly as it was.
#[test]
fn the_tsc_rendezvous_removes_a_skew_and_the_std_one_keeps_it() {
    let r = ok(&opts(2, vec![Variant::Xen415]), &[0, SKEW]);
    assert_eq!(r[0].skew_basis, crate::analysis::SkewBasis::Offsets);
    assert!(r[0].skew_cycles < SKEW / 4, "{}", r[0].skew_cycles);
    assert_eq!(r[0].skew_cycles_attr, Some(r[0].skew_cycles));
    assert!(
        r[0].vcpus[0].tsc_adjust_delta > 0,
        "thread 0 jumped forward"
    );
    assert_eq!(r[0].writes_honoured, Some(true));
    assert!(r[0].disagreements.is_empty(), "{:?}", r[0].disagreements);

    let r = ok(&opts(3, vec![Variant::XenStd; 2]), &[0, SKEW, SKEW / 2]);
    for round in &r {
        assert_eq!(rel(round, 1), SKEW as i64);
        assert_eq!(rel(round, 2), (SKEW / 2) as i64);
        assert_eq!(round.skew_cycles, SKEW);
    }
}

/// Linux's sync finds an AP ahead and one behind, moves their TSC_ADJUST by
/// what it measured, and leaves far less skew than it was given; every
/// compensation is in TSC_ADJUST and in the offset, exactly.
#[test]
fn linux_tsc_sync_compensates_a_skew_it_is_given() {
    let o = RunOptions {
        // Long windows: the pair overlaps even on a loaded host.
        sync_windows_ms: (100, 100),
        ..opts(3, vec![Variant::LinuxTscSync])
    };
    let r = ok(&o, &[0, SKEW, SKEW.wrapping_neg()]);
    let round = &r[0];
    let sync = round.sync.as_ref().expect("Linux's results");
    assert_eq!(sync.aps.len(), 2);
    for ap in &sync.aps {
        let k = ap.ap as usize;
        let v = &round.vcpus[k];
        let total: i64 = ap.compensations.iter().sum();
        assert!(!ap.compensations.is_empty(), "AP {k} was compensated");
        assert_eq!(total, v.tsc_adjust_delta, "AP {k}");
        assert_eq!(v.offset_delta, Some(total), "AP {k}");
        assert!(ap.runs[0].warps > 0, "AP {k}'s first run saw the skew");
        assert!(
            rel(round, k).unsigned_abs() < SKEW / 4,
            "AP {k} left at {}",
            rel(round, k)
        );
    }
    // The AP ahead went back, the one behind forward.
    assert!(round.vcpus[1].tsc_adjust_delta < 0);
    assert!(round.vcpus[2].tsc_adjust_delta > 0);
    assert_eq!(round.vcpus[0].tsc_adjust_delta, 0, "the source never moves");
    assert!(round.disagreements.is_empty(), "{:?}", round.disagreements);
}

/// The deadline ends a round that cannot finish in time: no hang, a
/// timeout naming the threads and where they were, nothing completed.
#[test]
fn the_deadline_stops_a_round_cleanly() {
    let o = RunOptions {
        timeout: Duration::from_millis(200),
        // One window alone outlasts the deadline many times over.
        sync_windows_ms: (60_000, 60_000),
        ..opts(2, vec![Variant::LinuxTscSync; 3])
    };
    let started = Instant::now();
    let f = run_from(&o, &[]).expect_err("it cannot finish in time");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(f.rounds_completed, 0);
    assert!(f.host.is_some_and(|h| h.on_host_threads()));
    let RunError::Timeout(stall) = &f.error else {
        panic!("not a timeout: {}", f.error)
    };
    assert_eq!(stall.round, 0);
    assert!(!stall.missing.is_empty());
    assert!(
        stall
            .missing
            .iter()
            .all(|(_, p)| matches!(p, Some(tsc_contract::Progress::At { round: 0, .. }))),
        "{stall}"
    );
}

/// An error from the consumer of the rounds ends the run after that round.
#[test]
fn a_failing_consumer_ends_the_run() {
    let o = opts(2, vec![Variant::XenHead; 5]);
    let mut seen = 0;
    let f = crate::run::run_streaming(&o, &mut |_| {
        seen += 1;
        Err("disk full".into())
    })
    .expect_err("the consumer failed");
    assert_eq!((seen, f.rounds_completed), (1, 0));
    assert!(matches!(f.error, RunError::Output(ref m) if m == "disk full"));
}

/// A round's read of every thread (asked for as each thread's part ends)
/// is the read a separate read-back after the round gives: the same exact
/// offsets and TSC_ADJUST, each thread's TSC inside its bracket of the
/// coordinator's two reads, the threads read one after the other.
#[test]
fn the_read_that_ends_a_round_is_a_read_back() {
    use crate::backend::{Backend, RoundData};
    let o = opts(3, vec![Variant::XenStd; 2]);
    let offsets = [0, SKEW, SKEW / 2];
    let mut b = HostBackend::start(&o, &offsets, 2).unwrap_or_else(|e| panic!("{e}"));
    let mut data = RoundData::with_capacity(3);
    for round in 0..2 {
        b.run_round(round, Variant::XenStd, &mut data)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let mut back = Vec::new();
        b.readback(round, &mut back)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((data.records.len(), data.after.len()), (3, 3));
        let mut last_after = 0;
        for (k, (s, r)) in data.after.iter().zip(&back).enumerate() {
            let raw = s.tsc.wrapping_sub(s.offset.unwrap_or(0));
            assert!(
                s.host_before <= raw && raw <= s.host_after,
                "thread {k}: {} <= {raw} <= {}",
                s.host_before,
                s.host_after
            );
            assert!(s.host_before >= last_after, "thread {k} read in turn");
            last_after = s.host_after;
            // The std rendezvous writes no TSC: the offsets are the ones
            // given, in the round's read and in the read-back alike.
            assert_eq!(s.offset, Some(offsets[k]), "thread {k}");
            assert_eq!((s.offset, s.adjust), (r.offset, r.adjust), "thread {k}");
            assert!(r.host_before >= s.host_after, "the read-back came later");
        }
    }
}
