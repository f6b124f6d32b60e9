//! KTAP (the kernel selftests' format, Documentation/dev-tools/ktap.rst) for
//! `check --ktap FILE`, so that kernel CI systems can take the results as
//! they take kselftests: one result line per check, PASS as `ok`, FAIL (or a
//! regression against the baseline, whatever its verdict) as `not ok`, SKIP
//! and UNDECIDED as `ok ... # SKIP` with the reason, the environment and each
//! check's title as diagnostic lines.
//!
//! Written to be read by the kernel's own parser (KUnit's
//! tools/testing/kunit/kunit_parser.py) as it reads kselftests: the plan
//! directly after the version line (the only place it looks for one), and
//! ` # SKIP` nowhere on a line that is not skipped (it takes that text
//! anywhere on a result line as the SKIP directive, so a regression written
//! `not ok ... # SKIP: ...` would be counted as skipped and vanish).

use std::fmt::Write as _;

use super::report::{CheckReport, Verdict};

/// Makes text safe for a KTAP line: no line breaks; in a description no `#`
/// either (it would start the directive).
fn clean(s: &str, in_description: bool) -> String {
    s.chars()
        .map(|c| match c {
            '\n' | '\r' => ' ',
            '#' if in_description => '_',
            c => c,
        })
        .collect()
}

/// A diagnostic on a result line that is not skipped: no `#` (a later
/// ` # SKIP` would make KUnit's parser read the line as skipped, and a
/// leading directive word would be taken as one).
fn not_a_directive(s: &str) -> String {
    s.replace('#', "_")
}

/// Renders the report as KTAP version 1.
pub fn render(r: &CheckReport) -> String {
    let e = &r.environment.host;
    let mut x = String::from("KTAP version 1\n");
    let _ = writeln!(x, "1..{}", r.checks.len());
    let _ = writeln!(
        x,
        "# tsc-rendezvous {} check: kernel {}, KVM flavour {}, offsets from {}",
        r.tool_version,
        e.kernel_release,
        e.kvm_flavor.name(),
        e.offset_source.describe()
    );
    let o = &r.options;
    let _ = writeln!(
        x,
        "# {} vCPUs, {} rounds of {}, warp test {} iterations per vCPU",
        o.vcpus,
        o.rounds,
        o.variant.name(),
        o.warp_iterations
    );
    if let Some(why) = &r.incomplete {
        let _ = writeln!(x, "# incomplete: {}", clean(why, false));
    }
    for (i, c) in r.checks.iter().enumerate() {
        let _ = writeln!(x, "# {}: {}", clean(&c.id, false), clean(&c.title, false));
        let name = clean(&c.id, true);
        let reason = clean(&c.reason, false);
        let regressed = c.baseline.as_ref().filter(|b| b.regressed);
        let line = match (c.verdict, regressed) {
            // Whatever the verdict (a SKIP too): not ok, and no directive.
            (_, Some(b)) => format!(
                "not ok {} {name} # regressed against the baseline: {}; now {}: {}",
                i + 1,
                not_a_directive(&clean(&b.reason, false)),
                c.verdict.label(),
                not_a_directive(&reason)
            ),
            (Verdict::Pass, None) => {
                format!("ok {} {name} # {}", i + 1, not_a_directive(&reason))
            }
            (Verdict::Fail, None) => {
                format!("not ok {} {name} # {}", i + 1, not_a_directive(&reason))
            }
            (Verdict::Skip, None) => format!("ok {} {name} # SKIP {reason}", i + 1),
            (Verdict::Undecided, None) => {
                format!("ok {} {name} # SKIP undecided: {reason}", i + 1)
            }
        };
        let _ = writeln!(x, "{line}");
        for d in &c.details {
            let _ = writeln!(x, "# {}", clean(d, false));
        }
    }
    let not_ok = x.lines().filter(|l| l.starts_with("not ok ")).count();
    let skipped = x
        .lines()
        .filter(|l| l.starts_with("ok ") && l.contains(" # SKIP"))
        .count();
    let _ = writeln!(
        x,
        "# Totals: pass:{} fail:{not_ok} xfail:0 xpass:0 skip:{skipped} error:0",
        r.checks.len() - not_ok - skipped
    );
    x
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::report;
    use super::super::report::{CheckResult, Finding};
    use super::*;

    fn check(n: u32, id: &str, f: Finding) -> CheckResult {
        CheckResult::new(n, id, "what # it checks", f)
    }

    #[test]
    fn each_verdict_has_its_line() {
        let mut r = report(vec![
            check(1, "same-start", Finding::pass("equal offsets")),
            check(2, "tsc-msrs", Finding::fail("stage 1 # differs\nbadly")),
            check(3, "adjust-equals-offset", Finding::skip("no exact offsets")),
            check(4, "warp", Finding::undecided("no hand-off")),
        ]);
        r.tally();
        let k = render(&r);
        let lines: Vec<&str> = k.lines().collect();
        assert_eq!(lines[0], "KTAP version 1");
        assert!(lines.contains(&"1..4"), "{k}");
        assert!(lines.contains(&"ok 1 same-start # equal offsets"), "{k}");
        assert!(
            lines.contains(&"not ok 2 tsc-msrs # stage 1 _ differs badly"),
            "{k}"
        );
        assert_eq!(lines[1], "1..4", "the plan right after the version line");
        assert!(
            lines.contains(&"ok 3 adjust-equals-offset # SKIP no exact offsets"),
            "{k}"
        );
        assert!(
            lines.contains(&"ok 4 warp # SKIP undecided: no hand-off"),
            "{k}"
        );
        assert!(lines.contains(&"# warp: what # it checks"), "{k}");
        assert_eq!(
            lines.last().copied(),
            Some("# Totals: pass:1 fail:1 xfail:0 xpass:0 skip:2 error:0")
        );
    }

    #[test]
    fn a_regression_is_not_ok_and_an_interruption_is_said() {
        let mut r = report(vec![check(1, "same-start", Finding::skip("not measured"))]);
        r.checks[0].baseline = Some(super::super::report::BaselineVerdict {
            verdict: Some(Verdict::Pass),
            regressed: true,
            reason: "was PASS, now SKIP".into(),
        });
        r.incomplete = Some("interrupted by SIGTERM".into());
        r.tally();
        let k = render(&r);
        assert!(
            k.contains(
                "not ok 1 same-start # regressed against the baseline: was PASS, now SKIP; now \
                 SKIP: not measured"
            ),
            "{k}"
        );
        // Nowhere a SKIP directive on it (KUnit's parser would count it as
        // skipped), nor in the totals.
        let line = k.lines().find(|l| l.starts_with("not ok 1 ")).unwrap_or("");
        assert!(!line.contains(" # SKIP"), "{line}");
        assert!(
            k.contains("# Totals: pass:0 fail:1 xfail:0 xpass:0 skip:0"),
            "{k}"
        );
        assert!(
            k.contains("\n# incomplete: interrupted by SIGTERM\n"),
            "{k}"
        );
    }
}
