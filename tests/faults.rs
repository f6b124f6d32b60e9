//! Every injected fault and every signal ends the run with a clear error and a
//! defined exit code, within a deadline, never a hang or a VMM panic; rounds
//! completed before are kept (in the report and in the `--output` stream).
//!
//! These run real VMs: without a usable /dev/kvm they are skipped with a
//! message, except when `CI` is set: then they fail.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::kvm_or_skip;

/// A fresh scratch path for this test (the process id keeps parallel runs of
/// the suite apart).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tsc-rendezvous-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts")
}

/// Waits for `child` at most `deadline` (killing it and failing the test if
/// it is not done by then); returns its output and how long it took.
fn finish(mut child: Child, started: Instant, deadline: Duration, what: &str) -> Output {
    loop {
        match child.try_wait().expect("waitpid") {
            Some(_) => break,
            None if started.elapsed() > deadline => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "{what}: still running after {deadline:?} (hang); stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    child.wait_with_output().expect("output")
}

/// Runs the binary to completion within `deadline`.
fn run(args: &[&str], deadline: Duration) -> Output {
    let started = Instant::now();
    finish(spawn(args), started, deadline, &format!("{args:?}"))
}

/// Checks the `--output` stream: every line a complete JSON object of the
/// round schema, rounds 0, 1, ... in order, `n` vCPUs each; returns them.
fn stream_lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the last line is cut off: {text:?}"
    );
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect();
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["schema"], "tsc-rendezvous/round/v1", "line {i}");
        assert_eq!(l["round"].as_u64(), Some(i as u64), "line {i}: in order");
        assert_eq!(l["vcpu_count"].as_u64(), Some(n as u64), "line {i}");
        let vcpus = l["vcpus"].as_array().expect("vcpus");
        assert_eq!(vcpus.len(), n, "line {i}: one entry per vCPU");
        assert!(l["skew_cycles"].is_u64(), "line {i}");
    }
    lines
}

/// What a failed run must look like: the exit code, one error line with the
/// key words, no panic, and exactly `rounds` rounds streamed.
fn assert_failure(out: &Output, code: i32, words: &[&str], stream: &Path, rounds: usize) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(!err.contains("panicked at"), "the VMM panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line: {err}");
    for w in words {
        assert!(lines[0].contains(w), "'{w}' missing from: {err}");
    }
    let got = stream_lines(stream, 2);
    assert_eq!(got.len(), rounds, "rounds streamed before the error");
    let report = String::from_utf8_lossy(&out.stdout);
    if rounds > 0 {
        assert!(
            report.contains(&format!("Variant xen-head ({rounds} rounds)")),
            "completed rounds are reported: {report}"
        );
        assert!(report.contains("incomplete"), "{report}");
    }
}

/// A fault-injection run: 2 vCPUs, 3 rounds of xen-head.
fn inject(spec: &str, stream: &Path, timeout: &str) -> Output {
    let s = stream.to_str().expect("utf-8 path");
    run(
        &[
            "run",
            "--vcpus",
            "2",
            "--variant",
            "xen-head",
            "--rounds",
            "3",
            "--timeout",
            timeout,
            "--inject",
            spec,
            "--output",
            s,
        ],
        Duration::from_secs(90),
    )
}

#[test]
fn a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("stall.jsonl");
    let started = Instant::now();
    let out = inject("stall,vcpu=1,round=2,iter=3", &stream, "4");
    assert_failure(
        &out,
        1,
        &[
            "timed out after 4.0 s in round 2",
            "vCPU(s) 0, 1 had not arrived",
            "vCPU 1 was in round 2 iteration 3",
            "rendezvous semaphore = ",
            "read from guest memory",
        ],
        &stream,
        2,
    );
    // The deadline was honoured: not much earlier, and the stop was bounded.
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(4), "gave up early: {took:?}");
    assert!(took < Duration::from_secs(60), "stopping took {took:?}");
}

#[test]
fn a_stall_in_the_first_round_reports_no_rounds_but_still_ends() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("stall0.jsonl");
    let out = inject("stall,vcpu=0,round=0,iter=0", &stream, "3");
    assert_failure(
        &out,
        1,
        &[
            "timed out",
            "in round 0",
            "vCPU 0 was in round 0 iteration 0",
        ],
        &stream,
        0,
    );
}

