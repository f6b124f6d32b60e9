//! Real VMs on /dev/kvm: N = 1, 2, 4, every variant, several rounds.
//!
//! These need a usable /dev/kvm. Without one they are skipped with a message,
//! except when `CI` is set: then a missing /dev/kvm is a failure.
//!
//! The assertions hold on every hypervisor; the ones that depend on whether the
//! writes take effect are chosen from the host's flavour and kernel version, so
//! the same tests check PVM here and real KVM (VMX/SVM, e.g. inside QEMU).

use std::process::Command;
use std::time::Duration;

use tsc_sync::Variant;
use tsc_vmm::KvmFlavor;
use tsc_vmm::RoundResult;
use tsc_vmm::RunOptions;
use tsc_vmm::{run, RunOutput};

mod common;
use common::kvm_or_skip;

fn run_ok(vcpus: u32, variant: Variant, rounds: usize) -> RunOutput {
    let opts = RunOptions {
        vcpus,
        schedule: vec![variant; rounds],
        timeout: Duration::from_secs(120),
        ..RunOptions::default()
    };
    match run(&opts) {
        Ok(out) => out,
        Err(f) => panic!(
            "{} on {vcpus} vCPUs failed after {} rounds: {}",
            variant.name(),
            f.rounds_completed,
            f.error
        ),
    }
}

/// What this host must do with guest TSC writes: PVM ignores them; real KVM
/// honours them (and, from Linux 5.10, without snapping them together). A
/// host this test does not know is a failure, never a silent pass.
fn expect_honoured(out: &RunOutput) -> bool {
    let h = &out.facts.host;
    match h.kvm_flavor {
        KvmFlavor::Pvm => false,
        KvmFlavor::Vmx | KvmFlavor::Svm if h.kernel_version.is_some_and(|v| v >= (5, 10)) => true,
        KvmFlavor::Vmx | KvmFlavor::Svm => panic!(
            "kernel {} is older than 5.10, which this tool does not support: guest TSC writes \
             go through KVM's synchronisation heuristic there",
            h.kernel_release
        ),
        KvmFlavor::Unknown => panic!(
            "unknown KVM flavour (none of kvm_intel, kvm_amd, kvm_pvm loaded): this test does \
             not know what the host must do with TSC writes"
        ),
    }
}

