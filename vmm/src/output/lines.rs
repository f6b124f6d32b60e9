//! Lines every report shares: the `--output` round line (schema
//! `tsc-rendezvous/round/v1`), what bounded statistics say of their
//! precision, the initial skew, and the note on runs the spin breaker paced.

use serde::Serialize;

use crate::analysis::RoundResult;
use crate::units::fmt_num;

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

/// Said of every run whose vCPUs outnumbered the host's cores.
pub const SPIN_BREAKER_NOTE: &str = "more vCPUs than host cores: the VMM interrupted the \
    vCPUs every 200 us so that spinning ones yield (a stand-in for pause-loop exiting); \
    skews and exit times then reflect host scheduling, not the rendezvous";

/// What a summary past the exact limit is made of, in words.
pub fn precision_line(digits: u8) -> String {
    format!(
        "Past {} values per metric the statistics come from a histogram: percentiles to {digits} \
         significant digits; counts, minima and maxima exact.",
        fmt_num(crate::stats::distribution::EXACT_LIMIT as f64)
    )
}

/// What `--initial-skew` set up, in words (run and compare reports).
pub fn initial_skew_line(vcpus: u32, cycles: u64) -> String {
    let targets = crate::initial_skew::targets(vcpus, cycles);
    let list: Vec<String> = targets.iter().map(u64::to_string).collect();
    format!(
        "Initial skew: --initial-skew {cycles}: vCPUs 0..{} started {} cycles ahead of vCPU 0 \
         (set before the first round, verified by the readback)",
        vcpus.saturating_sub(1),
        list.join(", ")
    )
}