#[test]
fn a_delayed_write_shows_up_as_skew_not_as_write_latency() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("delay.jsonl");
    let cycles: i64 = 20_000_000;
    let out = inject(
        &format!("delay,vcpu=1,round=1,cycles={cycles}"),
        &stream,
        "60",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = stream_lines(&stream, 2);
    assert_eq!(lines.len(), 3, "every round streamed");
    let field = |round: usize, vcpu: usize, name: &str| {
        lines[round]["vcpus"][vcpu][name]
            .as_i64()
            .unwrap_or_else(|| panic!("{name} of vCPU {vcpu} in round {round}"))
    };
    // vCPU 1 spun before its last TSC read ahead of the write: the write
    // reached the hypervisor at least `cycles` after vCPU 0's (vCPU 0 wrote
    // right after releasing it), so their relative offset moved by that much.
    let rel = field(1, 1, "rel_offset_adjust") - field(0, 1, "rel_offset_adjust");
    assert!(
        rel.abs() >= cycles / 2,
        "delayed write moved the offset by {rel}"
    );
    assert!(
        lines[1]["skew_cycles"].as_i64().unwrap_or(0) >= cycles / 2,
        "skew {}",
        lines[1]["skew_cycles"]
    );
    // ... and the delay is not inside the measured write latency.
    assert!(
        field(1, 1, "write_latency_cycles") < cycles / 2,
        "write latency {} includes the delay",
        field(1, 1, "write_latency_cycles")
    );
}

#[test]
fn a_triple_fault_names_the_vcpu_and_round() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("triple.jsonl");
    let out = inject("triple-fault,vcpu=1,round=1,iter=2", &stream, "60");
    assert_failure(
        &out,
        1,
        &["vCPU 1 in round 1", "triple fault", "KVM_EXIT_SHUTDOWN"],
        &stream,
        1,
    );
}

#[test]
fn a_guest_panic_is_reported_with_its_text() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("panic.jsonl");
    let out = inject("panic,vcpu=0,round=2,iter=4", &stream, "60");
    assert_failure(
        &out,
        1,
        &["vCPU 0 in round 2", "the guest panicked", "injected fault"],
        &stream,
        2,
    );
}

#[test]
fn a_port_write_of_the_wrong_size_is_refused() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("size.jsonl");
    let out = inject("corrupt-size,vcpu=1,round=1", &stream, "60");
    assert_failure(
        &out,
        1,
        &["vCPU 1 in round 1", "port write to 0x510 (2 bytes"],
        &stream,
        1,
    );
}

#[test]
fn a_record_with_an_index_out_of_range_is_refused() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("index.jsonl");
    let out = inject("corrupt-index,vcpu=0,round=2", &stream, "60");
    assert_failure(
        &out,
        1,
        &["record of round 2 is invalid", "vCPU 1002 in vCPU 0's slot"],
        &stream,
        2,
    );
}

#[test]
fn a_record_with_impossible_values_is_refused() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("value.jsonl");
    let out = inject("corrupt-value,vcpu=1,round=0", &stream, "60");
    assert_failure(
        &out,
        1,
        &[
            "vCPU 1's record of round 0 is invalid",
            "below the vCPU's first-iteration TSC",
        ],
        &stream,
        0,
    );
}

/// Starts a long run, waits for `rounds` streamed rounds, sends `signal`.
fn interrupt(signal: i32, stream: &Path, json: bool) -> Output {
    let s = stream.to_str().expect("utf-8 path");
    let mut args = vec![
        "run",
        "--vcpus",
        "2",
        "--variant",
        "xen-head",
        "--rounds",
        "1000000",
        "--output",
        s,
    ];
    if json {
        args.push("--json");
    }
    let started = Instant::now();
    let child = spawn(&args);
    let wait_until = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(stream)
        .map(|t| t.lines().count())
        .unwrap_or(0)
        < 2
    {
        assert!(Instant::now() < wait_until, "no rounds streamed in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) on our own child, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let signalled = Instant::now();
    let out = finish(child, started, Duration::from_secs(120), "interrupted run");
    assert!(
        signalled.elapsed() < Duration::from_secs(30),
        "stopping took {:?}",
        signalled.elapsed()
    );
    out
}

#[test]
fn ctrl_c_stops_the_run_and_keeps_the_rounds() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("sigint.jsonl");
    let out = interrupt(libc::SIGINT, &stream, false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted by SIGINT"), "{err}");
    assert!(!err.contains("panicked at"), "{err}");
    let lines = stream_lines(&stream, 2);
    assert!(lines.len() >= 2);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains(&format!("Variant xen-head ({} rounds)", lines.len())),
        "the report has every streamed round: {report}"
    );
}

#[test]
fn sigterm_stops_the_run_and_the_json_report_keeps_the_rounds() {
    if !kvm_or_skip() {
        return;
    }
    let stream = scratch("sigterm.jsonl");
    let out = interrupt(libc::SIGTERM, &stream, true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(err.contains("interrupted by SIGTERM"), "{err}");
    let lines = stream_lines(&stream, 2);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../vmm/schema/run-v1.json")).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
    let rounds = doc["runs"][0]["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), lines.len(), "report and stream agree");
    for (r, l) in rounds.iter().zip(&lines) {
        assert_eq!(r["skew_cycles"], l["skew_cycles"]);
    }
}

#[test]
fn an_unwritable_output_file_is_a_usage_error() {
    let out = run(
        &[
            "run",
            "--rounds",
            "1",
            "--output",
            "/nonexistent-dir/x.jsonl",
        ],
        Duration::from_secs(30),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--output") && err.contains("writable path"),
        "{err}"
    );
}