/// Checks one round. `adjust_sum` holds each vCPU's TSC_ADJUST summed over the
/// rounds so far (KVM starts it at 0), updated here.
fn check_round(r: &RoundResult, n: u32, honoured: bool, adjust_sum: &mut [i64], ctx: &str) {
    let ctx = format!("{ctx} round {}", r.round);
    assert_eq!(r.vcpus.len(), n as usize, "{ctx}: one result per vCPU");
    assert!(
        r.disagreements.is_empty(),
        "{ctx}: methods disagree: {:?}",
        r.disagreements
    );
    let v = r.vcpus[0].written_value;
    for c in &r.vcpus {
        let cctx = format!("{ctx} vCPU {}", c.id);
        assert_eq!(
            c.written_value, v,
            "{cctx}: every vCPU writes the same value"
        );
        assert!(
            v >= c.tsc_first,
            "{cctx}: value below a first-iteration TSC"
        );
        if let Some(g) = c.guest_adjust_delta {
            assert_eq!(
                g, c.tsc_adjust_delta,
                "{cctx}: guest and KVM see the same TSC_ADJUST delta"
            );
        }
        // TSC_ADJUST delta == value written - TSC at the write, where the TSC at
        // the write lies between the guest's read just before it and the end
        // of the loop (on the pre-write timeline): within the write's own cost.
        let at_write = (c.written_value as i128) - (c.tsc_adjust_delta as i128);
        let before = c.tsc_before_write as i128;
        let jump = if honoured {
            c.tsc_adjust_delta as i128
        } else {
            0
        };
        let after_pre = c.tsc_after_loop as i128 - jump;
        assert!(
            at_write >= before,
            "{cctx}: write handled before it was issued"
        );
        assert!(
            at_write <= after_pre,
            "{cctx}: write handled after the loop ended"
        );
        // The write's own cost lies between the guest's read before it and
        // the end of the loop (on the pre-write timeline).
        let latency = c.write_latency_cycles.expect("a write latency") as i128;
        assert!(latency >= 0, "{cctx}: negative write latency");
        assert!(
            latency <= after_pre - before,
            "{cctx}: write latency beyond the loop's end"
        );
        // The seed's metric, from the raw record: from the value written
        // when the write was decided to have taken effect, else from where
        // the TSC was at it (undecided included; whether the decision is
        // right is asserted below).
        let exit = if c.write_honoured == Some(true) {
            c.tsc_after_loop as i128 - c.written_value as i128
        } else {
            c.tsc_after_loop as i128 - at_write
        };
        let got = c.exit_latency_cycles.expect("an exit time") as i128;
        assert_eq!(got, exit, "{cctx}: exit time");
        assert!(got >= 0, "{cctx}: negative exit time");
        // With exact offsets every vCPU-round is decided, except a write of
        // the value the TSC held at that moment (TSC_ADJUST delta 0), which
        // moves nothing either way; without them it may be undecided, never
        // decided the wrong way.
        if let Some(od) = c.offset_delta {
            let expect = if honoured { c.tsc_adjust_delta } else { 0 };
            assert_eq!(od, expect, "{cctx}: offset delta");
            let decided = if c.tsc_adjust_delta == 0 {
                None
            } else {
                Some(honoured)
            };
            assert_eq!(c.write_honoured, decided, "{cctx}: honoured?");
            assert_eq!(
                c.moved_nothing(),
                decided.is_none(),
                "{cctx}: moved nothing?"
            );
        } else {
            assert_ne!(c.write_honoured, Some(!honoured), "{cctx}: honoured?");
        }
    }
    let spread = |xs: &[i64]| {
        (xs.iter().max().copied().unwrap_or(0) as i128
            - xs.iter().min().copied().unwrap_or(0) as i128) as u64
    };
    for (sum, c) in adjust_sum.iter_mut().zip(&r.vcpus) {
        *sum = sum.wrapping_add(c.tsc_adjust_delta);
    }
    match honoured {
        false => {
            // The offsets never move: the would-be skew is the spread of this
            // round's deltas, and the actual skew is 0.
            let deltas: Vec<i64> = r.vcpus.iter().map(|c| c.tsc_adjust_delta).collect();
            assert_eq!(
                r.skew_cycles,
                spread(&deltas),
                "{ctx}: skew is the spread of the deltas"
            );
            if let Some(actual) = r.skew_cycles_attr {
                assert_eq!(actual, 0, "{ctx}: ignored writes leave no actual skew");
            }
        }
        true => {
            // Every write moved the offset by its delta, so the offsets now
            // differ by the accumulated TSC_ADJUST values.
            assert_eq!(
                r.skew_cycles,
                spread(adjust_sum),
                "{ctx}: skew is the spread of TSC_ADJUST"
            );
            if let Some(actual) = r.skew_cycles_attr {
                assert_eq!(
                    actual, r.skew_cycles,
                    "{ctx}: the offsets show the same skew"
                );
            }
        }
    }
    assert_ne!(r.writes_honoured, Some(!honoured), "{ctx}");
    if r.vcpus.iter().all(|c| c.offset_delta.is_some()) {
        assert_eq!(r.writes_honoured, Some(honoured), "{ctx}");
    }
    if n == 1 {
        assert_eq!(r.skew_cycles, 0, "{ctx}: one vCPU has no skew");
    }
}

/// Checks one round of a variant that writes no common TSC value: the std
/// rendezvous writes nothing; Linux's sync moves TSC_ADJUST on the APs by
/// exactly the compensations the guest reports, and the offsets with it on an
/// honouring host.
fn check_no_write_round(r: &RoundResult, n: u32, variant: Variant, honoured: bool, ctx: &str) {
    let ctx = format!("{ctx} round {}", r.round);
    assert_eq!(r.vcpus.len(), n as usize, "{ctx}: one result per vCPU");
    assert!(
        r.disagreements.is_empty(),
        "{ctx}: methods disagree: {:?}",
        r.disagreements
    );
    assert_eq!(
        r.cpu0_exit_latency_cycles, None,
        "{ctx}: no exit time applies"
    );
    let comps = |id: u32| -> i64 {
        r.sync
            .as_ref()
            .and_then(|s| s.aps.iter().find(|a| a.ap == id))
            .map_or(0, |a| a.compensations.iter().sum())
    };
    match variant {
        Variant::LinuxTscSync => {
            let sync = r.sync.as_ref().expect("Linux's sync reports every AP");
            assert_eq!(sync.aps.len(), n as usize - 1, "{ctx}");
            assert_eq!(sync.synchronised + sync.unstable, n - 1, "{ctx}");
        }
        _ => assert!(r.sync.is_none(), "{ctx}"),
    }
    for c in &r.vcpus {
        let cctx = format!("{ctx} vCPU {}", c.id);
        assert_eq!((c.written_value, c.tsc_before_write), (0, 0), "{cctx}");
        assert_eq!(c.exit_latency_cycles, None, "{cctx}");
        assert_eq!(c.guest_saw_jump, None, "{cctx}");
        // Only the APs' compensations move TSC_ADJUST, by what they wrote.
        assert_eq!(c.tsc_adjust_delta, comps(c.id), "{cctx}: TSC_ADJUST");
        if let Some(od) = c.offset_delta {
            let moved = if honoured { c.tsc_adjust_delta } else { 0 };
            assert_eq!(od, moved, "{cctx}: offset delta");
        }
    }
}

