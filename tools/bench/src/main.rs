//! `cargo run --release -p tsc-bench`: how fast tsc-rendezvous runs on this
//! host, each figure beside a floor measured in the same run, as a ratio:
//!
//! - the host backend (2 threads, 200,000 rounds of xen-6ca022a1) against
//!   the same `tsc-sync` rendezvous on pinned threads with spin waits and
//!   nothing else ([`host_floor`]);
//! - KVM at 2 vCPUs: the main thread's CPU per round against the cost of
//!   the ioctls it issues per round (counted with `strace -f` when it is
//!   installed, each ioctl timed on a bare vCPU: [`bare`]), and the
//!   syscalls per round of every thread ([`syscalls`]);
//! - KVM rounds per second at 1, 2, 4, 8 vCPUs;
//! - process start to the first result (2 vCPUs; this binary re-executes
//!   itself) against process start to a bare VM's vCPUs' first exit;
//! - `check` with all its checks, wall;
//! - 10 rounds at 16, 32, 64 vCPUs (VM setup included) against a bare boot
//!   and teardown of as many vCPUs, and how the run was paced;
//! - idle against loaded (one `nice -n 19` CPU hog per host core): KVM
//!   rounds/s at 1, 2, 8 vCPUs, the first result, `check` and its checks 5
//!   and 9's bounds, `sched_yield` per round ([`loaded`]);
//! - memory and CPU as the rounds grow ([`memory`]).
//!
//! Figures repeated `--reps` times (default 3; first result 7) give their
//! median and their spread. `--json [FILE]` writes the table as JSON (to
//! FILE, else to stdout with the text on stderr). Options: `--quick` (fewer
//! rounds), `--rounds R` (KVM rounds for N <= 2), `--host-rounds R`,
//! `--memory-only`, `--no-memory`, `--kvm-1m`, `--only SECTION[,..]`
//! (host, kvm, rates, first, check, overcommit, loaded). Timings depend on the host
//! and its load; they are reported, never asserted.

mod bare;
mod children;
mod host_floor;
mod loaded;
mod memory;
mod profile;
mod sections;
mod syscalls;
mod table;

use std::io::Write;
use std::process::ExitCode;

use table::Table;

/// The value after `flag`, parsed.
fn value<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1)?.parse().ok()
}

/// The sections `--only` names.
const SECTIONS: [&str; 7] = [
    "host",
    "kvm",
    "rates",
    "first",
    "check",
    "overcommit",
    "loaded",
];
/// Flags that stand alone.
const SWITCHES: [&str; 4] = ["--quick", "--kvm-1m", "--memory-only", "--no-memory"];
/// Flags followed by a value (`--json`'s is optional).
const VALUED: [&str; 5] = ["--reps", "--rounds", "--host-rounds", "--only", "--json"];

const USAGE: &str = "usage: tsc-bench [--quick] [--reps N] [--rounds R] [--host-rounds R] \
[--only SECTION[,..]] [--memory-only | --no-memory] [--kvm-1m] [--json [FILE]]
sections: host, kvm, rates, first, check, overcommit, loaded";

/// What is wrong with the arguments, in words naming the argument; `None`
/// when every one is a known flag with a valid value.
fn bad_args(args: &[String]) -> Option<String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if SWITCHES.contains(&a) {
            i += 1;
            continue;
        }
        if !VALUED.contains(&a) {
            return Some(format!("unknown argument {a:?}"));
        }
        let v = args.get(i + 1).filter(|v| !v.starts_with("--"));
        match (a, v) {
            ("--json", None) => {
                i += 1;
                continue;
            }
            (_, None) => return Some(format!("{a} needs a value")),
            ("--only", Some(v)) => {
                if let Some(s) = v.split(',').find(|s| !SECTIONS.contains(s)) {
                    return Some(format!(
                        "--only: unknown section {s:?} (sections: {})",
                        SECTIONS.join(", ")
                    ));
                }
            }
            ("--reps" | "--rounds" | "--host-rounds", Some(v))
                if !v.parse::<u32>().is_ok_and(|n| n > 0) =>
            {
                return Some(format!("{a} {v:?}: expected a positive whole number"));
            }
            _ => {}
        }
        i += 2;
    }
    None
}

/// Where `--json` writes: `None` for no JSON, `Some(None)` for stdout.
fn json_target(args: &[String]) -> Option<Option<String>> {
    let i = args.iter().position(|a| a == "--json")?;
    Some(args.get(i + 1).filter(|a| !a.starts_with("--")).cloned())
}

