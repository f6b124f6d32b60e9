//! The routes by which `check`'s verdicts leave one host, each proven with
//! the route's own tools (`.ci/run` installs them; `common::validators`
//! finds them, skipping without one unless `CI` is set):
//!
//! - kselftest: the kernel's own `run_kselftest.sh` runs
//!   `tools/kselftest/tsc_rendezvous_check.sh` as the collection
//!   `tsc_rendezvous`, and its one result follows the check's verdicts;
//! - KernelCI: the `--kcidb` file passes `kcidb-io`'s validator (schema
//!   v5.3), one test per check with the verdict's status;
//! - Prometheus: the `--openmetrics` file passes `promtool check metrics`,
//!   one verdict per check; `tools/prometheus/alerts.yml` passes
//!   `promtool check rules` and its unit tests and queries what the check
//!   writes; the systemd units pass `systemd-analyze verify`;
//! - LAVA: the test definition and the example job pass `lava_common`'s
//!   schemas, and `tools/lava/run-check.sh` reports one case per check
//!   through LAVA's own `lava-test-case`.
//!
//! One `check` run (through the kselftest runner, on /dev/kvm) writes the
//! KTAP, KCIDB, OpenMetrics and JUnit results that every test here reads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

mod common;
use common::validators::{self, assert_ok, root, run, Validator};

/// What one `check` run through the kselftest runner left.
struct Run {
    /// The runner's whole output (TAP 13, the check's KTAP nested as `# `).
    runner: String,
    /// The check's own KTAP result lines: check id -> verdict.
    verdicts: BTreeMap<String, &'static str>,
    /// The check's KTAP, un-nested.
    ktap: PathBuf,
    kcidb: PathBuf,
    openmetrics: PathBuf,
    junit: PathBuf,
}

/// The one `check` run, or `None` (skipped: no /dev/kvm or no runner).
fn the_run() -> Option<&'static Run> {
    static RUN: OnceLock<Option<Run>> = OnceLock::new();
    RUN.get_or_init(|| {
        if !common::kvm_or_skip() {
            return None;
        }
        validators::or_skip(Validator::KselftestRunner).map(|r| run_through_kselftest(&r))
    })
    .as_ref()
}

/// A kselftest install (the runner, `kselftest-list.txt`, the collection
/// `tsc_rendezvous` from tools/kselftest) in a fresh directory, run as the
/// kernel's `run_kselftest.sh` runs it.
fn run_through_kselftest(runner: &Path) -> Run {
    let dir = std::env::temp_dir().join(format!("tsc-routes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let collection = dir.join("tsc_rendezvous");
    std::fs::create_dir_all(collection.join("../kselftest")).expect("a temporary directory");
    for f in [
        "run_kselftest.sh",
        "kselftest/runner.sh",
        "kselftest/prefix.pl",
        "kselftest/ktap_helpers.sh",
    ] {
        copy(&runner.join(f), &dir.join(f));
    }
    for f in ["tsc_rendezvous_check.sh", "settings"] {
        copy(&root().join("tools/kselftest").join(f), &collection.join(f));
    }
    std::fs::write(
        dir.join("kselftest-list.txt"),
        "tsc_rendezvous:tsc_rendezvous_check.sh\n",
    )
    .expect("kselftest-list.txt");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).expect("an output directory");
    let file = |n: &str| out_dir.join(n);
    let args = format!(
        "--rounds 20 --warp-iterations 2000 --kcidb {} --openmetrics {} --junit {}",
        file("checks.kcidb.json").display(),
        file("checks.prom").display(),
        file("checks.xml").display()
    );
    let out = run(
        Command::new(dir.join("run_kselftest.sh"))
            .env("TSC_RENDEZVOUS", env!("CARGO_BIN_EXE_tsc-rendezvous"))
            .env("KSELFTEST_TSC_RENDEZVOUS_CHECK_SH_ARGS", args),
        "run_kselftest.sh",
    );
    let runner = String::from_utf8_lossy(&out.stdout).into_owned();
    // The check's own lines, as the runner nested them ("# " before each).
    let ktap: String = runner
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(file("checks.ktap"), &ktap).expect("checks.ktap");
    Run {
        verdicts: ktap_verdicts(&ktap),
        runner,
        ktap: file("checks.ktap"),
        kcidb: file("checks.kcidb.json"),
        openmetrics: file("checks.prom"),
        junit: file("checks.xml"),
    }
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", from.display(), to.display()));
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} was not written: {e}", path.display()))
}

