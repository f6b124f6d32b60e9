//! The host backend (`--backend host`): every variant on host threads, the
//! invariants of what each algorithm does to the threads' TSCs, as the
//! reports' own analysis sees them, and `run`/`compare` end to end (schemas,
//! CSV, the overcommit warning, SIGTERM), and how runs with more vCPUs or
//! threads than host cores are paced, on both backends. No /dev/kvm is
//! needed, except for the tests of `--linux-windows` and of the pacing on
//! the KVM backend (skipped without it unless `CI` is set).
//!
//! Relations only: nothing here assumes a cycle count of this machine, and
//! every wait is bounded by a generous deadline.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use tsc_contract::Variant;
use tsc_vmm::RoundResult;
use tsc_vmm::{run, RunOutput};
use tsc_vmm::{Backend, RunOptions};

mod common;
use common::interrupt::interrupt_after;
use common::{kvm_or_skip, validate};

fn host_run(vcpus: u32, schedule: Vec<Variant>) -> RunOutput {
    let opts = RunOptions {
        backend: Backend::Host,
        vcpus,
        schedule,
        timeout: Duration::from_secs(600),
        ..RunOptions::default()
    };
    run(&opts).unwrap_or_else(|f| {
        panic!(
            "{vcpus} threads failed after {} rounds: {}",
            f.rounds_completed, f.error
        )
    })
}

/// What holds of every round on the host backend, whatever the variant:
/// one record per thread, methods (a) and (b) equal, TSC_ADJUST and the
/// offset moved together.
fn common_invariants(r: &RoundResult, vcpus: u32) {
    assert_eq!(r.vcpus.len(), vcpus as usize, "one record per thread");
    for v in &r.vcpus {
        assert_eq!(
            v.offset_delta,
            Some(v.tsc_adjust_delta),
            "{} thread {}: the offset moves exactly with TSC_ADJUST",
            r.variant,
            v.id
        );
        assert_eq!(v.guest_adjust_delta, Some(v.tsc_adjust_delta));
        assert_eq!(v.rel_offset_attr, Some(v.rel_offset_adjust));
    }
    assert_eq!(r.skew_cycles_attr, Some(r.skew_cycles));
}

fn check_round(r: &RoundResult, variant: Variant, vcpus: u32) {
    common_invariants(r, vcpus);
    let first = r.vcpus.iter().map(|v| v.tsc_first).max().unwrap_or(0);
    match variant {
        v if v.writes_common_tsc() => {
            let value = r.vcpus[0].written_value;
            for c in &r.vcpus {
                assert!(c.wrote);
                assert_eq!(c.written_value, value, "one common value");
                assert!(
                    value >= first,
                    "{value} below a first-iteration TSC {first}"
                );
                assert!(c.exit_latency_cycles.is_some());
            }
            assert_eq!(r.writes_honoured, Some(true));
            assert!(r.cpu0_exit_latency_cycles.is_some());
        }
        Variant::XenStd => {
            for c in &r.vcpus {
                assert!(!c.wrote);
                assert_eq!((c.tsc_adjust_delta, c.offset_delta), (0, Some(0)));
                assert_eq!(c.written_value, 0);
            }
            assert_eq!(r.cpu0_exit_latency_cycles, None, "does not apply");
        }
        Variant::LinuxTscSync => {
            let sync = r.sync.as_ref().expect("Linux's results");
            assert_eq!(sync.aps.len(), vcpus as usize - 1);
            assert_eq!(r.vcpus[0].tsc_adjust_delta, 0, "the source never moves");
            for ap in &sync.aps {
                let v = &r.vcpus[ap.ap as usize];
                let total: i64 = ap.compensations.iter().sum();
                assert_eq!(total, v.tsc_adjust_delta, "AP {}", ap.ap);
                assert_eq!(v.offset_delta, Some(total), "AP {}", ap.ap);
            }
            assert_eq!(r.cpu0_exit_latency_cycles, None, "does not apply");
        }
        _ => unreachable!("every variant is one of the above"),
    }
}

#[test]
fn every_variant_runs_on_1_2_4_and_8_threads() {
    for vcpus in [1, 2, 4, 8] {
        for variant in Variant::ALL {
            let out = host_run(vcpus, vec![variant; 3]);
            assert_eq!(out.rounds.len(), 3);
            let h = &out.facts.host;
            assert_eq!(h.backend, Backend::Host);
            let threads = h.host_threads.as_ref().expect("the threads' facts");
            assert_eq!(threads.threads, vcpus);
            assert_eq!(threads.pinned.len(), vcpus as usize);
            for r in &out.rounds {
                check_round(r, variant, vcpus);
            }
        }
    }
}

