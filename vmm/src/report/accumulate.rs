//! One variant's statistics gathered round by round, in memory that does not
//! grow with the rounds: bounded distributions of every metric, the count of
//! disagreeing rounds with the first few, what the decided rounds say about
//! the writes, and the typical round kept as a round while the rounds go by.

use hdrhistogram::Histogram;

use super::model::{RunSummary, VariantReport};
use crate::analysis::{Decision, RoundResult};
use crate::output::lines::SPIN_BREAKER_NOTE;
use crate::run::RunFacts;
use crate::stats::distribution::{Distribution, SIGNIFICANT_DIGITS};
use crate::stats::Summary;
use crate::units::cycles_to_ns;

/// Past this many rounds the running median skew (for the typical round)
/// is worked out again every this many rounds.
const MEDIAN_EVERY: u64 = 128;

/// How many disagreements are kept verbatim.
const FIRST_DISAGREEMENTS: usize = 5;

/// One variant's rounds, summarised as they complete.
#[derive(Clone, Debug)]
pub struct VariantAccumulator {
    rounds: u64,
    skew: Distribution,
    cpu0_exit: Distribution,
    other_exit: Distribution,
    /// The magnitude of each round's largest kvmclock jump, ns.
    kvmclock_jump: Distribution,
    /// Writes whose kvmclock reading wrapped (kept out of `kvmclock_jump`).
    kvmclock_wrapped: u64,
    disagreeing: u64,
    first_disagreements: Vec<String>,
    honoured: (bool, bool),
    /// The running median of the skew, for choosing the typical round.
    skew_median: Option<Histogram<u64>>,
    /// The running median as last worked out.
    cached_median: Option<i128>,
    typical: Option<RoundResult>,
    /// Whether the typical round is kept (`compare` needs none).
    keep_typical: bool,
}

impl Default for VariantAccumulator {
    fn default() -> Self {
        VariantAccumulator::new()
    }
}

impl VariantAccumulator {
    /// Nothing yet.
    pub fn new() -> VariantAccumulator {
        VariantAccumulator {
            rounds: 0,
            skew: Distribution::default(),
            cpu0_exit: Distribution::default(),
            other_exit: Distribution::default(),
            kvmclock_jump: Distribution::default(),
            kvmclock_wrapped: 0,
            disagreeing: 0,
            first_disagreements: Vec::new(),
            honoured: (false, false),
            skew_median: Histogram::new(SIGNIFICANT_DIGITS).ok(),
            cached_median: None,
            typical: None,
            keep_typical: true,
        }
    }

    /// As [`VariantAccumulator::new`], without keeping a typical round.
    pub fn without_typical() -> VariantAccumulator {
        VariantAccumulator {
            skew_median: None,
            keep_typical: false,
            ..VariantAccumulator::new()
        }
    }

    /// As [`VariantAccumulator::new`], keeping at most `limit` values of each
    /// metric exactly (for tests of the histogram path).
    pub fn with_exact_limit(limit: usize) -> VariantAccumulator {
        VariantAccumulator {
            skew: Distribution::with_limit(limit),
            cpu0_exit: Distribution::with_limit(limit),
            other_exit: Distribution::with_limit(limit),
            kvmclock_jump: Distribution::with_limit(limit),
            ..VariantAccumulator::new()
        }
    }

