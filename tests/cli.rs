//! The binary's handling of bad input: a one-line error naming the problem and
//! the fix, exit code 2, no panic.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use tsc_vmm::EMBEDDED;
use tsc_vmm::{HIDE_CAP_ENV, KVM_DEVICE_ENV};

mod common;
use common::{hang_bound, kvm_or_skip, wait_bounded};
use tsc_vmm::default_timeout;

/// The bound on every command here: the tool's own default deadline for the
/// largest run these commands could start (2 vCPUs, one round), with the
/// join grace, generously. Every bad-input case is refused before a VM runs;
/// the bound only turns a hang into a failure.
fn bound() -> Duration {
    hang_bound(default_timeout(2, 1))
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    wait_bounded(child, bound(), &format!("{args:?}"))
}

fn run(args: &[&str]) -> Output {
    run_env(args, &[])
}

fn check_usage_error(out: &Output, what: &str, words: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    for w in words {
        assert!(err.contains(w), "{what}: '{w}' missing from: {err}");
    }
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(!err.contains("stack backtrace"), "{what}: {err}");
    assert!(out.stdout.is_empty(), "{what}: nothing on stdout");
    let errors = err.lines().filter(|l| l.starts_with("error:")).count();
    assert_eq!(errors, 1, "{what}: one error line: {err}");
}

fn assert_usage_error(args: &[&str], words: &[&str]) {
    check_usage_error(&run(args), &format!("{args:?}"), words);
}

/// Writes `bytes` to a fresh scratch file; returns its path.
fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tsc-rendezvous-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write scratch file");
    p
}