/// After a rendezvous left some skew, the std rendezvous leaves the offsets
/// exactly as they were, and Linux's sync compensates only through
/// TSC_ADJUST, by what it wrote.
#[test]
fn the_std_rendezvous_keeps_a_skew_and_linux_moves_only_what_it_wrote() {
    let schedule = vec![
        Variant::Xen415,
        Variant::XenStd,
        Variant::XenStd,
        Variant::LinuxTscSync,
        Variant::XenStd,
    ];
    let out = host_run(3, schedule.clone());
    for (r, v) in out.rounds.iter().zip(&schedule) {
        check_round(r, *v, 3);
    }
    let rel = |r: &RoundResult| {
        r.vcpus
            .iter()
            .map(|v| v.rel_offset_attr)
            .collect::<Vec<_>>()
    };
    let [a, b, c, d, e] = &out.rounds[..] else {
        panic!("five rounds")
    };
    assert_eq!(rel(b), rel(a), "xen-std moved an offset");
    assert_eq!(rel(c), rel(a));
    assert_eq!(rel(e), rel(d), "xen-std moved an offset");
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
}

fn ok(args: &[&str]) -> (Output, Value) {
    let out = bin().args(args).output().expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    let doc = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    (out, doc)
}

const RUN_SCHEMA: &str = include_str!("../vmm/schema/run-v1.json");
const COMPARE_SCHEMA: &str = include_str!("../vmm/schema/compare-v1.json");

#[test]
fn run_json_validates_and_says_host_and_the_windows_used() {
    let (_, doc) = ok(&[
        "run",
        "--backend",
        "host",
        "--rounds",
        "3",
        "--linux-windows",
        "7,3",
        "--json",
    ]);
    validate(&doc, RUN_SCHEMA);
    let h = &doc["host"];
    assert_eq!(h["backend"], "host");
    assert_eq!(h["offset_source"], "host_thread");
    assert_eq!(h["host_threads"]["threads"], 2);
    let over = h["host_threads"]["overcommitted"] == true;
    assert_eq!(h["pacing"], if over { "thread_yield" } else { "none" });
    let w = &h["sync_windows"];
    assert_eq!(
        (w["first_ms"].as_u64(), w["ms"].as_u64()),
        (Some(7), Some(3))
    );
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), Variant::ALL.len());
    let linux = runs
        .iter()
        .find(|r| r["variant"] == "linux-tsc-sync")
        .expect("linux-tsc-sync ran");
    for round in linux["rounds"].as_array().expect("rounds") {
        for ap in round["sync"]["aps"].as_array().expect("APs") {
            assert_eq!(
                ap["window_cycles"], w["cycles"],
                "every AP's window is REST_MS"
            );
        }
    }
}

/// The KVM backend runs Linux's sync with the windows asked for too, and
/// says so; its JSON names its backend.
#[test]
fn the_kvm_backend_uses_and_reports_the_windows_asked_for() {
    if !kvm_or_skip() {
        return;
    }
    let (_, doc) = ok(&[
        "run",
        "--variant",
        "linux-tsc-sync",
        "--rounds",
        "2",
        "--linux-windows",
        "7,3",
        "--json",
    ]);
    validate(&doc, RUN_SCHEMA);
    let h = &doc["host"];
    assert_eq!(h["backend"], "kvm");
    assert!(h["host_threads"].is_null());
    let w = &h["sync_windows"];
    assert_eq!(
        (w["first_ms"].as_u64(), w["ms"].as_u64()),
        (Some(7), Some(3))
    );
    for round in doc["runs"][0]["rounds"].as_array().expect("rounds") {
        for ap in round["sync"]["aps"].as_array().expect("APs") {
            assert_eq!(ap["window_cycles"], w["cycles"]);
        }
    }
}