    /// Counts one round.
    pub fn add(&mut self, r: &RoundResult) {
        self.rounds += 1;
        self.skew.record(r.skew_cycles as f64);
        if let Some(x) = r.cpu0_exit_latency_cycles {
            self.cpu0_exit.record(x as f64);
        }
        for v in r.vcpus.iter().skip(1) {
            if let Some(x) = v.exit_latency_cycles {
                self.other_exit.record(x as f64);
            }
        }
        if let Some(k) = &r.kvmclock {
            if let Some(j) = k.jump_ns {
                self.kvmclock_jump.record(j.abs());
            }
            self.kvmclock_wrapped += k.wrapped.len() as u64;
        }
        if !r.disagreements.is_empty() {
            self.disagreeing += 1;
            for d in &r.disagreements {
                if self.first_disagreements.len() < FIRST_DISAGREEMENTS {
                    self.first_disagreements
                        .push(format!("round {}: {d}", r.round));
                }
            }
        }
        match r.writes_honoured {
            Some(true) => self.honoured.0 = true,
            Some(false) => self.honoured.1 = true,
            None => {}
        }
        if !self.keep_typical {
            return;
        }
        // The typical round: the one nearest the median skew so far. The
        // median walks the histogram's bins; past the first rounds it moves
        // slowly, so it is worked out again only every MEDIAN_EVERY rounds
        // (the per-round cost stays small and flat).
        let rounds = self.rounds;
        let cached = &mut self.cached_median;
        let median = self.skew_median.as_mut().map(|h| {
            let _ = h.record(r.skew_cycles);
            if rounds <= MEDIAN_EVERY || rounds % MEDIAN_EVERY == 0 || cached.is_none() {
                *cached = Some(h.value_at_quantile(0.5) as i128);
            }
            cached.unwrap_or(0)
        });
        let closer = match (&self.typical, median) {
            (None, _) => true,
            (Some(t), Some(m)) => {
                (i128::from(r.skew_cycles) - m).abs() < (i128::from(t.skew_cycles) - m).abs()
            }
            (Some(_), None) => false,
        };
        if closer {
            self.typical = Some(r.clone());
        }
    }

    /// Rounds counted.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Whether the decided rounds' writes took effect (None: none decided,
    /// or they differ).
    pub fn writes_honoured(&self) -> Option<bool> {
        match self.honoured {
            (true, false) => Decision::Yes,
            (false, true) => Decision::No,
            (true, true) => Decision::Mixed,
            (false, false) => Decision::Undecided,
        }
        .verdict()
    }

    /// The round kept as typical (its skew nearest the median).
    pub fn typical(&self) -> Option<&RoundResult> {
        self.typical.as_ref()
    }

    /// The skew's distribution.
    pub fn skew(&self) -> &Distribution {
        &self.skew
    }

    /// CPU 0's exit times.
    pub fn cpu0_exit(&self) -> &Distribution {
        &self.cpu0_exit
    }

    /// The other vCPUs' exit times.
    pub fn other_exit(&self) -> &Distribution {
        &self.other_exit
    }

    /// The magnitudes of the rounds' largest kvmclock jumps, ns.
    pub fn kvmclock_jump(&self) -> &Distribution {
        &self.kvmclock_jump
    }

    /// Rounds in which any two methods disagreed.
    pub fn rounds_with_disagreements(&self) -> u64 {
        self.disagreeing
    }

    /// The median skew so far, cheaply (for a progress line): from the
    /// running histogram while the typical round is kept, else from the
    /// distribution. `None` before the first round.
    pub fn median_skew(&self) -> Option<f64> {
        match &self.skew_median {
            Some(h) if !h.is_empty() => Some(h.value_at_quantile(0.5) as f64),
            _ if self.skew.is_empty() => None,
            _ => Some(self.skew.percentile(50.0)),
        }
    }

    /// The summary of the rounds so far.
    pub fn summary(&self, tsc_khz: Option<u32>) -> RunSummary {
        let skew = self.skew.summary();
        let skew_ns = match (&skew, tsc_khz) {
            (Some(s), Some(khz)) => Some(in_ns(s, khz)),
            _ => None,
        };
        let precision = [
            &self.skew,
            &self.cpu0_exit,
            &self.other_exit,
            &self.kvmclock_jump,
        ]
        .iter()
        .find_map(|d| d.precision());
        RunSummary {
            rounds: self.rounds as usize,
            skew_cycles: skew,
            skew_ns,
            cpu0_exit_latency_cycles: self.cpu0_exit.summary(),
            other_exit_latency_cycles: self.other_exit.summary(),
            kvmclock_jump_ns: self.kvmclock_jump.summary(),
            kvmclock_wrapped_writes: self.kvmclock_wrapped,
            rounds_with_disagreements: self.disagreeing as usize,
            first_disagreements: self.first_disagreements.clone(),
            typical_round: self.typical.as_ref().map(|r| r.round),
            precision_digits: precision,
        }
    }
}

