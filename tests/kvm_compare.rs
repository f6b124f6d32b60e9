//! `compare` on real VMs, through the binary: every variant measured the
//! requested number of times, in a seeded balanced order, and the JSON, CSV,
//! SVG and text outputs well-formed and consistent with each other.
//!
//! Nothing here asks the implementation what the answer should be: the
//! schedule is checked by its documented properties (each block runs each
//! variant exactly once; the same seed gives the same order, another seed
//! another), the statistics against a small independent implementation
//! written here (sorting, R's type-7 percentiles, mean, sample standard
//! deviation) applied to the CSV, every CSV column against its definition,
//! and the plot's legend against the axis rule applied here to the CSV.
//!
//! These need a usable /dev/kvm. Without one they are skipped with a message,
//! except when `CI` is set: then a missing /dev/kvm is a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{hang_bound, kvm_or_skip, wait_bounded};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tsc-compare-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir.join(name)
}

/// The deadline given to every compare here (`--timeout`, per VM): far
/// beyond what these few rounds take, and the bound of the test's wait.
const TIMEOUT: Duration = Duration::from_secs(120);

fn run_compare(args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .arg("compare")
        .args(args)
        .args(["--timeout", &TIMEOUT.as_secs().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let out = wait_bounded(child, hang_bound(TIMEOUT), &format!("compare {args:?}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    out
}

fn compare(args: &[&str]) -> (Output, Value) {
    let out = run_compare(args);
    let json: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    validate(&json);
    (out, json)
}

fn validate(json: &Value) {
    common::validate(json, include_str!("../vmm/schema/compare-v1.json"));
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number: {x}"))
}

// ---------------------------------------------------------------------------
// An independent implementation of the statistics docs/compare.md documents.

/// The documented summary of a metric: n, min, median, mean, p10, p90, p99,
/// max, sample standard deviation.
#[derive(Debug)]
struct Stats {
    n: usize,
    fields: [(&'static str, f64); 8],
}

/// The p-th percentile of sorted `v`, linear between closest ranks (R's
/// type 7): at rank h = (n - 1) p / 100, v[floor h] plus the fraction of
/// the way to v[floor h + 1].
fn type7(v: &[f64], p: f64) -> f64 {
    let h = (v.len() - 1) as f64 * p / 100.0;
    let i = h.floor() as usize;
    match v.get(i + 1) {
        Some(next) => v[i] + (h - i as f64) * (next - v[i]),
        None => v[i],
    }
}

fn stats(mut v: Vec<f64>) -> Stats {
    assert!(!v.is_empty(), "no values");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let mean = v.iter().sum::<f64>() / n as f64;
    let var = if n > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    Stats {
        n,
        fields: [
            ("min", v[0]),
            ("median", type7(&v, 50.0)),
            ("mean", mean),
            ("p10", type7(&v, 10.0)),
            ("p90", type7(&v, 90.0)),
            ("p99", type7(&v, 99.0)),
            ("max", v[n - 1]),
            ("std_dev", var.sqrt()),
        ],
    }
}

/// The JSON summary `summary` holds exactly the statistics of `values`.
fn assert_summary(summary: &Value, values: Vec<f64>, what: &str) {
    let s = stats(values);
    assert_eq!(summary["n"].as_u64(), Some(s.n as u64), "{what}: n");
    for (name, want) in s.fields {
        let got = f(summary, &[name]);
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{what}: {name} is {got} in the JSON, {want} from the CSV"
        );
    }
}

// ---------------------------------------------------------------------------
// The CSV, parsed by name.

/// The columns the documentation (docs/compare.md) lists, in order: "`--csv
/// FILE` the raw data, one row per measured round and vCPU (`seq, vm, ...,
/// disagreements`".
fn documented_columns() -> Vec<String> {
    let readme = common::docs::flat();
    let key = "one row per measured round and vCPU (`";
    let at = readme
        .find(key)
        .expect("the documentation lists the CSV columns")
        + key.len();
    let list = &readme[at..at + readme[at..].find('`').expect("a closing backtick")];
    list.split(',').map(|c| c.trim().to_string()).collect()
}

#[derive(Debug, Clone)]
struct Row {
    seq: u32,
    vm: u32,
    block: u32,
    round_in_vm: u32,
    variant: String,
    vcpu: u32,
    exit: Option<f64>,
    skew: u64,
    adjust_delta: i64,
    write_latency: Option<i64>,
    honoured: Option<bool>,
    disagreements: u32,
}

fn read_csv(path: &Path) -> Vec<Row> {
    let text = std::fs::read_to_string(path).expect("the CSV was written");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    assert_eq!(
        header,
        documented_columns(),
        "the CSV's columns are the documented ones, in their order"
    );
    lines
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            assert_eq!(c.len(), header.len(), "row {l}");
            let field = |name: &str| c[header.iter().position(|h| *h == name).expect("column")];
            let int = |name: &str| -> i64 {
                field(name)
                    .parse()
                    .unwrap_or_else(|_| panic!("{name} in {l}"))
            };
            let opt = |name: &str| -> Option<i64> {
                let v = field(name);
                (!v.is_empty()).then(|| v.parse().unwrap_or_else(|_| panic!("{name} in {l}")))
            };
            Row {
                seq: int("seq") as u32,
                vm: int("vm") as u32,
                block: int("block") as u32,
                round_in_vm: int("round_in_vm") as u32,
                variant: field("variant").to_string(),
                vcpu: int("vcpu") as u32,
                exit: opt("exit_latency_cycles").map(|x| x as f64),
                skew: int("skew_cycles") as u64,
                adjust_delta: int("tsc_adjust_delta"),
                write_latency: opt("write_latency_cycles"),
                honoured: match field("write_honoured") {
                    "true" => Some(true),
                    "false" => Some(false),
                    "" => None,
                    other => panic!("write_honoured '{other}' in {l}"),
                },
                disagreements: int("disagreements") as u32,
            }
        })
        .collect()
}

/// The CSV's rounds: the rows of each `seq`, in vCPU order.
fn rounds_of(rows: &[Row], vcpus: u32) -> Vec<&[Row]> {
    let rounds: Vec<&[Row]> = rows.chunks(vcpus as usize).collect();
    for (i, r) in rounds.iter().enumerate() {
        assert_eq!(r.len(), vcpus as usize, "round {i}: one row per vCPU");
        for (k, row) in r.iter().enumerate() {
            assert_eq!(row.seq, i as u32, "seq counts the measured rounds in order");
            assert_eq!(row.vcpu, k as u32, "vcpu 0..N-1 in order: {row:?}");
            for name in [&row.variant, &r[0].variant] {
                assert_eq!(name, &r[0].variant);
            }
            // Per-round columns are repeated on each of the round's rows.
            assert_eq!(
                (
                    row.vm,
                    row.block,
                    row.round_in_vm,
                    row.skew,
                    row.disagreements
                ),
                (
                    r[0].vm,
                    r[0].block,
                    r[0].round_in_vm,
                    r[0].skew,
                    r[0].disagreements
                ),
                "round {i}: per-round columns differ between rows"
            );
        }
    }
    rounds
}

/// Every CSV column against its definition (docs/compare.md "Outputs", the
/// module docs of `compare --csv`) and against the JSON document.
/// Returns how many rounds' skew it could check against the TSC_ADJUST
/// deltas.
fn check_csv_columns(rows: &[Row], json: &Value, warmup: u32, fresh_vm_every: u32) -> usize {
    let vcpus = json["vcpus"].as_u64().expect("vcpus") as u32;
    let names: Vec<&str> = json["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .map(|v| v.as_str().expect("a name"))
        .collect();
    let per_round = json["rounds_per_variant"].as_u64().expect("rounds") as usize;
    let rounds = rounds_of(rows, vcpus);
    assert_eq!(
        rounds.len(),
        per_round * names.len(),
        "every measured round"
    );
    // block: whole blocks of one round per variant, each variant once.
    for (b, block) in rounds.chunks(names.len()).enumerate() {
        let mut in_block: Vec<&str> = block.iter().map(|r| r[0].variant.as_str()).collect();
        in_block.sort_unstable();
        let mut want = names.clone();
        want.sort_unstable();
        assert_eq!(in_block, want, "block {b} runs each variant exactly once");
        assert!(block.iter().all(|r| r[0].block == b as u32), "block {b}");
    }
    // vm: a fresh VM every `fresh_vm_every` blocks (0: one VM), numbered in
    // order; as many as the JSON says.
    for r in &rounds {
        let block = r[0].block;
        let vm = block.checked_div(fresh_vm_every).unwrap_or(0);
        assert_eq!(r[0].vm, vm, "block {block} runs in VM {vm}");
    }
    let vms = rounds.last().map_or(0, |r| r[0].vm + 1);
    assert_eq!(json["vms"].as_u64(), Some(u64::from(vms)), "VMs");
    // round_in_vm: the round's index in its VM, warm-up rounds included
    // (and first).
    let mut next_in_vm: BTreeMap<u32, u32> = BTreeMap::new();
    for r in &rounds {
        let i = next_in_vm.entry(r[0].vm).or_insert(warmup);
        assert_eq!(r[0].round_in_vm, *i, "round_in_vm of seq {}", r[0].seq);
        *i += 1;
    }
    assert_eq!(
        json["warmup_rounds_run"].as_u64(),
        Some(u64::from(warmup * vms)),
        "warm-up rounds are counted, not written"
    );
    for (name, p) in names
        .iter()
        .zip(json["per_variant"].as_array().expect("per_variant"))
    {
        assert_eq!(p["variant"], *name);
        let own: Vec<&[Row]> = rounds
            .iter()
            .filter(|r| r[0].variant == *name)
            .copied()
            .collect();
        assert_eq!(
            p["rounds"].as_u64(),
            Some(own.len() as u64),
            "{name}: rounds"
        );
        // exit_latency_cycles: CPU 0's is vCPU 0's; empty exactly for the
        // variants without a common TSC write, and then so is the write
        // latency and the verdict on the write.
        let writes = !matches!(*name, "xen-std" | "linux-tsc-sync");
        for row in own.iter().flat_map(|r| r.iter()) {
            assert_eq!(row.exit.is_some(), writes, "{name}: exit time {row:?}");
            assert_eq!(
                row.write_latency.is_some(),
                writes,
                "{name}: write latency {row:?}"
            );
            if !writes {
                assert_eq!(row.adjust_delta, 0, "{name} writes nothing: {row:?}");
            }
        }
        let exits = |cpu0: bool| -> Vec<f64> {
            own.iter()
                .flat_map(|r| r.iter())
                .filter(|row| (row.vcpu == 0) == cpu0)
                .filter_map(|row| row.exit)
                .collect()
        };
        match p["cpu0_exit_latency_cycles"].is_null() {
            true => assert!(!writes, "{name}: CPU 0 exit time missing"),
            false => assert_summary(
                &p["cpu0_exit_latency_cycles"],
                exits(true),
                &format!("{name} CPU 0 exit"),
            ),
        }
        match p["other_exit_latency_cycles"].is_null() {
            true => assert!(!writes || vcpus == 1, "{name}: other exit times missing"),
            false => assert_summary(
                &p["other_exit_latency_cycles"],
                exits(false),
                &format!("{name} other exits"),
            ),
        }
        // skew_cycles: the JSON's skew statistics, one value per round.
        assert_summary(
            &p["skew_cycles"],
            own.iter().map(|r| r[0].skew as f64).collect(),
            &format!("{name} skew"),
        );
        // disagreements: the JSON counts the rounds with any.
        let disagreeing = own.iter().filter(|r| r[0].disagreements > 0).count();
        assert_eq!(
            p["rounds_with_disagreements"].as_u64(),
            Some(disagreeing as u64),
            "{name}: rounds with disagreements"
        );
        // write_honoured: the JSON's verdict is the rows' common one. A write
        // of the value the TSC already held (TSC_ADJUST delta 0) moved
        // nothing and is decided neither way.
        let verdicts: Vec<Option<bool>> = own
            .iter()
            .flat_map(|r| r.iter())
            .filter(|row| writes && !(row.adjust_delta == 0 && row.honoured.is_none()))
            .map(|row| row.honoured)
            .collect();
        if let Some(v) = p["writes_honoured"].as_bool() {
            assert!(
                verdicts.iter().all(|h| *h == Some(v)),
                "{name}: the JSON says writes_honoured = {v}, the rows {verdicts:?}"
            );
        }
    }
    // write_latency_cycles: from just before the write until KVM handled it,
    // never negative (a negative one is counted as a disagreement).
    for r in &rounds {
        for row in r.iter() {
            if let Some(l) = row.write_latency {
                assert!(
                    l >= 0 || row.disagreements > 0,
                    "a negative write latency not counted as a disagreement: {row:?}"
                );
            }
        }
    }
    check_skew_against_tsc_adjust(&rounds)
}

/// skew_cycles and tsc_adjust_delta: the skew is the spread of the relative
/// offsets from the TSC_ADJUST deltas. Where the writes were ignored the
/// offsets never moved, so it is the spread of the round's own deltas (the
/// would-be skew); where they were honoured the offsets differ by every
/// delta so far (TSC_ADJUST starts at 0 in a new VM), so it is the spread of
/// the sums, which needs every round since the VM was created: only checked
/// for VMs without warm-up rounds (whose rows the CSV does not hold).
/// Returns how many rounds it could check.
fn check_skew_against_tsc_adjust(rounds: &[&[Row]]) -> usize {
    let spread = |xs: &mut dyn Iterator<Item = i64>| -> u64 {
        let v: Vec<i64> = xs.collect();
        let (lo, hi) = (
            v.iter().min().copied().unwrap_or(0),
            v.iter().max().copied().unwrap_or(0),
        );
        (i128::from(hi) - i128::from(lo)) as u64
    };
    let mut sums: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    let mut honoured_so_far: BTreeMap<u32, Option<bool>> = BTreeMap::new();
    let mut origin: BTreeMap<u32, bool> = BTreeMap::new();
    let mut checked = 0;
    for r in rounds {
        let vm = r[0].vm;
        // Whether this VM's rows start at its creation: decided by its first
        // row (a VM with warm-up rounds starts later, and stays incomplete).
        let from_creation = *origin.entry(vm).or_insert(r[0].round_in_vm == 0);
        let sum = sums.entry(vm).or_insert_with(|| vec![0; r.len()]);
        for (s, row) in sum.iter_mut().zip(r.iter()) {
            *s = s.wrapping_add(row.adjust_delta);
        }
        let verdicts: Vec<Option<bool>> = r.iter().map(|row| row.honoured).collect();
        let so_far = honoured_so_far.entry(vm).or_insert(None);
        let all = |v: Option<bool>| verdicts.iter().all(|h| *h == v);
        let expected = if all(Some(false)) {
            *so_far = Some(false);
            Some(spread(&mut r.iter().map(|row| row.adjust_delta)))
        } else if all(Some(true)) {
            *so_far = Some(true);
            from_creation.then(|| spread(&mut sum.iter().copied()))
        } else if all(None) && r.iter().all(|row| row.adjust_delta == 0) {
            // No write: the offsets stay where the earlier rounds left them.
            match *so_far {
                Some(false) => Some(0),
                _ => from_creation.then(|| spread(&mut sum.iter().copied())),
            }
        } else {
            None // Undecided or mixed: the relation is not defined.
        };
        if let Some(e) = expected.filter(|_| r[0].disagreements == 0) {
            assert_eq!(
                r[0].skew, e,
                "seq {}: skew against the TSC_ADJUST deltas {:?}",
                r[0].seq, r
            );
            checked += 1;
        }
    }
    checked
}

// ---------------------------------------------------------------------------
// The plot.

/// "Its x axes end at 1.25x the largest p90 ...; the legend says how many
/// lie beyond": the legend's counts of each panel against that rule applied
/// here to the CSV (ending at the largest value when that is smaller).
fn check_plot_legend(svg: &Path, rows: &[Row], names: &[&str]) {
    let text = std::fs::read_to_string(svg).expect("the SVG was written");
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
    let lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .count();
    assert!(
        lines >= 2 * names.len(),
        "one curve per variant and panel, {lines} found"
    );
    // The panels: CPU 0's exit time, then the skew, one value per round.
    let vcpu0: Vec<&Row> = rows.iter().filter(|r| r.vcpu == 0).collect();
    fn exit(r: &Row) -> Option<f64> {
        r.exit
    }
    fn skew(r: &Row) -> Option<f64> {
        Some(r.skew as f64)
    }
    let panels: [fn(&Row) -> Option<f64>; 2] = [exit, skew];
    for (panel, value) in panels.iter().enumerate() {
        let series: Vec<Vec<f64>> = names
            .iter()
            .map(|n| {
                let mut v: Vec<f64> = vcpu0
                    .iter()
                    .filter(|r| r.variant == *n)
                    .filter_map(|r| value(r))
                    .collect();
                v.sort_by(f64::total_cmp);
                v
            })
            .collect();
        let p90 = series
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| type7(s, 90.0))
            .fold(f64::NEG_INFINITY, f64::max);
        let max = series
            .iter()
            .filter_map(|s| s.last().copied())
            .fold(f64::NEG_INFINITY, f64::max);
        let hi = (1.25 * p90).min(max);
        for (name, s) in names.iter().zip(&series) {
            let prefix = format!("{name} (n = {}, ", s.len());
            let entries: Vec<&String> = labels
                .iter()
                .filter(|l| l.starts_with(&prefix) && l.ends_with(" beyond the axis)"))
                .collect();
            assert_eq!(
                entries.len(),
                2,
                "{name}: one legend entry per panel: {labels:?}"
            );
            let beyond: usize = entries[panel][prefix.len()..]
                .trim_end_matches(" beyond the axis)")
                .parse()
                .unwrap_or_else(|_| panic!("a count in {}", entries[panel]));
            // Values within rounding of the end could fall either side.
            let strict = s.iter().filter(|&&x| x > hi * (1.0 + 1e-12)).count();
            let loose = s.iter().filter(|&&x| x > hi * (1.0 - 1e-12)).count();
            assert!(
                (strict..=loose).contains(&beyond),
                "panel {panel}, {name}: the legend says {beyond} beyond the axis, \
                 the rule (end at {hi}) gives {strict}"
            );
        }
    }
}

// ---------------------------------------------------------------------------

fn csv_order(csv: &Path) -> Vec<(u32, String)> {
    read_csv(csv)
        .into_iter()
        .filter(|r| r.vcpu == 0)
        .map(|r| (r.block, r.variant))
        .collect()
}

#[test]
fn compare_measures_every_variant_in_balanced_order_and_outputs_agree() {
    if !kvm_or_skip() {
        return;
    }
    let csv = scratch("rounds.csv");
    let svg = scratch("compare.svg");
    let names = ["xen-4.15", "xen-6ca022a1", "xen-head"];
    let common = [
        "--vcpus",
        "2",
        "--rounds",
        "12",
        "--warmup",
        "3",
        "--bootstrap",
        "200",
        "--variants",
        "xen-4.15,xen-6ca022a1,xen-head",
        "--json",
    ];
    let with = |seed: &str, csv: &Path| -> Vec<String> {
        let mut a: Vec<String> = common.iter().map(|s| s.to_string()).collect();
        a.extend(["--seed".into(), seed.into(), "--csv".into()]);
        a.push(csv.to_str().expect("utf-8 path").into());
        a
    };
    let mut args = with("7", &csv);
    args.extend(["--plot".into(), svg.to_str().expect("utf-8 path").into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (out, json) = compare(&args);
    // No progress bar: stderr is not a terminal (and --json).
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json["seed"], 7);
    assert_eq!(json["vms"], 1);
    assert_eq!(json["warmup_rounds_run"], 3);
    assert_eq!(json["rounds_per_variant"], 12);
    assert_eq!(json["vcpus"], 2);
    let per: Vec<&Value> = json["per_variant"]
        .as_array()
        .expect("per_variant")
        .iter()
        .collect();
    assert_eq!(per.len(), 3);
    for (p, name) in per.iter().zip(names) {
        assert_eq!(p["variant"], name);
        assert_eq!(p["rounds"], 12, "{name} measured as often as asked");
    }
    assert_eq!(json["comparisons"].as_array().map(Vec::len), Some(2 * 3));
    assert_eq!(json["verdicts"].as_array().map(Vec::len), Some(2));

    let rows = read_csv(&csv);
    assert_eq!(
        rows.len(),
        12 * 3 * 2,
        "one row per measured round and vCPU"
    );
    check_csv_columns(&rows, &json, 3, 0);
    check_plot_legend(&svg, &rows, &names);

    // The comparisons use the medians of the statistics.
    for c in json["comparisons"].as_array().expect("comparisons") {
        let metric = c["metric"].as_str().expect("a metric");
        let of = |variant: &Value| {
            per.iter()
                .find(|p| p["variant"] == *variant)
                .map(|p| f(p, &[metric, "median"]))
                .expect("a variant of the report")
        };
        assert_eq!(f(c, &["shift", "median_a"]), of(&c["baseline"]), "{c}");
        assert_eq!(f(c, &["shift", "median_b"]), of(&c["variant"]), "{c}");
        let (lo, hi, d) = (
            f(c, &["shift", "diff_lo"]),
            f(c, &["shift", "diff_hi"]),
            f(c, &["shift", "diff"]),
        );
        assert!(lo <= d && d <= hi, "the interval holds the estimate: {c}");
        assert_eq!(c["baseline"], "xen-4.15", "the first named is the baseline");
    }

    // "the same seed gives the same order": a second run with seed 7; and
    // the order is drawn from the seed: another seed gives another order
    // (12 blocks of 3 variants: the same by chance once in 6^12).
    let again = scratch("again.csv");
    let other = scratch("other.csv");
    for (seed, path) in [("7", &again), ("8", &other)] {
        let a = with(seed, path);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        compare(&a);
    }
    let order = csv_order(&csv);
    assert_eq!(csv_order(&again), order, "seed 7 twice, two orders");
    assert_ne!(
        csv_order(&other),
        order,
        "seeds 7 and 8 gave the same order"
    );
    let _ = std::fs::remove_dir_all(csv.parent().expect("scratch dir"));
}

/// `--fresh-vm-every`, warm-up 0 and a variant without a TSC write: the vm,
/// block and round_in_vm columns across VMs, the empty fields of a variant
/// to which the exit time does not apply, and the skew against the
/// TSC_ADJUST deltas from each VM's creation on.
#[test]
fn a_fresh_vm_every_two_blocks_and_every_csv_column() {
    if !kvm_or_skip() {
        return;
    }
    let csv = scratch("fresh.csv");
    let (_, json) = compare(&[
        "--vcpus",
        "2",
        "--rounds",
        "5",
        "--warmup",
        "0",
        "--fresh-vm-every",
        "2",
        "--seed",
        "3",
        "--bootstrap",
        "100",
        "--variants",
        "xen-head,xen-std",
        "--json",
        "--csv",
        csv.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(json["vms"], 3, "5 blocks, 2 per VM");
    assert_eq!(
        json["variants"][0], "xen-head",
        "the first named is the baseline"
    );
    let rows = read_csv(&csv);
    let checked = check_csv_columns(&rows, &json, 0, 2);
    // Without warm-up rounds every round can be checked against the
    // TSC_ADJUST deltas but those whose methods disagree or whose writes
    // are undecided: most of them.
    assert!(
        checked * 2 > rows.len() / 2,
        "only {checked} of {} rounds' skews checked",
        rows.len() / 2
    );
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
        "1",
        "--seed",
        "3",
        "--bootstrap",
        "100",
        "--variants",
        "xen-head,xen-4.15",
        "--json",
    ]);
    assert_eq!(json["vms"], 5, "`1`: a fresh VM per block, 5 blocks");
    assert_eq!(json["warmup_rounds_run"], 5, "one warm-up round per VM");
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

/// The numbers of a readable table row: `name n median mean p10 p90 p99 max
/// std dev`, thousands separators removed.
fn table_row(text: &str, title: &str, name: &str) -> Vec<f64> {
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != title)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let row = table
        .iter()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} under {title}:\n{text}"));
    row.split_whitespace()
        .skip(1)
        .map(|x| {
            x.replace(',', "")
                .parse()
                .unwrap_or_else(|_| panic!("{x} in {row}"))
        })
        .collect()
}

/// The readable report: the tables hold the statistics of the CSV (rounded
/// as shown), a verdict per non-baseline variant, and the count of rounds
/// with disagreeing readback methods exactly when there are any.
#[test]
fn the_readable_report_has_the_tables_the_seed_and_a_verdict() {
    if !kvm_or_skip() {
        return;
    }
    let csv = scratch("text.csv");
    let out = run_compare(&[
        "--rounds",
        "8",
        "--warmup",
        "2",
        "--seed",
        "42",
        "--bootstrap",
        "100",
        "--csv",
        csv.to_str().expect("utf-8 path"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "xen-4.15 vs xen-6ca022a1",
        "(seed 42)",
        "2 warm-up round(s) run and excluded",
        "Verdict (CPU 0 loop-exit time",
    ] {
        assert!(text.contains(want), "'{want}' missing from:\n{text}");
    }
    let rows = read_csv(&csv);
    for name in ["xen-4.15", "xen-6ca022a1"] {
        let own = |cpu0: bool| -> Vec<f64> {
            rows.iter()
                .filter(|r| r.variant == name && (r.vcpu == 0) == cpu0)
                .filter_map(|r| r.exit)
                .collect()
        };
        let skew: Vec<f64> = rows
            .iter()
            .filter(|r| r.variant == name && r.vcpu == 0)
            .map(|r| r.skew as f64)
            .collect();
        for (title, values) in [
            ("CPU 0 loop-exit time (cycles)", own(true)),
            ("Other vCPUs' loop-exit times (cycles)", own(false)),
            ("Skew (cycles)", skew),
        ] {
            let shown = table_row(&text, title, name);
            let s = stats(values);
            assert_eq!(shown[0], s.n as f64, "{title} {name}: n");
            for ((field, want), got) in s
                .fields
                .iter()
                .filter(|(n, _)| *n != "min")
                .zip(&shown[1..])
            {
                assert!(
                    (got - want.round()).abs() <= 1.0,
                    "{title} {name}: {field} shown as {got}, {want} from the CSV"
                );
            }
        }
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
    let disagreeing = rows
        .iter()
        .filter(|r| r.vcpu == 0 && r.disagreements > 0)
        .count();
    let line = "round(s) had disagreeing readback methods; they are kept";
    if disagreeing > 0 {
        assert!(
            text.contains(&format!("{disagreeing} {line}")),
            "{disagreeing} disagreeing rounds in the CSV, not so in:\n{text}"
        );
    } else {
        assert!(!text.contains(line), "no disagreement in the CSV:\n{text}");
    }
}

/// "`--seed` (default: the clock; the seed is printed and in the JSON)":
/// two runs without a seed draw different ones, each stated.
#[test]
fn without_a_seed_the_clock_picks_one_and_the_report_says_which() {
    if !kvm_or_skip() {
        return;
    }
    let args = [
        "--vcpus",
        "1",
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--bootstrap",
        "100",
    ];
    let seeds: Vec<u64> = (0..2)
        .map(|_| {
            let (_, json) = compare(&[&args[..], &["--json"]].concat());
            json["seed"].as_u64().expect("the seed is in the JSON")
        })
        .collect();
    assert_ne!(seeds[0], seeds[1], "two runs drew the same seed");
    let out = run_compare(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    let seed = number_after(&text, "(seed ");
    assert!(
        !seeds.contains(&seed),
        "a third run drew seed {seed} again: {seeds:?}"
    );
}

/// The number right after `key` in `text`.
fn number_after(text: &str, key: &str) -> u64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no '{key}' in:\n{text}"))
        + key.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after '{key}' in:\n{text}"))
}