fn assert_bad_guest(name: &str, bytes: &[u8], words: &[&str]) {
    let path = scratch(name, bytes);
    let p = path.to_str().expect("utf-8");
    let mut all = vec![p, "static, non-PIE"];
    all.extend_from_slice(words);
    // The image is checked before KVM is touched: no /dev/kvm needed. Every
    // command that takes --guest checks it the same way.
    assert_usage_error(&["run", "--guest", p, "--rounds", "1"], &all);
    assert_usage_error(&["compare", "--guest", p, "--rounds", "1"], &all);
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

#[test]
fn zero_vcpus_is_refused() {
    assert_usage_error(&["run", "--vcpus", "0"], &["--vcpus", "at least one vCPU"]);
}

#[test]
fn zero_rounds_is_refused() {
    assert_usage_error(
        &["run", "--rounds", "0"],
        &["--rounds", "at least one round"],
    );
}

#[test]
fn unknown_variants_list_the_valid_ones() {
    assert_usage_error(
        &["run", "--variant", "xen-9"],
        &[
            "unknown variant 'xen-9'",
            "xen-4.15, xen-6ca022a1, xen-head",
        ],
    );
}

#[test]
fn check_and_compare_refuse_unknown_variants_the_same_way() {
    assert_usage_error(
        &["check", "--variant", "xen-9"],
        &[
            "unknown variant 'xen-9'",
            "xen-4.15, xen-6ca022a1, xen-head",
        ],
    );
    assert_usage_error(
        &["compare", "--variants", "xen-4.15,xen-9"],
        &[
            "unknown variant 'xen-9'",
            "xen-4.15, xen-6ca022a1, xen-head",
        ],
    );
}

#[test]
fn too_many_vcpus_for_the_layout_is_refused() {
    assert_usage_error(&["--vcpus", "4096"], &["at most 512"]);
}

#[test]
fn a_missing_guest_image_is_named() {
    assert_usage_error(
        &["run", "--guest", "/nonexistent/guest.elf", "--rounds", "1"],
        &["/nonexistent/guest.elf"],
    );
}

#[test]
fn a_guest_that_is_not_an_elf_is_refused() {
    assert_bad_guest("text.elf", b"#!/bin/sh\necho hello\n", &["not an ELF"]);
}

#[test]
fn a_truncated_guest_is_refused() {
    assert_bad_guest("short.elf", &EMBEDDED[..40], &["truncated"]);
    assert_bad_guest("cut.elf", &EMBEDDED[..EMBEDDED.len() / 2], &["truncated"]);
}

#[test]
fn a_position_independent_guest_is_refused() {
    let mut pie = EMBEDDED.to_vec();
    pie[16] = 3; // ET_DYN
    assert_bad_guest("pie.elf", &pie, &["position-independent"]);
}

#[test]
fn a_guest_with_a_segment_outside_guest_memory_is_refused() {
    let mut bad = EMBEDDED.to_vec();
    let phoff = u64_at(&bad, 32) as usize;
    // The first program header's physical address, beyond guest RAM.
    bad[phoff + 24..phoff + 32].copy_from_slice(&0x4000_0000u64.to_le_bytes());
    assert_bad_guest("outside.elf", &bad, &["outside the guest image area"]);
}

#[test]
fn a_missing_kvm_device_says_how_to_get_one() {
    let out = run_env(
        &["run", "--rounds", "1"],
        &[(KVM_DEVICE_ENV, "/nonexistent/kvm")],
    );
    check_usage_error(
        &out,
        "missing device",
        &["cannot open /nonexistent/kvm", "load the kvm module"],
    );
}

#[test]
fn a_device_that_is_not_kvm_is_named() {
    let out = run_env(&["run", "--rounds", "1"], &[(KVM_DEVICE_ENV, "/dev/null")]);
    check_usage_error(
        &out,
        "not KVM",
        &[
            "/dev/null is not a usable KVM device",
            "KVM_GET_API_VERSION",
        ],
    );
}

#[test]
fn an_unreadable_kvm_device_says_how_to_get_access() {
    // Needs root to become an unprivileged user; a root-only file stands in
    // for a /dev/kvm without access.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    if !root || !setpriv.exists() {
        eprintln!("skipping: needs root and setpriv to run as an unprivileged user");
        return;
    }
    let dev = scratch("kvm-no-access", b"");
    let mut perms = std::fs::metadata(&dev).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    std::fs::set_permissions(&dev, perms).expect("chmod");
    let dir = dev.parent().expect("dir");
    let mut dperms = std::fs::metadata(dir).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut dperms, 0o755);
    std::fs::set_permissions(dir, dperms).expect("chmod dir");
    let child = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(["run", "--rounds", "1"])
        .env(KVM_DEVICE_ENV, &dev)
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv runs");
    let out = wait_bounded(child, bound(), "setpriv");
    if out.status.code() == Some(127) || out.status.code() == Some(126) {
        eprintln!("skipping: the test binary is not executable by an unprivileged user");
        return;
    }
    check_usage_error(
        &out,
        "no access",
        &["Permission denied", "kvm group", "udev rule"],
    );
}

#[test]
fn a_kvm_lacking_a_capability_names_it() {
    if !kvm_or_skip() {
        return;
    }
    let out = run_env(
        &["run", "--rounds", "1"],
        &[(HIDE_CAP_ENV, "KVM_CAP_IMMEDIATE_EXIT")],
    );
    check_usage_error(
        &out,
        "missing capability",
        &["lacks KVM_CAP_IMMEDIATE_EXIT", "newer kernel"],
    );
}

#[test]
fn more_vcpus_than_kvm_or_the_layout_allows_is_refused() {
    if !kvm_or_skip() {
        return;
    }
    let kvm = tsc_vmm::open_kvm().expect("KVM opens");
    let limit = tsc_vmm::max_vcpus(&kvm);
    let layout = tsc_contract::layout::MAX_VCPUS;
    // One more than the tighter of the two limits is refused, naming that
    // limit. (Where KVM allows more than the layout holds, as on this
    // workplace's hosts, that is the layout; the KVM-limit message itself is
    // also unit-tested in vm.rs.)
    let (tighter, names) = if limit < layout {
        (limit, "KVM_CAP_MAX_VCPUS")
    } else {
        (layout, "guest memory layout")
    };
    let n = (tighter + 1).to_string();
    assert_usage_error(
        &["run", "--vcpus", &n, "--rounds", "1"],
        &[names, &format!("use at most {tighter}")],
    );
}

