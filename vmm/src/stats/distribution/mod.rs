//! A distribution of per-round values (cycles) whose memory does not grow
//! with the rounds: the values themselves while there are few (up to
//! [`EXACT_LIMIT`] by default), then a high-dynamic-range histogram with
//! [`SIGNIFICANT_DIGITS`] significant digits (values rounded to whole
//! cycles). The count, mean, standard deviation, minimum and maximum stay
//! exact either way (the mean and standard deviation to floating-point
//! rounding); quantiles are exact while the values are kept and within the
//! stated precision after.
//!
//! The limit is small on purpose: a histogram of cycle counts up to 10^9
//! takes about 180 KB whatever the count, while kept values take 8 bytes
//! each, so a limit of a million would let a soak's memory grow to 8 MB per
//! metric and variant before it stops growing. At [`EXACT_LIMIT`] the kept
//! values take about as much as the histogram that replaces them.
//!
//! Inference works on both forms: Mann-Whitney U (tie-corrected) from the
//! histograms' bins, and the bootstrap of a median shift from each
//! histogram's quantile function (the resampled median's rank is binomial,
//! so a replicate is a quantile at a normally perturbed probability).

use hdrhistogram::Histogram;

use crate::stats::inference::{
    bootstrap_median_shift, mann_whitney, normal_upper_tail, MannWhitney, MedianShift, PMethod, Rng,
};
use crate::stats::{percentile_sorted, summarize, Summary};

/// How many values a distribution keeps exactly before it turns into a
/// histogram (see the module documentation for why so few).
pub const EXACT_LIMIT: usize = 10_000;

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

/// A histogram's bins in ascending value order with their cumulative
/// counts: its quantile function, built once for many look-ups.
struct Ranked {
    /// (value, count of values up to and including this bin).
    bins: Vec<(f64, u64)>,
}

impl Ranked {
    fn of(bins: Vec<(f64, u64)>) -> Ranked {
        let mut seen = 0u64;
        let bins = bins
            .into_iter()
            .map(|(v, c)| {
                seen = seen.saturating_add(c);
                (v, seen)
            })
            .collect();
        Ranked { bins }
    }

    fn len(&self) -> u64 {
        self.bins.last().map_or(0, |b| b.1)
    }

    /// The value of 0-based rank `k` (ascending): the middle of the bin
    /// holding it.
    fn at_rank(&self, k: u64) -> f64 {
        let i = self.bins.partition_point(|&(_, c)| c <= k);
        self.bins
            .get(i)
            .or(self.bins.last())
            .map_or(f64::NAN, |b| b.0)
    }

    /// The `p`-th percentile (0..=100): type 7 over the ranks, each rank's
    /// value the middle of its bin.
    fn percentile(&self, p: f64) -> f64 {
        let n = self.len();
        if n == 0 {
            return f64::NAN;
        }
        let rank = (p.clamp(0.0, 100.0) / 100.0) * (n - 1) as f64;
        let (lo, hi) = (rank.floor() as u64, rank.ceil() as u64);
        let (a, b) = (self.at_rank(lo), self.at_rank(hi));
        a + (b - a) * (rank - lo as f64)
    }
}

/// A distribution's quantile function: its sorted values or its ranked bins.
enum Quantiles {
    Sorted(Vec<f64>),
    Ranked(Ranked),
}

impl Quantiles {
    fn percentile(&self, p: f64) -> f64 {
        match self {
            Quantiles::Sorted(v) => percentile_sorted(v, p),
            Quantiles::Ranked(r) => r.percentile(p),
        }
    }
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

    /// The smallest value (exact), `None` when empty.
    pub fn min(&self) -> Option<f64> {
        (self.n > 0).then_some(self.min)
    }

    /// The largest value (exact), `None` when empty.
    pub fn max(&self) -> Option<f64> {
        (self.n > 0).then_some(self.max)
    }

