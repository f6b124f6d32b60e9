//! JUnit XML for `check --junit FILE`: one testsuite, one testcase per check
//! (its `time` the check's own wall time, without the shared measurement);
//! a FAIL (or a regression) is a `<failure>` whose message is the reason and
//! whose text lists the measured values; a SKIP is `<skipped>`. The
//! environment block goes into `<properties>`.

use std::fmt::Write as _;

use super::report::{CheckReport, Verdict};

/// Escapes text for XML attributes and content.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 does not allow.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// Renders the report as JUnit XML; `seconds` is the run's duration.
pub fn render(r: &CheckReport, seconds: f64) -> String {
    let failures = r.checks.iter().filter(|c| c.fails()).count();
    let skipped = r
        .checks
        .iter()
        .filter(|c| !c.fails() && matches!(c.verdict, Verdict::Skip | Verdict::Undecided))
        .count();
    let mut x = String::new();
    let _ = writeln!(x, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        x,
        r#"<testsuites name="tsc-rendezvous check" tests="{}" failures="{failures}" errors="0" skipped="{skipped}" time="{seconds:.3}">"#,
        r.checks.len()
    );
    let _ = writeln!(
        x,
        r#"  <testsuite name="tsc-rendezvous.check" tests="{}" failures="{failures}" errors="0" skipped="{skipped}" time="{seconds:.3}">"#,
        r.checks.len()
    );
    let _ = writeln!(x, "    <properties>");
    let e = &r.environment.host;
    let mut props = vec![
        ("kernel_release".to_string(), e.kernel_release.clone()),
        ("kvm_flavor".to_string(), e.kvm_flavor.name().to_string()),
        (
            "cpu_model".to_string(),
            e.cpu_model.clone().unwrap_or_default(),
        ),
        ("cpu_tsc_flags".to_string(), e.cpu_tsc_flags.join(" ")),
        (
            "clocksource".to_string(),
            e.clocksource.clone().unwrap_or_default(),
        ),
        (
            "tsc_khz".to_string(),
            e.tsc_khz.map(|k| k.to_string()).unwrap_or_default(),
        ),
        ("tsc_offset_attr".to_string(), e.tsc_offset_attr.to_string()),
        (
            "offset_source".to_string(),
            serde_json::to_value(e.offset_source)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        ),
        (
            "guest_tsc_adjust".to_string(),
            e.guest_tsc_adjust.to_string(),
        ),
        ("tool_version".to_string(), r.tool_version.clone()),
    ];
    props.extend(
        r.environment
            .kvm_capabilities
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string())),
    );
    for (k, v) in props {
        let _ = writeln!(
            x,
            r#"      <property name="{}" value="{}"/>"#,
            escape(&k),
            escape(&v)
        );
    }
    let _ = writeln!(x, "    </properties>");
    for c in &r.checks {
        let name = format!("{} {}", c.number, c.id);
        let values = c
            .values
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect::<Vec<_>>()
            .join("\n");
        let _ = write!(
            x,
            r#"    <testcase classname="tsc-rendezvous.check" name="{}" time="{:.3}">"#,
            escape(&name),
            c.seconds.unwrap_or(0.0)
        );
        if c.fails() {
            let mut msg = format!("{}: {}", c.verdict.label(), c.reason);
            if let Some(b) = c.baseline.as_ref().filter(|b| b.regressed) {
                msg = format!("{msg} [regressed against the baseline: {}]", b.reason);
            }
            let _ = write!(
                x,
                "\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    ",
                escape(&msg),
                c.verdict.label(),
                escape(&values)
            );
        } else if matches!(c.verdict, Verdict::Skip | Verdict::Undecided) {
            let _ = write!(
                x,
                "\n      <skipped message=\"{}\"/>\n    ",
                escape(&c.reason)
            );
        } else {
            let _ = write!(
                x,
                "\n      <system-out>{}</system-out>\n    ",
                escape(&format!("{}\n{values}", c.reason))
            );
        }
        let _ = writeln!(x, "</testcase>");
    }
    let _ = writeln!(x, "  </testsuite>");
    let _ = writeln!(x, "</testsuites>");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_control_characters() {
        assert_eq!(escape(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(escape("x\u{1}y\tz"), "x?y\tz");
    }

    /// Each testcase's time is its check's own; one without a time (an
    /// earlier version's result) says 0.
    #[test]
    fn a_testcase_takes_its_checks_time() {
        use crate::check::report::{CheckResult, Finding};
        let timed = CheckResult {
            seconds: Some(0.25),
            ..CheckResult::new(1, "a", "a", Finding::pass("ok"))
        };
        let untimed = CheckResult::new(2, "b", "b", Finding::pass("ok"));
        let x = render(
            &crate::check::report::tests::report(vec![timed, untimed]),
            1.5,
        );
        assert!(x.contains(r#"name="1 a" time="0.250""#), "{x}");
        assert!(x.contains(r#"name="2 b" time="0.000""#), "{x}");
        assert!(x.contains(r#"time="1.500""#), "{x}");
    }
}
