//! `compare` on real VMs, through the binary: every variant measured the
//! requested number of times, in the seeded balanced order, and the JSON, CSV
//! and SVG outputs well-formed and consistent with each other.
//!
//! These need a usable /dev/kvm. Without one they are skipped with a message,
//! except when `CI` is set: then a missing /dev/kvm is a failure.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use tsc_sync::Variant;
use tsc_vmm::compare::plan;
use tsc_vmm::stats::summarize;

mod common;
use common::kvm_or_skip;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tsc-compare-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir.join(name)
}

fn compare(args: &[&str]) -> (Output, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .arg("compare")
        .args(args)
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    (out, json)
}

fn validate(json: &Value) {
    let schema: Value = serde_json::from_str(include_str!("../vmm/schema/compare-v1.json"))
        .expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(json).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number: {x}"))
}

struct Row {
    seq: u32,
    block: u32,
    variant: String,
    vcpu: u32,
    exit: f64,
    skew: f64,
}

fn read_csv(path: &PathBuf) -> Vec<Row> {
    let text = std::fs::read_to_string(path).expect("the CSV was written");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let (seq, block, variant, vcpu, exit, skew) = (
        col("seq"),
        col("block"),
        col("variant"),
        col("vcpu"),
        col("exit_latency_cycles"),
        col("skew_cycles"),
    );
    lines
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            assert_eq!(c.len(), header.len(), "row {l}");
            Row {
                seq: c[seq].parse().expect("seq"),
                block: c[block].parse().expect("block"),
                variant: c[variant].to_string(),
                vcpu: c[vcpu].parse().expect("vcpu"),
                exit: c[exit].parse().expect("exit"),
                skew: c[skew].parse().expect("skew"),
            }
        })
        .collect()
}

#[test]
fn compare_measures_every_variant_in_balanced_order_and_outputs_agree() {
    if !kvm_or_skip() {
        return;
    }
    let (rounds, warmup, seed, vcpus) = (12u32, 3u32, 7u64, 2u32);
    let csv = scratch("rounds.csv");
    let svg = scratch("compare.svg");
    let (out, json) = compare(&[
        "--vcpus",
        "2",
        "--rounds",
        "12",
        "--warmup",
        "3",
        "--seed",
        "7",
        "--bootstrap",
        "200",
        "--variants",
        "xen-4.15,xen-6ca022a1,xen-head",
        "--json",
        "--csv",
        csv.to_str().expect("utf-8 path"),
        "--plot",
        svg.to_str().expect("utf-8 path"),
    ]);
    // No progress bar: stderr is not a terminal (and --json).
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    validate(&json);
    let names = ["xen-4.15", "xen-6ca022a1", "xen-head"];
    assert_eq!(json["seed"], seed);
    assert_eq!(json["vms"], 1);
    assert_eq!(json["warmup_rounds_run"], warmup);
    assert_eq!(json["rounds_per_variant"], rounds);
    let per: Vec<&Value> = json["per_variant"]
        .as_array()
        .expect("per_variant")
        .iter()
        .collect();
    assert_eq!(per.len(), 3);
    for (p, name) in per.iter().zip(names) {
        assert_eq!(p["variant"], name);
        assert_eq!(p["rounds"], rounds, "{name} measured as often as asked");
        assert_eq!(f(p, &["cpu0_exit_latency_cycles", "n"]), f64::from(rounds));
        assert_eq!(
            f(p, &["other_exit_latency_cycles", "n"]),
            f64::from(rounds * (vcpus - 1))
        );
    }
    assert_eq!(json["comparisons"].as_array().map(Vec::len), Some(2 * 3));
    assert_eq!(json["verdicts"].as_array().map(Vec::len), Some(2));

    // The CSV: one row per measured round and vCPU, in the seeded order.
    let rows = read_csv(&csv);
    assert_eq!(rows.len(), (rounds * 3 * vcpus) as usize);
    let mut order: Vec<(u32, u32, String)> = rows
        .iter()
        .filter(|r| r.vcpu == 0)
        .map(|r| (r.seq, r.block, r.variant.clone()))
        .collect();
    order.sort();
    let expected = plan(
        &[Variant::Xen415, Variant::Xen6ca022a1, Variant::XenHead],
        rounds,
        warmup,
        0,
        seed,
    );
    let planned: Vec<&str> = expected[0].measured.iter().map(|v| v.name()).collect();
    let ran: Vec<&str> = order.iter().map(|(_, _, v)| v.as_str()).collect();
    assert_eq!(ran, planned, "the rounds ran in the seeded order");
    for (i, chunk) in order.chunks(3).enumerate() {
        let mut in_block: Vec<&str> = chunk.iter().map(|(_, _, v)| v.as_str()).collect();
        in_block.sort_unstable();
        assert_eq!(in_block, names, "block {i} runs each variant once");
        assert!(chunk.iter().all(|(_, b, _)| *b == i as u32));
    }

    // The CSV reproduces the JSON's medians.
    for (p, name) in per.iter().zip(names) {
        let of = |vcpu0: bool| {
            rows.iter()
                .filter(|r| r.variant == name && (r.vcpu == 0) == vcpu0)
                .map(|r| r.exit)
                .collect::<Vec<f64>>()
        };
        let cpu0 = summarize(of(true)).expect("values");
        let others = summarize(of(false)).expect("values");
        let skew = summarize(
            rows.iter()
                .filter(|r| r.variant == name && r.vcpu == 0)
                .map(|r| r.skew),
        )
        .expect("values");
        assert_eq!(cpu0.median, f(p, &["cpu0_exit_latency_cycles", "median"]));
        assert_eq!(cpu0.max, f(p, &["cpu0_exit_latency_cycles", "max"]));
        assert_eq!(
            others.median,
            f(p, &["other_exit_latency_cycles", "median"])
        );
        assert_eq!(skew.median, f(p, &["skew_cycles", "median"]));
    }
    // And the comparisons use the same medians.
    for c in json["comparisons"].as_array().expect("comparisons") {
        if c["metric"] == "cpu0_exit_latency_cycles" {
            let base = per
                .iter()
                .find(|p| p["variant"] == c["baseline"])
                .expect("baseline");
            let var = per
                .iter()
                .find(|p| p["variant"] == c["variant"])
                .expect("variant");
            assert_eq!(
                f(c, &["shift", "median_a"]),
                f(base, &["cpu0_exit_latency_cycles", "median"])
            );
            assert_eq!(
                f(c, &["shift", "median_b"]),
                f(var, &["cpu0_exit_latency_cycles", "median"])
            );
            let (lo, hi, d) = (
                f(c, &["shift", "diff_lo"]),
                f(c, &["shift", "diff_hi"]),
                f(c, &["shift", "diff"]),
            );
            assert!(lo <= d && d <= hi, "the interval holds the estimate: {c}");
            assert_eq!(f(c, &["mann_whitney", "n_a"]), f64::from(rounds));
        }
    }

    // The SVG: well-formed XML, labelled, one legend entry per variant.
    let text = std::fs::read_to_string(&svg).expect("the SVG was written");
    let doc = roxmltree::Document::parse(&text).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let labels: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect();
    for want in ["CPU 0 loop-exit time (cycles)", "skew (cycles)", "CDF"] {
        assert!(
            labels.iter().any(|l| l.contains(want)),
            "no label with '{want}': {labels:?}"
        );
    }
    for name in names {
        assert!(
            labels.iter().any(|l| l.starts_with(name)),
            "no legend for {name}"
        );
    }
    let lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .count();
    assert!(lines >= 6, "one curve per variant and panel, {lines} found");
    let _ = std::fs::remove_dir_all(csv.parent().expect("scratch dir"));
}