/// The verdict of every top-level KTAP result line of `check --ktap`:
/// `pass`, `fail`, `skip` or `undecided` (`# SKIP undecided: ...`).
fn ktap_verdicts(ktap: &str) -> BTreeMap<String, &'static str> {
    let mut out = BTreeMap::new();
    for line in ktap.lines() {
        let (ok, rest) = match (line.strip_prefix("ok "), line.strip_prefix("not ok ")) {
            (Some(r), _) => (true, r),
            (_, Some(r)) => (false, r),
            _ => continue,
        };
        let mut words = rest.split_whitespace();
        let (Some(n), Some(id)) = (words.next(), words.next()) else {
            continue;
        };
        if n.parse::<u32>().is_err() {
            continue;
        }
        let verdict = match (
            ok,
            line.contains(" # SKIP undecided:"),
            line.contains(" # SKIP"),
        ) {
            (false, _, _) => "fail",
            (true, true, _) => "undecided",
            (true, false, true) => "skip",
            (true, false, false) => "pass",
        };
        out.insert(id.to_string(), verdict);
    }
    out
}

#[test]
fn ktap_lines_give_the_verdicts_the_ktap_writer_means() {
    let v = ktap_verdicts(
        "KTAP version 1\n1..4\nok 1 same-start # equal\nnot ok 2 tsc-msrs # differ\n\
         ok 3 warp # SKIP undecided: no hand-off\nok 4 skew-threshold # SKIP no limit\n\
         # ok 9 nested # not a result of this level\n",
    );
    let want: BTreeMap<String, &str> = [
        ("same-start", "pass"),
        ("tsc-msrs", "fail"),
        ("warp", "undecided"),
        ("skew-threshold", "skip"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(v, want);
}

#[test]
fn the_kselftest_runner_runs_the_check_and_reports_its_outcome() {
    let Some(r) = the_run() else { return };
    assert!(
        !r.verdicts.is_empty(),
        "the check's KTAP is not nested in the runner's output:\n{}",
        r.runner
    );
    let lines: Vec<&str> = r.runner.lines().collect();
    assert!(lines.contains(&"TAP version 13"), "{}", r.runner);
    assert!(lines.contains(&"1..1"), "{}", r.runner);
    assert!(
        lines.contains(&"# selftests: tsc_rendezvous: tsc_rendezvous_check.sh"),
        "{}",
        r.runner
    );
    let test = "1 selftests: tsc_rendezvous: tsc_rendezvous_check.sh";
    let has = |v: &str| r.verdicts.values().any(|x| *x == v);
    // kselftest's exit codes: 1 (fail) on any FAIL, 4 (skip) when nothing
    // passed, else 0 (pass).
    let want = if has("fail") {
        format!("not ok {test} # exit=1")
    } else if !has("pass") {
        format!("ok {test} # SKIP")
    } else {
        format!("ok {test}")
    };
    assert!(
        lines.contains(&want.as_str()),
        "verdicts {:?}: expected the runner to say `{want}`:\n{}",
        r.verdicts,
        r.runner
    );
}

/// The KCIDB status of a check's verdict.
fn kcidb_status(verdict: &str) -> &'static str {
    match verdict {
        "pass" => "PASS",
        "fail" => "FAIL",
        "skip" => "SKIP",
        _ => "DONE",
    }
}

#[test]
fn the_kcidb_file_passes_kcidb_ios_validator_with_one_test_per_check() {
    let Some(r) = the_run() else { return };
    let Some(python) = validators::or_skip(Validator::KcidbIo) else {
        return;
    };
    let validate = "import json, sys, kcidb_io\n\
        data = json.load(open(sys.argv[1]))\n\
        kcidb_io.schema.V5_3.validate_exactly(data)\n\
        print(kcidb_io.schema.V5_3, kcidb_io.schema.V5_3.count(data))";
    let out = run(
        Command::new(&python).args(["-c", validate]).arg(&r.kcidb),
        "kcidb-io",
    );
    assert_ok(&out, "kcidb_io.schema.V5_3.validate_exactly");
    let doc: Value = serde_json::from_str(&read(&r.kcidb)).expect("KCIDB JSON");
    assert_eq!(doc["version"]["major"], 5);
    assert_eq!(doc["version"]["minor"], 3);
    let tests = doc["tests"].as_array().expect("tests");
    assert_eq!(tests.len(), r.verdicts.len(), "one test per check");
    for (id, verdict) in &r.verdicts {
        let path = format!("tsc_rendezvous.{id}");
        let t = tests
            .iter()
            .find(|t| t["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no KCIDB test with path {path}"));
        assert_eq!(t["status"], kcidb_status(verdict), "{path}");
    }
    // The validator refuses what breaks the schema: it is not a formality.
    let mut bad = doc.clone();
    bad["tests"][0]["status"] = Value::from("GREEN");
    let bad_path = r.kcidb.with_extension("bad.json");
    std::fs::write(&bad_path, bad.to_string()).expect("a broken copy");
    let out = run(
        Command::new(&python).args(["-c", validate]).arg(&bad_path),
        "kcidb-io",
    );
    assert!(!out.status.success(), "kcidb-io accepted status GREEN");
}

/// `name{labels} value` of an OpenMetrics sample line, the labels unescaped.
fn sample(line: &str) -> Option<(&str, BTreeMap<String, String>, &str)> {
    if line.starts_with('#') || line.is_empty() {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        let (mut key, mut value, mut in_value, mut escaped) =
            (String::new(), String::new(), false, false);
        let end = loop {
            let (i, c) = chars.next()?;
            match (in_value, escaped, c) {
                (true, true, c) => {
                    value.push(if c == 'n' { '\n' } else { c });
                    escaped = false;
                }
                (true, false, '\\') => escaped = true,
                (true, false, '"') => {
                    labels.insert(std::mem::take(&mut key), std::mem::take(&mut value));
                    in_value = false;
                }
                (true, false, c) => value.push(c),
                (false, _, '}') => break i,
                (false, _, '"') => in_value = true,
                (false, _, '=' | ',' | ' ') => {}
                (false, _, c) => key.push(c),
            }
        };
        rest = &body[end + 1..];
    }
    let value = rest.split_whitespace().next()?;
    Some((name, labels, value))
}

/// The OpenMetrics verdict of a check (`tsc_rendezvous_check_verdict`'s
/// series at 1), by check id.
fn openmetrics_verdicts(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, labels, value) in text.lines().filter_map(sample) {
        if name == "tsc_rendezvous_check_verdict" && value == "1" {
            let check = labels.get("check").cloned().unwrap_or_default();
            let verdict = labels.get("verdict").cloned().unwrap_or_default();
            let before = out.insert(check.clone(), verdict);
            assert!(before.is_none(), "two verdicts at 1 for {check}");
        }
    }
    out
}

