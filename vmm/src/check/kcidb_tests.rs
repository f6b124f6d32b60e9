//! Tests of the KCIDB renderer: the document's structure, the status of
//! each verdict, ids and paths as the v5.3 schema's patterns require.

use std::collections::BTreeSet;
use std::time::{Duration, UNIX_EPOCH};

use super::super::report::tests::report;
use super::super::report::{BaselineVerdict, CheckResult, Finding, Verdict};
use super::*;

/// KCIDB's `origin_pattern`: `[a-z0-9_]+`.
fn is_origin(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// KCIDB's `origin_id_pattern`: an origin, `:`, then anything but NUL.
fn is_origin_id(s: &str) -> bool {
    s.split_once(':')
        .is_some_and(|(o, rest)| is_origin(o) && !rest.contains('\0'))
}

/// KCIDB's test path: `([a-zA-Z0-9_-]+(\.[a-zA-Z0-9_-]+)*)?`.
fn is_path(s: &str) -> bool {
    s.is_empty()
        || s.split('.').all(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

fn submission() -> Submission<'static> {
    Submission {
        origin: DEFAULT_ORIGIN,
        host: "node-7.example",
        started: UNIX_EPOCH + Duration::from_secs(1_796_457_763),
    }
}

fn sample() -> CheckReport {
    let mut checks = vec![
        CheckResult::new(1, "same-start", "equal starts", Finding::pass("equal")),
        CheckResult::new(2, "tsc-msrs", "the MSR table", Finding::fail("6 of 8")),
        CheckResult::new(3, "warp", "no warp", Finding::undecided("bound too wide")),
        CheckResult::new(
            4,
            "skew-threshold",
            "skew",
            Finding::skip("no limit given").with("median_ns", 12.5),
        ),
        CheckResult::new(5, "odd id.x", "odd", Finding::pass("fine")),
    ];
    for (i, c) in checks.iter_mut().enumerate() {
        c.seconds = Some(i as f64 + 1.0);
        c.details = vec!["a detail".into()];
    }
    let mut r = report(checks);
    r.measure_seconds = Some(10.0);
    r.tally();
    r
}

#[test]
fn the_document_has_one_checkout_one_build_and_a_test_per_check() {
    let r = sample();
    let v = render(&r, &submission());
    assert_eq!(v["version"], json!({"major": 5, "minor": 3}));
    let checkouts = v["checkouts"].as_array().expect("checkouts");
    let builds = v["builds"].as_array().expect("builds");
    let tests = v["tests"].as_array().expect("tests");
    assert_eq!((checkouts.len(), builds.len(), tests.len()), (1, 1, 5));
    let checkout_id = checkouts[0]["id"].as_str().expect("an id");
    assert_eq!(checkout_id, "tsc_rendezvous:node-7.example:6.1");
    assert_eq!(checkouts[0]["valid"], true);
    assert_eq!(builds[0]["checkout_id"], checkout_id);
    assert_eq!(builds[0]["architecture"], "x86_64");
    assert_eq!(builds[0]["config_name"], "kvm_amd");
    assert_eq!(builds[0]["status"], "PASS");
    for t in tests {
        assert_eq!(t["build_id"], builds[0]["id"]);
        assert_eq!(t["origin"], "tsc_rendezvous");
        let env = &t["environment"];
        assert_eq!(env["misc"]["kernel_release"], "6.1");
        assert_eq!(env["misc"]["kvm_flavor"], "svm");
        assert!(env["comment"].as_str().is_some_and(|c| c.contains("SVM")));
    }
    assert_eq!(tests[1]["comment"], "2. the MSR table");
    assert_eq!(tests[1]["log_excerpt"], "FAIL: 6 of 8\na detail\n");
    assert_eq!(tests[3]["misc"]["values"]["median_ns"], 12.5);
    assert_eq!(tests[3]["misc"]["verdict"], "SKIP");
    assert_eq!(tests[2]["duration"], 3.0);
    // Each check starts after the measurement and the checks before it.
    assert_eq!(tests[0]["start_time"], "2026-12-05T08:02:53.000000+00:00");
    assert_eq!(tests[2]["start_time"], "2026-12-05T08:02:56.000000+00:00");
    assert_eq!(
        checkouts[0]["start_time"],
        "2026-12-05T08:02:43.000000+00:00"
    );
}

/// Nulls are not allowed anywhere in a KCIDB document.
fn assert_no_nulls(v: &Value, at: &str) {
    match v {
        Value::Null => panic!("null at {at}"),
        Value::Object(m) => m
            .iter()
            .for_each(|(k, v)| assert_no_nulls(v, &format!("{at}.{k}"))),
        Value::Array(a) => a.iter().for_each(|v| assert_no_nulls(v, at)),
        _ => {}
    }
}

#[test]
fn ids_are_unique_and_ids_paths_and_origins_match_the_schema() {
    let v = render(&sample(), &submission());
    assert_no_nulls(&v, "");
    let mut ids = BTreeSet::new();
    for kind in ["checkouts", "builds", "tests"] {
        for o in v[kind].as_array().into_iter().flatten() {
            let id = o["id"].as_str().expect("an id");
            assert!(is_origin_id(id), "{kind}: {id}");
            assert!(id.starts_with("tsc_rendezvous:"), "{id}");
            assert!(ids.insert(id.to_string()), "duplicate id {id}");
            assert!(o["origin"].as_str().is_some_and(is_origin));
        }
    }
    for t in v["tests"].as_array().into_iter().flatten() {
        let path = t["path"].as_str().expect("a path");
        assert!(
            is_path(path) && path.starts_with("tsc_rendezvous."),
            "{path}"
        );
    }
    assert_eq!(v["tests"][4]["path"], "tsc_rendezvous.odd_id_x");
    assert!(v["tests"][4]["id"]
        .as_str()
        .is_some_and(|id| id.ends_with(":1796457763000000000:odd id.x")));
}

#[test]
fn each_verdict_has_its_status() {
    let mut r = sample();
    let statuses =
        |r: &CheckReport| -> Vec<&'static str> { r.checks.iter().map(|c| status(r, c)).collect() };
    assert_eq!(statuses(&r), ["PASS", "FAIL", "DONE", "SKIP", "PASS"]);
    // Stopped by a signal: a check not measured is MISS, a plain SKIP stays.
    r.checks.push(CheckResult::new(
        6,
        "save-restore",
        "t",
        Finding::skip("not measured: interrupted by SIGTERM"),
    ));
    assert_eq!(
        status(&r, &r.checks[5]),
        "SKIP",
        "a complete run misses nothing"
    );
    r.incomplete = Some("interrupted by SIGTERM".into());
    assert_eq!(status(&r, &r.checks[5]), "MISS");
    assert_eq!(status(&r, &r.checks[3]), "SKIP");
    // A regression is FAIL whatever its verdict, as in KTAP.
    r.checks[0].baseline = Some(BaselineVerdict {
        verdict: Some(Verdict::Pass),
        regressed: true,
        reason: "median skew grew".into(),
    });
    assert_eq!(status(&r, &r.checks[0]), "FAIL");
    let v = render(&r, &submission());
    assert_eq!(v["tests"][0]["misc"]["baseline"]["regressed"], true);
    assert!(v["tests"][0]["log_excerpt"]
        .as_str()
        .is_some_and(|l| l.starts_with("regressed against the baseline: median skew grew\nPASS")));
}

#[test]
fn origins_are_checked_and_long_logs_cut() {
    assert_eq!(parse_origin("lab_7"), Ok("lab_7".to_string()));
    for bad in ["", "Lab", "my-lab", "a:b", "é"] {
        let e = parse_origin(bad).expect_err(bad);
        assert!(e.contains("lower-case letters, digits and '_'"), "{e}");
    }
    let long = "é".repeat(MAX_EXCERPT + 10);
    assert_eq!(excerpt(long).chars().count(), MAX_EXCERPT);
    assert_eq!(excerpt("short".into()), "short");
}

/// A run stopped before its first round: the checks judged on the rounds
/// say they were not measured, and are MISS, not SKIP.
#[test]
fn checks_without_rounds_in_a_stopped_run_are_missed() {
    let tally = super::super::tally::RoundTally::default();
    let f = super::super::adjust_offset::judge(&tally, true, crate::host::KvmFlavor::Svm);
    let mut r = report(vec![CheckResult::new(3, "adjust-equals-offset", "t", f)]);
    r.incomplete = Some("interrupted by SIGINT".into());
    assert!(r.checks[0].missed(), "{}", r.checks[0].reason);
    assert_eq!(status(&r, &r.checks[0]), "MISS");
}
