//! A distribution of per-round values (cycles) whose memory does not grow
//! with the rounds: the values themselves while there are few (up to
//! [`EXACT_LIMIT`] by default), then a high-dynamic-range histogram with
//! [`SIGNIFICANT_DIGITS`] significant digits. The count, mean, standard
//! deviation, minimum and maximum stay exact either way; quantiles are exact
//! while the values are kept and within the stated precision after.
//!
//! Inference works on both forms: Mann-Whitney U (tie-corrected) from the
//! histograms' bins, and the bootstrap of a median shift from each
//! histogram's quantile function (the resampled median's rank is binomial,
//! so a replicate is a quantile at a normally perturbed probability).

use hdrhistogram::Histogram;

use crate::inference::{
    bootstrap_median_shift, mann_whitney, normal_upper_tail, MannWhitney, MedianShift, PMethod, Rng,
};
use crate::stats::{percentile_sorted, Summary};

/// How many values a distribution keeps exactly before it turns into a
/// histogram.
pub const EXACT_LIMIT: usize = 1_000_000;

/// The histogram's precision: values are kept to this many significant
/// decimal digits (a relative error below 10^-3).
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A histogram of signed integer values: one for those >= 0, one for the
/// magnitudes of those below.
#[derive(Clone, Debug)]
struct Signed {
    pos: Histogram<u64>,
    neg: Histogram<u64>,
}

impl Signed {
    fn new() -> Option<Signed> {
        Some(Signed {
            pos: Histogram::new(SIGNIFICANT_DIGITS).ok()?,
            neg: Histogram::new(SIGNIFICANT_DIGITS).ok()?,
        })
    }

    fn record(&mut self, v: f64) {
        let r = v.round();
        // Auto-resizing histograms accept any u64; a failure cannot happen
        // for these values, and would only lose one count.
        if r >= 0.0 {
            let _ = self.pos.record(r.min(u64::MAX as f64) as u64);
        } else {
            let _ = self.neg.record((-r).min(u64::MAX as f64) as u64);
        }
    }

    fn len(&self) -> u64 {
        self.pos.len() + self.neg.len()
    }

    /// The value of rank `k` (0-based, ascending) as the histogram knows it
    /// (the middle of its bin).
    fn at_rank(&self, k: u64) -> f64 {
        let n_neg = self.neg.len();
        if k < n_neg {
            // The (n_neg - 1 - k)-th smallest magnitude, negated.
            let j = n_neg - 1 - k;
            -(quantile_rank(&self.neg, j) as f64)
        } else {
            quantile_rank(&self.pos, k - n_neg) as f64
        }
    }

    /// Every bin in ascending value order: (value, count).
    fn bins(&self) -> Vec<(f64, u64)> {
        let mut out: Vec<(f64, u64)> = self
            .neg
            .iter_recorded()
            .map(|v| {
                (
                    -(self.neg.median_equivalent(v.value_iterated_to()) as f64),
                    v.count_at_value(),
                )
            })
            .collect();
        out.reverse();
        out.extend(self.pos.iter_recorded().map(|v| {
            (
                self.pos.median_equivalent(v.value_iterated_to()) as f64,
                v.count_at_value(),
            )
        }));
        out
    }
}

/// The value of 0-based rank `k` in `h`: the middle of the bin holding it.
fn quantile_rank(h: &Histogram<u64>, k: u64) -> u64 {
    let mut seen = 0u64;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        if seen > k {
            return h.median_equivalent(v.value_iterated_to());
        }
    }
    h.max()
}

/// Values of one metric, bounded in memory.
#[derive(Clone, Debug)]
pub struct Distribution {
    limit: usize,
    exact: Vec<f64>,
    hist: Option<Signed>,
    n: u64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution::with_limit(EXACT_LIMIT)
    }
}

