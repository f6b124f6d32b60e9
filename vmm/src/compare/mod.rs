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
//!
//! Memory does not grow with the rounds: the schedule is drawn as the rounds
//! start ([`plan`]), each variant's rounds are summed up as they complete in
//! bounded distributions ([`Measured`]), and the inference works on those
//! (exact while they keep their values, from histograms after:
//! [`crate::stats::distribution`]); `--csv` and `--output` are written round by
//! round.

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
use crate::options::Backend;
use crate::report::VariantAccumulator;
use crate::stats::distribution::Distribution;
use crate::stats::inference::{MannWhitney, MedianShift};
use crate::stats::Summary;

pub use analyse::{analyse, analyse_measured, p_text};
pub use csv::CsvWriter;
pub use measure::{measure, ByTime, Partial};
pub use plan::{Blocks, VmSchedule};
pub use plot::{draw_plot, render_plot};
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
    /// `--initial-skew` of every VM (see [`crate::options::RunOptions`]).
    pub initial_skew: Option<u64>,
    /// `--kvmclock`: kvmclock read around every TSC write.
    pub kvmclock: bool,
    /// `--tsc-khz`: every VM's guest TSC frequency.
    pub tsc: Option<crate::tsc::frequency::TscRequest>,
    /// A fault every VM's guest injects (testing; round numbers count the
    /// VM's rounds, warm-up included).
    pub inject: Option<crate::options::Injection>,
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

/// Everything measured, as a list of every round (for tests and small
/// inputs; `compare` itself keeps `Measured`, which does not grow with the
/// rounds). [`analyse`] and [`draw_plot`] take either.
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

/// Each variant's measured rounds summed up as they complete: its bounded
/// distributions and counts ([`VariantAccumulator`]), whatever the number
/// of rounds; and the counts of rounds run.
#[derive(Clone, Debug, Default)]
pub struct Tallies {
    /// Per variant name, in the order first measured.
    per_variant: Vec<(String, VariantAccumulator)>,
    /// Measured rounds, all variants.
    pub measured_rounds: u64,
    /// Warm-up rounds run (and excluded), over all VMs.
    pub warmup_rounds_run: u32,
}

impl Tallies {
    /// Counts one measured round.
    pub fn add(&mut self, r: &RoundResult) {
        self.measured_rounds += 1;
        match self.per_variant.iter_mut().find(|(n, _)| *n == r.variant) {
            Some((_, t)) => t.add(r),
            None => {
                let mut t = VariantAccumulator::without_typical();
                t.add(r);
                self.per_variant.push((r.variant.to_string(), t));
            }
        }
    }

    /// The rounds of `variant` so far, summed up (`None`: none measured).
    pub fn tally(&self, variant: &str) -> Option<&VariantAccumulator> {
        self.per_variant
            .iter()
            .find(|(n, _)| n == variant)
            .map(|(_, t)| t)
    }

    /// The statistics of `variant` so far.
    pub fn stats(&self, variant: &str) -> VariantStats {
        let empty = VariantAccumulator::without_typical();
        let t = self.tally(variant).unwrap_or(&empty);
        let precision = Metric::ALL.iter().find_map(|m| m.of(t).precision());
        VariantStats {
            variant: variant.to_string(),
            rounds: t.rounds() as usize,
            writes_honoured: t.writes_honoured(),
            rounds_with_disagreements: t.rounds_with_disagreements() as usize,
            cpu0_exit_latency_cycles: t.cpu0_exit().summary(),
            other_exit_latency_cycles: t.other_exit().summary(),
            skew_cycles: t.skew().summary(),
            kvmclock_jump_ns: t.kvmclock_jump().summary(),
            precision_digits: precision,
        }
    }
}

/// Everything measured, in memory that does not grow with the rounds.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Host facts (from the first VM).
    pub host: HostInfo,
    /// Each variant's rounds, summed up.
    pub tallies: Tallies,
    /// VMs created.
    pub vms: u32,
    /// Wall time of the measurement, VM creation included.
    pub elapsed: Duration,
    /// Observations about the runs.
    pub notes: Vec<String>,
    /// How long the measurement was asked to run (`--duration`), if by time.
    pub duration: Option<Duration>,
}

impl From<CompareData> for Measured {
    fn from(d: CompareData) -> Measured {
        let mut tallies = Tallies::default();
        for r in &d.rounds {
            tallies.add(&r.result);
        }
        tallies.warmup_rounds_run = d.warmup_rounds_run;
        Measured {
            host: d.host,
            tallies,
            vms: d.vms,
            elapsed: d.elapsed,
            notes: d.notes,
            duration: None,
        }
    }
}