#[test]
fn openmetrics_samples_are_read_with_their_escaped_labels() {
    let (name, labels, value) =
        sample(r#"tsc_rendezvous_check_verdict{check="warp",kernel_release="a\"b,c"} 1"#)
            .expect("a sample");
    assert_eq!((name, value), ("tsc_rendezvous_check_verdict", "1"));
    assert_eq!(labels["check"], "warp");
    assert_eq!(labels["kernel_release"], "a\"b,c");
    assert!(sample("# TYPE tsc_rendezvous_check_verdict gauge").is_none());
}

#[test]
fn the_openmetrics_file_passes_promtool_with_one_verdict_per_check() {
    let Some(r) = the_run() else { return };
    let Some(promtool) = validators::or_skip(Validator::Promtool) else {
        return;
    };
    let text = read(&r.openmetrics);
    let file = std::fs::File::open(&r.openmetrics).expect("the OpenMetrics file");
    let out = run(
        Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(file),
        "promtool check metrics",
    );
    assert_ok(&out, "promtool check metrics");
    assert_eq!(text.lines().last(), Some("# EOF"), "{text}");
    let got = openmetrics_verdicts(&text);
    let want: BTreeMap<String, String> = r
        .verdicts
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    assert_eq!(got, want, "the OpenMetrics verdicts are the KTAP's");
    for (name, labels, _) in text.lines().filter_map(sample) {
        if name.starts_with("tsc_rendezvous_check_") {
            for l in ["kernel_release", "kvm_flavor"] {
                assert!(labels.contains_key(l), "{name} has no {l} label: {text}");
            }
        }
    }
    assert!(
        text.lines()
            .filter_map(sample)
            .any(|(n, _, _)| n == "tsc_rendezvous_last_run_timestamp_seconds"),
        "{text}"
    );
}

#[test]
fn the_junit_file_has_one_testcase_per_check() {
    let Some(r) = the_run() else { return };
    let xml = read(&r.junit);
    let doc = roxmltree::Document::parse(&xml).expect("JUnit XML");
    let cases = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .count();
    assert_eq!(cases, r.verdicts.len(), "{xml}");
}

#[test]
fn run_check_sh_reports_one_lava_case_per_check_through_lavas_lava_test_case() {
    let Some(r) = the_run() else { return };
    let Some(bin) = validators::or_skip(Validator::LavaTestCase) else {
        return;
    };
    let results = r.ktap.with_extension("lava");
    let _ = std::fs::remove_dir_all(&results);
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("a PATH");
    let out = run(
        Command::new(root().join("tools/lava/run-check.sh"))
            .arg("--ktap")
            .arg(&r.ktap)
            .env("PATH", path)
            .env("LAVA_RESULT_DIR", &results),
        "run-check.sh",
    );
    assert_ok(&out, "run-check.sh --ktap");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lava = |v: &'static str| if v == "undecided" { "unknown" } else { v };
    let mut reported = 0;
    for (i, (id, verdict)) in numbered(&r.ktap).iter().enumerate() {
        let name = format!("{}-{id}", i + 1);
        let signal = format!(
            "<LAVA_SIGNAL_TESTCASE TEST_CASE_ID={name} RESULT={}>",
            lava(verdict)
        );
        assert!(stdout.contains(&signal), "no `{signal}` in:\n{stdout}");
        let kept = read(&results.join("results").join(&name).join("result"));
        assert_eq!(kept.trim(), lava(verdict), "{name}");
        reported += 1;
    }
    assert_eq!(reported, r.verdicts.len());
}

/// The KTAP's checks in their order, with their verdicts.
fn numbered(ktap: &Path) -> Vec<(String, &'static str)> {
    let text = read(ktap);
    let verdicts = ktap_verdicts(&text);
    let mut ids: Vec<(u32, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("not ok ").or_else(|| l.strip_prefix("ok ")))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.to_string()))
        })
        .collect();
    ids.sort();
    ids.into_iter()
        .map(|(_, id)| {
            let v = verdicts[&id];
            (id, v)
        })
        .collect()
}

