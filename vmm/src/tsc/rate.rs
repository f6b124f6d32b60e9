//! The rate of one clock against another, bounded from two bracketed reads.
//! Pure arithmetic, a leaf.
//!
//! A read `v` happened at some host time within its bracket `[a, b]`. For
//! two reads `v0` in `[a0, b0]` and `v1` in `[a1, b1]` of a clock that
//! advances linearly at rate `r` against the host's (`v1 - v0 = r * (t1 -
//! t0)`, up to `slack` units of rounding), `r` lies in
//! `[(v1 - v0 - slack) / (b1 - a0), (v1 - v0 + slack) / (a1 - b0)]`: a sound
//! bound, however the reads fell inside their brackets. A TSC served by
//! KVM's catch-up (no TSC scaling, a rate above the host's) is not linear:
//! KVM sets it to the asked rate's value at every guest entry and it runs at
//! the host's rate in between; moving each bracket's start back by its own
//! width keeps the bound sound for it ([`RateBound::catch_up`]).

use serde::Serialize;

/// An interval of rates (units of one clock per unit of the other).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RateBound {
    /// The rate is at least this.
    pub lo: f64,
    /// And at most this.
    pub hi: f64,
}

/// One read of a clock and the host-time bracket it happened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bracketed {
    /// The value read.
    pub value: u64,
    /// The host's clock before.
    pub before: u64,
    /// The host's clock after.
    pub after: u64,
}

/// f64 keeps 53 bits: the bounds are widened by this much relative to
/// cover the conversion of values up to 2^64.
pub const F64_SLOP: f64 = 1e-12;

impl RateBound {
    /// The rate of a linearly advancing clock from two reads, `slack` units
    /// of rounding allowed in the advance. `None` when the brackets overlap
    /// or the clock went backwards.
    pub fn linear(first: Bracketed, last: Bracketed, slack: u64) -> Option<RateBound> {
        let advance = last.value.checked_sub(first.value)?;
        let longest = last.after.checked_sub(first.before)?;
        let shortest = last.before.checked_sub(first.after)?;
        if shortest == 0 {
            return None;
        }
        let lo = advance.saturating_sub(slack) as f64 / longest as f64;
        let hi = advance.saturating_add(slack) as f64 / shortest as f64;
        Some(RateBound {
            lo: lo * (1.0 - F64_SLOP),
            hi: hi * (1.0 + F64_SLOP),
        })
    }

    /// As [`RateBound::linear`] for a clock served by catch-up: each read
    /// may lag the asked rate's value by up to its bracket's width of host
    /// time, so each bracket starts that much earlier.
    pub fn catch_up(first: Bracketed, last: Bracketed, slack: u64) -> Option<RateBound> {
        let early = |r: Bracketed| Bracketed {
            before: r.before.saturating_sub(r.after.saturating_sub(r.before)),
            ..r
        };
        RateBound::linear(early(first), early(last), slack)
    }

    /// The bound widened by `ppm` parts per million on both sides.
    pub fn widen_ppm(self, ppm: u64) -> RateBound {
        let f = ppm as f64 / 1e6;
        RateBound {
            lo: self.lo * (1.0 - f),
            hi: self.hi * (1.0 + f),
        }
    }

    /// Whether `x` lies in it.
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }

    /// `[lo, hi]` with `digits` decimals.
    pub fn describe(&self, digits: usize) -> String {
        format!("[{:.digits$}, {:.digits$}]", self.lo, self.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(value: u64, before: u64, after: u64) -> Bracketed {
        Bracketed {
            value,
            before,
            after,
        }
    }

    #[test]
    fn a_linear_clock_lies_inside_its_bound_wherever_the_reads_fell() {
        // A clock at 0.5x read somewhere inside each bracket.
        for (t0, t1) in [(1_000, 1_001_000), (1_100, 1_000_900), (1_050, 1_000_950)] {
            let (f, l) = (
                read(t0 / 2, 1_000, 1_100),
                read(t1 / 2, 1_000_900, 1_001_000),
            );
            let b = RateBound::linear(f, l, 1).expect("brackets apart");
            assert!(b.contains(0.5), "{t0} {t1}: {b:?}");
            assert!(!b.contains(0.51) && !b.contains(0.49), "{b:?}");
        }
    }

    #[test]
    fn overlapping_brackets_or_a_clock_going_back_give_no_bound() {
        assert_eq!(
            RateBound::linear(read(0, 0, 100), read(10, 50, 150), 0),
            None
        );
        assert_eq!(
            RateBound::linear(read(10, 0, 1), read(5, 100, 101), 0),
            None
        );
    }

    #[test]
    fn catch_up_covers_a_clock_that_lags_within_an_entry() {
        // 2x in the long run, 1x within an entry: a read 40 host cycles after
        // the entry at the start of its bracket lags 40 cycles behind 2x.
        let at = |t: u64, entry: u64| 2 * entry + (t - entry);
        let f = read(at(1_080, 1_000), 1_000, 1_100);
        let l = read(at(10_000_050, 10_000_000), 10_000_000, 10_000_100);
        let linear = RateBound::linear(f, l, 0).expect("apart");
        let catch = RateBound::catch_up(f, l, 0).expect("apart");
        assert!(catch.contains(2.0), "{catch:?}");
        assert!(catch.lo <= linear.lo && catch.hi >= linear.hi);
        assert!(!catch.contains(1.0));
    }

    #[test]
    fn widening_keeps_the_order() {
        let b = RateBound { lo: 0.9, hi: 1.1 }.widen_ppm(100_000);
        assert!(
            (b.lo - 0.81).abs() < 1e-9 && (b.hi - 1.21).abs() < 1e-9,
            "{b:?}"
        );
        assert_eq!(RateBound { lo: 0.5, hi: 0.25 }.describe(2), "[0.50, 0.25]");
    }
}
