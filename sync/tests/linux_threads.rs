//! Linux's TSC sync check (`tsc_sync.c`) on host threads (see `common`): CPU 0
//! against every AP in turn, with injected TSC offsets, and TSC_ADJUST
//! compensation that moves the simulated TSC as KVM does.
//!
//! The clock ticks every 100 µs: a lock handoff between two threads nearly
//! always takes less, even on a loaded 2-core machine, so the smallest handoff
//! of a run is 0 ticks, the warp measured is the skew itself and one
//! compensation aligns the TSCs (a second one fixes the rare 1-tick residual,
//! after which no warp is possible). The windows are long (100 ms and more) so
//! that both threads of a pair get to run inside them; nothing asserts a
//! duration.

mod common;

use std::sync::atomic::Ordering;

use common::{run_cpus, signed_diff, Setup, Sim};
use tsc_sync::linux::{
    compensation, linux_tsc_sync, LinuxApResult, LinuxParams, LinuxShared, LinuxState,
    LinuxSummary, LinuxSyncResult, LINUX_SHARED_SIZE, MAX_COMPENSATIONS, MAX_RUNS,
};

/// 100 µs per tick.
const TICK_NS: u64 = 100_000;
/// The injected spread: 10 ms.
const SKEW: u64 = 100;
/// Windows: 120 ms for the first AP of a package, 100 ms for the others.
const FIRST_WINDOW: u64 = 1_200;
const WINDOW: u64 = 1_000;
/// 4 CPUs per package, so that both windows are used from N = 5 on.
const PARAMS: LinuxParams = LinuxParams {
    test_runs: 3,
    package_first_window_cycles: FIRST_WINDOW,
    window_cycles: WINDOW,
    cpus_per_package: 4,
};

struct Run {
    targets: Vec<LinuxApResult>,
    summary: LinuxSummary,
    sims: Vec<Sim>,
    shared: LinuxShared,
}

fn run_linux(n: u32, setup: &Setup, params: LinuxParams) -> Run {
    let shared = LinuxShared::new();
    let outs = run_cpus(n, setup, |sim| {
        linux_tsc_sync(&shared, sim.cpu, n, params, sim)
    });
    let mut targets = Vec::new();
    let mut summary = None;
    let mut sims = Vec::new();
    for (k, (res, sim)) in outs.into_iter().enumerate() {
        match res {
            LinuxSyncResult::Source(s) => {
                assert_eq!(k, 0, "only CPU 0 is the source");
                summary = Some(s);
            }
            LinuxSyncResult::Target(t) => {
                assert_eq!(t.ap as usize, k, "an AP reports its own pair");
                targets.push(t);
            }
        }
        sims.push(sim);
    }
    Run {
        targets,
        summary: summary.expect("CPU 0 returns the summary"),
        sims,
        shared,
    }
}

/// The protocol's own line is back to its zero state after the last AP.
fn assert_protocol_reset(s: &LinuxShared, n: u32) {
    let l = Ordering::SeqCst;
    assert_eq!(s.start_count.load(l), 0, "start_count");
    assert_eq!(s.stop_count.load(l), 0, "stop_count");
    assert_eq!(s.test_runs.load(l), 0, "test_runs");
    assert_eq!(s.nr_warps.load(l), 0, "nr_warps");
    assert_eq!(s.random_warps.load(l), 0, "random_warps");
    assert_eq!(s.last_tsc.load(l), 0, "last_tsc");
    assert_eq!(s.max_warp.load(l), 0, "max_warp");
    assert_eq!(
        s.lock_next.load(l),
        s.lock_owner.load(l),
        "the lock is free"
    );
    assert_eq!(s.turn.load(l), n - 1, "turn");
    assert_eq!(s.finished.load(l), n - 1, "finished");
}

