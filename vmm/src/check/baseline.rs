//! Comparing a `check` result with a known-good baseline (an earlier
//! `check --json` of the same host class): a check regresses when its verdict
//! got worse (PASS > UNDECIDED > SKIP > FAIL; PASS to UNDECIDED excepted:
//! inconclusive evidence is no evidence of a regression), when it is missing,
//! or, for the skew, when the median skew grew beyond the tolerance.

use super::report::{BaselineVerdict, CheckReport, Verdict, SCHEMA};

/// The default relative tolerance on the median skew (0.5 = 50 %).
pub const DEFAULT_TOLERANCE: f64 = 0.5;
/// Growth of the median skew below this many cycles never counts as a
/// regression (noise floor for near-zero baselines).
pub const SKEW_FLOOR_CYCLES: f64 = 1000.0;

/// What a baseline comparison found beyond the per-check results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BaselineSummary {
    /// Baseline checks that this run does not have.
    pub missing: Vec<String>,
}

/// Reads a baseline file written by `check --json`.
pub fn load(text: &str) -> Result<CheckReport, String> {
    let r: CheckReport =
        serde_json::from_str(text).map_err(|e| format!("not a `check --json` result ({e})"))?;
    if r.schema != SCHEMA {
        return Err(format!(
            "schema '{}' is not '{}'; write it with `check --json` of this version",
            r.schema, SCHEMA
        ));
    }
    Ok(r)
}

/// Annotates `current`'s checks with the comparison against `base`; a
/// missing check becomes a FAIL placeholder so it counts as a regression.
pub fn compare(current: &mut CheckReport, base: &CheckReport, tolerance: f64) -> BaselineSummary {
    let mut out = BaselineSummary::default();
    for c in &mut current.checks {
        let Some(b) = base.checks.iter().find(|b| b.id == c.id) else {
            c.baseline = Some(BaselineVerdict {
                verdict: None,
                regressed: false,
                reason: "new check, not in the baseline".into(),
            });
            continue;
        };
        let mut cmp = BaselineVerdict {
            verdict: Some(b.verdict),
            regressed: false,
            reason: format!("{} as in the baseline", c.verdict.label()),
        };
        if c.verdict == Verdict::Undecided && b.verdict == Verdict::Pass {
            // Inconclusive evidence is no evidence of a regression: a bound
            // too wide this time (a loaded host) is not a check that broke.
            cmp.reason = "was PASS, now UNDECIDED: not decided this time, which is no \
                          evidence of a regression"
                .into();
        } else if c.verdict.rank() < b.verdict.rank() {
            cmp.regressed = true;
            cmp.reason = format!("was {}, now {}", b.verdict.label(), c.verdict.label());
        } else if c.verdict.rank() > b.verdict.rank() {
            cmp.reason = format!(
                "improved: was {}, now {}",
                b.verdict.label(),
                c.verdict.label()
            );
        }
        c.baseline = Some(cmp);
    }
    // The median skew, attached to the skew check.
    if let (Some(now), Some(then)) = (&current.skew, &base.skew) {
        let limit = then.median_cycles * (1.0 + tolerance);
        let grew =
            now.median_cycles > limit && now.median_cycles - then.median_cycles > SKEW_FLOOR_CYCLES;
        if let Some(c) = current.checks.iter_mut().find(|c| c.id == "skew-threshold") {
            if let Some(cmp) = &mut c.baseline {
                if grew {
                    cmp.regressed = true;
                    cmp.reason = format!(
                        "median skew grew from {:.0} to {:.0} cycles (more than {:.0} %)",
                        then.median_cycles,
                        now.median_cycles,
                        tolerance * 100.0
                    );
                } else if !cmp.regressed {
                    cmp.reason = format!(
                        "{}; median skew {:.0} cycles vs {:.0} in the baseline (tolerance {:.0} %)",
                        cmp.reason,
                        now.median_cycles,
                        then.median_cycles,
                        tolerance * 100.0
                    );
                }
            }
        }
    }
    for b in &base.checks {
        if !current.checks.iter().any(|c| c.id == b.id) {
            out.missing.push(b.id.clone());
            let mut placeholder = b.clone();
            placeholder.verdict = Verdict::Fail;
            placeholder.reason = "in the baseline but missing from this run".into();
            placeholder.values.clear();
            placeholder.baseline = Some(BaselineVerdict {
                verdict: Some(b.verdict),
                regressed: true,
                reason: "missing from this run".into(),
            });
            current.checks.push(placeholder);
        }
    }
    current.tally();
    out
}

#[cfg(test)]
mod tests {
    use super::super::report::{CheckResult, SkewStats};
    use super::*;
    use std::collections::BTreeMap;

    fn check(id: &str, verdict: Verdict) -> CheckResult {
        CheckResult {
            number: 1,
            id: id.into(),
            title: id.into(),
            verdict,
            reason: String::new(),
            values: BTreeMap::new(),
            details: Vec::new(),
            baseline: None,
            seconds: None,
        }
    }

