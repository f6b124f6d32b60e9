//! Reports: the JSON document (schema `tsc-rendezvous/run/v1`, in
//! `vmm/schema/run-v1.json`, written as the rounds complete by [`stream`]),
//! the readable text built from the same summaries, the progress line of a
//! long run ([`progress`]) and the summary records a soak writes to its
//! `--output` ([`summary`]). What a variant's run keeps is bounded
//! ([`VariantAccumulator`]): its statistics and its typical round, never its
//! rounds.

mod accumulate;
pub mod progress;
pub mod stream;
pub mod summary;
mod text;

pub use accumulate::VariantAccumulator;

use serde::Serialize;

use crate::analysis::RoundResult;
use crate::host::HostInfo;
use crate::run::RunFacts;
use crate::stats::Summary;
#[cfg(test)]
use crate::{stats::summarize, units::cycles_to_ns};

pub use text::{initial_skew_line, precision_line, render_text};

/// Why a report could not be printed.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum PrintError {
    /// cannot encode it as JSON: {0}
    Json(#[source] serde_json::Error),
    /// cannot write it to standard output: {0}
    Write(#[source] std::io::Error),
}

/// Prints `value` to standard output: pretty JSON when `json`, else the text
/// `render` makes of it. Shared by `run`, `check` and `compare`.
pub fn print<T: Serialize>(
    value: &T,
    json: bool,
    render: impl FnOnce(&T) -> String,
) -> Result<(), PrintError> {
    use std::io::Write;
    let text = if json {
        serde_json::to_string_pretty(value).map_err(PrintError::Json)? + "\n"
    } else {
        render(value)
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
        .map_err(PrintError::Write)
}

/// The schema identifier written into every JSON report.
pub const SCHEMA: &str = "tsc-rendezvous/run/v1";

/// The schema identifier of every line `--output` streams.
pub const ROUND_LINE_SCHEMA: &str = "tsc-rendezvous/round/v1";

/// One line of `--output`: a completed round, as in the report's `rounds`,
/// plus the schema and the vCPU count.
#[derive(Debug, Serialize)]
pub struct RoundLine<'a> {
    /// [`ROUND_LINE_SCHEMA`].
    pub schema: &'static str,
    /// vCPU count of the run.
    pub vcpu_count: u32,
    /// The round (its fields are inlined).
    #[serde(flatten)]
    pub round: &'a RoundResult,
}

/// One `--output` line for `round` (no trailing newline).
pub fn round_line(vcpu_count: u32, round: &RoundResult) -> serde_json::Result<String> {
    serde_json::to_string(&RoundLine {
        schema: ROUND_LINE_SCHEMA,
        vcpu_count,
        round,
    })
}

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

/// Builds the report of one variant's run from what it said about itself and
/// what its rounds added up to.
pub fn variant_report(variant: &str, facts: RunFacts, acc: &VariantAccumulator) -> VariantReport {
    let mut notes = facts.notes;
    if facts.spin_breaker {
        notes.push(SPIN_BREAKER_NOTE.into());
    }
    VariantReport {
        variant: variant.to_string(),
        writes_honoured: acc.writes_honoured(),
        summary: acc.summary(facts.host.tsc_khz),
        notes,
        typical: acc.typical().cloned(),
    }
}

/// Said of every run whose vCPUs outnumbered the host's cores.
pub const SPIN_BREAKER_NOTE: &str = "more vCPUs than host cores: the VMM interrupted the \
    vCPUs every 200 us so that spinning ones yield (a stand-in for pause-loop exiting); \
    skews and exit times then reflect host scheduling, not the rendezvous";

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
        let mut acc = VariantAccumulator::new();
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