#[test]
fn the_lava_definition_and_job_pass_lava_commons_schemas() {
    let Some(python) = validators::or_skip(Validator::LavaCommon) else {
        return;
    };
    let validate = "import sys, yaml\n\
        from lava_common.schemas import validate\n\
        from lava_common.schemas.test import testdef\n\
        validate(yaml.safe_load(open(sys.argv[1])), strict=True)\n\
        testdef.validate(yaml.safe_load(open(sys.argv[2])))";
    let lava = root().join("tools/lava");
    let (job, def) = (lava.join("job-x86.yaml"), lava.join("tsc-rendezvous.yaml"));
    let out = run(
        Command::new(&python)
            .args(["-c", validate])
            .arg(&job)
            .arg(&def),
        "lava_common",
    );
    assert_ok(&out, "lava_common's job and test definition schemas");
    // The job runs this repository's definition, which runs run-check.sh.
    let job_text = read(&job);
    assert!(job_text.contains("path: tools/lava/tsc-rendezvous.yaml"));
    assert!(read(&def).contains("./tools/lava/run-check.sh"));
    // A job without its visibility is refused: the schema is strict.
    let bad = std::env::temp_dir().join(format!("tsc-routes-{}-job.yaml", std::process::id()));
    std::fs::write(&bad, job_text.replace("visibility: public\n", "")).expect("a broken job");
    let out = run(
        Command::new(&python)
            .args(["-c", validate])
            .arg(&bad)
            .arg(&def),
        "lava_common",
    );
    assert!(
        !out.status.success(),
        "lava_common accepted a job without visibility"
    );
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let Some(promtool) = validators::or_skip(Validator::Promtool) else {
        return;
    };
    let dir = root().join("tools/prometheus");
    let out = run(
        Command::new(&promtool)
            .args(["check", "rules", "alerts.yml"])
            .current_dir(&dir),
        "promtool check rules",
    );
    assert_ok(&out, "promtool check rules");
    assert!(String::from_utf8_lossy(&out.stdout).contains("SUCCESS: 2 rules found"));
    let out = run(
        Command::new(&promtool)
            .args(["test", "rules", "alerts_test.yml"])
            .current_dir(&dir),
        "promtool test rules",
    );
    assert_ok(&out, "promtool test rules");
    // The unit tests catch a regression rule that forgets the kernel: without
    // its `unless` clause a host that turned to FAIL on one kernel fires it.
    let rules = read(&dir.join("alerts.yml"));
    let clause = "            unless on (instance, check, kernel_release)\n            tsc_rendezvous_check_verdict{verdict=\"fail\"}\n";
    assert!(
        rules.contains(clause),
        "alerts.yml changed: update this test"
    );
    let mutant = std::env::temp_dir().join(format!("tsc-routes-{}-rules", std::process::id()));
    std::fs::create_dir_all(&mutant).expect("a temporary directory");
    std::fs::write(mutant.join("alerts.yml"), rules.replace(clause, "")).expect("rules");
    copy(
        &dir.join("alerts_test.yml"),
        &mutant.join("alerts_test.yml"),
    );
    let out = run(
        Command::new(&promtool)
            .args(["test", "rules", "alerts_test.yml"])
            .current_dir(&mutant),
        "promtool test rules",
    );
    assert!(
        !out.status.success(),
        "the rule tests pass a rule without `unless`"
    );
}