#[test]
fn every_variant_on_1_2_and_4_vcpus() {
    if !kvm_or_skip() {
        return;
    }
    for n in [1u32, 2, 4] {
        for variant in Variant::ALL {
            let rounds = 8;
            let out = run_ok(n, variant, rounds);
            let ctx = format!("{} n={n}", variant.name());
            assert_eq!(out.rounds.len(), rounds, "{ctx}: all rounds complete");
            assert_eq!(out.facts.initial.len(), n as usize);
            // Only an overcommitted run is paced, and it says so.
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            if n as usize > cores {
                assert!(
                    !out.facts.notes.is_empty()
                        && out
                            .facts
                            .notes
                            .iter()
                            .all(|x| x.starts_with("more vCPUs than host cores")),
                    "{ctx}: {:?}",
                    out.facts.notes
                );
            } else {
                assert!(out.facts.notes.is_empty(), "{ctx}: {:?}", out.facts.notes);
            }
            let honoured = expect_honoured(&out);
            let mut adjust_sum = vec![0i64; n as usize];
            for (i, r) in out.rounds.iter().enumerate() {
                assert_eq!(r.round, i as u32);
                assert_eq!(r.variant, variant.name());
                if variant.writes_common_tsc() {
                    check_round(r, n, honoured, &mut adjust_sum, &ctx);
                } else {
                    check_no_write_round(r, n, variant, honoured, &ctx);
                }
            }
        }
    }
}

/// Four vCPUs per host core: the vCPU threads park for their commands at
/// once (their cores are needed by the vCPUs still running) and the guest's
/// spin-waits yield; 200 rounds complete, every vCPU in every round, paced
/// as the report says, well within the run's time limit.
#[test]
fn an_overcommitted_run_completes() {
    if !kvm_or_skip() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let n = 4 * cores as u32;
    let start = std::time::Instant::now();
    let out = run_ok(n, Variant::XenHead, 200);
    assert_eq!(out.rounds.len(), 200, "n={n}: all rounds complete");
    for r in &out.rounds {
        assert_eq!(r.vcpus.len(), n as usize, "n={n}: round {}", r.round);
    }
    let pacing = out.facts.host.pacing.map(|p| p.name());
    assert_eq!(pacing, Some("guest_yield"), "n={n}");
    assert!(
        start.elapsed() < Duration::from_secs(100),
        "{:?}",
        start.elapsed()
    );
}

/// Each thread of this process named `vcpuN`, by N: the CPUs it may run on
/// (from /proc/self/task/*/status) and its scheduler slice, ns.
fn vcpu_affinities() -> std::collections::BTreeMap<u32, (String, u64)> {
    let mut out = std::collections::BTreeMap::new();
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let Some(n) = comm
            .trim()
            .strip_prefix("vcpu")
            .and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let tid: i32 = t.file_name().to_string_lossy().parse().expect("a task id");
        let slice = tsc_vmm::sched_slice_of(tid).expect("sched_getattr of a vCPU thread");
        if let Some(list) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            out.insert(n, (list.trim().to_string(), slice));
        }
    }
    out
}

