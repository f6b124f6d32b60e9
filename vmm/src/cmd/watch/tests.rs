//! Tests of `kvmclock-watch`'s analysis over synthetic samples (1 GHz, so a
//! cycle is a ns), its options and its report's words.

use super::analysis::{analyse, between, offset, Bracket, Input, Outcome, Sample, State, Watched};
use super::*;

const S: u64 = 1_000_000_000;
/// The host bracket of every read, ns.
const READ: u64 = 40_000;
/// The baseline read starts here (host CLOCK_MONOTONIC_RAW, ns).
const T0: u64 = 10 * S;
/// kvmclock at the baseline read's midpoint.
const K0: u64 = 5 * S;
/// The write's move: 4 s at 1 GHz.
const MOVE: i64 = 4_000_000_000;

/// A read starting at host time `t`, kvmclock off real time by `off` at its
/// midpoint (true since the baseline), page version `version`.
fn read_at(t: u64, off: i64, version: u32) -> Sample {
    let real = t as i64 - T0 as i64;
    Sample {
        host: Bracket {
            before_ns: t,
            after_ns: t + READ,
        },
        kvmclock_ns: (K0 as i64 + real + off) as u64,
        version,
        page_version: version,
        tsc_offset: Some(0),
        ..Sample::default()
    }
}

/// The write's host bracket: 1 ms after the baseline.
fn write() -> Bracket {
    Bracket {
        before_ns: T0 + S / 1000,
        after_ns: T0 + S / 1000 + 200_000,
    }
}

/// Samples every second from 2 ms after the baseline for `secs` s, each
/// with the offset and version `f` gives for its second.
fn series(secs: u64, f: impl Fn(u64) -> (i64, u32)) -> Vec<Sample> {
    (0..=secs)
        .map(|i| {
            let (off, v) = f(i);
            read_at(T0 + 2 * S / 1000 + i * S, off, v)
        })
        .collect()
}

fn watch(samples: &[Sample], moved: Option<i64>, wrote: bool) -> Watched {
    let base = read_at(T0, 0, 4);
    analyse(&Input {
        vcpu: 0,
        wrote,
        vm_created: Bracket {
            before_ns: T0 - 3 * S,
            after_ns: T0 - 3 * S + 5_000_000,
        },
        write: write(),
        moved_cycles: moved,
        khz: 1_000_000,
        settling: &[],
        baseline: &base,
        samples,
    })
}

#[test]
fn the_offset_interval_holds_reads_anywhere_in_both_brackets() {
    let base = read_at(T0, 0, 4);
    let s = read_at(T0 + 7 * S, 123_456, 4);
    let o = offset(&base, &s);
    // The midpoints' offset is the true one; the interval is the brackets'
    // width wide, around it.
    assert!(o.lo_ns <= 123_456 && 123_456 <= o.hi_ns, "{o:?}");
    assert_eq!(o.hi_ns - o.lo_ns, 2 * READ as i64);
    // A read at either end of either bracket is inside too: kvmclock read
    // at the start of the later bracket, real time at its end...
    for (db, ds) in [(0, 0), (READ, 0), (0, READ), (READ, READ)] {
        let true_elapsed = (T0 + 7 * S + ds) as i64 - (T0 + db) as i64;
        let advance = s.kvmclock_ns as i64 - base.kvmclock_ns as i64;
        let true_offset = advance - true_elapsed;
        assert!(
            o.lo_ns <= true_offset && true_offset <= o.hi_ns,
            "{db} {ds}: {true_offset} not in {o:?}"
        );
    }
    let e = between(&base.host, &s.host);
    assert_eq!(
        (e.lo_ns, e.hi_ns),
        ((7 * S - READ) as i64, (7 * S + READ) as i64)
    );
}

#[test]
fn a_stale_page_refreshed_at_300_s_is_timed_and_its_step_back_measured() {
    // Off by the move until 300 s, back on real time from 301 s; the page's
    // version 4 throughout the stale part, 6 after.
    let samples = series(330, |i| if i <= 300 { (MOVE, 4) } else { (0, 6) });
    let w = watch(&samples, Some(MOVE), true);
    assert_eq!(w.outcome, Outcome::StaleThenRefreshed, "{w:#?}");
    assert_eq!(w.tsc_moved_ns, Some(MOVE));
    let jump = w.at_write.expect("a first sample");
    assert!(jump.lo_ns <= MOVE && MOVE <= jump.hi_ns, "{jump:?}");
    let r = w.refresh.expect("refreshed");
    assert_eq!(r.version, (4, 6));
    // Between the 300 s sample's start and the 301 s one's end, since the
    // write (which ended 1.2 ms after the baseline, samples start 2 ms
    // after it).
    let lo = (300 * S + 2_000_000) as i64 - (S / 1000 + 200_000) as i64;
    let hi = (301 * S + 2_000_000 + READ) as i64 - (S / 1000) as i64;
    assert_eq!((r.since_write.lo_ns, r.since_write.hi_ns), (lo, hi));
    assert!(r.since_vm.lo_ns > r.since_write.lo_ns, "the VM came first");
    assert!(
        r.step.lo_ns <= -MOVE && -MOVE <= r.step.hi_ns,
        "the step back is the move: {:?}",
        r.step
    );
    assert_eq!(r.step.half(), 2 * READ as i64, "both samples' errors");
    assert_eq!(w.version_changes.len(), 1, "{:?}", w.version_changes);
    let c = w.version_changes[0];
    assert_eq!((c.from, c.to), (4, 6));
    assert_eq!(c.since_write, r.since_write);
    let text = report_words(&w);
    assert!(
        text.contains("stayed off real time by the move until the page was refreshed between")
            && text.contains("version 4 -> 6")
            && text.contains("back to real time"),
        "{text}"
    );
}

