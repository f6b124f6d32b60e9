//! Comparing two samples: a seeded PRNG, a percentile bootstrap confidence
//! interval for the difference (and relative change) of medians, and the
//! Mann-Whitney U rank test.
//!
//! Methods, as documented for users in the README:
//! - **Bootstrap**: each sample is resampled with replacement, independently,
//!   `iterations` times; every replicate gives `median(b*) - median(a*)` and
//!   `(median(b*) - median(a*)) / median(a*)`. The 95 % interval is the 2.5th
//!   and 97.5th percentile of the replicates (percentile method, linear
//!   interpolation as in [`super::order::percentile_sorted`]). The resampling
//!   is driven by [`Rng`], so a seed reproduces the interval exactly.
//! - **Mann-Whitney U** (two-sided): ranks of the pooled sample, ties given
//!   their average rank. `U` is the number of pairs (a, b) with a > b, ties
//!   counting one half. Without ties and with both samples smaller than 50 the
//!   p-value is exact (the distribution of U counted with a Gaussian binomial
//!   coefficient, as R's `wilcox.test` does); otherwise it is the normal
//!   approximation with the tie-corrected variance and a continuity
//!   correction of 1/2, accurate for the sample sizes `compare` uses.

use serde::Serialize;

use super::order::percentile_sorted;

/// A small, seedable PRNG: xoshiro256** seeded through SplitMix64. Not for
/// cryptography; reproducible across platforms.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose whole output is fixed by `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A number in `0..n` (0 when `n` is 0). Multiply-shift: the bias is at
    /// most n / 2^64, negligible for sample sizes.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// A float in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// The median of `buf`, reordering it; NaN when empty. O(n).
pub fn median_in_place(buf: &mut [f64]) -> f64 {
    let n = buf.len();
    if n == 0 {
        return f64::NAN;
    }
    let (left, mid, _) = buf.select_nth_unstable_by(n / 2, f64::total_cmp);
    let upper = *mid;
    if n % 2 == 1 {
        return upper;
    }
    let lower = left.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lower + upper) / 2.0
}

/// A bootstrap confidence interval for the difference of medians.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MedianShift {
    /// Median of the baseline sample `a`.
    pub median_a: f64,
    /// Median of the other sample `b`.
    pub median_b: f64,
    /// `median_b - median_a`.
    pub diff: f64,
    /// `(median_b - median_a) / median_a` (NaN when `median_a` is 0).
    pub rel: f64,
    /// Lower end of the 95 % interval of `diff`.
    pub diff_lo: f64,
    /// Upper end of the 95 % interval of `diff`.
    pub diff_hi: f64,
    /// Lower end of the 95 % interval of `rel`.
    pub rel_lo: f64,
    /// Upper end of the 95 % interval of `rel`.
    pub rel_hi: f64,
    /// Bootstrap replicates drawn.
    pub iterations: u32,
    /// The PRNG seed of the resampling.
    pub seed: u64,
}

/// Percentile-bootstrap 95 % intervals for `median(b) - median(a)` and for
/// the relative change; `None` when either sample is empty.
pub fn bootstrap_median_shift(
    a: &[f64],
    b: &[f64],
    iterations: u32,
    seed: u64,
) -> Option<MedianShift> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let median_a = median_in_place(&mut a.to_vec());
    let median_b = median_in_place(&mut b.to_vec());
    let mut rng = Rng::new(seed);
    let mut ra = vec![0.0; a.len()];
    let mut rb = vec![0.0; b.len()];
    let mut diffs = Vec::with_capacity(iterations as usize);
    let mut rels = Vec::with_capacity(iterations as usize);
    for _ in 0..iterations {
        for x in ra.iter_mut() {
            *x = a[rng.below(a.len())];
        }
        for x in rb.iter_mut() {
            *x = b[rng.below(b.len())];
        }
        let ma = median_in_place(&mut ra);
        let mb = median_in_place(&mut rb);
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

impl MedianShift {
    /// The shift between the samples' medians `(a, b)`, with the 95 %
    /// percentile intervals of the bootstrap replicates of the difference
    /// and of the relative change (`(iterations, seed)` as drawn).
    pub fn from_replicates(
        (median_a, median_b): (f64, f64),
        mut diffs: Vec<f64>,
        mut rels: Vec<f64>,
        (iterations, seed): (u32, u64),
    ) -> MedianShift {
        diffs.sort_by(f64::total_cmp);
        rels.sort_by(f64::total_cmp);
        MedianShift {
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
        }
    }
}

/// How a Mann-Whitney p-value was computed.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PMethod {
    /// The exact distribution of U (no ties, both samples < 50).
    Exact,
    /// Normal approximation, tie-corrected variance, continuity correction.
    Normal,
}

