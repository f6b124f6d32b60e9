//! kselftest's exit codes for `check --kselftest-exit-codes` (the kernel's
//! tools/testing/selftests/kselftest.h: KSFT_PASS 0, KSFT_FAIL 1, KSFT_SKIP
//! 4), so that the kselftest runner reports `check` as it reports a
//! selftest: `ok`, `not ok`, or `ok ... # SKIP`.
//!
//! UNDECIDED counts as a skip, as in the KTAP output (`ok ... # SKIP
//! undecided: ...`): the check applies but gave no verdict, which is
//! neither a pass a kselftest user may rely on nor a finding to chase. So a
//! run passes when something passed and nothing failed or regressed, fails
//! when anything failed or regressed, and is skipped when every check was
//! skipped or undecided.

use super::report::{CheckReport, CheckResult, Verdict};

/// How a run ends for the kselftest runner (`Exit::Done`, `Exit::Failed`,
/// `Exit::Skipped`: 0, 1, 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// KSFT_PASS: something passed, nothing failed or regressed.
    Pass,
    /// KSFT_FAIL: a check failed or regressed.
    Fail,
    /// KSFT_SKIP: every check was skipped or undecided.
    Skip,
}

/// The outcome of a report.
pub fn outcome(r: &CheckReport) -> Outcome {
    if r.checks.iter().any(CheckResult::fails) {
        Outcome::Fail
    } else if r.checks.iter().any(|c| c.verdict == Verdict::Pass) {
        Outcome::Pass
    } else {
        Outcome::Skip
    }
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::report;
    use super::super::report::{BaselineVerdict, Finding};
    use super::*;

    fn run(verdicts: &[Verdict]) -> CheckReport {
        let checks = verdicts
            .iter()
            .enumerate()
            .map(|(i, v)| CheckResult::new(i as u32 + 1, "c", "t", Finding::new(*v, "why")))
            .collect();
        report(checks)
    }

    #[test]
    fn pass_fail_and_skip_follow_kselftest() {
        use Verdict::*;
        assert_eq!(outcome(&run(&[Pass, Skip])), Outcome::Pass);
        assert_eq!(outcome(&run(&[Pass, Undecided])), Outcome::Pass);
        assert_eq!(outcome(&run(&[Pass, Fail, Skip])), Outcome::Fail);
        assert_eq!(outcome(&run(&[Skip, Skip])), Outcome::Skip);
        assert_eq!(outcome(&run(&[Undecided, Skip])), Outcome::Skip);
        assert_eq!(outcome(&run(&[Undecided, Fail])), Outcome::Fail);
        // A regression fails, whatever the verdict.
        let mut r = run(&[Pass, Skip]);
        r.checks[1].baseline = Some(BaselineVerdict {
            verdict: Some(Pass),
            regressed: true,
            reason: "was PASS".into(),
        });
        assert_eq!(outcome(&r), Outcome::Fail);
    }
}
