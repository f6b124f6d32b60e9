//! KCIDB I/O JSON (KernelCI's results database, schema version 5.3) for
//! `check --kcidb FILE`: the running kernel as one checkout, the kernel with
//! its KVM as one build, and one test per check.
//!
//! - checkout `<origin>:<host>:<kernel release>` (stable for this host and
//!   kernel), valid;
//! - build `<checkout id>:<flavour>` (`vmx`, `svm`, `pvm`), architecture
//!   `x86_64`, `config_name` the KVM module (`kvm_intel`, ...), status PASS
//!   (the kernel runs), the KVM capabilities in `misc`;
//! - test `<origin>:<host>:<run start, ns since the epoch>:<check id>`, path
//!   `tsc_rendezvous.<check id>`, `comment` the number and title, `status`
//!   PASS, FAIL, DONE for UNDECIDED (it ran, and gave no verdict), SKIP, MISS
//!   for a check not measured because a signal stopped the run; a regression
//!   against the baseline is FAIL, as in KTAP and the exit code (the
//!   comparison is in `misc.baseline`). `log_excerpt` is the verdict, the
//!   reason and the evidence lines; `misc` holds the number, the verdict, the
//!   reason and every measured value; `environment` the host's facts.
//!   `start_time` is when the check began: the run's start, plus the shared
//!   measurement, plus the checks before it.
//!
//! ERROR is never written: a check that errors stops the run before any
//! report exists (exit code 2).

use std::time::{Duration, SystemTime};

use serde_json::{json, Map, Value};

use super::report::{CheckReport, CheckResult, Verdict};
use crate::output::time::rfc3339;

/// The schema version written.
pub const VERSION: (u32, u32) = (5, 3);

/// The default origin: the name of the CI system that submits.
pub const DEFAULT_ORIGIN: &str = "tsc_rendezvous";

/// The tree path every test is under.
const PATH_ROOT: &str = "tsc_rendezvous";

/// KCIDB's limit on `log_excerpt`, characters.
const MAX_EXCERPT: usize = 16_384;

/// Checks an origin as KCIDB does (`^[a-z0-9_]+$`): the value parser of
/// `--kcidb-origin`.
pub fn parse_origin(s: &str) -> Result<String, String> {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        Ok(s.to_string())
    } else {
        Err(format!(
            "'{s}' is not a KCIDB origin: use lower-case letters, digits and '_' only \
             (e.g. {DEFAULT_ORIGIN})"
        ))
    }
}

/// What the report does not say: who submits and where and when it ran.
#[derive(Clone, Debug)]
pub struct Submission<'a> {
    /// The origin (checked by [`parse_origin`]).
    pub origin: &'a str,
    /// This host's name.
    pub host: &'a str,
    /// When the run started (wall clock).
    pub started: SystemTime,
}

/// A KCIDB status of one check.
pub fn status(report: &CheckReport, c: &CheckResult) -> &'static str {
    if c.baseline.as_ref().is_some_and(|b| b.regressed) {
        return "FAIL";
    }
    match c.verdict {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::Undecided => "DONE",
        Verdict::Skip if report.incomplete.is_some() && c.missed() => "MISS",
        Verdict::Skip => "SKIP",
    }
}

/// A path component: anything but `[A-Za-z0-9_-]` becomes `_`.
fn component(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c,
            _ => '_',
        })
        .collect()
}

/// The first [`MAX_EXCERPT`] characters of `s`.
fn excerpt(s: String) -> String {
    match s.char_indices().nth(MAX_EXCERPT) {
        Some((at, _)) => s[..at].to_string(),
        None => s,
    }
}

/// A JSON object without its null members (KCIDB allows no nulls).
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        v => v,
    }
}

/// Renders the report as a KCIDB I/O document.
pub fn render(r: &CheckReport, s: &Submission<'_>) -> Value {
    let host = &r.environment.host;
    let checkout_id = format!("{}:{}:{}", s.origin, s.host, host.kernel_release);
    let build_id = format!("{checkout_id}:{}", host.kvm_flavor.key());
    let since_epoch = s
        .started
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let run_id = format!("{}:{}:{}", s.origin, s.host, since_epoch.as_nanos());
    let checkout = json!({
        "id": checkout_id,
        "origin": s.origin,
        "comment": format!("the running kernel {} on {}", host.kernel_release, s.host),
        "start_time": rfc3339(s.started),
        "valid": true,
        "misc": {"host": s.host, "kernel_release": host.kernel_release},
    });
    let build = json!({
        "id": build_id,
        "checkout_id": checkout_id,
        "origin": s.origin,
        "comment": format!(
            "the running kernel {} with KVM by {} ({})",
            host.kernel_release,
            host.kvm_flavor.module(),
            host.kvm_flavor.name()
        ),
        "architecture": "x86_64",
        "config_name": host.kvm_flavor.module(),
        "status": "PASS",
        "misc": {"kvm_capabilities": r.environment.kvm_capabilities},
    });
    let environment = json!({
        "comment": format!(
            "{}: kernel {}, KVM flavour {}, TSC {}",
            s.host,
            host.kernel_release,
            host.kvm_flavor.name(),
            host.tsc_khz
                .map_or("of unknown frequency".to_string(), |k| format!("{k} kHz"))
        ),
        "misc": without_nulls(serde_json::to_value(&r.environment).unwrap_or(Value::Null)),
    });
    let mut at = s.started + Duration::from_secs_f64(r.measure_seconds.unwrap_or(0.0).max(0.0));
    let tests: Vec<Value> = r
        .checks
        .iter()
        .map(|c| {
            let t = test(r, c, (&run_id, &build_id, s.origin), at, &environment);
            at += Duration::from_secs_f64(c.seconds.unwrap_or(0.0).max(0.0));
            t
        })
        .collect();
    json!({
        "version": {"major": VERSION.0, "minor": VERSION.1},
        "checkouts": [checkout],
        "builds": [build],
        "tests": tests,
    })
}

/// One check as a KCIDB test; `ids`: (run id, build id, origin).
fn test(
    r: &CheckReport,
    c: &CheckResult,
    (run_id, build_id, origin): (&str, &str, &str),
    started: SystemTime,
    environment: &Value,
) -> Value {
    let mut log = format!("{}: {}\n", c.verdict.label(), c.reason);
    if let Some(b) = c.baseline.as_ref().filter(|b| b.regressed) {
        log = format!("regressed against the baseline: {}\n{log}", b.reason);
    }
    for d in &c.details {
        log.push_str(d);
        log.push('\n');
    }
    let mut misc = json!({
        "number": c.number,
        "verdict": c.verdict.label(),
        "reason": c.reason,
        "values": without_nulls(Value::Object(c.values.clone().into_iter().collect())),
        "tool_version": r.tool_version,
        "options": without_nulls(serde_json::to_value(&r.options).unwrap_or(Value::Null)),
    });
    if let Some(b) = &c.baseline {
        misc["baseline"] = without_nulls(serde_json::to_value(b).unwrap_or(Value::Null));
    }
    let mut t = json!({
        "id": format!("{run_id}:{}", c.id),
        "build_id": build_id,
        "origin": origin,
        "path": format!("{PATH_ROOT}.{}", component(&c.id)),
        "comment": format!("{}. {}", c.number, c.title),
        "status": status(r, c),
        "log_excerpt": excerpt(log),
        "start_time": rfc3339(started),
        "environment": environment,
        "misc": misc,
    });
    if let Some(secs) = c.seconds {
        t["duration"] = json!(secs);
    }
    t
}

#[cfg(test)]
#[path = "kcidb_tests.rs"]
mod tests;
