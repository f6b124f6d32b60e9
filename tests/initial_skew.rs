//! `--initial-skew CYCLES`: a state worth syncing, set exactly before the
//! first round and verified by the readback.
//!
//! On the host backend (no /dev/kvm needed) the skew is applied by
//! construction, so the algorithms' effect on it is checked exactly: the
//! no-write baseline leaves it as it was, the writing rendezvous and Linux's
//! sync remove it. On KVM the outcome depends on the kernel (the attribute
//! KVM_VCPU_TSC_OFFSET, and whether KVM keeps what it is given): an
//! independent probe of this kernel decides which outcome the run must have,
//! and both outcomes are checked in full.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tsc_contract::Variant;
use tsc_vmm::{initial_skew_targets as targets, SkewError};
use tsc_vmm::{run, RunOutput};
use tsc_vmm::{Backend, RunOptions};
use tsc_vmm::{Failure, RunError};

mod common;
use common::kvm_or_skip;

/// 100 million cycles: tens of milliseconds on any TSC, far more than any of the
/// algorithms leaves behind when it writes, so "removed" is unambiguous.
const SKEW: u64 = 100_000_000;

fn skewed(backend: Backend, vcpus: u32, schedule: Vec<Variant>) -> Result<RunOutput, Failure> {
    let opts = RunOptions {
        backend,
        vcpus,
        schedule,
        timeout: Duration::from_secs(300),
        initial_skew: Some(SKEW),
        ..RunOptions::default()
    };
    run(&opts)
}

/// Every vCPU's offset before the first round, relative to vCPU 0's.
fn initial_relative(out: &RunOutput) -> Vec<u64> {
    let base = out.facts.initial[0].offset.expect("exact offsets");
    out.facts
        .initial
        .iter()
        .map(|s| s.offset.expect("exact offsets").wrapping_sub(base))
        .collect()
}

#[test]
fn the_targets_spread_the_skew_from_vcpu_0_to_the_last() {
    assert_eq!(targets(4, 9), vec![0, 3, 6, 9]);
    assert_eq!(targets(2, SKEW), vec![0, SKEW]);
    assert_eq!(targets(1, SKEW), vec![0], "one vCPU: nothing to skew");
}

#[test]
fn on_host_threads_xen_std_leaves_the_skew_exactly_as_given() {
    for n in [2u32, 3, 4] {
        let out = skewed(Backend::Host, n, vec![Variant::XenStd; 4])
            .unwrap_or_else(|f| panic!("{n} threads: {}", f.error));
        assert_eq!(initial_relative(&out), targets(n, SKEW), "n={n}: as set");
        assert_eq!(out.facts.host.initial_skew_cycles, Some(SKEW));
        assert!(
            out.facts.notes.iter().any(|t| t.contains("--initial-skew")),
            "n={n}: the note says so: {:?}",
            out.facts.notes
        );
        for r in &out.rounds {
            // The spread of 0..=SKEW is SKEW: untouched by a no-write pass.
            assert_eq!(r.skew_cycles, SKEW, "n={n} round {}", r.round);
            let rel: Vec<i64> = r.vcpus.iter().map(|v| v.rel_offset_adjust).collect();
            let want: Vec<i64> = targets(n, SKEW).iter().map(|&t| t as i64).collect();
            assert_eq!(rel, want, "n={n} round {}: every offset kept", r.round);
        }
    }
}