/// A summary in cycles, converted to ns (a linear map: every statistic
/// converts alike).
fn in_ns(s: &Summary, khz: u32) -> Summary {
    let f = |x: f64| cycles_to_ns(x, khz);
    Summary {
        n: s.n,
        min: f(s.min),
        median: f(s.median),
        mean: f(s.mean),
        p10: f(s.p10),
        p90: f(s.p90),
        p99: f(s.p99),
        max: f(s.max),
        std_dev: f(s.std_dev),
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
        kvm_clock: facts.kvm_clock,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::summarize_run;

    fn round(i: u32, skew: u64, exit: Option<i64>, honoured: Option<bool>) -> RoundResult {
        RoundResult {
            cpu0_exit_latency_cycles: exit,
            disagreements: if i % 7 == 3 {
                vec![format!("d{i}")]
            } else {
                Vec::new()
            },
            ..crate::analysis::synthetic_round(i, skew, honoured)
        }
    }

    fn rounds(n: u32) -> Vec<RoundResult> {
        (0..n)
            .map(|i| {
                let skew = u64::from((i * 7919) % 1000) * 13 + 5_000;
                round(i, skew, Some(i64::from(i % 97) * 100 + 20_000), Some(true))
            })
            .collect()
    }

    /// The type-7 percentile of `v` (sorted here), from its definition,
    /// independently of the code under test.
    fn type7(v: &[f64], p: f64) -> f64 {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        let h = p * (v.len() - 1) as f64;
        let lo = h.floor() as usize;
        let hi = (lo + 1).min(v.len() - 1);
        v[lo] + (h - lo as f64) * (v[hi] - v[lo])
    }

    /// While every value is kept, the accumulator's summary is the one the
    /// whole list of rounds gives, and that is the one worked out here from
    /// the rounds' own numbers (both summaries share the order statistics
    /// of `stats`: a bug there would not show between them).
    #[test]
    fn the_summary_equals_the_one_of_all_rounds() {
        let rs = rounds(500);
        let mut acc = VariantAccumulator::new();
        for r in &rs {
            acc.add(r);
        }
        let a = acc.summary(Some(2_000_000));
        let b = summarize_run(&rs, Some(2_000_000));
        let skews: Vec<f64> = rs.iter().map(|r| r.skew_cycles as f64).collect();
        let exits: Vec<f64> = rs
            .iter()
            .filter_map(|r| r.cpu0_exit_latency_cycles)
            .map(|e| e as f64)
            .collect();
        let s = a.skew_cycles.as_ref().expect("a skew summary");
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * y.abs();
        assert!(close(s.median, type7(&skews, 0.5)), "{}", s.median);
        assert!(close(s.p99, type7(&skews, 0.99)), "{}", s.p99);
        assert!(close(s.p90, type7(&skews, 0.9)), "{}", s.p90);
        let e = a
            .cpu0_exit_latency_cycles
            .as_ref()
            .expect("an exit summary");
        assert_eq!(e.n, exits.len());
        assert!(close(e.median, type7(&exits, 0.5)), "{}", e.median);
        assert!(close(e.max, type7(&exits, 1.0)), "{}", e.max);
        assert_eq!(
            a.rounds_with_disagreements,
            rs.iter().filter(|r| !r.disagreements.is_empty()).count()
        );
        assert_eq!(a.rounds, b.rounds);
        assert_eq!(
            a.skew_cycles.as_ref().map(|s| s.median),
            b.skew_cycles.as_ref().map(|s| s.median)
        );
        assert_eq!(
            a.skew_cycles.as_ref().map(|s| s.p99),
            b.skew_cycles.as_ref().map(|s| s.p99)
        );
        assert_eq!(
            a.cpu0_exit_latency_cycles
                .as_ref()
                .map(|s| (s.n, s.median, s.max)),
            b.cpu0_exit_latency_cycles
                .as_ref()
                .map(|s| (s.n, s.median, s.max))
        );
        let ns = |s: &Option<Summary>| s.as_ref().map(|s| s.median);
        assert!((ns(&a.skew_ns).unwrap_or(0.0) - ns(&b.skew_ns).unwrap_or(0.0)).abs() < 1e-6);
        assert_eq!(a.rounds_with_disagreements, b.rounds_with_disagreements);
        assert_eq!(a.first_disagreements, b.first_disagreements);
        assert_eq!(a.precision_digits, None);
        assert_eq!(acc.writes_honoured(), Some(true));
    }

    /// Past the exact limit the statistics come from histograms, within
    /// their precision, and the summary says so.
    #[test]
    fn past_the_limit_the_summary_is_within_the_precision() {
        let rs = rounds(3_000);
        let mut acc = VariantAccumulator::with_exact_limit(100);
        for r in &rs {
            acc.add(r);
        }
        let a = acc.summary(None);
        let b = summarize_run(&rs, None);
        assert_eq!(a.precision_digits, Some(SIGNIFICANT_DIGITS));
        let (x, y) = (
            a.skew_cycles.as_ref().map_or(0.0, |s| s.median),
            b.skew_cycles.as_ref().map_or(0.0, |s| s.median),
        );
        assert!((x - y).abs() <= 1e-3 * y, "{x} vs {y}");
        assert_eq!(
            a.skew_cycles.as_ref().map(|s| s.max),
            b.skew_cycles.as_ref().map(|s| s.max)
        );
    }

    /// The typical round kept as the rounds go by has a skew near the final
    /// median (within the running median's precision and the data's spacing).
    #[test]
    fn the_typical_round_is_near_the_final_median() {
        let rs = rounds(2_000);
        let mut acc = VariantAccumulator::new();
        for r in &rs {
            acc.add(r);
        }
        let median = summarize_run(&rs, None)
            .skew_cycles
            .map_or(0.0, |s| s.median);
        let t = acc.typical().map_or(0, |r| r.skew_cycles) as f64;
        assert!(
            (t - median).abs() <= 0.01 * median + 13.0,
            "{t} vs {median}"
        );
    }

    #[test]
    fn mixed_or_undecided_rounds_are_not_a_verdict() {
        let mut acc = VariantAccumulator::new();
        acc.add(&round(0, 1, None, None));
        assert_eq!(acc.writes_honoured(), None);
        acc.add(&round(1, 1, None, Some(false)));
        assert_eq!(acc.writes_honoured(), Some(false));
        acc.add(&round(2, 1, None, Some(true)));
        assert_eq!(acc.writes_honoured(), None);
        // No exit time applies: no summary of it, never zeros.
        assert!(acc.summary(None).cpu0_exit_latency_cycles.is_none());
    }

    /// `compare` keeps no typical round; both forms give the same
    /// statistics, and the median skew for a progress line is the median.
    #[test]
    fn without_a_typical_round_the_statistics_are_the_same() {
        let rs = rounds(300);
        let (mut with, mut without) = (
            VariantAccumulator::new(),
            VariantAccumulator::without_typical(),
        );
        assert_eq!(with.median_skew(), None);
        for r in &rs {
            with.add(r);
            without.add(r);
        }
        assert!(without.typical().is_none());
        assert!(with.typical().is_some());
        let (a, b) = (with.summary(None), without.summary(None));
        assert_eq!(
            a.skew_cycles.as_ref().map(|s| s.median),
            b.skew_cycles.as_ref().map(|s| s.median)
        );
        assert_eq!(b.typical_round, None);
        let exact = summarize_run(&rs, None)
            .skew_cycles
            .map_or(0.0, |s| s.median);
        for m in [with.median_skew(), without.median_skew()] {
            let m = m.unwrap_or(f64::NAN);
            assert!((m - exact).abs() <= 1e-3 * exact + 13.0, "{m} vs {exact}");
        }
        assert_eq!(
            without.rounds_with_disagreements(),
            a.rounds_with_disagreements as u64
        );
    }
}