/// The Mann-Whitney U test of samples `a` and `b`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MannWhitney {
    /// Size of `a`.
    pub n_a: usize,
    /// Size of `b`.
    pub n_b: usize,
    /// U of `a`: pairs with a > b, ties counting 1/2 (R's `W`).
    pub u_a: f64,
    /// U of `b`: `n_a * n_b - u_a`.
    pub u_b: f64,
    /// The normal score of `u_a` (tie-corrected, continuity-corrected); 0
    /// when every value is tied.
    pub z: f64,
    /// Two-sided p-value.
    pub p_two_sided: f64,
    /// One-sided p-value for "a tends to be larger than b" (P(U >= u_a)).
    pub p_greater: f64,
    /// How the p-values were computed.
    pub method: PMethod,
    /// The common-language effect size `u_a / (n_a n_b)`: the probability
    /// that a random `a` exceeds a random `b` (ties count one half).
    pub prob_a_greater: f64,
}

/// The complementary error function, with a relative error below 1.2e-7
/// (the Chebyshev fit of Numerical Recipes' `erfcc`).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// P(Z >= z) for a standard normal Z.
pub fn normal_upper_tail(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// Counts of U = 0..=m*n over all arrangements of m and n distinct values:
/// the coefficients of the Gaussian binomial [m+n choose m]_q, exactly.
fn u_distribution(m: usize, n: usize) -> Vec<i128> {
    let max = m * n;
    let mut c = vec![0i128; max + m + n + 2];
    c[0] = 1;
    let mut deg = 0;
    for i in 1..=m {
        // Multiply by (1 - q^(n+i)).
        let a = n + i;
        for k in (a..=deg + a).rev() {
            c[k] -= c[k - a];
        }
        // Divide by (1 - q^i): exact, the quotient is a polynomial.
        for k in i..=deg + a {
            c[k] += c[k - i];
        }
        deg += n;
    }
    c.truncate(max + 1);
    c
}

/// The Mann-Whitney U test; `None` when either sample is empty.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> Option<MannWhitney> {
    let (na, nb) = (a.len(), b.len());
    if na == 0 || nb == 0 {
        return None;
    }
    let mut pooled: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));
    let total = pooled.len();
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < total {
        let mut j = i + 1;
        while j < total && pooled[j].0 == pooled[i].0 {
            j += 1;
        }
        let t = (j - i) as f64;
        // Ranks i+1..=j share their average.
        let avg = (i + 1 + j) as f64 / 2.0;
        rank_sum_a += avg * pooled[i..j].iter().filter(|p| p.1).count() as f64;
        tie_term += t * t * t - t;
        i = j;
    }
    let (fa, fb, ft) = (na as f64, nb as f64, total as f64);
    let u_a = rank_sum_a - fa * (fa + 1.0) / 2.0;
    let u_b = fa * fb - u_a;
    let mean = fa * fb / 2.0;
    let var = fa * fb / 12.0 * ((ft + 1.0) - tie_term / (ft * (ft - 1.0)));
    let sd = var.max(0.0).sqrt();
    let z = if sd > 0.0 {
        let d = u_a - mean;
        (d - 0.5 * d.signum()) / sd
    } else {
        0.0
    };
    let (p_two_sided, p_greater, method) = if tie_term == 0.0 && na < 50 && nb < 50 {
        let dist = u_distribution(na, nb);
        let all: i128 = dist.iter().sum();
        let k = u_a.round() as usize;
        let at_least: i128 = dist[k.min(dist.len())..].iter().sum();
        let at_most: i128 = dist[..=k.min(dist.len() - 1)].iter().sum();
        let p_ge = at_least as f64 / all as f64;
        let p_le = at_most as f64 / all as f64;
        ((2.0 * p_ge.min(p_le)).min(1.0), p_ge, PMethod::Exact)
    } else if sd > 0.0 {
        let z_greater = (u_a - mean - 0.5) / sd;
        (
            (2.0 * normal_upper_tail(z.abs())).min(1.0),
            normal_upper_tail(z_greater),
            PMethod::Normal,
        )
    } else {
        (1.0, 1.0, PMethod::Normal)
    };
    Some(MannWhitney {
        n_a: na,
        n_b: nb,
        u_a,
        u_b,
        z,
        p_two_sided,
        p_greater,
        method,
        prob_a_greater: u_a / (fa * fb),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prng_is_reproducible_and_uniform_enough() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        let mut r = Rng::new(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[r.below(10)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
        let mean = (0..100_000).map(|_| r.unit()).sum::<f64>() / 100_000.0;
        assert!((mean - 0.5).abs() < 0.01);
    }

    #[test]
    fn a_shuffle_is_a_permutation() {
        let mut v: Vec<u32> = (0..50).collect();
        Rng::new(3).shuffle(&mut v);
        assert_ne!(v, (0..50).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn medians_in_place_match_the_sorted_definition() {
        assert_eq!(median_in_place(&mut [5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median_in_place(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median_in_place(&mut [7.0]), 7.0);
        assert!(median_in_place(&mut []).is_nan());
    }

    #[test]
    fn erfc_matches_known_values() {
        // erfc(0) = 1, erfc(1) = 0.157299207..., erfc(2) = 0.004677734981...
        assert!((erfc(0.0) - 1.0).abs() < 1e-7);
        assert!((erfc(1.0) - 0.157_299_207).abs() < 1e-7);
        assert!((erfc(2.0) - 0.004_677_735).abs() < 1e-9);
        assert!((erfc(-1.0) - 1.842_700_793).abs() < 1e-7);
        // P(Z >= 1.959964) = 0.025.
        assert!((normal_upper_tail(1.959_964) - 0.025).abs() < 1e-6);
    }

    #[test]
    fn the_u_distribution_is_the_gaussian_binomial() {
        // m = n = 2: U = 0,1,2,3,4 in 1,1,2,1,1 of the 6 arrangements.
        assert_eq!(u_distribution(2, 2), vec![1, 1, 2, 1, 1]);
        // m = 3, n = 2: [5 choose 3]_q = 1,1,2,2,2,1,1 (10 arrangements).
        assert_eq!(u_distribution(3, 2), vec![1, 1, 2, 2, 2, 1, 1]);
        let d = u_distribution(49, 49);
        assert_eq!(d.len(), 49 * 49 + 1);
        assert!(d.iter().all(|&c| c > 0));
        assert_eq!(d.first(), d.last());
    }

    /// Hollander & Wolfe (1973), p. 69, the example in R's `?wilcox.test`:
    /// permeability constants of the human chorioamnion at term (x) and at
    /// 12 to 26 weeks (y). Published: W = 35, one-sided p = 0.1272 (exact).
    #[test]
    fn mann_whitney_reproduces_the_hollander_wolfe_example() {
        let x = [0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46];
        let y = [1.15, 0.88, 0.90, 0.74, 1.21];
        let t = mann_whitney(&x, &y).expect("samples");
        assert_eq!(t.u_a, 35.0);
        assert_eq!(t.u_b, 15.0);
        assert_eq!(t.method, PMethod::Exact);
        assert!((t.p_greater - 0.1272).abs() < 5e-5, "{}", t.p_greater);
        assert!((t.p_two_sided - 0.2544).abs() < 1e-4, "{}", t.p_two_sided);
    }

    /// Hand-computed: complete separation of 3 and 3 values. U_a = 9, and
    /// only 1 of the C(6,3) = 20 arrangements is as extreme on that side.
    #[test]
    fn complete_separation_of_small_samples() {
        let t = mann_whitney(&[4.0, 5.0, 6.0], &[1.0, 2.0, 3.0]).expect("samples");
        assert_eq!((t.u_a, t.u_b), (9.0, 0.0));
        assert!((t.p_greater - 0.05).abs() < 1e-12);
        assert!((t.p_two_sided - 0.1).abs() < 1e-12);
        assert_eq!(t.prob_a_greater, 1.0);
    }

    /// With ties the normal approximation is used. Hand computation for
    /// a = [1, 2, 2, 3], b = [2, 3, 4, 5]: pooled ranks 1, 3, 3, 3, 5.5, 5.5,
    /// 7, 8; R_a = 1 + 3 + 3 + 5.5 = 12.5, U_a = 12.5 - 10 = 2.5. Ties: one
    /// group of 3, one of 2: sum(t^3 - t) = 24 + 6 = 30. var = 16/12 * (9 -
    /// 30/56) = 11.2857; z = (2.5 - 8 + 0.5)/sqrt(var) = -1.48835;
    /// p = 2 * P(Z >= 1.48835) = 0.13666.
    #[test]
    fn ties_use_the_corrected_normal_approximation() {
        let t = mann_whitney(&[1.0, 2.0, 2.0, 3.0], &[2.0, 3.0, 4.0, 5.0]).expect("samples");
        assert_eq!(t.u_a, 2.5);
        assert_eq!(t.method, PMethod::Normal);
        assert!((t.z - -1.488_35).abs() < 1e-4, "{}", t.z);
        assert!((t.p_two_sided - 0.136_66).abs() < 1e-4, "{}", t.p_two_sided);
    }

    #[test]
    fn identical_samples_are_not_different() {
        let a = [3.0; 60];
        let t = mann_whitney(&a, &a).expect("samples");
        assert_eq!(t.p_two_sided, 1.0);
        assert_eq!(t.u_a, 1800.0);
        assert!(mann_whitney(&[], &a).is_none());
    }

    fn noisy(rng: &mut Rng, n: usize, centre: f64) -> Vec<f64> {
        // Skewed noise: the sum of two uniforms plus an exponential tail.
        (0..n)
            .map(|_| centre + 100.0 * (rng.unit() + rng.unit()) - 30.0 * (1.0 - rng.unit()).ln())
            .collect()
    }

    /// A known shift of +50 on skewed synthetic data: the 95 % interval
    /// covers it in (nearly) every repetition and excludes 0.
    #[test]
    fn the_bootstrap_interval_covers_a_known_shift() {
        let mut rng = Rng::new(2024);
        let mut covered = 0;
        let reps = 40;
        for rep in 0..reps {
            let a = noisy(&mut rng, 300, 1_000.0);
            let b = noisy(&mut rng, 300, 1_050.0);
            let s = bootstrap_median_shift(&a, &b, 400, rep).expect("samples");
            assert!(s.diff_lo <= s.diff && s.diff <= s.diff_hi, "{s:?}");
            assert!(s.rel_lo <= s.rel && s.rel <= s.rel_hi, "{s:?}");
            assert!(s.diff_lo > 0.0, "a 50-cycle shift is resolved: {s:?}");
            if s.diff_lo <= 50.0 && 50.0 <= s.diff_hi {
                covered += 1;
            }
        }
        // Nominal coverage 95 %: at least 34 of 40 (binomial p ~ 0.99).
        assert!(covered >= 34, "covered {covered} of {reps}");
    }

    #[test]
    fn the_bootstrap_is_reproducible_and_centred_on_no_shift() {
        let mut rng = Rng::new(9);
        let a = noisy(&mut rng, 200, 500.0);
        let b = noisy(&mut rng, 200, 500.0);
        let s1 = bootstrap_median_shift(&a, &b, 300, 5).expect("samples");
        let s2 = bootstrap_median_shift(&a, &b, 300, 5).expect("samples");
        assert_eq!(s1, s2);
        assert!(s1.diff_lo < 0.0 && s1.diff_hi > 0.0, "{s1:?}");
        assert!(bootstrap_median_shift(&a, &[], 10, 1).is_none());
    }
}