/// With no more vCPUs than host cores each vCPU thread is pinned to a core
/// of its own (two vCPUs on one core would spin in the guest in turns, a
/// scheduler tick each) and asks for a short scheduler slice (so that, when
/// woken, it takes its core back from a busy task at once); with more, none
/// is pinned and none asks (the slice the thread that started them has).
#[test]
fn vcpu_threads_have_a_core_each_unless_overcommitted() {
    if !kvm_or_skip() {
        return;
    }
    // Alone in a process of its own: other tests' vCPU threads would be
    // counted with this run's.
    const CHILD: &str = "KVM_RUN_AFFINITY_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let exe = std::env::current_exe().expect("the test binary");
        let name = "vcpu_threads_have_a_core_each_unless_overcommitted";
        let out = Command::new(exe)
            .args([name, "--exact", "--test-threads", "1"])
            .env(CHILD, "1")
            .output()
            .expect("the test binary runs");
        let all = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{all}");
        assert!(all.contains("1 passed"), "the child ran the test: {all}");
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    for n in [cores as u32, cores as u32 + 1] {
        let opts = RunOptions {
            vcpus: n,
            schedule: vec![Variant::XenHead; 3],
            timeout: Duration::from_secs(60),
            ..RunOptions::default()
        };
        let mut seen = None;
        tsc_vmm::run_streaming(&opts, &mut |_| {
            seen.get_or_insert_with(vcpu_affinities);
            Ok(())
        })
        .expect("the run completes");
        let seen = seen.expect("a round completed");
        assert_eq!(seen.len(), n as usize, "n={n}: {seen:?}");
        let single: std::collections::BTreeSet<&String> = seen
            .values()
            .map(|(l, _)| l)
            .filter(|l| l.parse::<u32>().is_ok())
            .collect();
        // 0 on kernels without custom slices (before 6.12): nothing to see.
        let base = tsc_vmm::sched_slice_of(0).expect("sched_getattr of this thread");
        let short = seen
            .values()
            .filter(|(_, s)| *s == tsc_vmm::SHORT_SLICE_NS)
            .count();
        if base != 0 && base != tsc_vmm::SHORT_SLICE_NS {
            let want = if n as usize <= cores { n as usize } else { 0 };
            assert_eq!(short, want, "n={n}, base slice {base}: {seen:?}");
        }
        if n as usize <= cores {
            assert_eq!(single.len(), n as usize, "n={n}: {seen:?}");
        } else {
            assert!(single.is_empty() || cores == 1, "n={n}: {seen:?}");
        }
    }
}

#[test]
fn host_facts_are_reported() {
    if !kvm_or_skip() {
        return;
    }
    let out = run_ok(2, Variant::XenHead, 2);
    assert!(out.facts.host.tsc_khz.is_some_and(|k| k > 0));
    assert!(!out.facts.host.kernel_release.is_empty());
    let pvm = std::path::Path::new("/sys/module/kvm_pvm").exists();
    assert_eq!(out.facts.host.kvm_flavor == KvmFlavor::Pvm, pvm);
    // Every vCPU runs its TSC at the same rate.
    assert!(out
        .facts
        .initial
        .iter()
        .all(|s| s.tsc_khz == out.facts.initial[0].tsc_khz));
}

#[test]
fn json_report_matches_the_schema_and_the_data() {
    if !kvm_or_skip() {
        return;
    }
    let output = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(["run", "--vcpus", "2", "--rounds", "5", "--json"])
        .output()
        .expect("the binary runs");
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("valid JSON");
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../vmm/schema/run-v1.json")).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");

    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), Variant::ALL.len(), "every variant by default");
    for run in runs {
        let rounds = run["rounds"].as_array().expect("rounds");
        assert_eq!(rounds.len(), 5);
        let skews: Vec<f64> = rounds
            .iter()
            .map(|r| r["skew_cycles"].as_f64().unwrap_or(-1.0))
            .collect();
        let max = skews.iter().copied().fold(f64::MIN, f64::max);
        assert_eq!(run["summary"]["skew_cycles"]["max"].as_f64(), Some(max));
        // The writing variants are decided, the way the host does it; the
        // others only when they wrote (never the other way round).
        let honours = match doc["host"]["kvm_flavor"].as_str() {
            Some("pvm") => false,
            Some("svm" | "vmx") => true,
            other => panic!("unknown KVM flavour {other:?}: teach this test what to expect"),
        };
        let name = run["variant"].as_str().unwrap_or("");
        assert_ne!(
            run["writes_honoured"],
            serde_json::Value::Bool(!honours),
            "{name}"
        );
        if Variant::from_name(name).is_some_and(Variant::writes_common_tsc) {
            assert_eq!(
                run["writes_honoured"],
                serde_json::Value::Bool(honours),
                "{name}"
            );
        }
    }
}

