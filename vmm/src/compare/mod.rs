//! `compare`: two or more variants measured in the same VM, rounds interleaved
//! in a balanced random order, summarised per variant and compared with the
//! first (the reference) by a bootstrap interval of the difference of medians
//! and a Mann-Whitney U test.
//!
//! The schedule is a sequence of blocks; every block runs each variant once, in
//! an order drawn from a PRNG seeded with `--seed`. So after every block each
//! variant has run equally often, and slow drift of the host (frequency,
//! other load) falls on all variants alike. Every VM starts with `warmup`
//! rounds (variants cycled in shuffled blocks too) that run, are counted and
//! are excluded from the statistics; no measured round is ever dropped.
//! With `fresh_vm_every = k > 0` a new VM (and new vCPU threads) is created
//! every `k` blocks; with 0 one VM runs everything.

mod analyse;
mod csv;
mod measure;
mod plan;
mod plot;
mod text;

use std::time::Duration;

use serde::Serialize;
use tsc_contract::Variant;

use crate::analysis::RoundResult;
use crate::host::HostInfo;
use crate::inference::{MannWhitney, MedianShift};
use crate::options::Backend;
use crate::stats::Summary;

pub use analyse::{analyse, p_text, verdict};
pub use csv::write_csv;
pub use measure::{measure, Partial};
pub use plan::plan;
pub use plot::draw_plot;
pub use text::render_text;

/// The schema identifier of `compare --json` (`vmm/schema/compare-v1.json`).
pub const SCHEMA: &str = "tsc-rendezvous/compare/v1";

/// What to compare, and how.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Where the algorithms run (a "VM" is a set of host threads with
    /// [`Backend::Host`]).
    pub backend: Backend,
    /// The windows of Linux's sync, ms (see [`crate::options::RunOptions`]).
    pub sync_windows_ms: (u64, u64),
    /// vCPUs per VM.
    pub vcpus: u32,
    /// The variants; the first is the reference. At least two, distinct.
    pub variants: Vec<Variant>,
    /// Measured rounds per variant (= number of blocks).
    pub rounds: u32,
    /// Warm-up rounds at the start of every VM, excluded from the statistics.
    pub warmup: u32,
    /// Seed of the schedule and of the bootstrap.
    pub seed: u64,
    /// Blocks per VM; 0 runs every block in one VM.
    pub fresh_vm_every: u32,
    /// Bootstrap replicates.
    pub bootstrap: u32,
    /// Deadline of each VM's run.
    pub timeout: Duration,
    /// The guest image; the embedded one when `None`.
    pub image: Option<Vec<u8>>,
}

/// One VM's share of the schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmPlan {
    /// Warm-up rounds, run first and excluded.
    pub warmup: Vec<Variant>,
    /// Measured rounds, whole blocks.
    pub measured: Vec<Variant>,
    /// Index of the VM's first block.
    pub first_block: u32,
}

/// One measured round and where it ran.
#[derive(Clone, Debug)]
pub struct MeasuredRound {
    /// Position among all measured rounds, in the order run.
    pub seq: u32,
    /// The VM it ran in (0-based).
    pub vm: u32,
    /// Its block (0-based, over all VMs).
    pub block: u32,
    /// Its round index inside its VM (warm-up rounds included).
    pub round_in_vm: u32,
    /// The round's findings.
    pub result: RoundResult,
}

/// Everything measured.
#[derive(Clone, Debug)]
pub struct CompareData {
    /// Host facts (from the first VM).
    pub host: HostInfo,
    /// The measured rounds, in the order run.
    pub rounds: Vec<MeasuredRound>,
    /// Warm-up rounds run (and excluded), over all VMs.
    pub warmup_rounds_run: u32,
    /// VMs created.
    pub vms: u32,
    /// Wall time of the measurement, VM creation included.
    pub elapsed: Duration,
    /// Observations about the runs.
    pub notes: Vec<String>,
}

