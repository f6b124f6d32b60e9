//! Tests of the OpenMetrics renderer: every family declared, every series
//! labelled, exactly one verdict per check, label values escaped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use super::super::report::tests::report;
use super::super::report::{CheckResult, Finding, SkewStats};
use super::*;

fn sample() -> CheckReport {
    let mut r = report(vec![
        CheckResult::new(1, "same-start", "t", Finding::pass("equal")),
        CheckResult::new(
            2,
            "warp",
            "t",
            Finding::undecided("wide")
                .with("bound_cycles", 12_961u64)
                .with("exact", true)
                .with("pairs", json!([{"rtt": 43_880}, {"rtt": 43_781}]))
                .with("note", "a string is left out"),
        ),
        CheckResult::new(3, "tsc-msrs", "t", Finding::fail("6 of 8")),
        CheckResult::new(4, "skew-threshold", "t", Finding::skip("no limit")),
    ]);
    r.environment.host.kernel_release = "6.1 \"odd\\name\"\nx".into();
    r.checks[0].seconds = Some(0.25);
    r.skew = Some(SkewStats {
        median_cycles: 1500.0,
        p99_cycles: 3000.0,
        ..SkewStats::default()
    });
    r.tally();
    r
}

/// (metric name, labels, value) of every sample line.
fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (name, rest) = l.split_once('{').expect("labels");
            let (labels, value) = rest.rsplit_once("} ").expect("a value");
            let mut map = BTreeMap::new();
            // Split on `",` outside escapes: the test values have no `",`.
            for pair in labels.split("\",") {
                let (k, v) = pair.split_once("=\"").expect("k=\"v\"");
                map.insert(k.to_string(), v.trim_end_matches('"').to_string());
            }
            (name.to_string(), map, value.parse().expect("a number"))
        })
        .collect()
}

#[test]
fn every_family_is_declared_before_its_samples_and_the_text_ends_with_eof() {
    let text = render(
        &sample(),
        UNIX_EPOCH + Duration::from_millis(1_796_457_763_500),
    );
    assert!(text.ends_with("\n# EOF\n"), "{text}");
    let mut declared = BTreeSet::new();
    let mut helped = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("name and type");
            assert_eq!(kind, "gauge");
            assert!(helped.contains(name), "HELP before TYPE: {name}");
            declared.insert(name.to_string());
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split_once(' ').expect("name and text").0.to_string());
        } else if !line.starts_with('#') {
            let name = line.split('{').next().unwrap_or("");
            assert!(declared.contains(name), "undeclared: {line}");
        }
    }
    let all = samples(&text);
    let last = all
        .iter()
        .find(|(n, _, _)| n == "tsc_rendezvous_last_run_timestamp_seconds")
        .expect("the time of the run");
    assert_eq!(last.2, 1_796_457_763.5);
    let complete = all
        .iter()
        .find(|(n, _, _)| n == "tsc_rendezvous_run_complete");
    assert_eq!(complete.map(|s| s.2), Some(1.0));
    let median = all
        .iter()
        .find(|(n, _, _)| n == "tsc_rendezvous_skew_median_cycles");
    assert_eq!(median.map(|s| s.2), Some(1500.0));
}

#[test]
fn every_series_has_the_host_labels_escaped() {
    let text = render(&sample(), UNIX_EPOCH);
    for (name, labels, _) in samples(&text) {
        assert_eq!(
            labels.get("kernel_release").map(String::as_str),
            Some("6.1 \\\"odd\\\\name\\\"\\nx"),
            "{name}"
        );
        assert_eq!(labels.get("kvm_flavor").map(String::as_str), Some("svm"));
    }
    // No raw line break inside a sample: one line per sample.
    assert_eq!(text.lines().filter(|l| l.starts_with("x\"")).count(), 0);
}

#[test]
fn exactly_one_verdict_per_check_is_one() {
    let r = sample();
    let text = render(&r, UNIX_EPOCH);
    let verdicts: Vec<_> = samples(&text)
        .into_iter()
        .filter(|(n, _, _)| n == "tsc_rendezvous_check_verdict")
        .collect();
    assert_eq!(verdicts.len(), 4 * r.checks.len());
    for c in &r.checks {
        let mine: Vec<_> = verdicts
            .iter()
            .filter(|(_, l, _)| l["check"] == c.id)
            .collect();
        assert_eq!(mine.len(), 4, "{}", c.id);
        let on: Vec<&str> = mine
            .iter()
            .filter(|(_, _, v)| *v == 1.0)
            .map(|(_, l, _)| l["verdict"].as_str())
            .collect();
        assert_eq!(on, [c.verdict.label().to_lowercase()], "{}", c.id);
        assert!(mine.iter().all(|(_, _, v)| *v == 0.0 || *v == 1.0));
    }
}

#[test]
fn measured_numbers_are_values_and_strings_are_not() {
    let text = render(&sample(), UNIX_EPOCH);
    let values: BTreeMap<String, f64> = samples(&text)
        .into_iter()
        .filter(|(n, l, _)| n == "tsc_rendezvous_check_value" && l["check"] == "warp")
        .map(|(_, l, v)| (l["name"].clone(), v))
        .collect();
    let expected: BTreeMap<String, f64> = [
        ("bound_cycles", 12_961.0),
        ("exact", 1.0),
        ("pairs.0.rtt", 43_880.0),
        ("pairs.1.rtt", 43_781.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(values, expected);
    assert_eq!(number(f64::NAN), "NaN");
    assert_eq!(number(f64::NEG_INFINITY), "-Inf");
    assert_eq!(number(0.5), "0.5");
}
