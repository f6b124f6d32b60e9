//! The chained restore's report ([`chain`]) and which property a method
//! keeps after one and after two restores ([`keeps`]), from what was
//! measured (pure).

use super::clock_derive::{restore_clock, ClockInputs, Rates};
use super::clock_report::{ChainReport, ChainVcpu, Keeps, MasterClock, RestoreClock};
use super::keeps::{kept_after, relative, skew_kept};
use super::record::ChainRun;
use crate::analysis::spread;
use crate::tsc::TscState;

/// Every vCPU's exact offset in `states` (`None` where missing).
pub fn offsets(states: Option<&Vec<TscState>>, n: usize) -> Vec<Option<u64>> {
    (0..n)
        .map(|i| states.and_then(|s| s.get(i)).and_then(|s| s.offset))
        .collect()
}

/// The spread of `values`, when every one is known.
pub fn spread_of(values: &[Option<i64>]) -> Option<u64> {
    let all: Option<Vec<i64>> = values.iter().copied().collect();
    all.filter(|v| !v.is_empty()).map(spread)
}

/// The chained restore's report: `n` vCPUs, cycles converted at `rates`.
pub fn chain(c: &ChainRun, rates: Rates, n: usize, why_not: Option<&str>) -> ChainReport {
    let saved_states: Option<Vec<TscState>> = c
        .snapshot
        .as_ref()
        .map(|s| s.vcpus.iter().map(|v| v.tsc).collect());
    let run_states = c.clock_after.as_ref().map(|a| a.states.clone());
    let (saved, after, run) = (
        offsets(saved_states.as_ref(), n),
        offsets(c.after.as_ref(), n),
        offsets(run_states.as_ref(), n),
    );
    let (rel_saved, rel_after, rel_run) = (relative(&saved), relative(&after), relative(&run));
    let adjust =
        |s: Option<&Vec<TscState>>, i: usize| s.and_then(|s| s.get(i)).map(|s| s.adjust as i64);
    let vcpus = (0..n)
        .map(|i| ChainVcpu {
            id: i as u32,
            offset_saved: saved[i],
            offset_after: after[i],
            offset_after_run: run[i],
            relative_offset_saved: rel_saved[i],
            relative_offset_after: rel_after[i],
            relative_offset_after_run: rel_run[i],
            tsc_adjust_saved: adjust(saved_states.as_ref(), i),
            tsc_adjust_after: adjust(c.after.as_ref(), i),
        })
        .collect();
    let kvmclock = restore_clock(&ClockInputs {
        why_not,
        last: c.clock_last.as_ref(),
        first: c.clock_first.as_ref(),
        delay_ms: c.delay.map(|d| d.as_secs_f64() * 1e3),
        rates,
        trace: c.trace.as_ref(),
        snapshot_clock: c.snapshot.as_ref().and_then(|s| s.clock.as_ref()),
        after: c.clock_after.as_ref(),
        vcpus: n as u32,
    });
    ChainReport {
        completed: c.clock_after.is_some(),
        not_possible: c.not_possible.clone(),
        delay_ms: c.delay.map(|d| d.as_secs_f64() * 1e3),
        skew_saved_cycles: spread_of(&rel_saved),
        skew_after_cycles: spread_of(&rel_after),
        vcpus,
        kvmclock,
    }
}

/// The master clock a restore's clock report found (undecided when the
/// clock after it was not measured).
fn master(c: Option<&RestoreClock>) -> MasterClock {
    c.and_then(|c| c.after.as_ref()).map_or_else(
        || MasterClock::Undecided {
            why: "the clock after the restore was not measured".into(),
        },
        |a| a.master_clock.clone(),
    )
}

/// What the first restore kept (`rel_saved` the first snapshot's relative
/// offsets, `rel_first` the first restore's after it and after the warp
/// test) and, with a completed chain, what the second kept.
pub fn keeps(
    rel_saved: &[Option<i64>],
    rel_first: [&[Option<i64>]; 2],
    saved_skew: Option<u64>,
    vcpus: u32,
    first_clock: Option<&RestoreClock>,
    chain: Option<&ChainReport>,
) -> Keeps {
    let after_one = kept_after(
        1,
        skew_kept(rel_saved, &rel_first),
        saved_skew,
        vcpus,
        master(first_clock),
    );
    let after_two = chain.filter(|c| c.completed).map(|c| {
        let after: Vec<Option<i64>> = c.vcpus.iter().map(|v| v.relative_offset_after).collect();
        let run: Vec<Option<i64>> = c
            .vcpus
            .iter()
            .map(|v| v.relative_offset_after_run)
            .collect();
        kept_after(
            2,
            skew_kept(rel_saved, &[&after, &run]),
            saved_skew,
            vcpus,
            master(Some(&c.kvmclock)),
        )
    });
    let after_two_why_not = match chain {
        Some(c) if !c.completed => Some(
            c.not_possible
                .clone()
                .unwrap_or_else(|| "the chained restore did not complete".to_string()),
        ),
        _ => None,
    };
    Keeps {
        after_one,
        after_two,
        after_two_why_not,
    }
}