#[test]
fn readable_report_states_the_verdict() {
    if !kvm_or_skip() {
        return;
    }
    let output = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(["--rounds", "3", "--variant", "xen-4.15"])
        .output()
        .expect("the binary runs");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("Did the hypervisor honour the guest's TSC writes?"),
        "{text}"
    );
    assert!(text.contains("Variant xen-4.15 (3 rounds)"), "{text}");
    assert!(text.contains("skew (ns)"), "{text}");
    match common::flavor() {
        common::Flavor::Pvm => {
            assert!(text.contains("No. This host's hypervisor (PVM)"), "{text}")
        }
        common::Flavor::Vmx | common::Flavor::Svm => {
            assert!(text.contains("Yes. The writes took effect"), "{text}")
        }
        common::Flavor::Unknown => {
            panic!("unknown KVM flavour: this test does not know what the report must say")
        }
    }
}

/// The JSON report of `run` with the offsets forced to `source`.
fn run_with_offset_source(source: &str) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args([
            "run",
            "--vcpus",
            "2",
            "--rounds",
            "6",
            "--variant",
            "xen-head",
            "--json",
        ])
        .env("TSC_RENDEZVOUS_TEST_OFFSET_SOURCE", source)
        .output()
        .expect("the binary runs");
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("valid JSON")
}

/// Whether KVM's debugfs can be read here (mounted, and its kvm directory
/// readable: root, or a mount opened to others). In CI it must be: `.ci/run`
/// mounts it, the real-KVM guests mount it, and the GitHub workflow opens it.
fn debugfs_or_skip() -> bool {
    let root = std::fs::read_to_string("/proc/self/mounts")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.split_whitespace().nth(2) == Some("debugfs"))
                .and_then(|l| l.split_whitespace().nth(1).map(std::path::PathBuf::from))
        });
    let ok = root.is_some_and(|r| std::fs::read_dir(r.join("kvm")).is_ok());
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!(
                "CI is set but KVM's debugfs cannot be read: mount -t debugfs debugfs \
                 /sys/kernel/debug (as root), or chmod a+rx the mount point"
            );
        }
        eprintln!("skipping: KVM's debugfs cannot be read (set CI to make this a failure)");
    }
    ok
}

/// The exact offsets from KVM's debugfs (what kernels before 5.16 offer)
/// behave as the attribute's: an honoured write moves the offset by exactly
/// its TSC_ADJUST delta, an ignored one not at all.
#[test]
fn offsets_from_debugfs_are_exact() {
    if !kvm_or_skip() || !debugfs_or_skip() {
        return;
    }
    let doc = run_with_offset_source("debugfs");
    assert_eq!(doc["host"]["offset_source"], "debugfs");
    let honoured = doc["runs"][0]["writes_honoured"].as_bool();
    let flavor = doc["host"]["kvm_flavor"].as_str().unwrap_or("");
    let expected = match flavor {
        "pvm" => Some(false),
        "svm" | "vmx" => Some(true),
        other => panic!("unknown KVM flavour '{other}': teach this test what to expect"),
    };
    assert_eq!(honoured, expected, "{flavor}");
    for r in doc["runs"][0]["rounds"].as_array().expect("rounds") {
        assert_eq!(r["skew_basis"], "offsets", "{r}");
        for v in r["vcpus"].as_array().expect("vcpus") {
            let od = v["offset_delta"].as_i64().expect("an exact offset delta");
            let ad = v["tsc_adjust_delta"].as_i64().expect("a TSC_ADJUST delta");
            assert_eq!(od, if expected == Some(true) { ad } else { 0 }, "{v}");
            assert_eq!(v["decided_by"], "offsets", "{v}");
        }
    }
}

/// Without any exact offsets the bracketed reads and the guest decide, and
/// the report says there were no exact offsets.
#[test]
fn without_exact_offsets_the_bracket_and_the_guest_decide() {
    if !kvm_or_skip() {
        return;
    }
    let doc = run_with_offset_source("none");
    assert_eq!(doc["host"]["offset_source"], "none");
    for r in doc["runs"][0]["rounds"].as_array().expect("rounds") {
        for v in r["vcpus"].as_array().expect("vcpus") {
            assert!(v["offset_delta"].is_null(), "{v}");
            let by = v["decided_by"].as_str();
            assert!(
                by.is_none() || by == Some("bracketed_reads") || by == Some("guest"),
                "{v}"
            );
        }
    }
}

