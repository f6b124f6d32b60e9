//! GitHub-flavoured Markdown for `check --markdown FILE`: the verdict table
//! (number, id, verdict, reason, and the baseline comparison when there is
//! one), the environment and run lines above it, the totals and the
//! regressions below. Made for `$GITHUB_STEP_SUMMARY` (the GitHub Action
//! appends it there) and for pull-request comments. Pure: a report in, the
//! text out.

use std::fmt::Write as _;

use super::report::{CheckReport, CheckResult, Verdict};

/// Escapes text for one table cell or one line of Markdown: the characters
/// that would end a cell (`|`), start markup (emphasis, code, links, HTML,
/// entities) or undo an escape (`\`) get a backslash; a line break becomes
/// `<br>` so that a row stays one line. An `_` between two letters or digits
/// (`TSC_ADJUST`) is left as it is: there it cannot start or end emphasis.
pub fn escape(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        let alnum = |j: Option<usize>| {
            j.and_then(|j| chars.get(j))
                .is_some_and(|c| c.is_alphanumeric())
        };
        match c {
            '_' if alnum(i.checked_sub(1)) && alnum(Some(i + 1)) => out.push(c),
            '\\' | '|' | '*' | '_' | '`' | '<' | '>' | '[' | ']' | '&' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '\r' => {}
            '\n' => out.push_str("<br>"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The verdict as a cell: a symbol a reader's eye finds, then the word.
fn verdict_cell(v: Verdict) -> String {
    let symbol = match v {
        Verdict::Pass => "✅",
        Verdict::Fail => "❌",
        Verdict::Skip => "⏭️",
        Verdict::Undecided => "❔",
    };
    format!("{symbol} {}", v.label())
}

/// The baseline cell of a check: the comparison's words, marked when the
/// check regressed.
fn baseline_cell(c: &CheckResult) -> String {
    match &c.baseline {
        Some(b) if b.regressed => format!("**REGRESSED**: {}", escape(&b.reason)),
        Some(b) => escape(&b.reason),
        None => "not compared".into(),
    }
}

/// The environment and run lines.
fn header(r: &CheckReport, out: &mut String) {
    let e = &r.environment.host;
    let mut env = vec![
        format!("kernel {}", escape(&e.kernel_release)),
        format!("KVM flavour {}", escape(e.kvm_flavor.name())),
    ];
    if let Some(m) = &e.cpu_model {
        env.push(format!("CPU {}", escape(m)));
    }
    if let Some(c) = &e.clocksource {
        env.push(format!("clocksource {}", escape(c)));
    }
    if let Some(t) = e.tsc_words() {
        env.push(format!("TSC {}", escape(&t)));
    }
    env.push(format!(
        "offsets from {}",
        escape(e.offset_source.describe())
    ));
    let _ = writeln!(out, "**Environment:** {}\n", env.join(", "));
    let o = &r.options;
    let mut run = format!(
        "{} vCPUs, {} rounds of {}, warp test {} iterations per vCPU",
        o.vcpus,
        o.rounds,
        escape(o.variant.name()),
        o.warp_iterations
    );
    if let Some(s) = &r.skew {
        let ns = |v: Option<f64>| v.map(|n| format!(" ({n:.0} ns)")).unwrap_or_default();
        let _ = write!(
            run,
            "; skew median {:.0} cycles{}, p99 {:.0} cycles{}",
            s.median_cycles,
            ns(s.median_ns),
            s.p99_cycles,
            ns(s.p99_ns)
        );
    }
    let _ = writeln!(out, "**Run:** {run}\n");
    if let Some(why) = &r.incomplete {
        let _ = writeln!(
            out,
            "> **Incomplete:** {}; checks without evidence are skipped as not measured\n",
            escape(why)
        );
    }
}

/// The verdict table, with a baseline column when any check was compared.
fn table(r: &CheckReport, out: &mut String) {
    let compared = r.checks.iter().any(|c| c.baseline.is_some());
    if compared {
        let _ = writeln!(out, "| # | check | verdict | reason | baseline |");
        let _ = writeln!(out, "|--:|---|---|---|---|");
    } else {
        let _ = writeln!(out, "| # | check | verdict | reason |");
        let _ = writeln!(out, "|--:|---|---|---|");
    }
    for c in &r.checks {
        let _ = write!(
            out,
            "| {} | {} | {} | {} |",
            c.number,
            escape(&c.id),
            verdict_cell(c.verdict),
            escape(&c.reason)
        );
        if compared {
            let _ = write!(out, " {} |", baseline_cell(c));
        }
        out.push('\n');
    }
}

/// The totals, the regressions and the PVM note.
fn footer(r: &CheckReport, out: &mut String) {
    let n = &r.counts;
    let regressed = if n.regressed > 0 {
        format!(", {} regressed", n.regressed)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "\n**{} passed, {} failed, {} skipped, {} undecided{regressed}: {}**",
        n.passed,
        n.failed,
        n.skipped,
        n.undecided,
        if r.ok { "OK" } else { "FAILED" }
    );
    let regressions: Vec<&CheckResult> = r
        .checks
        .iter()
        .filter(|c| c.baseline.as_ref().is_some_and(|b| b.regressed))
        .collect();
    if !regressions.is_empty() {
        let _ = writeln!(out, "\nRegressed against the baseline:\n");
        for c in regressions {
            let why = c.baseline.as_ref().map(|b| b.reason.as_str());
            let _ = writeln!(
                out,
                "- {}. {}: {}",
                c.number,
                escape(&c.id),
                escape(why.unwrap_or_default())
            );
        }
    }
    if let Some(line) = r.ignored_writes_note() {
        let _ = writeln!(out, "\n{}", escape(&line));
    }
}

/// Renders the report as GitHub-flavoured Markdown.
pub fn render(r: &CheckReport) -> String {
    let mut out = format!(
        "### tsc-rendezvous {} check: {}\n\n",
        escape(&r.tool_version),
        match (&r.incomplete, r.ok) {
            (Some(_), _) => "INCOMPLETE",
            (None, true) => "OK",
            (None, false) => "FAILED",
        }
    );
    header(r, &mut out);
    table(r, &mut out);
    footer(r, &mut out);
    details(r, &mut out);
    out
}

/// Each check's readable evidence, folded: a `<details>` block with the
/// lines in a code block (a fence longer than any backtick run in them).
fn details(r: &CheckReport, out: &mut String) {
    for c in r.checks.iter().filter(|c| !c.details.is_empty()) {
        let longest = c
            .details
            .iter()
            .flat_map(|l| l.split(|ch| ch != '`'))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let fence = "`".repeat(longest.max(2) + 1);
        let _ = writeln!(
            out,
            "\n<details><summary>{}. {}: the evidence</summary>\n\n{fence}",
            c.number,
            html_escape(&c.id)
        );
        for line in &c.details {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "{fence}\n\n</details>");
    }
}

/// Makes text safe inside an HTML element.
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::report;
    use super::super::report::{BaselineVerdict, Finding, SkewStats};
    use super::*;
    use crate::host::KvmFlavor;

    fn check(n: u32, id: &str, f: Finding) -> CheckResult {
        CheckResult::new(n, id, "what it checks", f)
    }

    /// The cells of a table row, split at the `|`s no backslash escapes;
    /// `None` for a line that is not a row.
    fn cells(line: &str) -> Option<Vec<String>> {
        let inner = line.strip_prefix('|')?.strip_suffix('|')?;
        let mut out = vec![String::new()];
        let mut escaped = false;
        for c in inner.chars() {
            match (c, escaped) {
                ('|', false) => out.push(String::new()),
                ('\\', false) => {
                    escaped = true;
                    if let Some(cell) = out.last_mut() {
                        cell.push(c);
                    }
                    continue;
                }
                (c, _) => {
                    if let Some(cell) = out.last_mut() {
                        cell.push(c);
                    }
                }
            }
            escaped = false;
        }
        Some(out.into_iter().map(|c| c.trim().to_string()).collect())
    }

    fn rows(md: &str) -> Vec<Vec<String>> {
        md.lines().filter_map(cells).collect()
    }

    fn four() -> CheckReport {
        let mut r = report(vec![
            check(1, "same-start", Finding::pass("equal offsets")),
            check(
                2,
                "tsc-msrs",
                Finding::fail("stage 1 | differs\nbadly: *TSC_ADJUST* <x>"),
            ),
            check(3, "adjust-equals-offset", Finding::skip("no exact offsets")),
            check(4, "warp", Finding::undecided("no hand-off")),
        ]);
        r.tally();
        r
    }

    #[test]
    fn details_are_folded_in_a_fence_no_line_can_close() {
        let mut r = four();
        r.checks[0].details = vec!["Check 1, heading".into(), "  a ``` b".into()];
        let md = render(&r);
        let at = md.find("<details><summary>1. ").expect("a details block");
        let block = &md[at..];
        assert!(
            block.contains("\n````\nCheck 1, heading\n  a ``` b\n````\n"),
            "{block}"
        );
        assert!(block.contains("</details>"), "{block}");
        // Checks without details get no block.
        assert_eq!(md.matches("<details>").count(), 1, "{md}");
    }

    #[test]
    fn escaping_keeps_a_cell_one_cell_and_one_line() {
        assert_eq!(escape("a|b"), r"a\|b");
        assert_eq!(escape(r"a\|b"), r"a\\\|b", "a backslash cannot unescape");
        assert_eq!(escape("x\r\ny"), "x<br>y");
        assert_eq!(
            escape("*a* _b_ `c` <d> [e] &f ~g~"),
            r"\*a\* \_b\_ \`c\` \<d\> \[e\] \&f \~g\~"
        );
        assert_eq!(escape("x\u{1}y"), "x y");
        assert_eq!(escape("TSC_ADJUST _a_ b_ _c"), r"TSC_ADJUST \_a\_ b\_ \_c");
        assert_eq!(escape("plain 1,234 (ns)"), "plain 1,234 (ns)");
    }

    #[test]
    fn every_check_is_one_row_with_its_number_id_verdict_and_reason() {
        let md = render(&four());
        let rows = rows(&md);
        assert_eq!(rows[0], ["#", "check", "verdict", "reason"], "{md}");
        assert_eq!(rows[1], ["--:", "---", "---", "---"], "{md}");
        assert_eq!(rows.len(), 2 + 4, "{md}");
        assert_eq!(rows[2], ["1", "same-start", "✅ PASS", "equal offsets"]);
        assert_eq!(
            rows[3],
            [
                "2",
                "tsc-msrs",
                "❌ FAIL",
                r"stage 1 \| differs<br>badly: \*TSC_ADJUST\* \<x\>"
            ],
            "{md}"
        );
        assert_eq!(rows[4][2], "⏭️ SKIP");
        assert_eq!(rows[5][2], "❔ UNDECIDED");
        // Every line of the table is a row: the line break in the reason
        // did not split one.
        let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(table.len(), 6, "{md}");
        assert!(md.lines().all(|l| !l.starts_with("badly")), "{md}");
    }

    #[test]
    fn the_title_and_totals_say_the_outcome() {
        let md = render(&four());
        assert!(
            md.starts_with("### tsc-rendezvous t check: FAILED\n"),
            "{md}"
        );
        assert!(
            md.contains("\n**1 passed, 1 failed, 1 skipped, 1 undecided: FAILED**\n"),
            "{md}"
        );
        let mut ok = report(vec![check(1, "same-start", Finding::pass("equal"))]);
        ok.tally();
        let md = render(&ok);
        assert!(md.starts_with("### tsc-rendezvous t check: OK\n"), "{md}");
        assert!(md.contains("**1 passed, 0 failed, 0 skipped, 0 undecided: OK**"));
        assert!(!md.contains("Regressed"), "{md}");
        ok.incomplete = Some("interrupted by SIGTERM".into());
        ok.tally();
        let md = render(&ok);
        assert!(
            md.starts_with("### tsc-rendezvous t check: INCOMPLETE\n"),
            "{md}"
        );
        assert!(
            md.contains("> **Incomplete:** interrupted by SIGTERM; checks without evidence"),
            "{md}"
        );
    }

    #[test]
    fn the_environment_and_run_lines_come_from_the_report() {
        let mut r = four();
        r.environment.host.cpu_model = Some("AMD EPYC | 7B13".into());
        r.environment.host.tsc_khz = Some(2_445_428);
        r.skew = Some(SkewStats {
            median_cycles: 1200.4,
            p99_cycles: 3000.0,
            median_ns: Some(490.6),
            p99_ns: None,
        });
        let md = render(&r);
        assert!(
            md.contains(
                "**Environment:** kernel 6.1, KVM flavour SVM, CPU AMD EPYC \\| 7B13, \
                 TSC 2445428 kHz, offsets from KVM_VCPU_TSC_OFFSET (exact)\n"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "**Run:** 2 vCPUs, 1 rounds of xen-head, warp test 1 iterations per vCPU; \
                 skew median 1200 cycles (491 ns), p99 3000 cycles\n"
            ),
            "{md}"
        );
        // The closing line about ignored writes follows check 3's data, not
        // the hypervisor's name.
        r.environment.host.kvm_flavor = KvmFlavor::Pvm;
        assert!(
            !render(&r).contains("ignores guest TSC writes"),
            "no such data"
        );
        r.checks[2]
            .values
            .insert("offsets_unmoved".into(), 2.into());
        r.checks[2].values.insert("comparisons".into(), 2.into());
        assert!(render(&r).contains(
            "\nThe exact offsets did not move in 2 of 2 vCPU-rounds whose TSC_ADJUST recorded"
        ));
    }

    #[test]
    fn a_baseline_adds_its_column_and_lists_the_regressions() {
        let mut r = four();
        r.checks[0].baseline = Some(BaselineVerdict {
            verdict: Some(Verdict::Pass),
            regressed: false,
            reason: "PASS as in the baseline".into(),
        });
        r.checks[2].baseline = Some(BaselineVerdict {
            verdict: Some(Verdict::Pass),
            regressed: true,
            reason: "was PASS, now SKIP".into(),
        });
        r.tally();
        let md = render(&r);
        let rows = rows(&md);
        assert_eq!(
            rows[0],
            ["#", "check", "verdict", "reason", "baseline"],
            "{md}"
        );
        assert!(rows.iter().all(|row| row.len() == 5), "{md}");
        assert_eq!(rows[2][4], "PASS as in the baseline");
        assert_eq!(rows[3][4], "not compared");
        assert_eq!(rows[4][4], "**REGRESSED**: was PASS, now SKIP");
        assert!(
            md.contains("undecided, 1 regressed: FAILED**\n"),
            "the totals count it: {md}"
        );
        assert!(
            md.contains(
                "\nRegressed against the baseline:\n\n- 3. adjust-equals-offset: was PASS, now SKIP\n"
            ),
            "{md}"
        );
    }
}
