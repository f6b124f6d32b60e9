//! Check 6, `skew-threshold`: median and p99 skew over the rounds within
//! `--max-skew-ns` / `--max-skew-cycles` (SKIP without a limit).

use super::evidence::{Check, Context, Evidence};
use super::judge;
use super::report::{Finding, SkewStats, Verdict};
use super::tally::RoundTally;
use crate::error::RunError;

/// Check 6.
pub struct SkewThreshold;

impl Check for SkewThreshold {
    fn number(&self) -> u32 {
        6
    }
    fn id(&self) -> &'static str {
        "skew-threshold"
    }
    fn title(&self) -> &'static str {
        "median and p99 skew over the rounds within --max-skew-ns / --max-skew-cycles"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        Ok(judge(
            &ev.tally,
            ev.skew().as_ref(),
            ev.options.max_skew_ns,
            ev.options.max_skew_cycles,
        ))
    }
}

/// Check 6: median and p99 skew against the limits given (SKIP without one).
pub fn judge(
    t: &RoundTally,
    skew: Option<&SkewStats>,
    max_ns: Option<f64>,
    max_cycles: Option<u64>,
) -> Finding {
    let mut c = Finding::skip("");
    if let Some(st) = skew {
        c.value("median_cycles", st.median_cycles);
        c.value("p99_cycles", st.p99_cycles);
        c.value("median_ns", st.median_ns);
        c.value("p99_ns", st.p99_ns);
        c.value("rounds", t.rounds);
        c.value("writes_honoured", t.rounds_honoured == t.rounds);
    }
    let Some(st) = skew else {
        c.set(Verdict::Skip, judge::missing("first round").reason);
        return c;
    };
    if max_ns.is_none() && max_cycles.is_none() {
        c.set(
            Verdict::Skip,
            "no limit given (--max-skew-ns or --max-skew-cycles)",
        );
        return c;
    }
    let mut over = Vec::new();
    if let Some(limit) = max_cycles {
        for (what, v) in [("median", st.median_cycles), ("p99", st.p99_cycles)] {
            if v > limit as f64 {
                over.push(format!("{what} {v:.0} cycles > {limit}"));
            }
        }
    }
    if let Some(limit) = max_ns {
        match (st.median_ns, st.p99_ns) {
            (Some(m), Some(p)) => {
                for (what, v) in [("median", m), ("p99", p)] {
                    if v > limit {
                        over.push(format!("{what} {v:.0} ns > {limit}"));
                    }
                }
            }
            _ => over.push("no TSC frequency to convert to ns".into()),
        }
    }
    let note = if t.rounds_ignored == t.rounds {
        " (the would-be skew: the writes were ignored)"
    } else {
        ""
    };
    if over.is_empty() {
        c.set(
            Verdict::Pass,
            format!(
                "median {:.0} and p99 {:.0} cycles within the limits{note}",
                st.median_cycles, st.p99_cycles
            ),
        );
    } else {
        c.set(Verdict::Fail, format!("{}{note}", over.join(", ")));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::super::testdata::round;
    use super::*;

    #[test]
    fn check_6_applies_both_limits_to_median_and_p99() {
        let rounds = [round(vec![], Some(true), 2_000)];
        let st = SkewStats {
            median_cycles: 2_000.0,
            p99_cycles: 9_000.0,
            median_ns: Some(1_000.0),
            p99_ns: Some(4_500.0),
        };
        assert_eq!(
            judge(&RoundTally::of(&rounds), Some(&st), None, None).verdict,
            Verdict::Skip
        );
        assert_eq!(
            judge(&RoundTally::of(&rounds), Some(&st), None, Some(9_000)).verdict,
            Verdict::Pass
        );
        let c = judge(&RoundTally::of(&rounds), Some(&st), None, Some(8_999));
        assert!(
            c.verdict == Verdict::Fail && c.reason.contains("p99"),
            "{}",
            c.reason
        );
        assert_eq!(
            judge(&RoundTally::of(&rounds), Some(&st), Some(4_500.0), None).verdict,
            Verdict::Pass
        );
        assert_eq!(
            judge(&RoundTally::of(&rounds), Some(&st), Some(999.0), None).verdict,
            Verdict::Fail
        );
        let no_khz = SkewStats {
            median_ns: None,
            p99_ns: None,
            ..st
        };
        assert_eq!(
            judge(&RoundTally::of(&rounds), Some(&no_khz), Some(1e9), None).verdict,
            Verdict::Fail
        );
    }
}