/// The summary is what the APs' own results add up to.
fn assert_summary_matches(run: &Run, n: u32) {
    let t = &run.targets;
    let s = &run.summary;
    assert_eq!(s.aps, n - 1);
    let count = |st: LinuxState| t.iter().filter(|r| r.state() == Some(st)).count() as u32;
    assert_eq!(s.synchronised, count(LinuxState::Synchronised));
    assert_eq!(s.unstable, count(LinuxState::Unstable));
    assert_eq!(s.runs, t.iter().map(|r| r.runs).sum::<u32>());
    assert_eq!(
        s.compensations,
        t.iter().map(|r| r.compensations).sum::<u32>()
    );
    assert_eq!(s.random, t.iter().filter(|r| r.random()).count() as u32);
    assert_eq!(
        s.clean_first_run,
        t.iter()
            .filter(|r| r.synchronised_after() == Some(1))
            .count() as u32
    );
    let first_unstable = t
        .iter()
        .find(|r| r.state() == Some(LinuxState::Unstable))
        .map_or(0, |r| r.ap);
    assert_eq!(s.first_unstable_ap, first_unstable);
    let max = t
        .iter()
        .flat_map(|r| r.run[..r.runs as usize].iter().map(|m| m.max_warp))
        .max()
        .unwrap_or(0);
    assert_eq!(s.max_warp, max);
}

/// Checks the bookkeeping of one AP's result against its simulated CPU: the
/// compensation rule, the TSC_ADJUST values written, the TSC moved.
fn assert_bookkeeping(r: &LinuxApResult, sim: &Sim, initial_adjust: u64, offset_before: u64) {
    let ctx = format!("AP {}", r.ap);
    let c = r.compensations as usize;
    assert!(
        r.runs >= 1 && r.runs as usize <= MAX_RUNS,
        "{ctx}: runs {r:?}"
    );
    assert!(c <= MAX_COMPENSATIONS, "{ctx}");
    assert_eq!(
        r.window_cycles,
        PARAMS.window_for(r.ap),
        "{ctx}: per-AP window"
    );
    for k in 0..r.runs as usize {
        let m = &r.run[k];
        assert_eq!(
            m.max_warp,
            m.source_max_warp.max(m.target_max_warp),
            "{ctx} run {k}"
        );
        assert!(m.target_read_max_warp <= m.max_warp, "{ctx} run {k}");
        assert_eq!(
            m.warps == 0,
            m.max_warp == 0,
            "{ctx} run {k}: warps and max_warp"
        );
    }
    for k in r.runs as usize..MAX_RUNS {
        assert_eq!(r.run[k], Default::default(), "{ctx}: unused run slot");
    }
    // Every compensation follows Linux's rule on its run's measurements.
    for k in 0..c {
        let m = &r.run[k];
        assert_eq!(
            r.compensation[k],
            compensation(m.target_max_warp, m.target_read_max_warp),
            "{ctx}: compensation {k}"
        );
    }
    // They add up to the TSC_ADJUST values written, and moved the TSC by
    // exactly that much.
    let mut adjusted = initial_adjust;
    for k in 0..c {
        adjusted = adjusted.wrapping_add(r.compensation[k] as u64);
        assert_eq!(r.tsc_adjust_written[k], adjusted, "{ctx}: TSC_ADJUST {k}");
    }
    assert_eq!(
        sim.tsc_adjust_writes,
        r.tsc_adjust_written[..c].to_vec(),
        "{ctx}"
    );
    assert_eq!(sim.tsc_adjust, adjusted, "{ctx}: final TSC_ADJUST");
    let total: i64 = r.compensation[..c].iter().sum();
    assert_eq!(
        signed_diff(sim.offset, offset_before),
        total,
        "{ctx}: TSC moved by"
    );
    if c > 0 {
        assert_eq!(
            r.tsc_adjust_initial, initial_adjust,
            "{ctx}: initial TSC_ADJUST"
        );
        assert_eq!(sim.tsc_adjust_reads, 1, "{ctx}: TSC_ADJUST read once");
    } else {
        assert_eq!(r.tsc_adjust_initial, 0, "{ctx}");
        assert_eq!(sim.tsc_adjust_reads, 0, "{ctx}: TSC_ADJUST not read");
    }
    for k in c..MAX_COMPENSATIONS {
        assert_eq!(
            (r.compensation[k], r.tsc_adjust_written[k]),
            (0, 0),
            "{ctx}"
        );
    }
    assert!(
        sim.tsc_writes.is_empty(),
        "{ctx}: IA32_TSC is never written"
    );
    assert_eq!(
        sim.iterations,
        (0..r.runs).collect::<Vec<_>>(),
        "{ctx}: progress hook once per run"
    );
}

