//! `run --kvmclock` and `compare --kvmclock` on this host's KVM: every
//! writing vCPU of every round reports its kvmclock across its write, the
//! numbers hold together (the jump is the advance minus the time that
//! passed, the move is the exact offsets' change), the summary counts what
//! the rounds measured, and `compare` compares it as a fourth metric; `run`
//! also reports KVM_GET_CLOCK on the fresh VM and after its first and last
//! rounds. Without the flag nothing of it is written; the host backend
//! refuses it.

mod common;

use std::process::Command;

use common::{kvm_or_skip, validate};
use serde_json::Value;

fn tool(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// `run --kvmclock --json` of 3 rounds of `variant` on 2 vCPUs, parsed.
fn run_kvmclock_json(variant: &str) -> Value {
    json_of(&tool(&[
        "run",
        "--vcpus",
        "2",
        "--rounds",
        "3",
        "--json",
        "--kvmclock",
        "--variant",
        variant,
    ]))
}

/// One round's kvmclock findings against its vCPUs.
fn check_round(round: &Value, vcpus: usize) {
    let k = &round["kvmclock"];
    let js = k["vcpus"].as_array().expect("every writer's reading");
    assert_eq!(js.len(), vcpus, "every vCPU wrote IA32_TSC: {round}");
    let mut largest: Option<f64> = None;
    for j in js {
        let id = j["vcpu"].as_u64().expect("vcpu") as usize;
        let v = &round["vcpus"][id];
        assert_eq!(
            j["tsc_moved_cycles"], v["offset_delta"],
            "the move is the offsets': {j}"
        );
        let advance = j["kvmclock_advance_ns"].as_f64().expect("advance");
        // A write that moved the TSC back may take a stale kvmclock back with
        // it (measured on real KVM); one that did not move it back cannot.
        let moved = j["tsc_moved_cycles"].as_i64().expect("the move");
        assert!(
            moved < 0 || advance > 0.0,
            "kvmclock advanced across a write that did not move the TSC back: {j}"
        );
        if let (Some(elapsed), Some(jump)) = (j["elapsed_ns"].as_f64(), j["jump_ns"].as_f64()) {
            assert!(elapsed > 0.0, "time passed between the readings: {j}");
            assert!((jump - (advance - elapsed)).abs() < 1.0, "{j}");
            if largest.is_none_or(|l: f64| jump.abs() > l.abs()) {
                largest = Some(jump);
            }
        }
        let version = j["version"].as_array().expect("versions");
        assert!(
            version
                .iter()
                .all(|x| x.as_u64().is_some_and(|x| x % 2 == 0)),
            "a consistent read never keeps an odd version: {j}"
        );
    }
    // The largest in magnitude (two writers may tie, one ahead and one
    // behind by the same sub-ns rounding: either is the round's).
    let jump = k["jump_ns"].as_f64();
    assert_eq!(
        jump.map(f64::abs),
        largest.map(f64::abs),
        "the round's jump is its largest: {k}"
    );
    assert!(
        jump.is_none() || js.iter().any(|j| j["jump_ns"].as_f64() == jump),
        "the round's jump is one writer's: {k}"
    );
}

#[test]
fn run_kvmclock_reports_every_writers_jump_beside_the_skew() {
    if !kvm_or_skip() {
        return;
    }
    let doc = run_kvmclock_json("all");
    validate(&doc, include_str!("../vmm/schema/run-v1.json"));
    let runs = doc["runs"].as_array().expect("runs");
    for run in runs {
        let rounds = run["rounds"].as_array().expect("rounds");
        // Every variant but these two writes IA32_TSC in every round.
        let writes =
            !["xen-std", "linux-tsc-sync"].contains(&run["variant"].as_str().unwrap_or(""));
        for r in rounds {
            if writes {
                check_round(r, 2);
            } else {
                assert!(
                    r.get("kvmclock").is_none(),
                    "no IA32_TSC write, no reading: {r}"
                );
            }
        }
        let summary = &run["summary"]["kvmclock_jump_ns"];
        let measured = rounds
            .iter()
            .filter(|r| r["kvmclock"]["jump_ns"].is_number())
            .count();
        if measured == 0 {
            assert!(summary.is_null(), "{summary}");
        } else {
            assert_eq!(summary["n"].as_u64(), Some(measured as u64), "{summary}");
        }
    }
    // The readable report shows it beside the skew.
    let text = tool(&[
        "run",
        "--rounds",
        "3",
        "--kvmclock",
        "--variant",
        "xen-head",
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("kvmclock jump ns"), "{text}");
    // Without the flag nothing of it is written.
    let plain = tool(&["run", "--rounds", "2", "--json", "--variant", "xen-head"]);
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("kvmclock"));
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("kvm_clock"));
}

