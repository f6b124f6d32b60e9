//! The statistics `compare` reports reproduce an independent reference:
//! values computed once with numpy and scipy by
//! `tests/fixtures/gen_stats_reference.py` and recorded, with their inputs,
//! in `tests/fixtures/stats_reference.json` (see the script for how each was
//! computed). Nothing here is recomputed with the code under test's own
//! formulas.
//!
//! Tolerances:
//! - summaries (median, percentiles of R's type 7, mean, min, max, sample
//!   standard deviation) and the U statistic: 1e-12 relative (they are exact
//!   up to floating-point rounding of a few operations);
//! - exact Mann-Whitney p-values (counted distribution of U): 1e-12
//!   relative;
//! - normal-approximation p-values: 1e-6 relative, from the documented
//!   relative error of the complementary error function (below 1.2e-7).

use serde_json::Value;
use tsc_vmm::summarize;
use tsc_vmm::{mann_whitney, PMethod};

mod common;
use common::stats_fixture::{load as fixture, values};

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {}", v["name"]))
}

/// `got` is within `rel` of `want`, relatively (absolutely near 0).
fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs().max(f64::MIN_POSITIVE)
}

#[test]
fn summaries_match_numpy() {
    let f = fixture();
    let cases = f["summaries"].as_array().expect("summaries");
    assert!(cases.len() >= 8, "the fixture holds the summaries");
    for case in cases {
        let name = case["name"].as_str().expect("a name");
        let s = summarize(values(&case["values"])).expect("values");
        assert_eq!(s.n as f64, num(case, "n"), "{name}: n");
        for (field, got) in [
            ("min", s.min),
            ("median", s.median),
            ("mean", s.mean),
            ("p10", s.p10),
            ("p90", s.p90),
            ("p99", s.p99),
            ("max", s.max),
        ] {
            let want = num(case, field);
            assert!(
                close(got, want, 1e-12),
                "{name}: {field} is {got}, numpy says {want}"
            );
        }
        match case["std_dev"].as_f64() {
            Some(want) => assert!(
                close(s.std_dev, want, 1e-12),
                "{name}: std dev is {}, numpy (ddof=1) says {want}",
                s.std_dev
            ),
            // One value: numpy has no sample standard deviation; the code
            // documents 0.
            None => assert_eq!(s.std_dev, 0.0, "{name}"),
        }
    }
}

#[test]
fn mann_whitney_matches_scipy() {
    let f = fixture();
    let cases = f["mann_whitney"].as_array().expect("mann_whitney");
    assert!(cases.len() >= 8, "the fixture holds the tests");
    let mut methods = (0, 0);
    for case in cases {
        let name = case["name"].as_str().expect("a name");
        let (a, b) = (values(&case["a"]), values(&case["b"]));
        let t = mann_whitney(&a, &b).expect("samples");
        let (method, tolerance) = match case["method"].as_str() {
            Some("exact") => {
                methods.0 += 1;
                (PMethod::Exact, 1e-12)
            }
            Some("normal") => {
                methods.1 += 1;
                (PMethod::Normal, 1e-6)
            }
            other => panic!("{name}: unknown method {other:?}"),
        };
        assert_eq!(t.method, method, "{name}: which p-value");
        assert_eq!((t.n_a, t.n_b), (a.len(), b.len()), "{name}");
        let u = num(case, "u_a");
        assert!(
            close(t.u_a, u, 1e-12),
            "{name}: U is {}, scipy says {u}",
            t.u_a
        );
        assert!(
            close(t.u_b, a.len() as f64 * b.len() as f64 - u, 1e-12),
            "{name}: U of b"
        );
        for (field, got) in [("p_two_sided", t.p_two_sided), ("p_greater", t.p_greater)] {
            let want = num(case, field);
            assert!(
                close(got, want, tolerance),
                "{name}: {field} is {got:e}, scipy says {want:e}"
            );
        }
    }
    assert!(
        methods.0 >= 3 && methods.1 >= 3,
        "both methods covered: {methods:?}"
    );
}