#[test]
fn a_page_never_refreshed_is_stale_through_the_last_sample() {
    let samples = series(20, |_| (MOVE, 4));
    let w = watch(&samples, Some(MOVE), true);
    assert_eq!(w.outcome, Outcome::StaleThroughout);
    assert!(
        w.refresh.is_none() && w.version_changes.is_empty(),
        "{w:#?}"
    );
    assert!(w.points.iter().all(|p| p.state == State::OffByTheWrite));
    let last = w.watched_for.expect("watched");
    assert!(last.lo_ns > 20 * S as i64 && last.hi_ns < 20 * S as i64 + 2_000_000);
    let text = report_words(&w);
    assert!(text.contains("no refresh within the watch"), "{text}");
}

#[test]
fn noise_within_the_bounds_keeps_every_state() {
    // The offset wanders by up to 0.9 of the tolerance: 1 us plus 1000 ppm
    // of the time since the baseline (and of the move, while stale).
    let wobble = |i: u64, base: i64| {
        let tol = 1_000 + ((i * S) as i64 + base.abs()) / 1_000;
        let sign = if i % 2 == 0 { 1 } else { -1 };
        base + sign * (tol * 9 / 10)
    };
    let stale = series(60, |i| (wobble(i, MOVE), 4));
    let w = watch(&stale, Some(MOVE), true);
    assert_eq!(w.outcome, Outcome::StaleThroughout, "{w:#?}");
    let control = series(60, |i| (wobble(i, 0), 4));
    let c = watch(&control, Some(0), false);
    assert_eq!(c.outcome, Outcome::RanOn, "{c:#?}");
    assert!(report_words(&c).contains("on real time at every sample"));
    // Beyond the bounds: half the move is neither.
    let odd = series(10, |i| (if i == 5 { MOVE / 2 } else { MOVE }, 4));
    let o = watch(&odd, Some(MOVE), true);
    assert_eq!(o.outcome, Outcome::Other);
    assert_eq!(o.points[5].state, State::Other);
    assert!(
        report_words(&o).contains("WWWWW?WWWW"),
        "{}",
        report_words(&o)
    );
}

#[test]
fn a_write_that_did_not_move_the_tsc_is_said_plainly() {
    // PVM: the exact offset stays put and kvmclock stays on real time.
    let samples = series(2, |_| (0, 4));
    let w = watch(&samples, Some(0), true);
    assert_eq!(w.outcome, Outcome::NotMoved);
    assert!(w.refresh.is_none());
    let text = report_words(&w);
    assert!(
        text.contains("the write did not move the TSC") && text.contains("no jump to time"),
        "{text}"
    );
}

#[test]
fn a_page_updated_at_the_write_runs_on() {
    // The fixed kernel: the version goes up at the write and kvmclock stays
    // on real time.
    let samples = series(10, |_| (0, 6));
    let w = watch(&samples, Some(MOVE), true);
    assert_eq!(w.outcome, Outcome::RanOn);
    assert_eq!(w.version_changes.len(), 1);
    let c = w.version_changes[0];
    assert!(
        c.since_write.lo_ns < 0 && c.since_write.hi_ns > 0,
        "between the baseline and the first sample: {c:?}"
    );
    assert!(report_words(&w).contains("the page was updated at the write"));
}

#[test]
fn without_exact_offsets_the_move_is_unknown_and_nothing_is_stale() {
    let samples = series(3, |_| (MOVE, 4));
    let w = watch(&samples, None, true);
    assert_eq!(w.outcome, Outcome::MoveUnknown);
    assert!(w.points.iter().all(|p| p.state == State::Other));
    assert!(watch(&[], Some(MOVE), true).outcome == Outcome::NothingSampled);
}

#[test]
fn version_changes_while_settling_are_kept_apart() {
    // KVM's update 100 ms after kvmclock was enabled: 2 -> 4 between the
    // first two settling samples, none after.
    let settling = [read_at(T0 - 2 * S, 0, 2), read_at(T0 - S, 0, 4)];
    let base = read_at(T0, 0, 4);
    let samples = series(3, |_| (MOVE, 4));
    let w = analyse(&Input {
        vcpu: 0,
        wrote: true,
        vm_created: Bracket {
            before_ns: T0 - 3 * S,
            after_ns: T0 - 3 * S + 5_000_000,
        },
        write: write(),
        moved_cycles: Some(MOVE),
        khz: 1_000_000,
        settling: &settling,
        baseline: &base,
        samples: &samples,
    });
    assert_eq!(w.before_write.len(), 1, "{:?}", w.before_write);
    let c = w.before_write[0];
    assert_eq!((c.from, c.to), (2, 4));
    assert_eq!(
        (c.since_vm.lo_ns, c.since_vm.hi_ns),
        ((S - 5_000_000) as i64, (2 * S + READ) as i64)
    );
    assert!(w.version_changes.is_empty(), "none after the baseline");
    assert_eq!(w.outcome, Outcome::StaleThroughout);
}

/// The report's sentence about `w`.
fn report_words(w: &Watched) -> String {
    report::vcpu_words(w)
}

#[test]
fn the_options_are_bounded_and_say_why() {
    assert_eq!(parse_seconds("330"), Ok(330));
    let e = parse_seconds("0").expect_err("zero");
    assert!(e.contains("300 s"), "{e}");
    assert!(parse_seconds("86401").is_err());
    assert!(parse_seconds("1.5").is_err());
    assert_eq!(parse_interval_ms("1000"), Ok(1000));
    assert!(parse_interval_ms("9").is_err() && parse_interval_ms("60001").is_err());
    assert_eq!(parse_settle_ms("0"), Ok(0));
    assert!(parse_settle_ms("60001").is_err());
}
