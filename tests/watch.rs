//! `kvmclock-watch` on this machine's /dev/kvm, briefly: the JSON report
//! matches its schema and the data, the findings say what the hypervisor
//! did with the write (PVM ignores it: the report must say so instead of a
//! jump), the text report has the same findings, and SIGTERM ends the watch
//! with what it measured. Needs a usable /dev/kvm: skipped without one,
//! except when `CI` is set: then it fails.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{flavor, kvm_usable_or_skip, validate, Flavor};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tsc-rendezvous")
}

fn kvm() -> bool {
    kvm_usable_or_skip(
        std::path::Path::new("/dev/kvm"),
        std::env::var_os("CI").is_some(),
    )
}

const SCHEMA: &str = include_str!("../vmm/schema/kvmclock-watch-v1.json");

fn watch(args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .arg("kvmclock-watch")
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn a_short_watch_reports_every_sample_and_what_the_write_did() {
    if !kvm() {
        return;
    }
    let out = watch(&["--seconds", "2", "--interval-ms", "500", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    validate(&doc, SCHEMA);
    assert_eq!(doc["incomplete"], Value::Null);
    let m = &doc["measured"];
    // The write waited 2 s (the default) after the VM's creation, sampling.
    assert_eq!(doc["options"]["settle_ms"], 2000);
    assert!(
        !m["settling"].as_array().expect("settling").is_empty(),
        "{m}"
    );
    // 0, 0.5, ..., 2 s after the write: five samplings of both vCPUs.
    let ticks = m["ticks"].as_array().expect("ticks");
    assert_eq!(ticks.len(), 5, "{m}");
    assert!(ticks
        .iter()
        .all(|t| t["vcpus"].as_array().map(Vec::len) == Some(2)));
    let khz = m["khz"].as_u64().expect("khz");
    assert_eq!(m["write"]["delta_cycles"].as_u64(), Some(khz * 4_000));
    let vcpus = doc["vcpus"].as_array().expect("vcpus");
    assert_eq!(vcpus.len(), 2);
    let (writer, control) = (&vcpus[0], &vcpus[1]);
    assert_eq!(
        (writer["wrote"].as_bool(), control["wrote"].as_bool()),
        (Some(true), Some(false))
    );
    // The samples are in order and about 2 s were watched.
    let since: Vec<i64> = writer["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| p["since_write"]["lo_ns"].as_i64().expect("lo"))
        .collect();
    assert!(since.windows(2).all(|w| w[0] < w[1]), "{since:?}");
    let watched = &writer["watched_for"];
    assert!(
        watched["hi_ns"].as_i64().expect("hi") >= 2_000_000_000,
        "{watched}"
    );
    // The control did not write: its kvmclock is on real time throughout.
    assert_eq!(control["outcome"], "ran-on", "{control}");
    let findings: Vec<&str> = doc["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let text = findings.join("\n");
    match flavor() {
        Flavor::Pvm => {
            // PVM ignores the write: the exact offset stays put, TSC_ADJUST
            // records the move it would have made; no jump is reported.
            assert_eq!(writer["outcome"], "not-moved", "{writer}");
            assert_eq!(writer["tsc_moved_cycles"], 0);
            assert!(text.contains("the write did not move the TSC"), "{text}");
            assert!(!text.contains("jumped by"), "{text}");
        }
        _ => {
            // Real KVM: the TSC moved by the 4 s asked; an unpatched
            // kernel leaves the page stale for far longer than 2 s, a fixed
            // one updates it at the write.
            let moved = writer["tsc_moved_ns"].as_i64().expect("exact offsets");
            assert!((moved - 4_000_000_000).abs() < 10_000_000, "{writer}");
            let outcome = writer["outcome"].as_str().unwrap_or("");
            assert!(
                ["stale-throughout", "ran-on"].contains(&outcome),
                "{writer}"
            );
        }
    }
    // The text report says the same.
    let out = watch(&["--seconds", "1"]);
    assert_eq!(out.status.code(), Some(0));
    let plain = String::from_utf8_lossy(&out.stdout);
    assert!(
        plain.starts_with("kvmclock-watch: one guest IA32_TSC write"),
        "{plain}"
    );
    let vcpu0 = plain
        .lines()
        .find(|l| l.starts_with("vCPU 0 (wrote)"))
        .unwrap_or("");
    let first = findings
        .iter()
        .find(|l| l.starts_with("vCPU 0 (wrote)"))
        .unwrap_or(&"");
    assert_eq!(
        vcpu0.split(':').nth(1).map(|s| s.split(';').next()),
        first.split(':').nth(1).map(|s| s.split(';').next()),
        "the same finding in both formats:\n{plain}\n{text}"
    );
}

#[test]
fn sigterm_ends_the_watch_with_what_it_measured() {
    if !kvm() {
        return;
    }
    let mut child = Command::new(bin())
        .args([
            "kvmclock-watch",
            "--seconds",
            "600",
            "--interval-ms",
            "100",
            "--json",
        ])
        .env("RUST_LOG", "tsc_vmm::cmd::watch=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut stdout = child.stdout.take().expect("stdout");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut rest = String::new();
    for line in lines.by_ref() {
        let line = line.expect("stderr is text");
        if line.contains("kvmclock-watch: sample 3 taken") {
            break;
        }
        rest.push_str(&line);
        assert!(Instant::now() < deadline, "no third sample: {rest}");
    }
    // SAFETY: kill(2) on our own child, not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    for line in lines {
        rest.push_str(&line.unwrap_or_default());
        rest.push('\n');
    }
    let status = child.wait().expect("waitpid");
    assert_eq!(status.code(), Some(143), "{rest}");
    assert!(rest.contains("interrupted by SIGTERM"), "{rest}");
    let doc: Value = serde_json::from_str(&out.join().unwrap_or_default()).expect("a JSON report");
    validate(&doc, SCHEMA);
    assert!(
        doc["incomplete"]
            .as_str()
            .is_some_and(|i| i.contains("SIGTERM")),
        "{}",
        doc["incomplete"]
    );
    let ticks = doc["measured"]["ticks"].as_array().map_or(0, Vec::len);
    assert!((3..100).contains(&ticks), "{ticks} samplings kept");
    assert_eq!(
        doc["vcpus"][0]["points"].as_array().map(Vec::len),
        Some(ticks),
        "every sampling measured is analysed"
    );
}