    fn report(checks: Vec<CheckResult>, median: f64) -> CheckReport {
        let mut r = crate::check::report::tests::report(checks);
        r.skew = Some(SkewStats {
            median_cycles: median,
            p99_cycles: median,
            median_ns: None,
            p99_ns: None,
        });
        r.tally();
        r
    }

    fn standard(v: Verdict) -> Vec<CheckResult> {
        vec![
            check("same-start", Verdict::Pass),
            check("writes-honoured", v),
            check("skew-threshold", Verdict::Skip),
        ]
    }

    #[test]
    fn equal_results_do_not_regress() {
        let base = report(standard(Verdict::Pass), 10_000.0);
        let mut now = report(standard(Verdict::Pass), 10_500.0);
        let out = compare(&mut now, &base, DEFAULT_TOLERANCE);
        assert!(out.missing.is_empty());
        assert!(now.ok);
        assert_eq!(now.counts.regressed, 0);
    }

    #[test]
    fn an_improved_verdict_is_not_a_regression() {
        let base = report(standard(Verdict::Fail), 10_000.0);
        let mut now = report(standard(Verdict::Pass), 10_000.0);
        compare(&mut now, &base, DEFAULT_TOLERANCE);
        assert!(now.ok);
        let c = &now.checks[1];
        assert!(c
            .baseline
            .as_ref()
            .is_some_and(|b| b.reason.starts_with("improved")));
    }

    #[test]
    fn a_worse_verdict_regresses() {
        let base = report(standard(Verdict::Pass), 10_000.0);
        let mut now = report(standard(Verdict::Skip), 10_000.0);
        compare(&mut now, &base, DEFAULT_TOLERANCE);
        assert!(!now.ok, "SKIP after PASS is worse");
        assert_eq!(now.counts.regressed, 1);
        assert_eq!(
            now.checks[1].baseline.as_ref().map(|b| b.regressed),
            Some(true)
        );
    }

    #[test]
    fn undecided_after_pass_is_no_regression_but_fail_and_skip_are() {
        let base = report(standard(Verdict::Pass), 10_000.0);
        let mut now = report(standard(Verdict::Undecided), 10_000.0);
        compare(&mut now, &base, DEFAULT_TOLERANCE);
        assert_eq!(now.counts.regressed, 0, "PASS -> UNDECIDED");
        let why = now.checks[1].baseline.as_ref().map(|b| b.reason.clone());
        assert!(why.is_some_and(|w| w.contains("no evidence of a regression")));
        // UNDECIDED -> FAIL and UNDECIDED -> SKIP are worse.
        for worse in [Verdict::Fail, Verdict::Skip] {
            let base = report(standard(Verdict::Undecided), 10_000.0);
            let mut now = report(standard(worse), 10_000.0);
            compare(&mut now, &base, DEFAULT_TOLERANCE);
            assert_eq!(now.counts.regressed, 1, "UNDECIDED -> {worse:?}");
        }
    }

    #[test]
    fn a_grown_median_skew_regresses_beyond_the_tolerance_only() {
        let base = report(standard(Verdict::Pass), 10_000.0);
        let mut within = report(standard(Verdict::Pass), 14_900.0);
        compare(&mut within, &base, DEFAULT_TOLERANCE);
        assert!(within.ok);
        let mut beyond = report(standard(Verdict::Pass), 15_100.0);
        compare(&mut beyond, &base, DEFAULT_TOLERANCE);
        assert!(!beyond.ok);
        let skew = beyond.checks.iter().find(|c| c.id == "skew-threshold");
        assert!(skew
            .and_then(|c| c.baseline.as_ref())
            .is_some_and(|b| b.regressed && b.reason.contains("grew")));
        // Near-zero baselines: tiny absolute growth is noise.
        let base0 = report(standard(Verdict::Pass), 0.0);
        let mut small = report(standard(Verdict::Pass), 500.0);
        compare(&mut small, &base0, DEFAULT_TOLERANCE);
        assert!(small.ok);
    }

    #[test]
    fn missing_checks_regress_and_new_ones_do_not() {
        let base = report(standard(Verdict::Pass), 10_000.0);
        let mut now = report(
            vec![
                check("same-start", Verdict::Pass),
                check("brand-new", Verdict::Pass),
            ],
            10_000.0,
        );
        let out = compare(&mut now, &base, DEFAULT_TOLERANCE);
        assert_eq!(
            out.missing,
            vec!["writes-honoured".to_string(), "skew-threshold".to_string()]
        );
        assert!(!now.ok);
        let new = now.checks.iter().find(|c| c.id == "brand-new");
        assert!(new
            .and_then(|c| c.baseline.as_ref())
            .is_some_and(|b| !b.regressed));
    }

    #[test]
    fn baselines_of_another_schema_are_refused() {
        assert!(load("{}").is_err());
        let mut r = report(standard(Verdict::Pass), 1.0);
        r.schema = "tsc-rendezvous/run/v1".into();
        let text = serde_json::to_string(&r).unwrap_or_default();
        assert!(load(&text).unwrap_err().contains("schema"));
        r.schema = SCHEMA.into();
        let text = serde_json::to_string(&r).unwrap_or_default();
        assert_eq!(load(&text), Ok(r));
    }
}