/// `compare`'s summary record in its `--output` (schema
/// `tsc-rendezvous/summary/v1`, see [`crate::report::summary`]).
#[derive(Debug, Serialize)]
pub struct SummaryRecord<'a> {
    /// [`crate::report::summary::SUMMARY_SCHEMA`].
    pub schema: &'static str,
    /// `compare`.
    pub command: &'static str,
    /// This tool's version.
    pub tool_version: &'static str,
    /// Seconds since the measurement started.
    pub elapsed_seconds: f64,
    /// vCPUs per VM.
    pub vcpus: u32,
    /// The seed of the schedule.
    pub seed: u64,
    /// The variants; the first is the baseline.
    pub variants: &'a [String],
    /// Measured rounds so far, all variants.
    pub measured_rounds: u64,
    /// Warm-up rounds run so far.
    pub warmup_rounds_run: u32,
    /// Each variant's statistics so far.
    pub per_variant: Vec<VariantStats>,
}

impl<'a> SummaryRecord<'a> {
    /// The record of what `m` holds.
    pub fn new(
        m: &Tallies,
        vcpus: u32,
        seed: u64,
        variants: &'a [String],
        elapsed: Duration,
    ) -> SummaryRecord<'a> {
        SummaryRecord {
            schema: crate::report::summary::SUMMARY_SCHEMA,
            command: "compare",
            tool_version: env!("CARGO_PKG_VERSION"),
            elapsed_seconds: elapsed.as_secs_f64(),
            vcpus,
            seed,
            variants,
            measured_rounds: m.measured_rounds,
            warmup_rounds_run: m.warmup_rounds_run,
            per_variant: variants.iter().map(|v| m.stats(v)).collect(),
        }
    }
}

/// The metrics compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
// The names are the JSON's (`skew_cycles`, ...), unit included.
#[allow(clippy::enum_variant_names)]
pub enum Metric {
    /// CPU 0's loop-exit time (the seed's metric), one value per round.
    Cpu0ExitLatencyCycles,
    /// The other vCPUs' loop-exit times, N - 1 values per round.
    OtherExitLatencyCycles,
    /// The skew (method a), one value per round.
    SkewCycles,
    /// `--kvmclock`: the magnitude of the round's largest kvmclock jump
    /// across the IA32_TSC writes, ns, one value per writing round.
    KvmclockJumpNs,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 4] = [
        Metric::Cpu0ExitLatencyCycles,
        Metric::OtherExitLatencyCycles,
        Metric::SkewCycles,
        Metric::KvmclockJumpNs,
    ];

    /// The metrics a comparison covers: the kvmclock jump only where it was
    /// measured (`--kvmclock`).
    pub fn compared(kvmclock: bool) -> impl Iterator<Item = Metric> {
        Metric::ALL
            .into_iter()
            .filter(move |m| kvmclock || *m != Metric::KvmclockJumpNs)
    }

    /// Readable name.
    pub fn title(self) -> &'static str {
        match self {
            Metric::Cpu0ExitLatencyCycles => "CPU 0 loop-exit time (cycles)",
            Metric::OtherExitLatencyCycles => "other vCPUs' loop-exit times (cycles)",
            Metric::SkewCycles => "skew (cycles)",
            Metric::KvmclockJumpNs => "|kvmclock jump| across the writes (ns)",
        }
    }

    /// The metric's distribution in a variant's tally.
    pub fn of(self, t: &VariantAccumulator) -> &Distribution {
        match self {
            Metric::Cpu0ExitLatencyCycles => t.cpu0_exit(),
            Metric::OtherExitLatencyCycles => t.other_exit(),
            Metric::SkewCycles => t.skew(),
            Metric::KvmclockJumpNs => t.kvmclock_jump(),
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
            Metric::KvmclockJumpNs => of
                .filter_map(|r| r.result.kvmclock.as_ref().and_then(|k| k.jump_ns))
                .map(f64::abs)
                .collect(),
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
    /// `--kvmclock`: the magnitude of each round's largest kvmclock jump, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvmclock_jump_ns: Option<Summary>,
    /// Significant digits of the statistics once a metric had more values
    /// than are kept exactly (a histogram); absent while they are exact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision_digits: Option<u8>,
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
    /// Measured rounds per variant (by time: the fewest any variant had).
    pub rounds_per_variant: u32,
    /// How long the measurement was asked to run (`--duration`), seconds;
    /// absent when it ran a number of rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
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