/// The metrics compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// CPU 0's loop-exit time (the seed's metric), one value per round.
    Cpu0ExitLatencyCycles,
    /// The other vCPUs' loop-exit times, N - 1 values per round.
    OtherExitLatencyCycles,
    /// The skew (method a), one value per round.
    SkewCycles,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 3] = [
        Metric::Cpu0ExitLatencyCycles,
        Metric::OtherExitLatencyCycles,
        Metric::SkewCycles,
    ];

    /// Readable name.
    pub fn title(self) -> &'static str {
        match self {
            Metric::Cpu0ExitLatencyCycles => "CPU 0 loop-exit time (cycles)",
            Metric::OtherExitLatencyCycles => "other vCPUs' loop-exit times (cycles)",
            Metric::SkewCycles => "skew (cycles)",
        }
    }

    /// The metric's values from the rounds of `variant`, in order.
    pub fn values<'a>(self, rounds: &'a [MeasuredRound], variant: &'a str) -> Vec<f64> {
        let of = rounds.iter().filter(move |r| r.result.variant == variant);
        match self {
            Metric::Cpu0ExitLatencyCycles => of
                .filter_map(|r| r.result.cpu0_exit_latency_cycles)
                .map(|x| x as f64)
                .collect(),
            Metric::OtherExitLatencyCycles => of
                .flat_map(|r| r.result.vcpus.iter().skip(1))
                .filter_map(|v| v.exit_latency_cycles)
                .map(|x| x as f64)
                .collect(),
            Metric::SkewCycles => of.map(|r| r.result.skew_cycles as f64).collect(),
        }
    }
}

/// One variant's statistics.
#[derive(Clone, Debug, Serialize)]
pub struct VariantStats {
    /// The variant.
    pub variant: String,
    /// Measured rounds.
    pub rounds: usize,
    /// Whether the writes took effect in every round (null: undetermined or mixed).
    pub writes_honoured: Option<bool>,
    /// Rounds in which the readback methods disagreed (kept, not dropped).
    pub rounds_with_disagreements: usize,
    /// CPU 0's loop-exit time.
    pub cpu0_exit_latency_cycles: Option<Summary>,
    /// The other vCPUs' loop-exit times (null with one vCPU).
    pub other_exit_latency_cycles: Option<Summary>,
    /// The skew.
    pub skew_cycles: Option<Summary>,
}

/// One variant against the reference variant (the first named) on one
/// metric.
#[derive(Clone, Debug, Serialize)]
pub struct MetricComparison {
    /// The reference variant.
    #[serde(rename = "baseline")]
    pub reference: String,
    /// The other variant.
    pub variant: String,
    /// The metric.
    pub metric: Metric,
    /// Values of the reference variant.
    #[serde(rename = "n_baseline")]
    pub n_reference: usize,
    /// Values of the variant.
    pub n_variant: usize,
    /// Difference of medians with its bootstrap interval (variant - baseline).
    pub shift: Option<MedianShift>,
    /// The rank test; `a` is the reference, `b` the variant.
    pub mann_whitney: Option<MannWhitney>,
    /// Whether the difference is distinguishable from noise: the 95 %
    /// interval excludes 0 and the two-sided p-value is below 0.05.
    pub distinguishable: bool,
}

/// The `compare --json` document.
#[derive(Clone, Debug, Serialize)]
pub struct CompareReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// This tool's version.
    pub tool_version: &'static str,
    /// Host facts.
    pub host: HostInfo,
    /// vCPUs per VM.
    pub vcpus: u32,
    /// The variants; the first is the baseline.
    pub variants: Vec<String>,
    /// Measured rounds per variant.
    pub rounds_per_variant: u32,
    /// The seed of the schedule and the bootstrap.
    pub seed: u64,
    /// How the rounds were ordered.
    pub interleaving: &'static str,
    /// Warm-up rounds at the start of every VM.
    pub warmup_rounds_per_vm: u32,
    /// Warm-up rounds run in all (excluded from the statistics).
    pub warmup_rounds_run: u32,
    /// Blocks per VM (0: one VM for all).
    pub fresh_vm_every: u32,
    /// VMs created.
    pub vms: u32,
    /// Bootstrap replicates per comparison.
    pub bootstrap_iterations: u32,
    /// Wall time of the measurement, seconds.
    pub elapsed_seconds: f64,
    /// Rounds (warm-up included) per second of wall time.
    pub rounds_per_second: f64,
    /// Per variant.
    pub per_variant: Vec<VariantStats>,
    /// Every other variant against the reference, on every metric.
    pub comparisons: Vec<MetricComparison>,
    /// One line per non-baseline variant, on CPU 0's loop-exit time.
    pub verdicts: Vec<String>,
    /// Observations.
    pub notes: Vec<String>,
    /// Why the measurement ended before the plan did (a signal, an error);
    /// absent when it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

/// The interleaving, in words.
pub const INTERLEAVING: &str =
    "balanced blocks: every block runs each variant once, in a seeded random order";