#[test]
fn a_fresh_vm_per_block_warms_each_up_and_keeps_the_counts() {
    if !kvm_or_skip() {
        return;
    }
    let (_, json) = compare(&[
        "--vcpus",
        "1",
        "--rounds",
        "5",
        "--warmup",
        "1",
        "--fresh-vm-every",
        "2",
        "--seed",
        "3",
        "--bootstrap",
        "100",
        "--variants",
        "xen-head,xen-4.15",
        "--json",
    ]);
    validate(&json);
    assert_eq!(json["vms"], 3, "5 blocks, 2 per VM");
    assert_eq!(json["warmup_rounds_run"], 3, "one warm-up round per VM");
    let mut counts = BTreeMap::new();
    for p in json["per_variant"].as_array().expect("per_variant") {
        counts.insert(p["variant"].to_string(), p["rounds"].clone());
        assert!(
            p["other_exit_latency_cycles"].is_null(),
            "one vCPU: no others"
        );
    }
    assert!(counts.values().all(|c| *c == 5), "{counts:?}");
    assert_eq!(
        json["variants"][0], "xen-head",
        "the first named is the baseline"
    );
}

#[test]
fn the_readable_report_has_the_tables_the_seed_and_a_verdict() {
    if !kvm_or_skip() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(["compare", "--rounds", "8", "--warmup", "2", "--seed", "42"])
        .args(["--bootstrap", "100"])
        .output()
        .expect("the binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "xen-4.15 vs xen-6ca022a1",
        "(seed 42)",
        "2 warm-up round(s) run and excluded",
        "CPU 0 loop-exit time (cycles)",
        "Other vCPUs' loop-exit times (cycles)",
        "Skew (cycles)",
        "Verdict (CPU 0 loop-exit time",
    ] {
        assert!(text.contains(want), "'{want}' missing from:\n{text}");
    }
    let verdicts: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Verdict"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(
        verdicts.len(),
        1,
        "one verdict for two variants: {verdicts:?}"
    );
    assert!(
        verdicts[0].contains("8 rounds each")
            && (verdicts[0].contains("noise")
                || verdicts[0].contains("sooner")
                || verdicts[0].contains("later")),
        "{verdicts:?}"
    );
}
