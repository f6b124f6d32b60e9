//! Unit tests of the bounded distributions: exact below the limit, within
//! the stated precision above it, and the inference on both forms.

use super::*;

/// A skewed, heavy-tailed sample like exit times: deterministic.
fn sample(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let u = rng.unit().max(1e-12);
            (scale * (20_000.0 + 3_000.0 * (-u.ln()).powf(1.5))).round()
        })
        .collect()
}

fn both(values: &[f64], limit: usize) -> (Distribution, Distribution) {
    let mut exact = Distribution::with_limit(usize::MAX);
    let mut hist = Distribution::with_limit(limit);
    for &v in values {
        exact.record(v);
        hist.record(v);
    }
    (exact, hist)
}

/// The type-7 percentile of sorted `v` (rank p (n - 1), interpolated),
/// worked here from its definition, independently of the code under test.
fn type7(v: &[f64], p: f64) -> f64 {
    let h = p * (v.len() - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

/// Up to [`EXACT_LIMIT`] values (the default limit, reached exactly) the
/// summary is the exact one: every order statistic as worked out from the
/// sorted values, the mean and the standard deviation by the two-pass
/// formula. The values are distinct, at least 3 apart, so that a rank off by
/// one, or a histogram's rounding, shows. One value more and the histogram
/// takes over.
#[test]
fn while_values_fit_the_summary_is_the_exact_one() {
    let mut rng = Rng::new(9);
    let mut v: Vec<f64> = (0..EXACT_LIMIT as u64)
        .map(|k| (20_000 + 7 * k + k * k % 5) as f64)
        .collect();
    for i in (1..v.len()).rev() {
        let j = (rng.unit() * (i + 1) as f64) as usize;
        v.swap(i, j.min(i));
    }
    let mut d = Distribution::default();
    for &x in &v {
        d.record(x);
    }
    assert_eq!(d.precision(), None, "{} values fit", v.len());
    let s = d.summary().expect("values");
    let mut sorted = v.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len() as f64;
    let mean = sorted.iter().sum::<f64>() / n;
    let sd = (sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    assert_eq!(s.n, v.len());
    assert_eq!((s.min, s.max), (sorted[0], sorted[v.len() - 1]));
    for (got, p) in [(s.p10, 0.1), (s.median, 0.5), (s.p90, 0.9), (s.p99, 0.99)] {
        assert!(
            close(got, type7(&sorted, p)),
            "p{p}: {got} vs {}",
            type7(&sorted, p)
        );
    }
    assert!(close(s.mean, mean), "{} vs {mean}", s.mean);
    assert!(close(s.std_dev, sd), "{} vs {sd}", s.std_dev);
    d.record(1.0);
    assert_eq!(
        d.precision(),
        Some(SIGNIFICANT_DIGITS),
        "one more: a histogram"
    );
}

/// The histogram's quantiles are within its stated precision of the
/// exact ones; count, mean, sd, min and max stay exact.
#[test]
fn a_histogram_keeps_quantiles_within_its_precision() {
    let mut v = sample(200_000, 2, 1.0);
    v.extend([-5_000.0, -12.0, 0.0]);
    let (e, h) = both(&v, 1_000);
    assert_eq!(h.precision(), Some(3));
    let (se, sh) = (e.summary().expect("e"), h.summary().expect("h"));
    assert_eq!((sh.n, sh.min, sh.max), (se.n, se.min, se.max));
    assert!((sh.mean - se.mean).abs() < 1e-9 * se.mean.abs());
    assert!((sh.std_dev - se.std_dev).abs() < 1e-9 * se.std_dev);
    for (x, y) in [
        (sh.median, se.median),
        (sh.p10, se.p10),
        (sh.p90, se.p90),
        (sh.p99, se.p99),
    ] {
        assert!((x - y).abs() <= 1e-3 * y.abs() + 1.0, "{x} vs {y}");
    }
    // Negative values land below the positive ones.
    assert!(h.percentile(0.0) <= -4_990.0, "{}", h.percentile(0.0));
}

#[test]
fn memory_does_not_grow_past_the_limit() {
    let mut d = Distribution::with_limit(10);
    for i in 0..10 {
        d.record(f64::from(i));
    }
    assert_eq!(d.exact_values().map(<[f64]>::len), Some(10));
    d.record(10.0);
    assert!(d.exact_values().is_none());
    assert_eq!(d.len(), 11);
}

/// Mann-Whitney from the bins agrees with the exact computation on the
/// same data (binning adds ties; the p-values stay close).
#[test]
fn mann_whitney_from_histograms_agrees_with_the_exact_test() {
    let a = sample(3_000, 3, 1.0);
    let b = sample(3_000, 4, 1.02);
    let (ea, ha) = both(&a, 10);
    let (eb, hb) = both(&b, 10);
    let exact = mann_whitney_of(&ea, &eb).expect("exact");
    let binned = mann_whitney_of(&ha, &hb).expect("binned");
    assert_eq!(exact.method, PMethod::Normal);
    assert!(
        (exact.u_a - binned.u_a).abs() <= 1e-3 * exact.u_a,
        "{} vs {}",
        exact.u_a,
        binned.u_a
    );
    assert!(
        (exact.z - binned.z).abs() < 0.05,
        "{} vs {}",
        exact.z,
        binned.z
    );
    assert!((exact.p_two_sided - binned.p_two_sided).abs() < 0.02);
}

/// The histogram bootstrap of the median shift gives an interval close
/// to the exact resampling bootstrap's on the same data.
#[test]
fn the_histogram_bootstrap_agrees_with_the_exact_one() {
    let a = sample(20_000, 5, 1.0);
    let b = sample(20_000, 6, 1.05);
    let (ea, ha) = both(&a, 10);
    let (eb, hb) = both(&b, 10);
    let exact = median_shift_of(&ea, &eb, 400, 7).expect("exact");
    let binned = median_shift_of(&ha, &hb, 2_000, 7).expect("binned");
    let width = exact.diff_hi - exact.diff_lo;
    assert!(width > 0.0);
    assert!(
        (binned.diff - exact.diff).abs() <= 0.002 * exact.median_a + 2.0,
        "{} vs {}",
        binned.diff,
        exact.diff
    );
    assert!(
        (binned.diff_lo - exact.diff_lo).abs() <= 0.35 * width,
        "{binned:?} vs {exact:?}"
    );
    assert!(
        (binned.diff_hi - exact.diff_hi).abs() <= 0.35 * width,
        "{binned:?} vs {exact:?}"
    );
}