#[test]
fn on_host_threads_the_writing_variants_remove_the_skew() {
    // Two threads: pinned one per CPU on any machine with two, so the
    // skew left is the algorithm's and not the scheduler's.
    for variant in Variant::ALL.into_iter().filter(|&v| v != Variant::XenStd) {
        let out = skewed(Backend::Host, 2, vec![variant; 3])
            .unwrap_or_else(|f| panic!("{}: {}", variant.name(), f.error));
        assert_eq!(initial_relative(&out), vec![0, SKEW], "{}", variant.name());
        let first = &out.rounds[0];
        let warp_seen = first.sync.as_ref().map(|s| s.max_warp > 0);
        if warp_seen == Some(false) {
            // Linux's check saw no warp, so it rightly wrote nothing: the two
            // threads never ran side by side during its loop (a machine
            // that runs them in turns, as single-threaded TCG does). A
            // skew this large cannot hide from two threads that overlap.
            assert_eq!(
                first.vcpus[1].tsc_adjust_delta,
                0,
                "{}: no warp seen, nothing written",
                variant.name()
            );
            assert_eq!(first.skew_cycles, SKEW, "{}: kept", variant.name());
            eprintln!(
                "{}: no warp seen in round 0: the threads never overlapped",
                variant.name()
            );
            continue;
        }
        // The writes replace the skew by their own: the time between the
        // threads' writes, which on an emulated or loaded machine can be a
        // scheduler's time slice (milliseconds, millions of cycles). What
        // must not survive is the initial skew: less than half of it is left.
        assert!(
            first.skew_cycles < SKEW / 2,
            "{}: the first round left {} of the {SKEW} cycles it was given",
            variant.name(),
            first.skew_cycles
        );
        if variant == Variant::LinuxTscSync {
            // Linux compensates through TSC_ADJUST only: what it wrote is
            // what moved vCPU 1 back towards vCPU 0.
            let v1 = &first.vcpus[1];
            assert!(
                v1.tsc_adjust_delta < 0,
                "moved back: {}",
                v1.tsc_adjust_delta
            );
            assert_eq!(v1.offset_delta, Some(v1.tsc_adjust_delta));
        }
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
}

#[test]
fn the_cli_reports_the_skew_in_json_and_text() {
    let out = bin()
        .args(["run", "--backend", "host", "--vcpus", "2", "--rounds", "2"])
        .args([
            "--variant",
            "xen-std",
            "--initial-skew",
            "1_000_000",
            "--json",
        ])
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    common::validate(&doc, include_str!("../vmm/schema/run-v1.json"));
    assert_eq!(doc["host"]["initial_skew_cycles"], 1_000_000);
    for r in doc["runs"][0]["rounds"].as_array().expect("rounds") {
        assert_eq!(r["skew_cycles"], 1_000_000, "xen-std keeps it");
    }

    let out = bin()
        .args([
            "compare",
            "--backend",
            "host",
            "--vcpus",
            "2",
            "--rounds",
            "4",
        ])
        .args([
            "--variants",
            "xen-std,xen-head",
            "--initial-skew",
            "1000000",
        ])
        .output()
        .expect("the binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("Initial skew: --initial-skew 1000000") && text.contains("0, 1000000"),
        "{text}"
    );
}

#[test]
fn a_bad_initial_skew_is_refused_naming_the_flag() {
    for (value, says) in [
        ("abc", "not a whole number of TSC cycles"),
        ("-5", "not a whole number"),
        ("1000000000000000000", "more than the"),
    ] {
        let out = bin()
            .args([
                "run",
                "--backend",
                "host",
                &format!("--initial-skew={value}"),
            ])
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(
            stderr.contains("--initial-skew") && stderr.contains(says),
            "{value}: {stderr}"
        );
    }
}

/// What this kernel does with an offset given through KVM_VCPU_TSC_OFFSET,
/// found without the code under test (raw ioctls of the tests' own,
/// `common::raw_kvm`: no `Vm`, no `get_offset`/`set_offset` of the VMM):
/// `None` when it lacks the attribute, else whether it keeps the value (read
/// back before any vCPU runs).
fn kernel_keeps_offsets() -> Option<bool> {
    use common::raw_kvm::{self, get_tsc_offset, has_tsc_offset, set_tsc_offset, RawVm};
    raw_kvm::self_test();
    let vm = RawVm::new(2).expect("a VM of the probe's own");
    let fd = &vm.vcpus[1];
    if !has_tsc_offset(fd) {
        return None;
    }
    let before = get_tsc_offset(fd).expect("the attribute reads");
    let asked = before.wrapping_add(SKEW);
    set_tsc_offset(fd, asked).expect("the attribute takes a value");
    Some(get_tsc_offset(fd).expect("the attribute reads") == asked)
}

#[test]
fn on_kvm_the_skew_is_applied_exactly_or_the_run_stops_saying_why() {
    if !kvm_or_skip() {
        return;
    }
    let probe = kernel_keeps_offsets();
    let result = skewed(Backend::Kvm, 2, vec![Variant::XenStd; 2]);
    match (probe, result) {
        (Some(true), Ok(out)) => {
            assert_eq!(initial_relative(&out), vec![0, SKEW]);
            assert_eq!(out.facts.host.initial_skew_cycles, Some(SKEW));
            let honoured = out.rounds.iter().all(|r| r.skew_cycles == SKEW);
            assert!(
                honoured,
                "xen-std writes no TSC, so the skew stays: {:?}",
                out.rounds.iter().map(|r| r.skew_cycles).collect::<Vec<_>>()
            );
        }
        (None, Err(f)) => {
            assert!(
                matches!(f.error, RunError::InitialSkew(SkewError::NoOffsetAttr)),
                "{}",
                f.error
            );
            assert_eq!(f.rounds_completed, 0, "stopped before the first round");
            assert!(f.error.to_string().contains("KVM_VCPU_TSC_OFFSET"));
        }
        (Some(true), Err(f)) => panic!("this kernel keeps offsets, yet: {}", f.error),
        (Some(false), Err(f)) => {
            // The attribute exists but the value does not stick: the
            // readback sees it and the run stops before its first round.
            assert!(
                matches!(
                    f.error,
                    RunError::InitialSkew(SkewError::NotApplied {
                        vcpu: 1,
                        asked: SKEW,
                        ..
                    })
                ),
                "{}",
                f.error
            );
            assert_eq!(f.rounds_completed, 0);
        }
        (probe, Ok(_)) => panic!("the probe says {probe:?} yet the skew verified"),
    }
    // The command says the same and exits 2.
    let out = bin()
        .args([
            "run",
            "--vcpus",
            "2",
            "--rounds",
            "2",
            "--variant",
            "xen-std",
        ])
        .args(["--initial-skew", "100000000", "--json"])
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = if probe == Some(true) { 0 } else { 2 };
    assert_eq!(out.status.code(), Some(want), "{stderr}");
    if want == 2 {
        assert!(stderr.contains("--initial-skew"), "{stderr}");
    }
}