#[test]
fn the_alert_rules_query_what_the_check_writes() {
    let Some(r) = the_run() else { return };
    let text = read(&r.openmetrics);
    let rules = read(&root().join("tools/prometheus/alerts.yml"));
    let written: Vec<(String, BTreeMap<String, String>)> = text
        .lines()
        .filter_map(sample)
        .map(|(n, l, _)| (n.to_string(), l))
        .collect();
    for metric in ["tsc_rendezvous_check_verdict"] {
        assert!(rules.contains(metric), "alerts.yml does not use {metric}");
        let labels = &written
            .iter()
            .find(|(n, _)| n == metric)
            .unwrap_or_else(|| panic!("the check writes no {metric}: {text}"))
            .1;
        for l in ["check", "verdict", "kernel_release", "kvm_flavor"] {
            assert!(labels.contains_key(l), "{metric} has no {l}");
            assert!(rules.contains(l), "alerts.yml does not use {l}");
        }
        for v in ["fail", "pass"] {
            assert!(
                written
                    .iter()
                    .any(|(n, l)| n == metric && l.get("verdict").is_some_and(|x| x == v)),
                "no {metric}{{verdict=\"{v}\"}} series: {text}"
            );
        }
    }
}

#[test]
fn the_systemd_units_pass_systemd_analyze_verify() {
    let Some(analyze) = validators::or_skip(Validator::SystemdAnalyze) else {
        return;
    };
    // verify wants ExecStart's program to exist: the one this build made.
    let dir = std::env::temp_dir().join(format!("tsc-routes-{}-units", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let mut units = Vec::new();
    for unit in ["tsc-rendezvous-check.service", "tsc-rendezvous-check.timer"] {
        let text = read(&root().join("tools/prometheus").join(unit));
        let text = text.replace(
            "/usr/local/bin/tsc-rendezvous",
            env!("CARGO_BIN_EXE_tsc-rendezvous"),
        );
        std::fs::write(dir.join(unit), text).expect("a unit");
        units.push(dir.join(unit));
    }
    let out = run(Command::new(analyze).arg("verify").args(&units), "verify");
    assert_ok(&out, "systemd-analyze verify");
    assert!(
        out.stderr.is_empty(),
        "systemd-analyze verify warns: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let service = read(&units[0]);
    assert!(
        service.contains("\nSuccessExitStatus=1\n"),
        "exit 1 is a run that wrote the metrics"
    );
    let timer = read(&units[1]);
    for line in [
        "OnBootSec=5min",
        "OnCalendar=hourly",
        "RandomizedDelaySec=15min",
    ] {
        assert!(
            timer.contains(&format!("\n{line}\n")),
            "the timer lacks {line}"
        );
    }
    assert!(service
        .contains(" check --openmetrics /var/lib/prometheus/node-exporter/tsc_rendezvous.prom"));
}

#[test]
fn a_missing_validator_skips_without_ci_and_fails_with_it() {
    let v = Validator::Promtool;
    assert_eq!(validators::found_or_skip(v, None, false), None);
    let here = Some(PathBuf::from("/usr/bin/promtool"));
    assert_eq!(validators::found_or_skip(v, here.clone(), true), here);
    let failed = std::panic::catch_unwind(|| validators::found_or_skip(v, None, true));
    assert!(failed.is_err(), "CI set and no promtool must fail the test");
}

#[test]
fn the_installers_refuse_bad_usage_with_exit_2() {
    for script in [
        "tools/kselftest/install-runner.sh",
        "tools/lava/install-test-shell.sh",
    ] {
        let out = run(
            Command::new("bash")
                .arg(root().join(script))
                .args(["a", "b"]),
            script,
        );
        assert_eq!(out.status.code(), Some(2), "{script}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"));
    }
    // A package apt does not have: named, with what to do.
    let out = run(
        Command::new("bash")
            .arg(root().join("tools/kselftest/install-runner.sh"))
            .arg(std::env::temp_dir().join("tsc-routes-no-runner"))
            .env("LINUX_SOURCE", "linux-source-0.0"),
        "install-runner.sh",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("apt has no installable version of linux-source-0.0: run apt-get update"),
        "{err}"
    );
    let out = run(
        Command::new(root().join("tools/lava/run-check.sh")).arg("--bogus"),
        "run-check.sh",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument '--bogus'"));
}

/// The lines of docs/fleet.md and docs/ci.md inside code blocks.
fn doc_code_lines() -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for (page, text) in common::docs::PAGES {
        if !matches!(*page, "docs/fleet.md" | "docs/ci.md") {
            continue;
        }
        let mut code = false;
        for line in text.lines() {
            if line.starts_with("```") {
                code = !code;
            } else if code {
                out.push((*page, line.to_string()));
            }
        }
    }
    out
}

#[test]
fn the_routes_docs_show_what_this_code_writes() {
    let Some(r) = the_run() else { return };
    let text = read(&r.openmetrics);
    let written: Vec<(String, Vec<String>)> = text
        .lines()
        .filter_map(sample)
        .map(|(n, l, _)| (n.to_string(), l.into_keys().collect()))
        .collect();
    let numbered = numbered(&r.ktap);
    let (mut metrics, mut signals, mut runner, mut kcidb) = (0, 0, 0, 0);
    for (page, line) in doc_code_lines() {
        let line = line.trim();
        if line.starts_with("# HELP tsc_rendezvous_") || line.starts_with("# TYPE tsc_rendezvous_")
        {
            assert!(
                text.lines().any(|l| l == line),
                "{page}: `{line}` is not written"
            );
        } else if let Some((name, labels, _)) =
            sample(line).filter(|(n, _, _)| n.starts_with("tsc_rendezvous_"))
        {
            let keys: Vec<String> = labels.into_keys().collect();
            assert!(
                written.iter().any(|(n, k)| n == name && *k == keys),
                "{page}: `{line}`: no {name} with the labels {keys:?} in what the check writes:\n{text}"
            );
            metrics += 1;
        } else if let Some(rest) = line.strip_prefix("<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=") {
            let (name, result) = rest
                .trim_end_matches('>')
                .split_once(" RESULT=")
                .unwrap_or_else(|| panic!("{page}: `{line}`"));
            let known = numbered
                .iter()
                .enumerate()
                .any(|(i, (id, _))| name == format!("{}-{id}", i + 1));
            assert!(known, "{page}: `{line}` names no check");
            assert!(
                ["pass", "fail", "skip", "unknown"].contains(&result),
                "{line}"
            );
            signals += 1;
        } else if line.contains("selftests: tsc_rendezvous: tsc_rendezvous_check.sh")
            && !line.starts_with('#')
        {
            let ok = [
                "ok 1 selftests: tsc_rendezvous: tsc_rendezvous_check.sh",
                "ok 1 selftests: tsc_rendezvous: tsc_rendezvous_check.sh # SKIP",
                "not ok 1 selftests: tsc_rendezvous: tsc_rendezvous_check.sh # exit=1",
            ];
            assert!(
                ok.contains(&line),
                "{page}: `{line}` is no line of the runner"
            );
            runner += 1;
        } else if let Some((_, rest)) = line.split_once("\"path\": \"tsc_rendezvous.") {
            let id = rest.split('"').next().unwrap_or_default();
            assert!(
                r.verdicts.contains_key(id),
                "{page}: `{line}` names no check"
            );
            kcidb += 1;
        }
    }
    assert!(metrics >= 3, "docs show {metrics} OpenMetrics samples");
    assert!(signals >= 3, "docs show {signals} LAVA test cases");
    assert!(runner >= 1, "docs show no result of the kselftest runner");
    assert!(kcidb >= 1, "docs show no KCIDB test");
}

/// What docs/fleet.md warns of: kselftest's runner writes through two
/// descriptors, so redirected into a plain file its result line overwrites
/// the start of the nested output; piped, every line arrives. A selftest of
/// three lines shows it, without KVM.
#[test]
fn the_kselftest_runner_garbles_a_file_but_not_a_pipe() {
    let Some(runner) = validators::or_skip(Validator::KselftestRunner) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("tsc-routes-{}-demo", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("kselftest")).expect("a temporary directory");
    std::fs::create_dir_all(dir.join("demo")).expect("a temporary directory");
    for f in [
        "run_kselftest.sh",
        "kselftest/runner.sh",
        "kselftest/prefix.pl",
        "kselftest/ktap_helpers.sh",
    ] {
        copy(&runner.join(f), &dir.join(f));
    }
    let nested = "ok 1 a-nested-result-long-enough-to-be-overwritten";
    let test = dir.join("demo/t.sh");
    std::fs::write(
        &test,
        format!("#!/bin/sh\necho 'KTAP version 1'\necho '1..1'\necho '{nested}'\n"),
    )
    .expect("the selftest");
    assert_ok(
        &run(Command::new("chmod").arg("+x").arg(&test), "chmod"),
        "chmod",
    );
    std::fs::write(dir.join("kselftest-list.txt"), "demo:t.sh\n").expect("the list");
    let piped = run(
        &mut Command::new(dir.join("run_kselftest.sh")),
        "run_kselftest.sh",
    );
    let piped = String::from_utf8_lossy(&piped.stdout).into_owned();
    assert!(piped.lines().any(|l| l == format!("# {nested}")), "{piped}");
    assert!(
        piped.lines().any(|l| l == "ok 1 selftests: demo: t.sh"),
        "{piped}"
    );
    let file = dir.join("out.txt");
    let out = std::fs::File::create(&file).expect("the output file");
    let status = Command::new(dir.join("run_kselftest.sh"))
        .stdout(out)
        .status()
        .expect("run_kselftest.sh runs");
    assert!(status.success());
    let garbled = read(&file);
    assert!(
        garbled.lines().any(|l| l == "ok 1 selftests: demo: t.sh"),
        "{garbled}"
    );
    assert!(
        !garbled.lines().any(|l| l == format!("# {nested}")),
        "the runner no longer garbles a file: update docs/fleet.md\n{garbled}"
    );
}

#[test]
fn run_check_sh_fails_without_a_result_line_or_lava_test_case() {
    let script = root().join("tools/lava/run-check.sh");
    let empty = std::env::temp_dir().join(format!("tsc-routes-{}-empty.ktap", std::process::id()));
    std::fs::write(&empty, "KTAP version 1\n1..0\n").expect("a KTAP without results");
    // Not in LAVA's test shell: said, exit 1.
    let out = run(
        Command::new(&script)
            .arg("--ktap")
            .arg(&empty)
            .env("PATH", "/usr/bin:/bin"),
        "run-check.sh",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lava-test-case is not on PATH"));
    let Some(bin) = validators::or_skip(Validator::LavaTestCase) else {
        return;
    };
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = run(
        Command::new(&script)
            .arg("--ktap")
            .arg(&empty)
            .env("PATH", path)
            .env("LAVA_RESULT_DIR", empty.with_extension("lava")),
        "run-check.sh",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no result line in"), "{err}");
}

#[test]
fn the_kselftest_wrapper_fails_without_a_binary() {
    let out = run(
        Command::new(root().join("tools/kselftest/tsc_rendezvous_check.sh"))
            .env_remove("TSC_RENDEZVOUS")
            .env("PATH", "/usr/bin:/bin"),
        "tsc_rendezvous_check.sh",
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a broken install is no skip (4)"
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("# tsc-rendezvous not found: set TSC_RENDEZVOUS"),
        "{said}"
    );
}