impl Distribution {
    /// An empty distribution that keeps up to `limit` values exactly.
    pub fn with_limit(limit: usize) -> Distribution {
        Distribution {
            limit,
            exact: Vec::new(),
            hist: None,
            n: 0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// Adds one value (non-finite values are ignored).
    pub fn record(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        self.n += 1;
        // Welford's update: exact enough for any count.
        let d = v - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (v - self.mean);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        match &mut self.hist {
            Some(h) => h.record(v),
            None if self.exact.len() < self.limit => self.exact.push(v),
            None => {
                if let Some(mut h) = Signed::new() {
                    for &x in &self.exact {
                        h.record(x);
                    }
                    h.record(v);
                    self.exact = Vec::new();
                    self.hist = Some(h);
                }
            }
        }
    }

    /// How many values were recorded.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The histogram's precision in significant digits, `None` while every
    /// value is kept exactly.
    pub fn precision(&self) -> Option<u8> {
        self.hist.as_ref().map(|_| SIGNIFICANT_DIGITS)
    }

    /// The values themselves, while they are kept.
    pub fn exact_values(&self) -> Option<&[f64]> {
        self.hist.is_none().then_some(self.exact.as_slice())
    }

    /// The `p`-th percentile (0..=100): linear interpolation between closest
    /// ranks (R's type 7) on exact values; the value at that rank, within the
    /// precision, on a histogram.
    pub fn percentile(&self, p: f64) -> f64 {
        match &self.hist {
            None => {
                let mut v = self.exact.clone();
                v.sort_by(f64::total_cmp);
                percentile_sorted(&v, p)
            }
            Some(h) => {
                let n = h.len();
                if n == 0 {
                    return f64::NAN;
                }
                let rank = (p.clamp(0.0, 100.0) / 100.0) * (n - 1) as f64;
                let (lo, hi) = (rank.floor() as u64, rank.ceil() as u64);
                let (a, b) = (h.at_rank(lo), h.at_rank(hi));
                a + (b - a) * (rank - lo as f64)
            }
        }
    }

    /// The summary: exact count, mean, standard deviation, minimum and
    /// maximum; quantiles as [`Distribution::percentile`]. `None` when empty.
    pub fn summary(&self) -> Option<Summary> {
        if self.n == 0 {
            return None;
        }
        let (median, p10, p90, p99) = match &self.hist {
            None => {
                let mut v = self.exact.clone();
                v.sort_by(f64::total_cmp);
                (
                    percentile_sorted(&v, 50.0),
                    percentile_sorted(&v, 10.0),
                    percentile_sorted(&v, 90.0),
                    percentile_sorted(&v, 99.0),
                )
            }
            Some(_) => (
                self.percentile(50.0),
                self.percentile(10.0),
                self.percentile(90.0),
                self.percentile(99.0),
            ),
        };
        Some(Summary {
            n: self.n as usize,
            min: self.min,
            median,
            mean: self.mean,
            p10,
            p90,
            p99,
            max: self.max,
            std_dev: if self.n > 1 {
                (self.m2 / (self.n - 1) as f64).max(0.0).sqrt()
            } else {
                0.0
            },
        })
    }

    /// (value, cumulative fraction) at `points` evenly spaced quantiles, for
    /// drawing the CDF.
    pub fn cdf(&self, points: usize) -> Vec<(f64, f64)> {
        if self.n == 0 || points == 0 {
            return Vec::new();
        }
        let sorted = self.exact_values().map(|v| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v
        });
        (0..=points)
            .map(|i| {
                let q = i as f64 / points as f64;
                let x = match &sorted {
                    Some(v) => percentile_sorted(v, q * 100.0),
                    None => self.percentile(q * 100.0),
                };
                (x, q)
            })
            .collect()
    }

    /// Every value (exact) or bin (value, count), ascending.
    fn bins(&self) -> Vec<(f64, u64)> {
        match &self.hist {
            Some(h) => h.bins(),
            None => {
                let mut v = self.exact.clone();
                v.sort_by(f64::total_cmp);
                let mut out: Vec<(f64, u64)> = Vec::new();
                for x in v {
                    match out.last_mut() {
                        Some((y, c)) if *y == x => *c += 1,
                        _ => out.push((x, 1)),
                    }
                }
                out
            }
        }
    }
}

/// The Mann-Whitney U test of `a` against `b`: exact computation (as
/// [`mann_whitney`]) while both keep their values, else from the bins, every
/// bin a group of ties (normal approximation, tie-corrected, continuity
/// correction).
pub fn mann_whitney_of(a: &Distribution, b: &Distribution) -> Option<MannWhitney> {
    if let (Some(x), Some(y)) = (a.exact_values(), b.exact_values()) {
        return mann_whitney(x, y);
    }
    let (na, nb) = (a.len() as f64, b.len() as f64);
    if na == 0.0 || nb == 0.0 {
        return None;
    }
    // Merge the two sorted bin lists: ranks of equal values are shared.
    let (ba, bb) = (a.bins(), b.bins());
    let (mut i, mut j) = (0, 0);
    let (mut below, mut rank_sum_a, mut tie_term) = (0.0f64, 0.0f64, 0.0f64);
    while i < ba.len() || j < bb.len() {
        let va = ba.get(i).map_or(f64::INFINITY, |x| x.0);
        let vb = bb.get(j).map_or(f64::INFINITY, |x| x.0);
        let v = va.min(vb);
        let ca = if va == v { ba[i].1 as f64 } else { 0.0 };
        let cb = if vb == v { bb[j].1 as f64 } else { 0.0 };
        let t = ca + cb;
        // Ranks below+1 ..= below+t share their average.
        rank_sum_a += ca * (below + (t + 1.0) / 2.0);
        tie_term += t * t * t - t;
        below += t;
        if va == v {
            i += 1;
        }
        if vb == v {
            j += 1;
        }
    }
    let ft = na + nb;
    let u_a = rank_sum_a - na * (na + 1.0) / 2.0;
    let mean = na * nb / 2.0;
    let var = na * nb / 12.0 * ((ft + 1.0) - tie_term / (ft * (ft - 1.0)));
    let sd = var.max(0.0).sqrt();
    let (z, p_two_sided, p_greater) = if sd > 0.0 {
        let d = u_a - mean;
        let z = (d - 0.5 * d.signum()) / sd;
        (
            z,
            (2.0 * normal_upper_tail(z.abs())).min(1.0),
            normal_upper_tail((u_a - mean - 0.5) / sd),
        )
    } else {
        (0.0, 1.0, 1.0)
    };
    Some(MannWhitney {
        n_a: na as usize,
        n_b: nb as usize,
        u_a,
        u_b: na * nb - u_a,
        z,
        p_two_sided,
        p_greater,
        method: PMethod::Normal,
        prob_a_greater: u_a / (na * nb),
    })
}

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut Rng) -> f64 {
    let u1 = rng.unit().max(f64::MIN_POSITIVE);
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A bootstrap replicate of the median of `d`: the median of n draws with
/// replacement is the value at rank R, and R/n is approximately
/// normal(1/2, 1/(4n)); so a replicate is the percentile at that perturbed
/// probability.
fn replicate_median(d: &Distribution, rng: &mut Rng) -> f64 {
    let n = d.len().max(1) as f64;
    let q = (0.5 + normal(rng) * (0.25 / n).sqrt()).clamp(0.0, 1.0);
    d.percentile(q * 100.0)
}

/// Percentile-bootstrap 95 % intervals of `median(b) - median(a)` and of the
/// relative change: the exact resampling bootstrap (as
/// [`bootstrap_median_shift`]) while both keep their values, else replicates
/// drawn from each histogram's quantile function.
pub fn median_shift_of(
    a: &Distribution,
    b: &Distribution,
    iterations: u32,
    seed: u64,
) -> Option<MedianShift> {
    if let (Some(x), Some(y)) = (a.exact_values(), b.exact_values()) {
        return bootstrap_median_shift(x, y, iterations, seed);
    }
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let (median_a, median_b) = (a.percentile(50.0), b.percentile(50.0));
    let mut rng = Rng::new(seed);
    let mut diffs = Vec::with_capacity(iterations as usize);
    let mut rels = Vec::with_capacity(iterations as usize);
    for _ in 0..iterations {
        let (ma, mb) = (replicate_median(a, &mut rng), replicate_median(b, &mut rng));
        diffs.push(mb - ma);
        rels.push((mb - ma) / ma);
    }
    diffs.sort_by(f64::total_cmp);
    rels.sort_by(f64::total_cmp);
    Some(MedianShift {
        median_a,
        median_b,
        diff: median_b - median_a,
        rel: (median_b - median_a) / median_a,
        diff_lo: percentile_sorted(&diffs, 2.5),
        diff_hi: percentile_sorted(&diffs, 97.5),
        rel_lo: percentile_sorted(&rels, 2.5),
        rel_hi: percentile_sorted(&rels, 97.5),
        iterations,
        seed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summarize;

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

    #[test]
    fn while_values_fit_the_summary_is_the_exact_one() {
        let v = sample(5_000, 1, 1.0);
        let (d, _) = both(&v, 0);
        assert_eq!(d.precision(), None);
        let s = d.summary().expect("values");
        let t = summarize(v.iter().copied()).expect("values");
        assert_eq!(
            (s.n, s.min, s.max, s.median, s.p90, s.p99),
            (t.n, t.min, t.max, t.median, t.p90, t.p99)
        );
        assert!((s.mean - t.mean).abs() < 1e-6 * t.mean);
        assert!((s.std_dev - t.std_dev).abs() < 1e-6 * t.std_dev);
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
}
