//! Prometheus text exposition (OpenMetrics-compatible, ends with `# EOF`)
//! for `check --openmetrics FILE`, to be collected by node_exporter's
//! textfile collector from every host of a fleet. Every family is a gauge
//! with `# HELP` and `# TYPE`; every series carries `kernel_release` and
//! `kvm_flavor` (`vmx`, `svm`, `pvm`, `unknown`); node_exporter adds the
//! instance. No sample has a timestamp (the collector refuses them):
//!
//! - `tsc_rendezvous_check_verdict{check, number, verdict}`: one series per
//!   check and verdict (`pass`, `fail`, `undecided`, `skip`), exactly one of
//!   the four 1, the others 0, so that `== 1` selects a verdict and a check
//!   absent from a host's file is told apart from one that did not pass;
//! - `tsc_rendezvous_check_regressed{check}`: 1 when the check got worse
//!   than in `--baseline` (0 without one);
//! - `tsc_rendezvous_check_value{check, name}`: every number a check
//!   measured (its JSON `values`, nested names joined with `.`, booleans as
//!   0/1; the unit is in the name, as in the JSON);
//! - `tsc_rendezvous_check_duration_seconds{check}`: the check's own time;
//! - `tsc_rendezvous_skew_{median,p99}_cycles`: the rendezvous' skew;
//! - `tsc_rendezvous_run_complete`: 1, or 0 when a signal stopped the run;
//! - `tsc_rendezvous_last_run_timestamp_seconds`: when the run started.

use std::fmt::Write as _;
use std::time::SystemTime;

use serde_json::Value;

use super::report::{CheckReport, Verdict};
use crate::output::time::unix_seconds;

/// The verdicts, as the `verdict` label writes them.
const VERDICTS: [(Verdict, &str); 4] = [
    (Verdict::Pass, "pass"),
    (Verdict::Fail, "fail"),
    (Verdict::Undecided, "undecided"),
    (Verdict::Skip, "skip"),
];

/// Escapes a label value: backslash, double quote and line feed.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A sample value as the format writes it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

/// Every number in `v`, with its name (`prefix`, nested keys and indices
/// joined with `.`); booleans as 0/1; strings and nulls left out.
fn numbers(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Number(n) => out.extend(n.as_f64().map(|x| (prefix.to_string(), x))),
        Value::Bool(b) => out.push((prefix.to_string(), f64::from(u8::from(*b)))),
        Value::Object(m) => m.iter().for_each(|(k, v)| numbers(&join(k), v, out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| numbers(&join(&i.to_string()), v, out)),
        Value::String(_) | Value::Null => {}
    }
}

/// The text being written: families, each with its help and samples.
struct Exposition {
    text: String,
    /// `kernel_release="..",kvm_flavor=".."`, on every series.
    common: String,
}

impl Exposition {
    fn family(&mut self, name: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} gauge");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        let mut l = String::new();
        for (k, v) in labels {
            let _ = write!(l, "{k}=\"{}\",", escape(v));
        }
        let _ = writeln!(self.text, "{name}{{{l}{}}} {}", self.common, number(v));
    }
}

/// Renders the report; `started`: when the run started.
pub fn render(r: &CheckReport, started: SystemTime) -> String {
    let host = &r.environment.host;
    let mut x = Exposition {
        text: String::new(),
        common: format!(
            "kernel_release=\"{}\",kvm_flavor=\"{}\"",
            escape(&host.kernel_release),
            host.kvm_flavor.key()
        ),
    };
    let m = "tsc_rendezvous_check_verdict";
    x.family(
        m,
        "1 for the check's verdict, 0 for the other three verdicts.",
    );
    for c in &r.checks {
        let n = c.number.to_string();
        for (v, name) in VERDICTS {
            let labels = [("check", c.id.as_str()), ("number", &n), ("verdict", name)];
            x.sample(m, &labels, f64::from(u8::from(c.verdict == v)));
        }
    }
    let m = "tsc_rendezvous_check_regressed";
    x.family(
        m,
        "1 when the check got worse than in the baseline, else 0.",
    );
    for c in &r.checks {
        let regressed = c.baseline.as_ref().is_some_and(|b| b.regressed);
        x.sample(m, &[("check", &c.id)], f64::from(u8::from(regressed)));
    }
    let m = "tsc_rendezvous_check_value";
    x.family(
        m,
        "A number the check measured; the name says what and its unit.",
    );
    for c in &r.checks {
        let mut found = Vec::new();
        c.values.iter().for_each(|(k, v)| numbers(k, v, &mut found));
        for (name, v) in found {
            x.sample(m, &[("check", &c.id), ("name", &name)], v);
        }
    }
    let m = "tsc_rendezvous_check_duration_seconds";
    x.family(m, "The check's own wall time.");
    for c in &r.checks {
        if let Some(s) = c.seconds {
            x.sample(m, &[("check", &c.id)], s);
        }
    }
    if let Some(skew) = &r.skew {
        let m = "tsc_rendezvous_skew_median_cycles";
        x.family(m, "Median TSC skew the rendezvous left, over its rounds.");
        x.sample(m, &[], skew.median_cycles);
        let m = "tsc_rendezvous_skew_p99_cycles";
        x.family(m, "99th percentile of the TSC skew the rendezvous left.");
        x.sample(m, &[], skew.p99_cycles);
    }
    let m = "tsc_rendezvous_run_complete";
    x.family(
        m,
        "1 when every check ran, 0 when a signal stopped the run.",
    );
    x.sample(m, &[], f64::from(u8::from(r.incomplete.is_none())));
    let m = "tsc_rendezvous_last_run_timestamp_seconds";
    x.family(m, "When the run started, seconds since the Unix epoch.");
    x.sample(m, &[], unix_seconds(started));
    x.text.push_str("# EOF\n");
    x.text
}

#[cfg(test)]
#[path = "openmetrics_tests.rs"]
mod tests;