/// Thread k starts `k * SKEW / (n - 1)` ahead of thread 0 (or behind it).
fn injected(n: u32, ahead: bool) -> Vec<u64> {
    (0..u64::from(n))
        .map(|k| {
            let d = k * SKEW / (u64::from(n) - 1);
            if ahead {
                d
            } else {
                d.wrapping_neg()
            }
        })
        .collect()
}

/// Every AP starts skewed and ends synchronised after compensating.
fn converges(n: u32, ahead: bool) {
    let offsets = injected(n, ahead);
    let adjust: Vec<u64> = (0..u64::from(n)).map(|k| k * 1000).collect();
    let setup = Setup {
        tick_ns: TICK_NS,
        offsets: offsets.clone(),
        tsc_adjust: adjust.clone(),
        ..Setup::default()
    };
    let run = run_linux(n, &setup, PARAMS);
    assert_eq!(run.targets.len() as u32, n - 1);

    for r in &run.targets {
        let k = r.ap as usize;
        let sim = &run.sims[k];
        let skew = offsets[k].wrapping_sub(offsets[0]) as i64;
        let ctx = format!("n={n} ahead={ahead} AP {k} (skew {skew}): {r:?}");
        assert_bookkeeping(r, sim, adjust[k], offsets[k]);

        assert_eq!(r.state(), Some(LinuxState::Synchronised), "{ctx}");
        assert!(r.runs >= 2, "{ctx}: the skew must be seen on the first run");
        assert_eq!(r.compensations, r.runs - 1, "{ctx}");
        assert_eq!(
            r.run[r.runs as usize - 1].warps,
            0,
            "{ctx}: the last run is clean"
        );
        let first = &r.run[0];
        assert!(first.warps > 0 && first.random_warps == 0, "{ctx}");
        // Only the CPU that is behind sees time go backwards, never by more
        // than the skew.
        if ahead {
            assert_eq!(first.target_max_warp, 0, "{ctx}");
            assert!(
                first.source_max_warp > 0 && first.source_max_warp <= skew.unsigned_abs(),
                "{ctx}"
            );
            assert!(r.compensation[0] < 0, "{ctx}: an AP ahead moves back");
        } else {
            assert_eq!(first.source_max_warp, 0, "{ctx}");
            assert!(
                first.target_max_warp > 0 && first.target_max_warp <= skew.unsigned_abs(),
                "{ctx}"
            );
            assert!(r.compensation[0] > 0, "{ctx}: an AP behind moves forward");
        }
        // Closer to CPU 0 than it started.
        let residual = signed_diff(sim.offset, run.sims[0].offset);
        assert!(
            residual.unsigned_abs() < skew.unsigned_abs(),
            "{ctx}: residual {residual}"
        );
    }

    // CPU 0 is the reference: never moved.
    let cpu0 = &run.sims[0];
    assert_eq!(cpu0.offset, offsets[0]);
    assert!(cpu0.tsc_adjust_writes.is_empty() && cpu0.tsc_adjust_reads == 0);

    // The final spread is smaller than the injected one.
    let rel: Vec<i64> = run
        .sims
        .iter()
        .map(|s| signed_diff(s.offset, cpu0.offset))
        .collect();
    let spread = rel.iter().max().unwrap() - rel.iter().min().unwrap();
    assert!(
        spread < SKEW as i64,
        "n={n} ahead={ahead}: spread {spread} from {SKEW}: {rel:?}"
    );

    assert_summary_matches(&run, n);
    assert_eq!(run.summary.synchronised, n - 1);
    assert_eq!(run.summary.unstable, 0);
    assert!(run.summary.max_warp <= SKEW);
    assert_protocol_reset(&run.shared, n);
}

macro_rules! converge_tests {
    ($($name:ident: $n:expr, $ahead:expr;)*) => {$(
        #[test]
        fn $name() {
            converges($n, $ahead);
        }
    )*};
}