#[test]
fn an_injection_outside_the_run_is_refused() {
    assert_usage_error(
        &["run", "--vcpus", "2", "--inject", "stall,vcpu=2"],
        &["--inject", "vcpu=0..1"],
    );
    assert_usage_error(
        &["run", "--rounds", "2", "--inject", "panic,round=5"],
        &["--inject", "round=0..1"],
    );
    assert_usage_error(
        &["run", "--inject", "boom"],
        &["unknown fault 'boom'", "stall"],
    );
}

#[test]
fn help_documents_the_options() {
    let out = run(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--vcpus",
        "--variant",
        "--rounds",
        "--json",
        "--timeout",
        "--guest",
        "--output",
        "--inject",
        "stall",
        "triple-fault",
        "corrupt-value",
        "Watchdog",
        "60 s plus 100 ms per round and vCPU",
        "Exit codes: 0",
        "130 SIGINT",
    ] {
        assert!(text.contains(opt), "{opt} missing from --help");
    }
}

#[test]
fn compare_refuses_an_unwritable_output_before_running() {
    assert_usage_error(
        &["compare", "--csv", "/nonexistent-dir/rounds.csv"],
        &["cannot create the CSV file", "writable path"],
    );
    assert_usage_error(
        &["compare", "--variants", "xen-4.15"],
        &["--variants", "at least two variants"],
    );
}

/// `check` exits 2 when "the checks could not run (no usable `/dev/kvm`, a
/// missing KVM capability, ...)" (README, "CI use"), and so does `compare`
/// ("These hold for `run` and `compare`"), with the error line of the
/// error table.
#[test]
fn check_and_compare_exit_2_without_a_usable_kvm_device() {
    for (cmd, json) in [("check", "--json"), ("compare", "--json")] {
        let out = run_env(
            &[cmd, "--rounds", "1", json],
            &[(KVM_DEVICE_ENV, "/nonexistent/kvm")],
        );
        check_usage_error(
            &out,
            &format!("{cmd}: missing device"),
            &["cannot open /nonexistent/kvm", "load the kvm module"],
        );
        let out = run_env(&[cmd, "--rounds", "1"], &[(KVM_DEVICE_ENV, "/dev/null")]);
        check_usage_error(
            &out,
            &format!("{cmd}: not KVM"),
            &["/dev/null is not a usable KVM device"],
        );
    }
}

#[test]
fn check_and_compare_exit_2_when_kvm_lacks_a_capability() {
    if !kvm_or_skip() {
        return;
    }
    for cmd in ["check", "compare"] {
        let out = run_env(
            &[cmd, "--rounds", "1"],
            &[(HIDE_CAP_ENV, "KVM_CAP_IMMEDIATE_EXIT")],
        );
        check_usage_error(
            &out,
            &format!("{cmd}: missing capability"),
            &["this KVM lacks KVM_CAP_IMMEDIATE_EXIT", "newer kernel"],
        );
    }
}

/// The documentation (README and docs/) with its whitespace collapsed.
fn readme() -> String {
    common::docs::flat()
}

/// The text right after `phrase` in the documentation, up to the first of
/// `ends`.
fn readme_after(readme: &str, phrase: &str, ends: &[char]) -> String {
    let at = readme
        .find(phrase)
        .unwrap_or_else(|| panic!("the README no longer says '{phrase}'"));
    let rest = &readme[at + phrase.len()..];
    let end = rest.find(|c| ends.contains(&c)).unwrap_or(rest.len());
    rest[..end].trim().to_string()
}

/// The `[default: X]` clap shows in `CMD --help` for `--OPT`.
fn help_default(cmd: &str, opt: &str) -> String {
    let out = run(&[cmd, "--help"]);
    assert_eq!(out.status.code(), Some(0), "{cmd} --help");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let key = format!("--{opt} <");
    let at = flat
        .find(&key)
        .unwrap_or_else(|| panic!("{cmd} --help has no {opt}: {text}"));
    // This option's text ends where the next option starts.
    let own = &flat[at..];
    let own = own[2..].find(" --").map_or(own, |e| &own[..e + 2]);
    readme_after(own, "[default: ", &[']'])
}