/// The samples of a run's `kvm_clock`, in order, each point checked: taken
/// where it says, a sample bracketed by its host TSC reads with its flags
/// named, or an error.
fn clock_samples(k: &Value, last: u64) -> Vec<&Value> {
    let mut samples = Vec::new();
    for (name, round) in [
        ("fresh", None),
        ("after_first", Some(0)),
        ("after_last", Some(last)),
    ] {
        let p = &k[name];
        assert!(p.is_object(), "{name} taken: {k}");
        assert_eq!(p["after_round"].as_u64(), round, "{name}: {p}");
        if let Some(e) = p["error"].as_str() {
            assert!(!e.is_empty() && p.get("clock_ns").is_none(), "{name}: {p}");
            eprintln!("{name}: {e}");
            continue;
        }
        let (before, after) = (p["host_before"].as_u64(), p["host_after"].as_u64());
        assert!(before.is_some() && before <= after, "{name}: {p}");
        let flags = p["flags"].as_u64().expect("flags");
        let named = |n: &str| {
            p["flag_names"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == n))
        };
        for (bit, n) in [
            (2, "KVM_CLOCK_TSC_STABLE"),
            (4, "KVM_CLOCK_REALTIME"),
            (8, "KVM_CLOCK_HOST_TSC"),
        ] {
            assert_eq!(flags & bit != 0, named(n), "{name}: {p}");
        }
        samples.push(p);
    }
    samples
}

#[test]
fn run_kvmclock_reports_kvm_get_clock_on_the_fresh_vm_and_after_the_first_and_last_rounds() {
    if !kvm_or_skip() {
        return;
    }
    let doc = run_kvmclock_json("xen-head");
    validate(&doc, include_str!("../vmm/schema/run-v1.json"));
    let k = &doc["runs"][0]["kvm_clock"];
    let samples = clock_samples(k, 2);
    // The VM-wide kvmclock never goes back, whatever the guest wrote to its
    // TSCs; nor do the host's clocks where every point has them.
    let never_back = |field: &str| {
        let v: Vec<u64> = samples.iter().filter_map(|p| p[field].as_u64()).collect();
        assert!(v.windows(2).all(|w| w[0] <= w[1]), "{field}: {k}");
    };
    never_back("clock_ns");
    for (bit, field) in [(4, "realtime_ns"), (8, "host_tsc")] {
        if samples
            .iter()
            .all(|p| p["flags"].as_u64().unwrap_or(0) & bit != 0)
        {
            never_back(field);
        }
    }
    let stable: Vec<bool> = samples
        .iter()
        .map(|p| p["flags"].as_u64().unwrap_or(0) & 2 != 0)
        .collect();
    let changed = (stable.len() >= 2).then(|| stable.windows(2).any(|w| w[0] != w[1]));
    assert_eq!(k["tsc_stable_changed"].as_bool(), changed, "{k}");
    // The readable report says it in one line.
    let text = tool(&[
        "run",
        "--rounds",
        "2",
        "--kvmclock",
        "--variant",
        "xen-head",
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("KVM_GET_CLOCK: fresh VM "))
        .unwrap_or_else(|| panic!("no KVM_GET_CLOCK line: {text}"));
    assert!(
        line.contains(", after round #0 ") && line.contains(", after round #1 "),
        "{line}"
    );
    assert!(line.contains("KVM_CLOCK_TSC_STABLE"), "{line}");
}

#[test]
fn compare_kvmclock_compares_the_jump_as_a_fourth_metric() {
    if !kvm_or_skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tsc-kvmclock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let csv = dir.join("rounds.csv");
    let doc = json_of(&tool(&[
        "compare",
        "--variants",
        "xen-4.15,xen-head",
        "--rounds",
        "6",
        "--warmup",
        "1",
        "--json",
        "--kvmclock",
        "--csv",
        csv.to_str().unwrap_or("rounds.csv"),
    ]));
    validate(&doc, include_str!("../vmm/schema/compare-v1.json"));
    let metrics: Vec<&str> = doc["comparisons"]
        .as_array()
        .expect("comparisons")
        .iter()
        .filter_map(|c| c["metric"].as_str())
        .collect();
    assert!(metrics.contains(&"kvmclock_jump_ns"), "{metrics:?}");
    for v in doc["per_variant"].as_array().expect("per variant") {
        let s = &v["kvmclock_jump_ns"];
        if !s.is_null() {
            assert!(
                s["n"].as_u64().unwrap_or(0) <= v["rounds"].as_u64().unwrap_or(0),
                "{v}"
            );
        }
    }
    // The CSV has the column, filled for the rows with a jump.
    let text = std::fs::read_to_string(&csv).expect("the CSV");
    let _ = std::fs::remove_dir_all(&dir);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let at = header
        .iter()
        .position(|h| *h == "kvmclock_jump_ns")
        .expect("the kvmclock column");
    let exact = doc["host"]["offset_source"] != "none";
    for l in lines {
        let cell = l.split(',').nth(at).unwrap_or("");
        if exact {
            assert!(cell.parse::<f64>().is_ok(), "a jump in every row: {l}");
        }
    }
    // Without the flag there is no fourth metric.
    let plain = json_of(&tool(&[
        "compare",
        "--variants",
        "xen-4.15,xen-head",
        "--rounds",
        "4",
        "--warmup",
        "1",
        "--json",
    ]));
    assert!(!plain.to_string().contains("kvmclock_jump_ns"));
}

#[test]
fn kvmclock_is_refused_on_the_host_backend() {
    for cmd in ["run", "compare"] {
        let out = tool(&[cmd, "--backend", "host", "--kvmclock", "--rounds", "2"]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--kvmclock") && err.contains("--backend kvm"),
            "{cmd}: {err}"
        );
    }
}