converge_tests! {
    aps_ahead_converge_n2: 2, true;
    aps_ahead_converge_n3: 3, true;
    aps_ahead_converge_n4: 4, true;
    aps_ahead_converge_n5: 5, true;
    aps_ahead_converge_n6: 6, true;
    aps_ahead_converge_n7: 7, true;
    aps_ahead_converge_n8: 8, true;
    aps_behind_converge_n2: 2, false;
    aps_behind_converge_n5: 5, false;
    aps_behind_converge_n8: 8, false;
}

#[test]
fn a_single_cpu_does_nothing() {
    let run = run_linux(1, &Setup::default(), PARAMS);
    assert!(run.targets.is_empty());
    assert_eq!(run.summary, LinuxSummary::default());
    let sim = &run.sims[0];
    assert_eq!(sim.rdtsc_count, 0);
    assert!(sim.iterations.is_empty());
    assert_eq!(sim.tsc_adjust_reads, 0);
    assert!(sim.tsc_adjust_writes.is_empty());
    assert!(is_all_zero(&run.shared), "the shared state is untouched");
}

#[test]
fn cpus_in_sync_pass_on_the_first_run() {
    for n in 2..=4u32 {
        let setup = Setup {
            tick_ns: TICK_NS,
            ..Setup::default()
        };
        // Short windows (30 ms, 20 ms): nothing to detect.
        let params = LinuxParams::new(true, 300, 200);
        let run = run_linux(n, &setup, params);
        for r in &run.targets {
            assert_eq!(r.synchronised_after(), Some(1), "n={n}: {r:?}");
            assert_eq!(r.compensations, 0);
            assert_eq!(r.run[0].warps, 0);
            assert_eq!(r.window_cycles, 200, "one package: the short window");
            let sim = &run.sims[r.ap as usize];
            assert_eq!(sim.tsc_adjust_reads, 0);
            assert!(sim.tsc_adjust_writes.is_empty());
            assert_eq!(sim.offset, 0);
        }
        assert_summary_matches(&run, n);
        assert_eq!(run.summary.clean_first_run, n - 1);
        assert_protocol_reset(&run.shared, n);
    }
}

#[test]
fn without_tsc_adjust_a_skewed_target_ends_unstable() {
    for n in [2u32, 3] {
        let offsets = injected(n, true);
        let setup = Setup {
            tick_ns: TICK_NS,
            offsets: offsets.clone(),
            // Any TSC_ADJUST access panics.
            has_tsc_adjust: false,
            ..Setup::default()
        };
        let params = LinuxParams::new(false, FIRST_WINDOW, WINDOW);
        assert_eq!(params.test_runs, 1);
        let run = run_linux(n, &setup, params);
        for r in &run.targets {
            let ctx = format!("n={n}: {r:?}");
            assert_eq!(r.state(), Some(LinuxState::Unstable), "{ctx}");
            assert_eq!((r.runs, r.compensations), (1, 0), "{ctx}");
            assert!(r.run[0].warps > 0, "{ctx}");
            assert_eq!(
                run.sims[r.ap as usize].offset, offsets[r.ap as usize],
                "{ctx}: unmoved"
            );
        }
        assert_summary_matches(&run, n);
        assert_eq!(run.summary.unstable, n - 1);
        assert_eq!(run.summary.first_unstable_ap, 1);
        assert_protocol_reset(&run.shared, n);
    }
}

#[test]
fn random_warps_end_the_pair_at_once_without_compensating() {
    // Both TSCs jitter by up to 5 ms per read: each CPU sees the other's
    // time go backwards.
    let setup = Setup {
        tick_ns: TICK_NS,
        jitter: 50,
        ..Setup::default()
    };
    let run = run_linux(2, &setup, PARAMS);
    let r = &run.targets[0];
    assert_eq!(r.state(), Some(LinuxState::Unstable), "{r:?}");
    assert_eq!((r.runs, r.compensations), (1, 0), "{r:?}");
    assert!(r.run[0].random_warps > 0, "{r:?}");
    assert!(
        r.run[0].source_max_warp > 0 && r.run[0].target_max_warp > 0,
        "{r:?}"
    );
    assert!(r.random());
    assert_eq!(run.sims[1].tsc_adjust_reads, 0);
    assert!(run.sims[1].tsc_adjust_writes.is_empty());
    assert_summary_matches(&run, 2);
    assert_eq!(run.summary.random, 1);
    assert_protocol_reset(&run.shared, 2);
}