/// The host, in words.
fn host_lines(cores: usize) -> Vec<String> {
    let flavor = if std::path::Path::new("/sys/module/kvm_pvm").exists() {
        "PVM (kvm_pvm: guest ring 0 is emulated)"
    } else if std::path::Path::new("/sys/module/kvm_intel").exists() {
        "VMX (kvm_intel)"
    } else if std::path::Path::new("/sys/module/kvm_amd").exists() {
        "SVM (kvm_amd)"
    } else {
        "unknown"
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    vec![
        format!("tsc-bench: {cores} host core(s) available, KVM: {flavor}"),
        format!(
            "load average at the start: {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ]
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--as-cli") => return children::as_cli(&args[1..]),
        Some("--first-result-child") => return children::first_result(),
        Some("--bare-boot-child") => {
            return children::bare_boot(args.get(1).map_or("2", String::as_str))
        }
        Some("--noop-child") => {
            println!("first");
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if let Some(e) = bad_args(&args) {
        eprintln!("tsc-bench: {e}\n{USAGE}");
        return ExitCode::from(2);
    }
    let has = |f: &str| args.iter().any(|a| a == f);
    let (quick, kvm_1m) = (has("--quick"), has("--kvm-1m"));
    if has("--memory-only") {
        println!("tsc-bench: memory and CPU only");
        return if memory::memory_section(quick, kvm_1m) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    let json = json_target(&args);
    let reps: usize = value(&args, "--reps").unwrap_or(3).max(1);
    let base: usize = value(&args, "--rounds").unwrap_or(if quick { 300 } else { 3000 });
    let host_rounds: u32 =
        value(&args, "--host-rounds").unwrap_or(if quick { 20_000 } else { 200_000 });
    let only: Option<Vec<String>> =
        value::<String>(&args, "--only").map(|s| s.split(',').map(str::to_string).collect());
    let wanted = |s: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == s));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut t = Table {
        schema: "tsc-bench/v1",
        host: host_lines(cores),
        ..Table::default()
    };
    let mut failed = false;
    let mut section = |name: &str, t: &mut Table, f: &dyn Fn(&mut Table) -> Result<(), String>| {
        if !wanted(name) {
            return;
        }
        eprintln!("tsc-bench: {name}...");
        if let Err(e) = f(t) {
            t.notes.push(format!("{name}: failed: {e}"));
            failed = true;
        }
    };
    section("host", &mut t, &|t| sections::host(t, host_rounds, reps));
    section("kvm", &mut t, &|t| sections::kvm_round(t, base, reps));
    section("rates", &mut t, &|t| sections::kvm_rates(t, base, cores));
    section("first", &mut t, &|t| {
        sections::first_result(t, if quick { 3 } else { 7 })
    });
    section("check", &mut t, &|t| sections::check(t, reps));
    section("overcommit", &mut t, &|t| sections::overcommit(t, cores));
    section("loaded", &mut t, &|t| loaded::loaded(t, base, reps, cores));
    let text = t.text();
    match &json {
        Some(target) => {
            let doc = serde_json::to_string_pretty(&t).unwrap_or_default();
            eprint!("{text}");
            match target {
                Some(path) => {
                    if let Err(e) = std::fs::write(path, doc + "\n") {
                        eprintln!("cannot write {path}: {e}");
                        failed = true;
                    }
                }
                None => {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{doc}");
                }
            }
        }
        None => print!("{text}"),
    }
    // The memory section prints as it goes: not onto a JSON document on
    // stdout.
    let memory = !has("--no-memory") && only.is_none();
    if memory && json == Some(None) {
        eprintln!("tsc-bench: the memory section is left out with --json to stdout (--json FILE keeps it)");
    } else if memory && !memory::memory_section(quick, kvm_1m) {
        failed = true;
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn known_flags_pass_and_anything_else_is_named() {
        for ok in [
            "",
            "--quick --reps 5 --only check,loaded --json",
            "--json out.json --no-memory --rounds 300 --host-rounds 1000",
            "--memory-only --kvm-1m",
        ] {
            assert_eq!(bad_args(&args(ok)), None, "{ok}");
        }
        for (bad, says) in [
            ("--help-me", "unknown argument \"--help-me\""),
            ("--only check,lodaed", "unknown section \"lodaed\""),
            ("--reps", "--reps needs a value"),
            ("--reps 0", "expected a positive whole number"),
            ("--rounds x", "expected a positive whole number"),
            ("--only --quick", "--only needs a value"),
            ("check", "unknown argument \"check\""),
        ] {
            let got = bad_args(&args(bad)).unwrap_or_default();
            assert!(got.contains(says), "{bad}: {got}");
        }
    }
}
