//! The guest's TSC frequency on /dev/kvm: `--tsc-khz` on `run`, `compare` and
//! `check`, and the frequency family of checks (10-13), each asserted by
//! what this host's KVM says it can do (KVM_CAP_TSC_CONTROL, read from the
//! check's own environment), never by its name: with TSC scaling half the
//! host's rate is taken and measured at 0.5 in the guest; without it it is
//! refused with an error naming the capability, and twice the host's rate
//! is taken (served by catch-up, or FAILed where the host does not catch
//! up). Skipped without /dev/kvm unless `CI` is set.

use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::kvm_or_skip;

fn tool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn json(out: &Output) -> Value {
    common::json_of(out)
}

fn check_by_id<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no check {id}"))
}

/// One short `check --json` (its frequency family is what these tests read).
fn short_check(extra: &[&str]) -> Value {
    let mut args = vec![
        "check",
        "--json",
        "--rounds",
        "10",
        "--warp-iterations",
        "200",
    ];
    args.extend_from_slice(extra);
    let out = tool(&args);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "check ran to its verdicts: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    json(&out)
}

#[test]
fn bad_rates_are_refused_naming_the_forms_taken() {
    for cmd in ["run", "compare", "check"] {
        let out = tool(&[cmd, "--tsc-khz", "fast"]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("kHz") && err.contains("0.5x"), "{cmd}: {err}");
    }
    let out = tool(&["run", "--backend", "host", "--tsc-khz", "2x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--backend kvm"));
}

#[test]
fn the_frequency_family_decides_by_what_this_kvm_can_do() {
    if !kvm_or_skip() {
        return;
    }
    let doc = short_check(&[]);
    let caps = &doc["environment"]["kvm_capabilities"];
    let scaling = caps["KVM_CAP_TSC_CONTROL"].as_i64().unwrap_or(0) > 0;
    let per_vm = caps["KVM_CAP_VM_TSC_CONTROL"].as_i64().unwrap_or(0) > 0;
    let ids: Vec<&str> = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(
        &ids[9..],
        [
            "tsc-frequency",
            "kvmclock-frequency",
            "mixed-frequency",
            "scaled-rendezvous"
        ]
    );

    let c10 = check_by_id(&doc, "tsc-frequency");
    let probes = c10["values"]["probes"].as_array().expect("probes");
    assert_eq!(probes.len(), if per_vm { 5 } else { 3 }, "{probes:#?}");
    let host_khz = c10["values"]["host_khz"].as_u64().expect("host rate");
    for p in probes {
        let (ppm, khz) = (
            p["ratio_ppm"].as_u64().unwrap_or(0),
            p["khz"].as_u64().unwrap_or(0),
        );
        assert_eq!(khz, (host_khz * ppm + 500_000) / 1_000_000, "{p}");
        let refused = !p["set"].is_null();
        if ppm < 1_000_000 && !scaling {
            // Without scaling KVM documents refusing a rate below the host's.
            assert!(refused, "{p}");
            assert_eq!(p["verdict"], "PASS", "{p}");
        }
        if !refused {
            assert_eq!(
                p["reported_khz"].as_u64(),
                Some(khz),
                "KVM_GET_TSC_KHZ: {p}"
            );
            let (lo, hi) = (p["rate"]["lo"].as_f64(), p["rate"]["hi"].as_f64());
            let (lo, hi) = (lo.expect("a rate"), hi.expect("a rate"));
            assert!(lo <= hi && lo > 0.0, "{p}");
            // Where the guest's rate holds the asked one the probe does not
            // fail, and where it excludes it, it does not pass.
            let asked = ppm as f64 / 1e6;
            let within_tolerance = (ppm as i64 - 1_000_000).unsigned_abs() <= 250;
            if !within_tolerance && !(lo..=hi).contains(&asked) {
                assert_eq!(p["verdict"], "FAIL", "{p}");
            }
            if scaling && !within_tolerance {
                assert!(
                    (lo..=hi).contains(&asked),
                    "a scaling KVM runs the guest at {asked}: {p}"
                );
                assert_eq!(p["verdict"], "PASS", "{p}");
            }
        }
    }
    let c13 = check_by_id(&doc, "scaled-rendezvous");
    if scaling {
        assert_eq!(c13["verdict"], "PASS", "{}", c13["reason"]);
    } else {
        assert_eq!(c13["verdict"], "SKIP");
        assert!(c13["reason"]
            .as_str()
            .unwrap_or("")
            .contains("KVM_CAP_TSC_CONTROL = 0"));
    }
    let c12 = check_by_id(&doc, "mixed-frequency");
    let khz = c12["values"]["khz"].as_array().expect("rates");
    assert_eq!(
        khz[1].as_u64(),
        Some(2 * host_khz),
        "vCPU 1 at twice the host's: {c12}"
    );
}

