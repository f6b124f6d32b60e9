//! What the guest reports of the commands that measure across vCPUs, decoded
//! from guest memory: what each vCPU saw in the lock-ordered warp test, and
//! what every pair saw in the forced hand-off test.

use tsc_contract::HandoffResult;

use crate::units::fmt_int as n;

/// What one vCPU saw in the warp test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WarpSeen {
    /// The largest backwards step, cycles (0: none).
    pub max_warp: u64,
    /// How many backwards steps.
    pub warps: u64,
    /// How many times it took the lock right after another vCPU.
    pub handoffs: u64,
    /// The shortest forward step across such a hand-off, cycles (`None`:
    /// none).
    pub shortest_handoff: Option<u64>,
}

/// What one forced hand-off test saw: every pair's result, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    /// Exchanges per ordered pair.
    pub exchanges: u32,
    /// Whether every ordered pair ran (else vCPU 0's pairs only: more
    /// vCPUs than the layout holds pairs for).
    pub all_pairs: bool,
    /// Every pair's result, in the test's pair order.
    pub pairs: Vec<HandoffResult>,
}

/// How far 0 lies outside `[lower, upper]` (0: inside): how far apart a
/// pair's readings are beyond the bound of its exchanges.
pub fn interval_apart(lower: i64, upper: i64) -> u64 {
    if lower > 0 {
        lower.unsigned_abs()
    } else if upper < 0 {
        upper.unsigned_abs()
    } else {
        0
    }
}

/// In words: initiator `a` and responder `b` read kvmclocks `apart` ns
/// beyond the bound of their exchanges, the responder's minus the
/// initiator's in `[lower, upper]`. An inverted interval (lower above upper)
/// is said as what it is: each end held at its own exchange, so no constant
/// difference fits them and the difference moved by at least `lower - upper`
/// during the test (the two kvmclocks ran at different rates).
pub fn kvmclocks_apart_words(a: u32, b: u32, apart: u64, lower: i64, upper: i64) -> String {
    let head = format!(
        "vCPUs {a} and {b} see kvmclocks {} ns apart beyond the bound",
        n(apart)
    );
    if lower > upper {
        format!(
            "{head}, and by no constant difference: vCPU {b}'s minus vCPU {a}'s was at least {} \
             ns at one exchange and at most {} ns at another, so it moved by at least {} ns \
             during the test (the two kvmclocks ran at different rates)",
            n(lower),
            n(upper),
            n(i128::from(lower) - i128::from(upper)),
        )
    } else {
        format!(
            "{head} (vCPU {b}'s minus vCPU {a}'s in [{}, {}] ns)",
            n(lower),
            n(upper)
        )
    }
}

/// The bound (half the width, rounded up) of an ordered pair's interval
/// `x`, intersected with its reverse pair's interval `reverse` negated when
/// there is one (the same difference seen the other way); 0 when empty.
pub fn both_directions_bound(x: (i64, i64), reverse: Option<(i64, i64)>) -> u64 {
    let (mut lo, mut hi) = (i128::from(x.0), i128::from(x.1));
    if let Some((r_lo, r_hi)) = reverse {
        lo = lo.max(-i128::from(r_hi));
        hi = hi.min(-i128::from(r_lo));
    }
    u64::try_from((hi - lo).max(0).saturating_add(1) / 2).unwrap_or(u64::MAX)
}

/// What a forced hand-off test says of whether the vCPUs' readings agree:
/// the ordered pair whose interval lies furthest from 0 and the widest bound
/// over the pairs (each with its reverse).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Agreement {
    /// The pairs measured.
    pub pairs: usize,
    /// The pair (initiator, responder) whose interval lies furthest from 0,
    /// when one excludes 0.
    pub worst_pair: Option<(u32, u32)>,
    /// How far 0 lies outside that pair's interval (0: every interval holds
    /// 0, the readings agree within the bounds).
    pub apart: u64,
    /// That pair's interval of the responder's reading minus the
    /// initiator's.
    pub worst_interval: Option<(i64, i64)>,
    /// The widest bound over the pairs, both directions intersected.
    pub bound: u64,
}

impl Agreement {
    /// Whether some pair's readings differ beyond its bound.
    pub fn differ(&self) -> bool {
        self.apart > 0
    }
}

impl Handoff {
    /// Whether the pairs' readings agree, and within what bound.
    pub fn agreement(&self) -> Agreement {
        let interval = |a: u32, b: u32| {
            self.pairs
                .iter()
                .find(|r| (r.a, r.b) == (a, b))
                .map(|r| (r.lower, r.upper))
        };
        let mut out = Agreement {
            pairs: self.pairs.len(),
            ..Agreement::default()
        };
        for p in &self.pairs {
            let apart = interval_apart(p.lower, p.upper);
            if apart > out.apart {
                out.apart = apart;
                out.worst_pair = Some((p.a, p.b));
                out.worst_interval = Some((p.lower, p.upper));
            }
            let bound = both_directions_bound((p.lower, p.upper), interval(p.b, p.a));
            out.bound = out.bound.max(bound);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsc_contract::HandoffResult;

    #[test]
    fn kvmclocks_apart_are_said_as_an_interval_or_as_a_moving_difference() {
        assert_eq!(
            kvmclocks_apart_words(0, 1, 2_000, 2_000, 3_000),
            "vCPUs 0 and 1 see kvmclocks 2,000 ns apart beyond the bound (vCPU 1's minus vCPU \
             0's in [2,000, 3,000] ns)"
        );
        let w = kvmclocks_apart_words(1, 0, 7, -5, -7);
        assert!(
            w.ends_with(
                "at least -5 ns at one exchange and at most -7 ns at another, so it moved by at \
                 least 2 ns during the test (the two kvmclocks ran at different rates)"
            ),
            "{w}"
        );
        // Inverted, each end held at its own exchange: 0 is outside at both.
        assert_eq!(interval_apart(5, -7), 5);
    }

    fn pair(a: u32, b: u32, lower: i64, upper: i64) -> HandoffResult {
        HandoffResult {
            a,
            b,
            lower,
            upper,
            ..HandoffResult::default()
        }
    }

    #[test]
    fn agreement_finds_the_pair_furthest_apart_and_the_widest_bound() {
        let h = Handoff {
            exchanges: 10,
            all_pairs: true,
            pairs: vec![pair(0, 1, -50, 30), pair(1, 0, -20, 40)],
        };
        let a = h.agreement();
        assert!(!a.differ(), "{a:?}");
        // 0->1 is [-50, 30]; 1->0 negated is [-40, 20]: together [-40, 20].
        assert_eq!(a.bound, 30);
        let h = Handoff {
            pairs: vec![pair(0, 1, 100, 300), pair(1, 0, -250, -120)],
            ..h
        };
        let a = h.agreement();
        assert_eq!(a.worst_pair, Some((1, 0)), "{a:?}");
        assert_eq!((a.apart, a.worst_interval), (120, Some((-250, -120))));
        assert_eq!(interval_apart(5, 9), 5);
        assert_eq!(interval_apart(-9, -5), 5);
        assert_eq!(interval_apart(-1, 1), 0);
        assert_eq!(both_directions_bound((0, 10), None), 5);
        assert_eq!(both_directions_bound((0, 10), Some((20, 30))), 0, "empty");
    }
}
