//! `compare`: two or more variants measured in the same VM, rounds interleaved
//! in a balanced random order, summarised per variant and compared with the
//! first (the baseline) by a bootstrap interval of the difference of medians
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

pub mod cmd;
mod csv;
mod plot;
mod text;

use std::time::{Duration, Instant};

use serde::Serialize;
use tsc_contract::Variant;

use crate::analysis::RoundResult;
use crate::host::HostInfo;
use crate::inference::{bootstrap_median_shift, mann_whitney, MannWhitney, MedianShift, Rng};
use crate::report::overall_honoured;
use crate::runner::{self, Failure, RunOptions};
use crate::stats::{summarize, Summary};

pub use csv::write_csv;
pub use plot::draw_plot;
pub use text::render_text;

/// The schema identifier of `compare --json` (`vmm/schema/compare-v1.json`).
pub const SCHEMA: &str = "tsc-rendezvous/compare/v1";

/// What to compare, and how.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// vCPUs per VM.
    pub vcpus: u32,
    /// The variants; the first is the baseline. At least two, distinct.
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

/// The balanced, seeded schedule: VMs, each with its warm-up and its blocks.
pub fn plan(
    variants: &[Variant],
    rounds: u32,
    warmup: u32,
    fresh_vm_every: u32,
    seed: u64,
) -> Vec<VmPlan> {
    if variants.is_empty() {
        return Vec::new();
    }
    let mut rng = Rng::new(seed);
    let mut block = || {
        let mut b = variants.to_vec();
        rng.shuffle(&mut b);
        b
    };
    let per_vm = if fresh_vm_every == 0 {
        rounds.max(1)
    } else {
        fresh_vm_every
    };
    let mut vms = Vec::new();
    let mut first_block = 0;
    while first_block < rounds {
        let blocks = per_vm.min(rounds - first_block);
        let mut warm = Vec::with_capacity(warmup as usize);
        while warm.len() < warmup as usize {
            warm.extend(block());
        }
        warm.truncate(warmup as usize);
        let measured = (0..blocks).flat_map(|_| block()).collect();
        vms.push(VmPlan {
            warmup: warm,
            measured,
            first_block,
        });
        first_block += blocks;
    }
    vms
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

/// Runs the plan. `progress(done, total)` is called after every round
/// (warm-up included).
// A comparison returns once: the size of its error does not matter.
#[allow(clippy::result_large_err)]
pub fn measure(
    opts: &CompareOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CompareData, Failure> {
    let plans = plan(
        &opts.variants,
        opts.rounds,
        opts.warmup,
        opts.fresh_vm_every,
        opts.seed,
    );
    let total: u64 = plans
        .iter()
        .map(|p| (p.warmup.len() + p.measured.len()) as u64)
        .sum();
    let started = Instant::now();
    let mut done = 0u64;
    let mut host = None;
    let mut rounds = Vec::with_capacity(opts.rounds as usize * opts.variants.len());
    let mut warmup_rounds_run = 0;
    let mut notes = Vec::new();
    let blocks_len = opts.variants.len() as u32;
    for (vm, p) in plans.iter().enumerate() {
        let schedule: Vec<Variant> = p.warmup.iter().chain(&p.measured).copied().collect();
        let run_opts = RunOptions {
            vcpus: opts.vcpus,
            schedule,
            timeout: opts.timeout,
            image: opts.image.clone(),
            inject: None,
        };
        let out = runner::run_streaming(&run_opts, &mut |_| {
            done += 1;
            progress(done, total);
            Ok(())
        })?;
        host.get_or_insert(out.host);
        if out.spin_breaker && vm == 0 {
            notes.push(crate::report::SPIN_BREAKER_NOTE.to_string());
        }
        notes.extend(out.notes.into_iter().map(|n| format!("VM {vm}: {n}")));
        let warm = p.warmup.len();
        warmup_rounds_run += warm as u32;
        for (i, result) in out.rounds.into_iter().enumerate().skip(warm) {
            let k = (i - warm) as u32;
            rounds.push(MeasuredRound {
                seq: rounds.len() as u32,
                vm: vm as u32,
                block: p.first_block + k / blocks_len,
                round_in_vm: i as u32,
                result,
            });
        }
    }
    let Some(host) = host else {
        return Err(Failure {
            error: runner::RunError::Lost(0),
            completed: Vec::new(),
            host: None,
        });
    };
    Ok(CompareData {
        host,
        rounds,
        warmup_rounds_run,
        vms: plans.len() as u32,
        elapsed: started.elapsed(),
        notes,
    })
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
                .map(|r| r.result.cpu0_exit_latency_cycles as f64)
                .collect(),
            Metric::OtherExitLatencyCycles => of
                .flat_map(|r| r.result.vcpus.iter().skip(1))
                .map(|v| v.exit_latency_cycles as f64)
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

/// One variant against the baseline on one metric.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The baseline variant.
    pub baseline: String,
    /// The other variant.
    pub variant: String,
    /// The metric.
    pub metric: Metric,
    /// Values of the baseline.
    pub n_baseline: usize,
    /// Values of the variant.
    pub n_variant: usize,
    /// Difference of medians with its bootstrap interval (variant - baseline).
    pub shift: Option<MedianShift>,
    /// The rank test; `a` is the baseline, `b` the variant.
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
    /// Every non-baseline variant against the baseline, on every metric.
    pub comparisons: Vec<Comparison>,
    /// One line per non-baseline variant, on CPU 0's loop-exit time.
    pub verdicts: Vec<String>,
    /// Observations.
    pub notes: Vec<String>,
}

/// The interleaving, in words.
pub const INTERLEAVING: &str =
    "balanced blocks: every block runs each variant once, in a seeded random order";

fn compare_metric(
    data: &CompareData,
    baseline: &str,
    variant: &str,
    metric: Metric,
    iterations: u32,
    seed: u64,
) -> Comparison {
    let a = metric.values(&data.rounds, baseline);
    let b = metric.values(&data.rounds, variant);
    let shift = bootstrap_median_shift(&a, &b, iterations, seed);
    let mw = mann_whitney(&a, &b);
    let distinguishable = match (&shift, &mw) {
        (Some(s), Some(t)) => (s.diff_lo > 0.0 || s.diff_hi < 0.0) && t.p_two_sided < 0.05,
        _ => false,
    };
    Comparison {
        baseline: baseline.to_string(),
        variant: variant.to_string(),
        metric,
        n_baseline: a.len(),
        n_variant: b.len(),
        shift,
        mann_whitney: mw,
        distinguishable,
    }
}

fn pct(x: f64) -> f64 {
    x * 100.0
}

/// The p-value as a verdict shows it.
pub fn p_text(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".into()
    } else {
        format!("p = {p:.3}")
    }
}

/// The verdict line of a CPU-0 exit-time comparison.
pub fn verdict(c: &Comparison, rounds_each: u32) -> String {
    let (Some(s), Some(t)) = (&c.shift, &c.mann_whitney) else {
        return format!("{} vs {}: no data to compare", c.variant, c.baseline);
    };
    let p = p_text(t.p_two_sided);
    if c.distinguishable {
        let (word, mag, lo, hi) = if s.rel < 0.0 {
            ("sooner", -s.rel, -s.rel_hi, -s.rel_lo)
        } else {
            ("later", s.rel, s.rel_lo, s.rel_hi)
        };
        format!(
            "{} exits {:.1}% {word} than {} (95% CI {:.1}..{:.1}%, {p}, {rounds_each} rounds each)",
            c.variant,
            pct(mag),
            c.baseline,
            pct(lo),
            pct(hi),
        )
    } else {
        let ci_excludes_0 = s.diff_lo > 0.0 || s.diff_hi < 0.0;
        let why = match (ci_excludes_0, t.p_two_sided < 0.05) {
            (false, true) => {
                " (the rank test finds the distributions differ, but the median shift's CI \
                 includes 0)"
            }
            (true, false) => {
                " (the median shift's CI excludes 0, but the rank test does not agree)"
            }
            _ => "",
        };
        format!(
            "{} vs {}: CPU 0 exit time differs by {:+.1}% (95% CI {:+.1}..{:+.1}%, {p}, \
             {rounds_each} rounds each): not distinguishable from noise{why}",
            c.variant,
            c.baseline,
            pct(s.rel),
            pct(s.rel_lo),
            pct(s.rel_hi),
        )
    }
}

/// Summarises and compares what was measured.
pub fn analyse(opts: &CompareOptions, data: CompareData) -> CompareReport {
    let names: Vec<String> = opts.variants.iter().map(|v| v.name().to_string()).collect();
    let per_variant = names
        .iter()
        .map(|name| {
            let own: Vec<RoundResult> = data
                .rounds
                .iter()
                .filter(|r| &r.result.variant == name)
                .map(|r| r.result.clone())
                .collect();
            VariantStats {
                variant: name.clone(),
                rounds: own.len(),
                writes_honoured: overall_honoured(&own),
                rounds_with_disagreements: own
                    .iter()
                    .filter(|r| !r.disagreements.is_empty())
                    .count(),
                cpu0_exit_latency_cycles: summarize(
                    Metric::Cpu0ExitLatencyCycles.values(&data.rounds, name),
                ),
                other_exit_latency_cycles: summarize(
                    Metric::OtherExitLatencyCycles.values(&data.rounds, name),
                ),
                skew_cycles: summarize(Metric::SkewCycles.values(&data.rounds, name)),
            }
        })
        .collect();
    let mut comparisons = Vec::new();
    let mut verdicts = Vec::new();
    let baseline = names.first().cloned().unwrap_or_default();
    for (vi, name) in names.iter().enumerate().skip(1) {
        for (mi, metric) in Metric::ALL.into_iter().enumerate() {
            let seed = opts
                .seed
                .wrapping_add(((vi as u64) << 8) | mi as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let c = compare_metric(&data, &baseline, name, metric, opts.bootstrap, seed);
            if metric == Metric::Cpu0ExitLatencyCycles {
                verdicts.push(verdict(&c, opts.rounds));
            }
            comparisons.push(c);
        }
    }
    let total_rounds = data.rounds.len() as f64 + f64::from(data.warmup_rounds_run);
    let secs = data.elapsed.as_secs_f64();
    CompareReport {
        schema: SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        host: data.host,
        vcpus: opts.vcpus,
        variants: names,
        rounds_per_variant: opts.rounds,
        seed: opts.seed,
        interleaving: INTERLEAVING,
        warmup_rounds_per_vm: opts.warmup,
        warmup_rounds_run: data.warmup_rounds_run,
        fresh_vm_every: opts.fresh_vm_every,
        vms: data.vms,
        bootstrap_iterations: opts.bootstrap,
        elapsed_seconds: secs,
        rounds_per_second: if secs > 0.0 { total_rounds / secs } else { 0.0 },
        per_variant,
        comparisons,
        verdicts,
        notes: data.notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V3: [Variant; 3] = Variant::ALL;

    #[test]
    fn every_block_runs_each_variant_once() {
        let vms = plan(&V3, 50, 7, 0, 11);
        assert_eq!(vms.len(), 1);
        let m = &vms[0].measured;
        assert_eq!(m.len(), 150);
        for block in m.chunks(3) {
            let mut b = block.to_vec();
            b.sort_by_key(|v| *v as u32);
            assert_eq!(b, V3.to_vec());
        }
        assert_eq!(vms[0].warmup.len(), 7);
        // Not one fixed order: the blocks are shuffled.
        assert!(m.chunks(3).any(|b| b != &m[0..3]));
    }

    #[test]
    fn nothing_to_compare_plans_no_vm() {
        assert!(plan(&[], 10, 5, 0, 1).is_empty());
        assert!(plan(&V3, 0, 5, 0, 1).is_empty());
    }

    #[test]
    fn the_schedule_is_fixed_by_the_seed() {
        assert_eq!(plan(&V3, 20, 3, 0, 5), plan(&V3, 20, 3, 0, 5));
        assert_ne!(plan(&V3, 20, 3, 0, 5), plan(&V3, 20, 3, 0, 6));
    }

    #[test]
    fn fresh_vms_split_the_blocks_and_each_warms_up() {
        let vms = plan(&V3[..2], 7, 2, 3, 1);
        assert_eq!(vms.len(), 3);
        let sizes: Vec<usize> = vms.iter().map(|p| p.measured.len()).collect();
        assert_eq!(sizes, vec![6, 6, 2]);
        assert_eq!(
            vms.iter().map(|p| p.first_block).collect::<Vec<_>>(),
            vec![0, 3, 6]
        );
        assert!(vms.iter().all(|p| p.warmup.len() == 2));
        let total = |v: Variant| {
            vms.iter()
                .flat_map(|p| &p.measured)
                .filter(|&&x| x == v)
                .count()
        };
        assert_eq!((total(V3[0]), total(V3[1])), (7, 7));
    }

    fn shift(rel: f64, lo: f64, hi: f64) -> MedianShift {
        MedianShift {
            median_a: 100.0,
            median_b: 100.0 * (1.0 + rel),
            diff: 100.0 * rel,
            rel,
            diff_lo: 100.0 * lo,
            diff_hi: 100.0 * hi,
            rel_lo: lo,
            rel_hi: hi,
            iterations: 10,
            seed: 0,
        }
    }

    fn comparison(s: MedianShift, p: f64) -> Comparison {
        let distinguishable = (s.diff_lo > 0.0 || s.diff_hi < 0.0) && p < 0.05;
        Comparison {
            baseline: "xen-4.15".into(),
            variant: "xen-6ca022a1".into(),
            metric: Metric::Cpu0ExitLatencyCycles,
            n_baseline: 10,
            n_variant: 10,
            shift: Some(s),
            mann_whitney: Some(MannWhitney {
                n_a: 10,
                n_b: 10,
                u_a: 0.0,
                u_b: 0.0,
                z: 0.0,
                p_two_sided: p,
                p_greater: p,
                method: crate::inference::PMethod::Normal,
                prob_a_greater: 0.5,
            }),
            distinguishable,
        }
    }

    #[test]
    fn verdicts_say_sooner_later_or_noise() {
        let v = verdict(&comparison(shift(-0.091, -0.113, -0.070), 0.0001), 2000);
        assert_eq!(
            v,
            "xen-6ca022a1 exits 9.1% sooner than xen-4.15 (95% CI 7.0..11.3%, p < 0.001, 2000 rounds each)"
        );
        let v = verdict(&comparison(shift(0.05, 0.02, 0.08), 0.012), 100);
        assert!(v.contains("5.0% later") && v.contains("p = 0.012"), "{v}");
        let v = verdict(&comparison(shift(0.01, -0.02, 0.04), 0.4), 100);
        assert!(v.ends_with("not distinguishable from noise"), "{v}");
        let v = verdict(&comparison(shift(0.01, -0.02, 0.04), 0.008), 50);
        assert!(
            v.contains("not distinguishable from noise (the rank test"),
            "{v}"
        );
        let v = verdict(&comparison(shift(0.03, 0.01, 0.05), 0.2), 50);
        assert!(v.contains("noise (the median shift's CI excludes 0"), "{v}");
    }
}