/// KVM names a VM's debugfs directory after the thread that created it, not
/// the process: a VM created on any thread (as every test here does, and as
/// a library user may) still finds its exact offsets there, and they agree
/// with the attribute's where both exist.
#[test]
fn a_vm_created_off_the_main_thread_finds_its_debugfs_offsets() {
    if !kvm_or_skip() || !debugfs_or_skip() {
        return;
    }
    use std::os::fd::AsRawFd;
    use tsc_vmm as tsc;
    use tsc_vmm::debugfs;
    use tsc_vmm::{open_kvm, Vm, VmSpec};
    let found = std::thread::spawn(|| {
        let kvm = open_kvm().expect("KVM");
        let vm = Vm::new(kvm, &VmSpec::rounds(2, 1, Variant::XenHead)).expect("a VM");
        assert_ne!(
            vm.creator_tid,
            std::process::id(),
            "created off the main thread"
        );
        let root = debugfs::mounted().expect("debugfs is mounted");
        let dir = debugfs::vm_dir(&root, vm.creator_tid, vm.fd.as_raw_fd());
        let mut offsets = Vec::new();
        for (i, fd) in vm.vcpus.iter().enumerate() {
            let file = debugfs::OffsetFile::open(&dir, i as u32)
                .unwrap_or_else(|e| panic!("{}: vCPU {i}: {e}", dir.display()));
            let from_debugfs = file.read().expect("readable");
            if tsc::has_offset_attr(fd) {
                let attr = tsc::get_offset(fd).expect("the attribute");
                assert_eq!(
                    from_debugfs, attr,
                    "vCPU {i}: debugfs and the attribute agree"
                );
            }
            offsets.push(from_debugfs);
        }
        offsets
    })
    .join()
    .expect("the thread ran");
    assert_eq!(found.len(), 2);
}

/// `run --guest-view`: every round of every variant carries method (d) for
/// every vCPU (vCPU 0 at 0 ± 0, the others with a bound of at least one
/// cycle: a round trip is never free), schema-valid; where the offsets are
/// exact, each vCPU's exact relative offset lies within what the guest saw
/// (else the round would list a disagreement, and a correct host has none),
/// and the guest-seen skew's error covers every vCPU's bound. Without the
/// flag none of these fields is written.
#[test]
fn run_guest_view_adds_a_fourth_method_that_agrees_with_the_exact_offsets() {
    if !kvm_or_skip() {
        return;
    }
    for vcpus in ["2", "3"] {
        let output = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
            .args(["run", "--vcpus", vcpus, "--rounds", "4", "--json"])
            .args(["--variant", "xen-head", "--guest-view", "8"])
            .output()
            .expect("the binary runs");
        assert!(
            output.status.success(),
            "exit {:?}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("valid JSON");
        common::validate(&doc, include_str!("../vmm/schema/run-v1.json"));
        let exact = doc["host"]["offset_source"] != "none";
        for round in doc["runs"][0]["rounds"].as_array().expect("rounds") {
            let vs = round["vcpus"].as_array().expect("vcpus");
            assert_eq!(vs.len().to_string(), vcpus);
            let mut max_bound = 0;
            for v in vs {
                let seen = v["rel_offset_guest"].as_i64().expect("method d");
                let bound = v["rel_offset_guest_error"].as_u64().expect("its bound");
                if v["id"] == 0 {
                    assert_eq!((seen, bound), (0, 0), "{v}");
                    continue;
                }
                assert!(bound > 0, "a round trip costs something: {v}");
                max_bound = max_bound.max(bound);
                if exact {
                    let e = v["rel_offset_attr"].as_i64().expect("exact");
                    assert!(
                        (i128::from(e) - i128::from(seen)).unsigned_abs() <= u128::from(bound),
                        "the guest contradicts KVM: {v}"
                    );
                }
            }
            assert!(round["skew_cycles_guest_error"].as_u64() >= Some(2 * max_bound));
            let guest_disagrees = round["disagreements"].as_array().is_some_and(|d| {
                d.iter()
                    .any(|x| x.as_str().is_some_and(|t| t.contains("guest sees")))
            });
            assert!(!guest_disagrees, "{round}");
        }
    }
    let plain = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(["run", "--rounds", "2", "--json", "--variant", "xen-head"])
        .output()
        .expect("the binary runs");
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(!text.contains("rel_offset_guest") && !text.contains("skew_cycles_guest"));
}

/// `--guest-view` needs a guest: with the host backend it is refused, exit 2.
#[test]
fn guest_view_is_refused_on_the_host_backend() {
    let out = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(["run", "--backend", "host", "--guest-view", "--rounds", "2"])
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--guest-view") && err.contains("--backend kvm"),
        "{err}"
    );
}