/// The defaults the README documents are the ones the binary has: each is
/// read from the README's text and from the binary's `--help` (clap prints
/// the real default), so a change of either side without the other fails.
#[test]
fn the_documented_defaults_are_the_binarys() {
    let r = readme();
    // "cargo run --release # run: 2 vCPUs, every variant, 100 rounds, readable report"
    let run_line = readme_after(&r, "cargo run --release # run: ", &['`', '#']);
    let run_line = run_line
        .split(" cargo ")
        .next()
        .unwrap_or_default()
        .to_string();
    let run_parts: Vec<&str> = run_line.split(", ").collect();
    let number_before = |parts: &[&str], unit: &str| -> String {
        let p = parts
            .iter()
            .find(|p| p.ends_with(unit))
            .unwrap_or_else(|| panic!("no '{unit}' in {parts:?}"));
        p.trim_end_matches(unit).trim().to_string()
    };
    assert_eq!(
        help_default("run", "vcpus"),
        number_before(&run_parts, "vCPUs")
    );
    assert_eq!(
        help_default("run", "rounds"),
        number_before(&run_parts, "rounds")
    );
    assert!(run_parts.contains(&"every variant"), "{run_parts:?}");
    assert_eq!(help_default("run", "variant"), "all");

    // "compare # xen-4.15 vs xen-6ca022a1, 2 vCPUs, 1000 rounds each"
    let cmp_line = r
        .match_indices("cargo run --release -- compare # ")
        .map(|(at, key)| {
            let rest = &r[at + key.len()..];
            rest[..rest.find(" cargo ").unwrap_or(rest.len())].to_string()
        })
        .find(|c| c.ends_with(" rounds each"))
        .expect("the README states compare's defaults");
    let parts: Vec<&str> = cmp_line.split(", ").collect();
    let (base, other) = parts[0]
        .split_once(" vs ")
        .unwrap_or_else(|| panic!("no 'A vs B' in {cmp_line:?}"));
    assert_eq!(
        help_default("compare", "variants"),
        format!("{base},{other}")
    );
    assert_eq!(
        help_default("compare", "vcpus"),
        number_before(&parts, "vCPUs")
    );
    let each: Vec<&str> = parts.iter().map(|p| p.trim_end_matches(" each")).collect();
    assert_eq!(
        help_default("compare", "rounds"),
        number_before(&each, "rounds")
    );
    assert_eq!(
        help_default("compare", "warmup"),
        readme_after(&r, "`--warmup` rounds (default ", &[')'])
    );
    assert_eq!(
        help_default("compare", "bootstrap"),
        readme_after(&r, "`--bootstrap` replicates, default ", &[','])
    );

    // check: "Checks (2 vCPUs, 200 rounds of xen-head, warp test 10000
    // iterations per vCPU)", the output of `check` with its defaults.
    let checks = readme_after(&r, "Checks (", &[')']);
    let parts: Vec<&str> = checks.split(", ").collect();
    assert_eq!(
        help_default("check", "vcpus"),
        number_before(&parts, "vCPUs")
    );
    let (rounds, variant) = parts[1]
        .split_once(" rounds of ")
        .unwrap_or_else(|| panic!("no 'N rounds of V' in {checks:?}"));
    assert_eq!(help_default("check", "rounds"), rounds);
    assert_eq!(help_default("check", "variant"), variant);
    let warp = readme_after(&checks, "warp test ", &[' ']);
    assert_eq!(help_default("check", "warp-iterations"), warp);
    let tolerance = readme_after(&r, "`--tolerance` percent (default ", &[' ', '%']);
    assert_eq!(help_default("check", "tolerance"), tolerance);

    // The watchdog: "by default 60 s plus 100 ms per round and vCPU (stated
    // in `--help`)".
    let watchdog = readme_after(&r, "Each variant's run has a deadline: by default ", &['(']);
    for cmd in ["run", "compare"] {
        let out = run(&[cmd, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            help.contains(&format!("Default: {watchdog}")),
            "{cmd} --help does not state the README's default deadline '{watchdog}': {help}"
        );
    }
}

/// The parser's subcommands and the long options of each (`None`: the top
/// level, whose options are `run`'s), read from the same `Cli` the binary
/// parses with: what the completions and man pages must cover.
fn cli_options() -> Vec<(Option<String>, Vec<String>)> {
    use clap::CommandFactory;
    let cli = tsc_vmm::Cli::command();
    let longs = |c: &clap::Command| -> Vec<String> {
        c.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect()
    };
    let mut out = vec![(None, longs(&cli))];
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        out.push((Some(sub.get_name().to_string()), longs(sub)));
    }
    // Not vacuous: the options this issue added are among them.
    let has = |sub: &str, long: &str| {
        out.iter()
            .any(|(s, l)| s.as_deref() == Some(sub) && l.iter().any(|o| o == long))
    };
    assert!(has("check", "markdown") && has("man", "out-dir"), "{out:?}");
    assert!(out.len() >= 7, "the top level and six subcommands: {out:?}");
    out
}