#[test]
fn a_rate_this_kvm_cannot_scale_to_is_refused_and_one_it_takes_is_reported() {
    if !kvm_or_skip() {
        return;
    }
    let run_at = |rate: &str| {
        tool(&[
            "run",
            "--json",
            "--rounds",
            "3",
            "--variant",
            "xen-head",
            "--tsc-khz",
            rate,
        ])
    };
    let out = run_at("2x");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = json(&out);
    let host = &doc["host"];
    let set = &host["guest_tsc"];
    let host_khz = host["host_tsc_khz"].as_u64().expect("the host's rate");
    assert_eq!(set["khz"].as_u64(), Some(2 * host_khz), "{set}");
    assert_eq!(
        host["tsc_khz"], set["khz"],
        "KVM_GET_TSC_KHZ is the rate set"
    );
    assert_eq!(set["asked"]["ratio_ppm"], 2_000_000);

    let half = run_at("0.5x");
    let doc = short_check(&[]);
    let scaling = doc["environment"]["kvm_capabilities"]["KVM_CAP_TSC_CONTROL"]
        .as_i64()
        .unwrap_or(0)
        > 0;
    if scaling {
        assert_eq!(
            half.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&half.stderr)
        );
        let d = json(&half);
        assert_eq!(d["host"]["guest_tsc"]["scaled"], true, "{}", d["host"]);
    } else {
        assert_eq!(half.status.code(), Some(2));
        let err = String::from_utf8_lossy(&half.stderr);
        assert!(
            err.contains("KVM_CAP_TSC_CONTROL = 0") && err.contains("below the host's"),
            "{err}"
        );
    }
}

#[test]
fn every_check_runs_under_a_guest_rate_asked_for() {
    if !kvm_or_skip() {
        return;
    }
    let doc = short_check(&["--tsc-khz", "2x"]);
    assert_eq!(
        doc["options"]["tsc"]["ratio_ppm"], 2_000_000,
        "{}",
        doc["options"]
    );
    let env = &doc["environment"];
    assert_eq!(
        env["tsc_khz"].as_u64(),
        env["host_tsc_khz"].as_u64().map(|k| 2 * k),
        "the checks' VM runs at twice the host's rate: {env}"
    );
    assert_eq!(doc["checks"].as_array().map(Vec::len), Some(13));
    // Check 7 snapshots a VM at that rate and restores it at the rate saved.
    let c7 = check_by_id(&doc, "save-restore");
    if c7["verdict"] != "SKIP" {
        let rate = &c7["values"]["rate"];
        let khz = &env["tsc_khz"];
        assert_eq!(&rate["saved_khz"], khz, "{rate}");
        assert_eq!(
            rate["restored_khz"],
            serde_json::json!([khz, khz]),
            "{rate}"
        );
        assert_eq!(rate["kept"], true, "{rate}");
        assert_eq!(rate["host_khz"], env["host_tsc_khz"], "{rate}");
    }
}