#[test]
fn the_text_report_says_no_hypervisor_and_names_the_cpu() {
    let out = bin()
        .args(["--backend", "host", "--rounds", "2"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no hypervisor was involved"), "{text}");
    assert!(text.contains("Windows: 20 ms"), "{text}");
    let model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|i| {
        i.lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
    });
    if let Some(m) = model {
        assert!(text.contains(&m), "the CPU model {m} is named: {text}");
    }
    assert!(!text.contains("Did the hypervisor honour"), "{text}");
}

#[test]
fn compare_on_host_threads_works_end_to_end() {
    let dir = std::env::temp_dir().join(format!("tsc-native-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let csv = dir.join("rounds.csv");
    let (_, doc) = ok(&[
        "compare",
        "--backend",
        "host",
        "--variants",
        "xen-4.15,xen-6ca022a1",
        "--rounds",
        "40",
        "--warmup",
        "4",
        "--seed",
        "2",
        "--json",
        "--csv",
        csv.to_str().expect("utf-8"),
    ]);
    validate(&doc, COMPARE_SCHEMA);
    assert_eq!(doc["host"]["backend"], "host");
    for v in doc["per_variant"].as_array().expect("per variant") {
        assert_eq!(v["rounds"], 40);
        assert_eq!(v["writes_honoured"], true);
    }
    assert_eq!(doc["verdicts"].as_array().map(Vec::len), Some(1));
    let text = std::fs::read_to_string(&csv).expect("the CSV was written");
    assert_eq!(
        text.lines().count(),
        1 + 40 * 2 * 2,
        "one row per round and thread"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn more_threads_than_cpus_are_warned_about_and_still_finish() {
    let out = bin()
        .args([
            "--backend",
            "host",
            "--vcpus",
            "8",
            "--rounds",
            "3",
            "--variant",
            "xen-head",
            "--json",
        ])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let t = &doc["host"]["host_threads"];
    let cpus = t["host_cpus"].as_array().map_or(0, Vec::len);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if cpus < 8 {
        assert_eq!(t["overcommitted"], true);
        assert_eq!(doc["host"]["pacing"], "thread_yield");
        assert!(t["pinned"]
            .as_array()
            .is_some_and(|p| p.iter().all(Value::is_null)));
        assert!(stderr.contains("warning: 8 threads on"), "{stderr}");
        let notes = doc["runs"][0]["notes"].to_string();
        assert!(notes.contains("8 threads on"), "{notes}");
    } else {
        assert_eq!(t["overcommitted"], false);
        assert_eq!(doc["host"]["pacing"], "none");
        assert!(!stderr.contains("warning"), "{stderr}");
    }
}

/// The host's cores, as the VMM counts them.
fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// More vCPUs than host cores on KVM: the guest's spin-waits yield (the
/// VMM rewrote its pauses), the JSON says `guest_yield` and the notes say
/// how; with no more vCPUs than cores nothing paces the run.
#[test]
fn more_vcpus_than_cores_are_paced_by_guest_yields_and_say_so() {
    if !kvm_or_skip() {
        return;
    }
    let n = (cores() + 1).to_string();
    let (_, doc) = ok(&[
        "run",
        "--vcpus",
        &n,
        "--variant",
        "xen-head",
        "--rounds",
        "3",
        "--json",
    ]);
    validate(&doc, RUN_SCHEMA);
    assert_eq!(doc["host"]["pacing"], "guest_yield");
    let notes = doc["runs"][0]["notes"].to_string();
    assert!(notes.contains("rewrote every `pause`"), "{notes}");
    assert!(!notes.contains("every 200 us"), "no spin breaker: {notes}");
    assert_eq!(doc["runs"][0]["rounds"].as_array().map(Vec::len), Some(3));
    let (_, doc) = ok(&[
        "run",
        "--vcpus",
        "1",
        "--variant",
        "xen-head",
        "--rounds",
        "2",
        "--json",
    ]);
    assert_eq!(doc["host"]["pacing"], "none");
    assert!(!doc["runs"][0]["notes"].to_string().contains("host cores"));
}

/// A guest image that lists no pause to rewrite is paced by the spin
/// breaker, as before, and says so; `compare` reports the pacing too.
#[test]
fn an_image_without_pause_sites_falls_back_to_the_spin_breaker() {
    if !kvm_or_skip() {
        return;
    }
    let name = b".tsc_pause_sites";
    let mut image = tsc_vmm::EMBEDDED.to_vec();
    let at = image
        .windows(name.len())
        .position(|w| w == name)
        .expect("the embedded guest names its pause sites");
    image[at + 1] = b'X';
    let path = std::env::temp_dir().join(format!("tsc-no-pause-sites-{}.elf", std::process::id()));
    std::fs::write(&path, &image).expect("a scratch image");
    let p = path.to_str().expect("utf-8");
    let n = (cores() + 1).to_string();
    let (_, doc) = ok(&[
        "run",
        "--vcpus",
        &n,
        "--variant",
        "xen-head",
        "--rounds",
        "2",
        "--guest",
        p,
        "--json",
    ]);
    validate(&doc, RUN_SCHEMA);
    assert_eq!(doc["host"]["pacing"], "spin_breaker");
    assert!(doc["runs"][0]["notes"].to_string().contains("every 200 us"));
    let (_, doc) = ok(&[
        "compare",
        "--vcpus",
        &n,
        "--variants",
        "xen-4.15,xen-head",
        "--rounds",
        "4",
        "--warmup",
        "1",
        "--seed",
        "1",
        "--json",
    ]);
    validate(&doc, COMPARE_SCHEMA);
    assert_eq!(doc["host"]["pacing"], "guest_yield");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn guest_options_are_refused_on_the_host_backend() {
    for args in [
        &["--backend", "host", "--inject", "panic"][..],
        &["compare", "--backend", "host", "--guest", "/nonexistent"][..],
    ] {
        let out = bin().args(args).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--backend kvm"));
    }
}

/// SIGTERM ends a run that would take days: exit 143, and the JSON report
/// of every round completed before it.
#[test]
fn sigterm_stops_a_long_host_run_with_its_report() {
    let stopped = interrupt_after(
        env!("CARGO_BIN_EXE_tsc-rendezvous"),
        &["run", "--backend", "host", "--rounds", "1000000", "--json"],
        20,
        libc::SIGTERM,
    );
    let (status, stdout, stderr) = (stopped.status, stopped.stdout, stopped.stderr);
    let before = stopped.analysed_before;
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).expect("the report is JSON");
    validate(&doc, RUN_SCHEMA);
    let run = &doc["runs"][0];
    let rounds = run["rounds"].as_array().map_or(0, Vec::len);
    assert!(
        rounds >= before,
        "{rounds} rounds reported, {before} analysed"
    );
    assert!(run["notes"].to_string().contains("incomplete"));
}