#[test]
fn compensation_rule() {
    // The target saw warps: it is behind by about its own warp.
    assert_eq!(compensation(500, 700), 500);
    assert_eq!(compensation(700, 700), 700);
    // Only the source saw warps: the target is ahead, move it back.
    assert_eq!(compensation(0, 700), -700);
    assert_eq!(compensation(0, 1), -1);
    // Nothing seen (Linux compensates by 0 then: a wasted run).
    assert_eq!(compensation(0, 0), 0);
}

#[test]
fn windows_follow_packages() {
    let p = LinuxParams {
        cpus_per_package: 4,
        ..LinuxParams::new(true, 20, 2)
    };
    let windows: Vec<u64> = (1..=9).map(|ap| p.window_for(ap)).collect();
    assert_eq!(windows, [2, 2, 2, 20, 2, 2, 2, 20, 2]);
    let one_package = LinuxParams::new(true, 20, 2);
    assert!((1..64).all(|ap| one_package.window_for(ap) == 2));
    assert_eq!(LinuxParams::new(true, 1, 1).test_runs, 3);
    assert_eq!(LinuxParams::new(false, 1, 1).test_runs, 1);
}

fn is_all_zero(s: &LinuxShared) -> bool {
    // SAFETY: LinuxShared is LINUX_SHARED_SIZE bytes of atomics and integers
    // with no implicit padding, so every byte is initialised.
    let bytes: [u8; LINUX_SHARED_SIZE] = unsafe { std::mem::transmute_copy(s) };
    bytes.iter().all(|&b| b == 0)
}

#[test]
fn layouts() {
    use std::mem::{align_of, size_of};
    assert_eq!(size_of::<LinuxShared>(), LINUX_SHARED_SIZE);
    assert_eq!(LINUX_SHARED_SIZE, 128);
    assert_eq!(align_of::<LinuxShared>(), 64);
    assert_eq!(size_of::<LinuxApResult>(), 184);
    assert_eq!(size_of::<LinuxSummary>(), 40);
    assert!(is_all_zero(&LinuxShared::new()));
    // SAFETY: atomics and integers are valid all-zero.
    let zeroed: LinuxShared = unsafe { std::mem::zeroed() };
    assert_eq!(zeroed.turn.load(Ordering::SeqCst), 0);
    assert_eq!(LinuxState::from_raw(0), Some(LinuxState::NotRun));
    assert_eq!(LinuxState::from_raw(1), Some(LinuxState::Synchronised));
    assert_eq!(LinuxState::from_raw(2), Some(LinuxState::Unstable));
    assert_eq!(LinuxState::from_raw(3), None);
    assert_eq!(LinuxApResult::default().state(), Some(LinuxState::NotRun));
}

#[test]
fn results_copy_word_by_word() {
    let mut r = LinuxApResult {
        ap: 3,
        state: LinuxState::Synchronised as u32,
        runs: 2,
        compensations: 1,
        window_cycles: 12345,
        tsc_adjust_initial: 7,
        compensation: [-99, 0],
        tsc_adjust_written: [7u64.wrapping_sub(99), 0],
        ..LinuxApResult::default()
    };
    r.run[0].source_max_warp = 99;
    r.run[0].warps = 4;
    r.run[1].random_warps = 1;
    let mut dst = LinuxApResult::default();
    // SAFETY: `dst` is a valid, aligned LinuxApResult.
    unsafe { r.write_volatile_to(&raw mut dst) };
    assert_eq!(dst, r);
    let s = LinuxSummary {
        aps: 7,
        synchronised: 6,
        unstable: 1,
        random: 1,
        runs: 13,
        compensations: 6,
        clean_first_run: 0,
        first_unstable_ap: 4,
        max_warp: 1 << 40,
    };
    let mut d = LinuxSummary::default();
    // SAFETY: as above.
    unsafe { s.write_volatile_to(&raw mut d) };
    assert_eq!(d, s);
}