    /// The kept values, sorted (`None` once they are a histogram).
    fn sorted_exact(&self) -> Option<Vec<f64>> {
        self.exact_values().map(|v| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v
        })
    }

    /// The histogram's quantile function (`None` while the values are kept).
    fn ranked(&self) -> Option<Ranked> {
        self.hist.as_ref().map(|h| Ranked::of(h.bins()))
    }

    /// The quantile function, built once for many look-ups.
    fn quantiles(&self) -> Quantiles {
        match (self.sorted_exact(), self.ranked()) {
            (Some(v), _) => Quantiles::Sorted(v),
            (None, Some(r)) => Quantiles::Ranked(r),
            (None, None) => Quantiles::Sorted(Vec::new()),
        }
    }

    /// The `p`-th percentile (0..=100): linear interpolation between closest
    /// ranks (R's type 7) on exact values; the same on a histogram's ranks,
    /// each rank's value the middle of its bin (within the precision).
    pub fn percentile(&self, p: f64) -> f64 {
        match (self.sorted_exact(), self.ranked()) {
            (Some(v), _) => percentile_sorted(&v, p),
            (None, Some(r)) => r.percentile(p),
            (None, None) => f64::NAN,
        }
    }

    /// The summary: exact count, mean, standard deviation, minimum and
    /// maximum; quantiles as [`Distribution::percentile`]. While the values
    /// are kept it is exactly [`summarize`] of them. `None` when empty.
    pub fn summary(&self) -> Option<Summary> {
        if self.n == 0 {
            return None;
        }
        if let Some(v) = self.exact_values() {
            return summarize(v.iter().copied());
        }
        let r = self.ranked()?;
        Some(Summary {
            n: self.n as usize,
            min: self.min,
            median: r.percentile(50.0),
            mean: self.mean,
            p10: r.percentile(10.0),
            p90: r.percentile(90.0),
            p99: r.percentile(99.0),
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
        let sorted = self.sorted_exact();
        let ranked = self.ranked();
        (0..=points)
            .map(|i| {
                let q = i as f64 / points as f64;
                let x = match (&sorted, &ranked) {
                    (Some(v), _) => percentile_sorted(v, q * 100.0),
                    (None, Some(r)) => r.percentile(q * 100.0),
                    (None, None) => f64::NAN,
                };
                (x, q)
            })
            .collect()
    }

    /// The empirical CDF as steps: every distinct value (kept values) or bin
    /// (histogram), ascending, with the fraction of values at or below it.
    /// At most `EXACT_LIMIT` points or the histogram's bins, whatever the
    /// count.
    pub fn ecdf(&self) -> Vec<(f64, f64)> {
        let bins = self.bins();
        let n = self.n.max(1) as f64;
        let mut seen = 0u64;
        bins.into_iter()
            .map(|(v, c)| {
                seen += c;
                (v, seen as f64 / n)
            })
            .collect()
    }

    /// How many values lie above `x` (exact while the values are kept; by
    /// bin, within the precision, after).
    pub fn count_above(&self, x: f64) -> u64 {
        match self.exact_values() {
            Some(v) => v.iter().filter(|&&y| y > x).count() as u64,
            None => self
                .bins()
                .into_iter()
                .filter(|&(v, _)| v > x)
                .map(|(_, c)| c)
                .sum(),
        }
    }

    /// Every value (exact) or bin (value, count), ascending.
    fn bins(&self) -> Vec<(f64, u64)> {
        match &self.hist {
            Some(h) => h.bins(),
            None => {
                let mut out: Vec<(f64, u64)> = Vec::new();
                for x in self.sorted_exact().unwrap_or_default() {
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
fn replicate_median(q: &Quantiles, n: u64, rng: &mut Rng) -> f64 {
    let n = n.max(1) as f64;
    let at = (0.5 + normal(rng) * (0.25 / n).sqrt()).clamp(0.0, 1.0);
    q.percentile(at * 100.0)
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
    let (qa, qb) = (a.quantiles(), b.quantiles());
    let (median_a, median_b) = (qa.percentile(50.0), qb.percentile(50.0));
    let mut rng = Rng::new(seed);
    let mut diffs = Vec::with_capacity(iterations as usize);
    let mut rels = Vec::with_capacity(iterations as usize);
    for _ in 0..iterations {
        let ma = replicate_median(&qa, a.len(), &mut rng);
        let mb = replicate_median(&qb, b.len(), &mut rng);
        diffs.push(mb - ma);
        rels.push((mb - ma) / ma);
    }
    Some(MedianShift::from_replicates(
        (median_a, median_b),
        diffs,
        rels,
        (iterations, seed),
    ))
}

#[cfg(test)]
mod tests;
