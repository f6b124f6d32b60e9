//! What the `run` report holds: per variant its statistics, notes and
//! typical round ([`VariantReport`], [`RunSummary`]), and the whole readable
//! report ([`Report`]).

use serde::Serialize;

use crate::analysis::RoundResult;
use crate::host::HostInfo;
use crate::stats::Summary;
use crate::tsc::clock_points::ClockPoints;
#[cfg(test)]
use crate::{stats::summarize, units::cycles_to_ns};

/// One variant's run, as reported: its statistics and its typical round
/// (the rounds themselves were streamed as they completed, not kept).
#[derive(Clone, Debug)]
pub struct VariantReport {
    /// The variant's name.
    pub variant: String,
    /// Whether the writes took effect in every round (null when undetermined
    /// or not the same in every round).
    pub writes_honoured: Option<bool>,
    /// Statistics over the rounds.
    pub summary: RunSummary,
    /// Observations about the run as a whole.
    pub notes: Vec<String>,
    /// The round whose skew was nearest the median as the rounds went by
    /// ([`RunSummary::typical_round`]).
    pub typical: Option<RoundResult>,
    /// `--kvmclock` (KVM): KVM_GET_CLOCK at the run's fixed points.
    pub kvm_clock: Option<ClockPoints>,
}

/// Statistics of one variant over its rounds.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// Rounds measured.
    pub rounds: usize,
    /// Skew (method a), cycles.
    pub skew_cycles: Option<Summary>,
    /// Skew (method a), nanoseconds (null without a TSC frequency).
    pub skew_ns: Option<Summary>,
    /// CPU 0's loop-exit time, cycles (the seed's metric).
    pub cpu0_exit_latency_cycles: Option<Summary>,
    /// The other vCPUs' loop-exit times, cycles.
    pub other_exit_latency_cycles: Option<Summary>,
    /// `--kvmclock`: per round, the magnitude of the largest kvmclock jump
    /// across the vCPUs' IA32_TSC writes, ns; absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvmclock_jump_ns: Option<Summary>,
    /// `--kvmclock`: writes whose kvmclock reading wrapped (the TSC below
    /// the page's tsc_timestamp: a leap of about 10^18 ns, no time at all),
    /// kept out of `kvmclock_jump_ns`; absent when none did.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kvmclock_wrapped_writes: u64,
    /// Rounds in which any two methods disagreed.
    pub rounds_with_disagreements: usize,
    /// The first few disagreements, verbatim.
    pub first_disagreements: Vec<String>,
    /// The round whose skew is the median one (shown in the readable report).
    pub typical_round: Option<u32>,
    /// Significant digits of the statistics once a metric had more values
    /// than are kept exactly (a histogram); absent while they are exact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision_digits: Option<u8>,
}

/// The whole readable report (the JSON document has the same content, with
/// every round, and is streamed: [`stream::JsonStream`]).
#[derive(Clone, Debug)]
pub struct Report {
    /// This tool's version.
    pub tool_version: &'static str,
    /// Host facts.
    pub host: HostInfo,
    /// vCPU count.
    pub vcpus: u32,
    /// Rounds per variant asked for (with a duration: the most any variant
    /// ran).
    pub rounds_per_variant: u32,
    /// Each variant's share of `--duration`, when the run was by time.
    pub duration_per_variant: Option<std::time::Duration>,
    /// One entry per variant, in the order run.
    pub runs: Vec<VariantReport>,
}

/// Whether a count is 0 (serde's `skip_serializing_if`).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
/// Summarises rounds held in a list, exactly (the reference the bounded
/// [`VariantAccumulator`] is tested against).
pub fn summarize_run(rounds: &[RoundResult], tsc_khz: Option<u32>) -> RunSummary {
    let skew = summarize(rounds.iter().map(|r| r.skew_cycles as f64));
    let skew_ns = tsc_khz.and_then(|khz| {
        summarize(
            rounds
                .iter()
                .map(|r| cycles_to_ns(r.skew_cycles as f64, khz)),
        )
    });
    let disagreeing: Vec<&RoundResult> = rounds
        .iter()
        .filter(|r| !r.disagreements.is_empty())
        .collect();
    let typical_round = skew.as_ref().and_then(|s| {
        rounds
            .iter()
            .min_by(|a, b| {
                let da = (a.skew_cycles as f64 - s.median).abs();
                let db = (b.skew_cycles as f64 - s.median).abs();
                da.total_cmp(&db)
            })
            .map(|r| r.round)
    });
    RunSummary {
        rounds: rounds.len(),
        skew_cycles: skew,
        skew_ns,
        cpu0_exit_latency_cycles: summarize(
            rounds
                .iter()
                .filter_map(|r| r.cpu0_exit_latency_cycles)
                .map(|x| x as f64),
        ),
        other_exit_latency_cycles: summarize(
            rounds
                .iter()
                .flat_map(|r| r.vcpus.iter().skip(1))
                .filter_map(|v| v.exit_latency_cycles)
                .map(|x| x as f64),
        ),
        kvmclock_jump_ns: summarize(
            rounds
                .iter()
                .filter_map(|r| r.kvmclock.as_ref().and_then(|k| k.jump_ns))
                .map(f64::abs),
        ),
        kvmclock_wrapped_writes: rounds
            .iter()
            .filter_map(|r| r.kvmclock.as_ref())
            .map(|k| k.wrapped.len() as u64)
            .sum(),
        rounds_with_disagreements: disagreeing.len(),
        first_disagreements: disagreeing
            .iter()
            .flat_map(|r| {
                r.disagreements
                    .iter()
                    .map(move |d| format!("round {}: {d}", r.round))
            })
            .take(5)
            .collect(),
        typical_round,
        precision_digits: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(i: u32, skew: u64, honoured: Option<bool>) -> RoundResult {
        RoundResult {
            cpu0_exit_latency_cycles: Some(10),
            ..crate::analysis::synthetic_round(i, skew, honoured)
        }
    }

    #[test]
    fn the_typical_round_is_the_one_nearest_the_median() {
        let rounds = [
            round(0, 100, Some(false)),
            round(1, 900, Some(false)),
            round(2, 300, Some(false)),
        ];
        let s = summarize_run(&rounds, Some(1_000_000));
        assert_eq!(s.typical_round, Some(2));
        assert_eq!(s.skew_ns.map(|x| x.median), Some(300.0));
    }

    /// The variant's verdict on the writes, over its rounds.
    fn honoured(rounds: &[RoundResult]) -> Option<bool> {
        let mut acc = crate::report::VariantAccumulator::new();
        for r in rounds {
            acc.add(r);
        }
        acc.writes_honoured()
    }

    #[test]
    fn honoured_overall_when_every_decided_round_agrees() {
        assert_eq!(
            honoured(&[round(0, 1, Some(true)), round(1, 1, Some(true))]),
            Some(true)
        );
        assert_eq!(
            honoured(&[round(0, 1, Some(true)), round(1, 1, Some(false))]),
            None
        );
        // An undecided round counts for neither side.
        assert_eq!(
            honoured(&[round(0, 1, Some(true)), round(1, 1, None)]),
            Some(true)
        );
        assert_eq!(honoured(&[round(0, 1, None)]), None);
        assert_eq!(honoured(&[]), None);
    }
}
