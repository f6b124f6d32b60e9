//! The forced hand-off test on simulated CPUs (host threads sharing one
//! globally monotonic clock, each with an offset it was given): every ordered
//! pair is exercised, each pair's interval contains the offsets the CPUs were
//! given, exactly, and is at most a round trip wide; the backwards steps it
//! reports are the ones the offsets allow.

mod common;

use common::{run_cpus, signed_diff, Setup};
use tsc_contract::{handoff, HandoffResult};
use tsc_sync::handoff::{handoff_test, HandoffParams, HandoffShared};

/// Runs the test on `n` CPUs started at `offsets`; returns every pair's
/// result, in pair order.
fn run(n: u32, offsets: &[u64], exchanges: u32, all: bool) -> Vec<HandoffResult> {
    let shared = HandoffShared::default();
    let pairs = handoff::pairs(n, all).expect("fits") as usize;
    let results = std::sync::Mutex::new(vec![HandoffResult::default(); pairs]);
    let setup = Setup {
        offsets: offsets.to_vec(),
        ..Setup::default()
    };
    let params = HandoffParams {
        total: n,
        exchanges,
        all,
        tag: 9,
    };
    let initiated: Vec<u32> = run_cpus(n, &setup, |sim| {
        handoff_test(&shared, sim.cpu, params, sim, |p, r| {
            results.lock().expect("not poisoned")[p as usize] = *r;
        })
    })
    .into_iter()
    .map(|(k, _)| k)
    .collect();
    assert_eq!(
        initiated.iter().sum::<u32>() as usize,
        pairs,
        "each pair initiated once"
    );
    results.into_inner().expect("not poisoned")
}

/// The relative offset of pair (a, b) as set up: b's TSC minus a's.
fn truth(offsets: &[u64], a: u32, b: u32) -> i64 {
    let o = |k: u32| offsets.get(k as usize).copied().unwrap_or(0);
    signed_diff(o(b), o(a))
}

fn check_pairs(n: u32, offsets: &[u64], exchanges: u32, all: bool) {
    let results = run(n, offsets, exchanges, all);
    for (p, r) in results.iter().enumerate() {
        let (a, b) = handoff::pair(p as u32, n, all).expect("in range");
        r.validate(a, b, 9, exchanges)
            .unwrap_or_else(|e| panic!("pair ({a}, {b}): {e}"));
        let t = truth(offsets, a, b);
        assert!(
            r.lower <= t && t <= r.upper,
            "pair ({a}, {b}): offset {t} outside [{}, {}]",
            r.lower,
            r.upper
        );
        let width = i128::from(r.upper) - i128::from(r.lower);
        assert!(
            (0..=i128::from(r.min_rtt)).contains(&width),
            "pair ({a}, {b}): width {width}, round trip {}",
            r.min_rtt
        );
        // The midpoint of the shortest exchange is within half its round
        // trip of the truth.
        let off = (i128::from(r.best_mid) - i128::from(t)).unsigned_abs();
        assert!(
            off <= u128::from(r.min_rtt.div_ceil(2)),
            "pair ({a}, {b}): midpoint {} is {off} from {t}, round trip {}",
            r.best_mid,
            r.min_rtt
        );
        // A backwards step from a to b is possible only when b is behind.
        if r.upper < 0 {
            assert!(
                t < 0,
                "pair ({a}, {b}): a step back of {} with b ahead",
                -r.upper
            );
        }
        if r.lower > 0 {
            assert!(
                t > 0,
                "pair ({a}, {b}): a step back of {} with a ahead",
                r.lower
            );
        }
    }
}

/// Every ordered pair of 2, 3 and 4 CPUs at offsets of every size and
/// sign, across the wrap of the 64-bit TSC: each interval holds the truth.
#[test]
fn every_ordered_pair_recovers_the_offsets_it_was_given() {
    let big = 1u64 << 33;
    check_pairs(2, &[0, 0], 50, true);
    check_pairs(2, &[0, big], 50, true);
    check_pairs(3, &[big, 0, big.wrapping_neg()], 30, true);
    check_pairs(4, &[u64::MAX - 5, 7, 1 << 50, 12_345], 20, true);
}

/// vCPU 0's pairs only: both directions of every pair with vCPU 0.
#[test]
fn the_pairs_of_cpu_0_cover_both_directions() {
    let offsets = [0, 1 << 20, (1u64 << 30).wrapping_neg()];
    check_pairs(3, &offsets, 40, false);
    let r = run(3, &offsets, 40, false);
    let names: Vec<(u32, u32)> = r.iter().map(|x| (x.a, x.b)).collect();
    assert_eq!(names, [(0, 1), (0, 2), (1, 0), (2, 0)]);
}

/// A CPU that is ahead shows up as backwards steps in the direction from
/// it: the pair from the CPU ahead sees its partner's TSC below its own.
#[test]
fn a_cpu_ahead_is_seen_stepping_back_from_it() {
    let ahead = 1u64 << 36; // far beyond any round trip between threads
    let r = run(2, &[ahead, 0], 20, true);
    // Pair 0 is (0, 1): CPU 1 reads after CPU 0, far below it.
    assert_eq!((r[0].a, r[0].b), (0, 1));
    assert!(
        r[0].upper < 0 && r[0].upper.unsigned_abs() > ahead / 2,
        "{:?}",
        r[0]
    );
    // Pair 1 is (1, 0): CPU 0 reads after CPU 1, far above it: no step back
    // from 1 to 0, but CPU 1's second read is far below CPU 0's.
    assert_eq!((r[1].a, r[1].b), (1, 0));
    assert!(r[1].lower > 0 && r[1].lower.unsigned_abs() > ahead / 2);
}

/// No exchange asked: every pair still reports, with nothing measured.
#[test]
fn zero_exchanges_report_every_pair_empty() {
    let r = run(3, &[0, 0, 0], 0, true);
    assert_eq!(r.len(), 6);
    assert!(r.iter().all(|x| x.exchanges == 0 && x.min_rtt == 0));
}
