//! From what was measured to the report: per-variant statistics, every
//! variant against the reference (the first named) on every metric, and the
//! verdicts. The inference runs on the bounded distributions: exactly as on
//! the values while they are kept, from the histograms after
//! ([`mann_whitney_of`], [`median_shift_of`]).

use super::{
    CompareOptions, CompareReport, Measured, Metric, MetricComparison, INTERLEAVING, SCHEMA,
};
use tsc_contract::Variant;

use crate::stats::distribution::{mann_whitney_of, median_shift_of, Distribution};
use crate::stats::inference::{MannWhitney, MedianShift};

/// Whether a difference is distinguishable from noise: the 95 % interval of
/// the median shift excludes 0 and the two-sided rank-test p-value is below
/// 0.05. Without either there is nothing to distinguish.
pub fn distinguishable(shift: Option<&MedianShift>, test: Option<&MannWhitney>) -> bool {
    match (shift, test) {
        (Some(s), Some(t)) => (s.diff_lo > 0.0 || s.diff_hi < 0.0) && t.p_two_sided < 0.05,
        _ => false,
    }
}

fn compare_metric(
    data: &Measured,
    reference: &str,
    variant: &str,
    metric: Metric,
    iterations: u32,
    seed: u64,
) -> MetricComparison {
    let empty = Distribution::default();
    let of = |name: &str| data.tallies.tally(name).map_or(&empty, |t| metric.of(t));
    let (a, b) = (of(reference), of(variant));
    let shift = median_shift_of(a, b, iterations, seed);
    let mw = mann_whitney_of(a, b);
    MetricComparison {
        reference: reference.to_string(),
        variant: variant.to_string(),
        metric,
        n_reference: a.len() as usize,
        n_variant: b.len() as usize,
        distinguishable: distinguishable(shift.as_ref(), mw.as_ref()),
        shift,
        mann_whitney: mw,
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
pub fn verdict(c: &MetricComparison) -> String {
    let no_write = [&c.reference, &c.variant]
        .into_iter()
        .find(|n| Variant::from_name(n).is_some_and(|v| !v.writes_common_tsc()));
    if let (Some(n), Metric::Cpu0ExitLatencyCycles) = (no_write, c.metric) {
        return format!(
            "{} vs {}: CPU 0's loop-exit time does not apply to {n} (it writes no common TSC \
             value); compare the skew",
            c.variant, c.reference
        );
    }
    let (Some(s), Some(t)) = (&c.shift, &c.mann_whitney) else {
        return format!("{} vs {}: no data to compare", c.variant, c.reference);
    };
    let p = p_text(t.p_two_sided);
    let counts = if c.n_reference == c.n_variant {
        format!("{} rounds each", c.n_variant)
    } else {
        format!("{} and {} rounds", c.n_reference, c.n_variant)
    };
    if c.distinguishable {
        let (word, mag, lo, hi) = if s.rel < 0.0 {
            ("sooner", -s.rel, -s.rel_hi, -s.rel_lo)
        } else {
            ("later", s.rel, s.rel_lo, s.rel_hi)
        };
        format!(
            "{} exits {:.1}% {word} than {} (95% CI {:.1}..{:.1}%, {p}, {counts})",
            c.variant,
            pct(mag),
            c.reference,
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
             {counts}): not distinguishable from noise{why}",
            c.variant,
            c.reference,
            pct(s.rel),
            pct(s.rel_lo),
            pct(s.rel_hi),
        )
    }
}

/// Summarises and compares what was measured (a `Measured`, or the list
/// form [`super::CompareData`]); `incomplete` says why the measurement ended
/// before its plan did, if it did.
pub fn analyse(
    opts: &CompareOptions,
    data: impl Into<Measured>,
    incomplete: Option<String>,
) -> CompareReport {
    analyse_measured(opts, &data.into(), incomplete)
}

/// [`analyse`] of what is kept for more (the plot).
pub fn analyse_measured(
    opts: &CompareOptions,
    data: &Measured,
    incomplete: Option<String>,
) -> CompareReport {
    let names: Vec<String> = opts.variants.iter().map(|v| v.name().to_string()).collect();
    let per_variant: Vec<_> = names.iter().map(|name| data.tallies.stats(name)).collect();
    let mut comparisons = Vec::new();
    let mut verdicts = Vec::new();
    let reference = names.first().cloned().unwrap_or_default();
    for (vi, name) in names.iter().enumerate().skip(1) {
        for (mi, metric) in Metric::compared(opts.kvmclock).enumerate() {
            let seed = opts
                .seed
                .wrapping_add(((vi as u64) << 8) | mi as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let c = compare_metric(data, &reference, name, metric, opts.bootstrap, seed);
            if metric == Metric::Cpu0ExitLatencyCycles {
                verdicts.push(verdict(&c));
            }
            comparisons.push(c);
        }
    }
    let total_rounds =
        data.tallies.measured_rounds as f64 + f64::from(data.tallies.warmup_rounds_run);
    let secs = data.elapsed.as_secs_f64();
    let rounds_per_variant = match data.duration {
        // By time: what every variant had (whole blocks: the same for all).
        Some(_) => per_variant
            .iter()
            .map(|v| u32::try_from(v.rounds).unwrap_or(u32::MAX))
            .min()
            .unwrap_or(0),
        None => opts.rounds,
    };
    CompareReport {
        schema: SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        host: data.host.clone(),
        vcpus: opts.vcpus,
        variants: names,
        rounds_per_variant,
        duration_seconds: data.duration.map(|d| d.as_secs_f64()),
        seed: opts.seed,
        interleaving: INTERLEAVING,
        warmup_rounds_per_vm: opts.warmup,
        warmup_rounds_run: data.tallies.warmup_rounds_run,
        fresh_vm_every: opts.fresh_vm_every,
        vms: data.vms,
        bootstrap_iterations: opts.bootstrap,
        elapsed_seconds: secs,
        rounds_per_second: if secs > 0.0 { total_rounds / secs } else { 0.0 },
        per_variant,
        comparisons,
        verdicts,
        notes: data.notes.clone(),
        incomplete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn test(p: f64) -> MannWhitney {
        MannWhitney {
            n_a: 10,
            n_b: 10,
            u_a: 0.0,
            u_b: 0.0,
            z: 0.0,
            p_two_sided: p,
            p_greater: p,
            method: crate::stats::inference::PMethod::Normal,
            prob_a_greater: 0.5,
        }
    }

    /// `distinguishable` is stated by hand for each case, not recomputed
    /// with the rule under test.
    fn comparison(s: MedianShift, p: f64, distinguishable: bool, n: usize) -> MetricComparison {
        MetricComparison {
            reference: "xen-4.15".into(),
            variant: "xen-6ca022a1".into(),
            metric: Metric::Cpu0ExitLatencyCycles,
            n_reference: n,
            n_variant: n,
            shift: Some(s),
            mann_whitney: Some(test(p)),
            distinguishable,
        }
    }

    #[test]
    fn distinguishable_needs_the_interval_and_the_test() {
        // Interval below 0, p small: yes. Interval above 0, p small: yes.
        assert!(distinguishable(
            Some(&shift(-0.1, -0.2, -0.05)),
            Some(&test(0.01))
        ));
        assert!(distinguishable(
            Some(&shift(0.1, 0.05, 0.2)),
            Some(&test(0.049))
        ));
        // Interval touching or straddling 0: no, whatever p.
        assert!(!distinguishable(
            Some(&shift(0.1, 0.0, 0.2)),
            Some(&test(0.001))
        ));
        assert!(!distinguishable(
            Some(&shift(0.0, -0.1, 0.1)),
            Some(&test(0.001))
        ));
        // p at or above 0.05: no.
        assert!(!distinguishable(
            Some(&shift(0.1, 0.05, 0.2)),
            Some(&test(0.05))
        ));
        // Missing either: no.
        assert!(!distinguishable(None, Some(&test(0.001))));
        assert!(!distinguishable(Some(&shift(0.1, 0.05, 0.2)), None));
    }

    #[test]
    fn verdicts_say_sooner_later_or_noise() {
        let v = verdict(&comparison(
            shift(-0.091, -0.113, -0.070),
            0.0001,
            true,
            2000,
        ));
        assert_eq!(
            v,
            "xen-6ca022a1 exits 9.1% sooner than xen-4.15 (95% CI 7.0..11.3%, p < 0.001, 2000 rounds each)"
        );
        let v = verdict(&comparison(shift(0.05, 0.02, 0.08), 0.012, true, 100));
        assert!(v.contains("5.0% later") && v.contains("p = 0.012"), "{v}");
        let v = verdict(&comparison(shift(0.01, -0.02, 0.04), 0.4, false, 100));
        assert!(v.ends_with("not distinguishable from noise"), "{v}");
        let v = verdict(&comparison(shift(0.01, -0.02, 0.04), 0.008, false, 50));
        assert!(
            v.contains("not distinguishable from noise (the rank test"),
            "{v}"
        );
        let v = verdict(&comparison(shift(0.03, 0.01, 0.05), 0.2, false, 50));
        assert!(v.contains("noise (the median shift's CI excludes 0"), "{v}");
    }

    #[test]
    fn the_exit_time_of_a_variant_without_a_write_is_not_compared() {
        let mut c = comparison(shift(0.05, 0.02, 0.08), 0.01, true, 10);
        c.variant = "linux-tsc-sync".into();
        let v = verdict(&c);
        assert!(v.contains("does not apply to linux-tsc-sync"), "{v}");
        c.metric = Metric::SkewCycles;
        assert!(!verdict(&c).contains("does not apply"));
    }

    #[test]
    fn an_interrupted_comparison_states_the_counts_it_had() {
        let mut c = comparison(shift(0.05, 0.02, 0.08), 0.01, true, 10);
        c.n_variant = 9;
        let v = verdict(&c);
        assert!(
            v.ends_with("(95% CI 2.0..8.0%, p = 0.010, 10 and 9 rounds)"),
            "{v}"
        );
    }
}