/// What bash's completion offers for `words` (the last one is the word being
/// completed), with the script `completions bash` printed, sourced as a user
/// would.
fn bash_completes(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    const DRIVER: &str = r#"
        source "$1"; shift
        f=$(complete -p tsc-rendezvous | sed -E 's/.* -F ([^ ]+) .*/\1/')
        COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
        COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
        "$f" tsc-rendezvous "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = Command::new("bash")
        .args(["-c", DRIVER, "bash"])
        .arg(script)
        .args(words)
        .output()
        .expect("bash runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.is_empty(), "{words:?}: {err}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `completions bash` completes every subcommand and, after each, every long
/// option it has (the top level: `run`'s); the other shells' scripts name
/// every subcommand and every long option. All generated from the parser,
/// so an option added later is covered without a change here.
#[test]
fn the_completions_cover_every_subcommand_and_long_option() {
    let options = cli_options();
    let out = run(&["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let script = scratch("tsc-rendezvous.bash", &out.stdout);
    let subs: Vec<&str> = options.iter().filter_map(|(s, _)| s.as_deref()).collect();
    let offered = bash_completes(&script, &["tsc-rendezvous", ""]);
    for sub in &subs {
        assert!(offered.iter().any(|o| o == sub), "{sub} not in {offered:?}");
    }
    for (sub, longs) in &options {
        let mut words = vec!["tsc-rendezvous"];
        words.extend(sub.as_deref());
        words.push("--");
        let offered = bash_completes(&script, &words);
        for long in longs {
            let opt = format!("--{long}");
            assert!(
                offered.contains(&opt),
                "{words:?}: {opt} not in {offered:?}"
            );
        }
    }
    for (shell, prefix) in [
        ("zsh", "--"),
        ("fish", "-l "),
        ("elvish", "--"),
        ("powershell", "--"),
    ] {
        let out = run(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for (sub, longs) in &options {
            if let Some(sub) = sub {
                assert!(text.contains(sub.as_str()), "{shell}: no {sub}");
            }
            for long in longs {
                let opt = format!("{prefix}{long}");
                assert!(text.contains(&opt), "{shell}: no {opt} ({sub:?})");
            }
        }
    }
    assert_usage_error(
        &["completions", "tcsh"],
        &[
            "invalid value 'tcsh'",
            "bash",
            "zsh",
            "fish",
            "elvish",
            "powershell",
        ],
    );
}

/// An option as roff prints it in bold: `\fB\-\-out\-dir\fR`.
fn roff_option(long: &str) -> String {
    format!(r"\fB\-\-{}\fR", long.replace('-', r"\-"))
}

/// `man` prints the main page (every subcommand named, every top-level long
/// option documented), `man SUB` each subcommand's page with every long
/// option of it, and `man --out-dir` writes exactly those pages; unknown
/// names and unwritable directories are refused with the fix.
#[test]
fn the_man_pages_cover_every_subcommand_and_long_option() {
    let options = cli_options();
    let dir = std::env::temp_dir().join(format!("tsc-rendezvous-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let written = run(&["man", "--out-dir", dir.to_str().expect("utf-8")]);
    assert_eq!(written.status.code(), Some(0), "{written:?}");
    let listed = String::from_utf8_lossy(&written.stdout).into_owned();
    assert_eq!(listed.lines().count(), options.len(), "{listed}");
    for (sub, longs) in &options {
        let (args, title) = match sub {
            None => (vec!["man"], "tsc-rendezvous".to_string()),
            Some(s) => (vec!["man", s.as_str()], format!("tsc-rendezvous-{s}")),
        };
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let page = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            page.contains(&format!("\n.TH {title} 1 ")),
            "{args:?}: {page}"
        );
        for long in longs {
            assert!(page.contains(&roff_option(long)), "{args:?}: no --{long}");
        }
        if sub.is_none() {
            for s in options.iter().filter_map(|(s, _)| s.as_deref()) {
                let see = format!(r"tsc\-rendezvous\-{}(1)", s.replace('-', r"\-"));
                assert!(page.contains(&see), "the main page does not name {s}");
            }
        }
        let file = dir.join(format!("{title}.1"));
        assert!(listed.contains(&file.display().to_string()), "{listed}");
        let on_disk = std::fs::read(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        assert_eq!(on_disk, out.stdout, "{file:?} differs from `{args:?}`");
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_usage_error(
        &["man", "nope"],
        &["there is no subcommand 'nope'", "run, check, compare"],
    );
    assert_usage_error(
        &["man", "--out-dir", "/proc/version/man"],
        &[
            "cannot write the man pages to /proc/version/man",
            "writable directory",
        ],
    );
}

/// A `--markdown` path that cannot be written is refused before anything is
/// measured (no KVM needed).
#[test]
fn check_refuses_an_unwritable_markdown_file_before_running() {
    assert_usage_error(
        &["check", "--markdown", "/nonexistent-dir/checks.md"],
        &[
            "cannot create the Markdown file /nonexistent-dir/checks.md",
            "writable path",
        ],
    );
}

/// A Markdown cell as its reader sees it: escapes undone, `<br>` a line
/// break.
fn unescape_cell(cell: &str) -> String {
    let mut out = String::new();
    let mut chars = cell.replace("<br>", "\n").chars().collect::<Vec<_>>();
    chars.reverse();
    while let Some(c) = chars.pop() {
        match c {
            '\\' => out.extend(chars.pop()),
            c => out.push(c),
        }
    }
    out
}

/// The rows of the first Markdown table in `md`, split at unescaped `|`.
fn markdown_rows(md: &str) -> Vec<Vec<String>> {
    md.lines()
        .filter(|l| l.starts_with('|') && l.ends_with('|'))
        .map(|l| {
            let mut cells = vec![String::new()];
            let mut chars = l[1..l.len() - 1].chars();
            while let Some(c) = chars.next() {
                match c {
                    '|' => cells.push(String::new()),
                    '\\' => {
                        let cell = cells.last_mut().expect("one cell at least");
                        cell.push(c);
                        cell.extend(chars.next());
                    }
                    c => cells.last_mut().expect("one cell at least").push(c),
                }
            }
            cells.iter().map(|c| c.trim().to_string()).collect()
        })
        .collect()
}

fn check_markdown(extra: &[&str], name: &str) -> (Output, Value, String) {
    let md = scratch(name, b"");
    let child = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args([
            "check",
            "--rounds",
            "5",
            "--warp-iterations",
            "500",
            "--json",
        ])
        .arg("--markdown")
        .arg(&md)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let out = wait_bounded(
        child,
        hang_bound(Duration::from_secs(60) + default_timeout(2, 5)),
        name,
    );
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let text = std::fs::read_to_string(&md).expect("the Markdown file is written");
    (out, doc, text)
}

/// `check --markdown FILE` on this host: one row per check saying what the
/// JSON says (number, id, verdict, reason), the totals of the JSON; against
/// a baseline in which check 6 passed (it is skipped without a limit), a
/// baseline column, the regression marked and listed, and exit code 1.
#[test]
fn check_writes_the_verdict_table_as_markdown() {
    if !kvm_or_skip() {
        return;
    }
    let (out, doc, md) = check_markdown(&[], "checks.md");
    let checks = doc["checks"].as_array().expect("checks");
    let rows = markdown_rows(&md);
    assert_eq!(rows[0], ["#", "check", "verdict", "reason"], "{md}");
    assert_eq!(rows.len(), 2 + checks.len(), "{md}");
    for (row, c) in rows[2..].iter().zip(checks) {
        assert_eq!(row[0], c["number"].to_string(), "{md}");
        assert_eq!(unescape_cell(&row[1]), c["id"].as_str().unwrap_or(""));
        let verdict = c["verdict"].as_str().unwrap_or("?");
        assert!(row[2].ends_with(&format!(" {verdict}")), "{row:?}");
        assert_eq!(unescape_cell(&row[3]), c["reason"].as_str().unwrap_or(""));
    }
    let n = &doc["counts"];
    let totals = format!(
        "**{} passed, {} failed, {} skipped, {} undecided: {}**",
        n["passed"],
        n["failed"],
        n["skipped"],
        n["undecided"],
        if doc["ok"] == true { "OK" } else { "FAILED" }
    );
    assert!(md.contains(&totals), "{totals} not in {md}");
    let kernel = doc["environment"]["kernel_release"].as_str().unwrap_or("?");
    assert!(
        md.contains(&format!("**Environment:** kernel {kernel}")),
        "{md}"
    );
    assert_eq!(
        out.status.code(),
        Some(if doc["ok"] == true { 0 } else { 1 })
    );

    let mut base = doc.clone();
    let six = base["checks"]
        .as_array_mut()
        .and_then(|cs| cs.iter_mut().find(|c| c["id"] == "skew-threshold"))
        .expect("check 6");
    assert_eq!(six["verdict"], "SKIP", "no limit given: {six}");
    six["verdict"] = "PASS".into();
    // No skew to compare with: a few rounds' median skew is noisy, and its
    // growth would be the regression's reason instead.
    base["skew"] = Value::Null;
    let base = scratch("baseline.json", base.to_string().as_bytes());
    let base = base.to_str().expect("utf-8");
    let (out, _, md) = check_markdown(&["--baseline", base], "regressed.md");
    assert_eq!(out.status.code(), Some(1), "a regression fails the run");
    let rows = markdown_rows(&md);
    assert_eq!(rows[0].last().map(String::as_str), Some("baseline"), "{md}");
    let six = rows
        .iter()
        .find(|r| r[1] == "skew-threshold")
        .expect("row 6");
    assert_eq!(six[4], "**REGRESSED**: was PASS, now SKIP", "{md}");
    assert!(md.contains(", 1 regressed: FAILED**"), "{md}");
    assert!(
        md.contains("Regressed against the baseline:\n\n- 6. skew-threshold: was PASS, now SKIP\n"),
        "{md}"
    );
}

/// `-` (stdout) twice, or with `--json`, is refused before anything runs,
/// naming both options: with no KVM device at all the error is still the
/// usage error, so it came first.
#[test]
fn stdout_is_taken_once() {
    let no_kvm = [(KVM_DEVICE_ENV, "/nonexistent/kvm")];
    for (args, words) in [
        (
            &["check", "--ktap", "-", "--kcidb", "-"][..],
            &["--ktap -", "--kcidb -", "standard output"][..],
        ),
        (
            &["check", "--openmetrics", "-", "--json"],
            &["--openmetrics -", "--json"],
        ),
        (
            &["check", "--junit", "-", "--markdown", "-"],
            &["--junit -", "--markdown -"],
        ),
        (
            &["run", "--output", "-", "--json"],
            &["--output -", "--json"],
        ),
        (
            &["compare", "--csv", "-", "--plot", "-"],
            &["--csv -", "--plot -"],
        ),
        (
            &["compare", "--output", "-", "--json"],
            &["--output -", "--json"],
        ),
    ] {
        let out = run_env(args, &no_kvm);
        check_usage_error(&out, &format!("{args:?}"), words);
    }
}

/// A KCIDB origin is `[a-z0-9_]+`; anything else is refused, saying what
/// an origin may hold.
#[test]
fn a_bad_kcidb_origin_is_refused() {
    for bad in ["My-Lab", "", "lab:1"] {
        let out = run(&["check", "--kcidb", "-", "--kcidb-origin", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.contains("--kcidb-origin") && err.contains("lower-case letters, digits and '_'"),
            "{bad}: {err}"
        );
        assert!(out.stdout.is_empty(), "{bad}");
    }
}

/// Every new output path is created before the measurement: an unwritable
/// one fails at once (no KVM device is needed to see it), and the OpenMetrics
/// file's temporary sibling is not left behind.
#[test]
fn check_refuses_unwritable_outputs_before_running() {
    let no_kvm = [(KVM_DEVICE_ENV, "/nonexistent/kvm")];
    for (opt, what) in [
        ("--kcidb", "KCIDB"),
        ("--openmetrics", "OpenMetrics"),
        ("--ktap", "KTAP"),
        ("--junit", "JUnit"),
    ] {
        let out = run_env(&["check", opt, "/nonexistent-dir/x"], &no_kvm);
        check_usage_error(
            &out,
            opt,
            &[
                &format!("cannot create the {what} file /nonexistent-dir/x"),
                "writable path",
            ],
        );
    }
    let file = scratch("m.prom", b"old\n");
    let target = file.to_string_lossy().into_owned();
    let out = run_env(&["check", "--openmetrics", &target], &no_kvm);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&file).ok().as_deref(), Some(&b"old\n"[..]));
    let parent = file.parent().expect("a directory");
    let leftovers: Vec<_> = std::fs::read_dir(parent)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        !leftovers
            .iter()
            .any(|n| n.to_string_lossy().ends_with(".tmp")),
        "{leftovers:?}"
    );
}

/// `-` writes that output, alone, to stdout: `run --output -` only JSON
/// round lines (no readable report), `compare --plot -` one SVG document,
/// `compare --csv -` only CSV rows of the header's width.
#[test]
fn a_dash_output_is_all_that_stdout_carries() {
    if !kvm_or_skip() {
        return;
    }
    let out = run(&[
        "run",
        "--rounds",
        "3",
        "--variant",
        "xen-head",
        "--output",
        "-",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rounds = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|v| v["schema"] == "tsc-rendezvous/round/v1")
        .count();
    assert_eq!(rounds, 3, "{stdout}");
    let out = run(&["compare", "--rounds", "3", "--warmup", "1", "--plot", "-"]);
    let svg = String::from_utf8_lossy(&out.stdout);
    assert!(
        svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    let out = run(&["compare", "--rounds", "3", "--warmup", "1", "--csv", "-"]);
    let csv = String::from_utf8_lossy(&out.stdout);
    let mut lines = csv.lines();
    let width = lines.next().map_or(0, |h| h.split(',').count());
    assert!(width > 5 && csv.starts_with("seq,"), "{csv}");
    // 3 rounds x 2 variants x 2 vCPUs, the warm-up excluded or not: rows.
    let rows: Vec<&str> = lines.collect();
    assert!(rows.len() >= 12, "{csv}");
    assert!(rows.iter().all(|r| r.split(',').count() == width), "{csv}");
}

/// Without a usable KVM, `check --kselftest-exit-codes` skips as the kernel's
/// KVM selftests do (exit 4, the reason on stderr, nothing on stdout); without
/// the flag the same run still exits 2, and bad arguments exit 2 with it.
#[test]
fn no_kvm_is_a_kselftest_skip_only_under_the_flag() {
    let no_kvm = [(KVM_DEVICE_ENV, "/nonexistent/kvm")];
    let skipped = run_env(&["check", "--kselftest-exit-codes", "--ktap", "-"], &no_kvm);
    let err = String::from_utf8_lossy(&skipped.stderr);
    assert_eq!(skipped.status.code(), Some(4), "{err}");
    assert!(err.contains("/nonexistent/kvm"), "names the device: {err}");
    assert!(err.contains("kselftest skip"), "says why 4: {err}");
    assert!(skipped.stdout.is_empty(), "nothing on stdout");
    let plain = run_env(&["check", "--ktap", "-"], &no_kvm);
    assert_eq!(plain.status.code(), Some(2));
    let bad = run_env(
        &["check", "--kselftest-exit-codes", "--vcpus", "0"],
        &no_kvm,
    );
    assert_eq!(bad.status.code(), Some(2), "bad arguments stay 2");
}
