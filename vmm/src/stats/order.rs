//! Order statistics over per-round measurements.

use serde::Serialize;

/// Summary of one metric over many rounds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Smallest value.
    pub min: f64,
    /// Median (linear interpolation between the two middle values).
    pub median: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
    /// Sample standard deviation (n - 1); 0 for fewer than two values.
    pub std_dev: f64,
}

/// The `p`-th percentile (0..=100) of sorted values, linearly interpolated
/// between closest ranks (R's type 7, numpy's default). NaN when empty.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let rank = (p.clamp(0.0, 100.0) / 100.0) * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            let frac = rank - lo as f64;
            sorted[lo] + (sorted[hi] - sorted[lo]) * frac
        }
    }
}

/// Summarises `values`; `None` when there are none.
pub fn summarize(values: impl IntoIterator<Item = f64>) -> Option<Summary> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let mean = v.iter().sum::<f64>() / n as f64;
    let std_dev = if n > 1 {
        (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Some(Summary {
        n,
        min: v[0],
        median: percentile_sorted(&v, 50.0),
        mean,
        p10: percentile_sorted(&v, 10.0),
        p90: percentile_sorted(&v, 90.0),
        p99: percentile_sorted(&v, 99.0),
        max: v[n - 1],
        std_dev,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_samples() {
        assert_eq!(summarize([3.0, 1.0, 2.0]).map(|s| s.median), Some(2.0));
        assert_eq!(summarize([4.0, 1.0, 3.0, 2.0]).map(|s| s.median), Some(2.5));
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        // numpy.percentile([1..=10], 90) == 9.1, 10 -> 1.9.
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = summarize(v).expect("values");
        assert!((s.p90 - 9.1).abs() < 1e-12);
        assert!((s.p10 - 1.9).abs() < 1e-12);
        assert_eq!((s.min, s.max, s.n), (1.0, 10.0, 10));
    }

    #[test]
    fn mean_and_sample_standard_deviation() {
        // 2,4,4,4,5,5,7,9: mean 5, sample sd sqrt(32/7).
        let s = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).expect("values");
        assert_eq!(s.mean, 5.0);
        assert!((s.std_dev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn empty_input_has_no_summary_and_one_value_is_its_own() {
        assert_eq!(summarize(std::iter::empty()), None);
        let s = summarize([7.0]).expect("one");
        assert_eq!((s.median, s.p99, s.std_dev), (7.0, 7.0, 0.0));
    }
}
