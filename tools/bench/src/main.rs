//! `cargo run --release -p tsc-bench`: how fast tsc-rendezvous runs on this
//! host, in one run:
//!
//! - rounds per second for N = 1, 2, 4, 8 vCPUs (rounds back to back in one
//!   VM, timed from the first round's result to the last, so VM creation is
//!   not counted; also given with it);
//! - the time from process start to the first result for N = 2 (this binary
//!   re-executes itself; the child creates the VM, runs one round and prints a
//!   line; the parent times spawn to that line), median of several;
//! - the wall time of 10 rounds at N = 16, 32, 64 (overcommitted on small
//!   hosts: they must finish, not hang), VM creation included;
//! - memory and CPU as the rounds grow (issue 13): the peak RSS of `run` and
//!   `compare` at 10k, 100k and 1M rounds and the ratio 1M / 10k (goal: under
//!   1.2), and the CPU time per round, of the whole process and of its main
//!   thread (the VMM's own code: the round loop, the analysis, the
//!   statistics, the outputs; the vCPU threads run the guest), which should
//!   be flat as the rounds grow. Each command runs in a child (this binary
//!   re-executed as the tsc-rendezvous command line), which reports its own
//!   `VmHWM` and `getrusage` at its end. The host backend runs all three
//!   counts; KVM runs 10k and 100k (1M takes about 12 minutes per command at
//!   ~1,450 rounds/s; `--kvm-1m` includes it).
//!
//! Options: `--quick` (fewer rounds), `--rounds R` (rounds for N <= 2),
//! `--memory-only` (just the last section), `--kvm-1m`.
//! Timings depend on the host and its load; they are reported, never asserted.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use tsc_contract::Variant;
use tsc_vmm::{run_streaming, Cli, RunOptions};

fn opts(vcpus: u32, rounds: usize) -> RunOptions {
    RunOptions {
        vcpus,
        schedule: vec![Variant::XenHead; rounds],
        timeout: Duration::from_secs(600),
        ..RunOptions::default()
    }
}

/// (rounds per second between the first and last result, including VM setup).
fn rounds_per_second(vcpus: u32, rounds: usize) -> Result<(f64, f64), String> {
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = start;
    run_streaming(&opts(vcpus, rounds), &mut |_| {
        let now = Instant::now();
        first.get_or_insert(now);
        last = now;
        Ok(())
    })
    .map_err(|f| f.to_string())?;
    let total = start.elapsed().as_secs_f64();
    let steady = first
        .map(|f| (last - f).as_secs_f64())
        .filter(|&s| s > 0.0 && rounds > 1)
        .map_or(f64::NAN, |s| (rounds - 1) as f64 / s);
    Ok((steady, rounds as f64 / total))
}

/// The child of the time-to-first-result measurement.
fn first_result_child() -> ExitCode {
    let mut printed = false;
    let res = run_streaming(&opts(2, 1), &mut |r| {
        if !printed {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "first {}", r.skew_cycles);
            let _ = out.flush();
            printed = true;
        }
        Ok(())
    });
    match res {
        Ok(_) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {f}");
            ExitCode::from(1)
        }
    }
}

fn time_to_first_result() -> Result<Duration, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut child = Command::new(exe)
        .arg("--first-result-child")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let took = start.elapsed();
    let status = child.wait().map_err(|e| e.to_string())?;
    if !line.starts_with("first") || !status.success() {
        return Err(format!("the child failed ({status}): {line:?}"));
    }
    Ok(took)
}

/// The line a `--as-cli` child ends with on stderr.
const CHILD_MARK: &str = "tsc-bench-child";

/// User + system time of `who` (RUSAGE_SELF, RUSAGE_THREAD), microseconds.
fn cpu_us(who: libc::c_int) -> Option<f64> {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into `u`, valid for the call.
    if unsafe { libc::getrusage(who, &mut u) } != 0 {
        return None;
    }
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    Some(us(u.ru_utime) + us(u.ru_stime))
}

/// This process's peak RSS, KiB (`VmHWM`: its own since exec, unlike
/// `ru_maxrss`, which counts the parent's memory before the exec).
fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The child: the tsc-rendezvous command line with `args`, then its peak
/// RSS and CPU times on stderr.
fn as_cli(args: &[String]) -> ExitCode {
    let argv = std::iter::once("tsc-rendezvous".to_string()).chain(args.iter().cloned());
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    let exit = tsc_vmm::dispatch(cli);
    eprintln!(
        "{CHILD_MARK} vmhwm_kib={} main_cpu_us={:.0} all_cpu_us={:.0}",
        vm_hwm_kib().unwrap_or(0),
        cpu_us(libc::RUSAGE_THREAD).unwrap_or(f64::NAN),
        cpu_us(libc::RUSAGE_SELF).unwrap_or(f64::NAN)
    );
    exit.into()
}

/// What a command cost.
#[derive(Clone, Copy, Debug)]
struct Cost {
    peak_kib: u64,
    wall_s: f64,
    main_cpu_us: f64,
    all_cpu_us: f64,
}

/// Runs the tsc-rendezvous command line `args` in a child and reads what it
/// cost.
fn cost_of(args: &[String]) -> Result<Cost, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let start = Instant::now();
    let out = Command::new(exe)
        .arg("--as-cli")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    let wall_s = start.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{args:?} failed ({}): {}",
            out.status,
            err.lines().find(|l| l.starts_with("error")).unwrap_or("")
        ));
    }
    let line = err
        .lines()
        .find(|l| l.starts_with(CHILD_MARK))
        .ok_or("the child reported nothing")?;
    let field = |k: &str| -> Option<f64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
    };
    Ok(Cost {
        peak_kib: field("vmhwm_kib").unwrap_or(0.0) as u64,
        wall_s,
        main_cpu_us: field("main_cpu_us").unwrap_or(f64::NAN),
        all_cpu_us: field("all_cpu_us").unwrap_or(f64::NAN),
    })
}

/// The command line of `what` (`run` or `compare`) on `backend` for
/// `rounds` rounds (`compare`: measured rounds in all, half per variant).
fn command(what: &str, backend: &str, rounds: u64) -> Vec<String> {
    let mut a: Vec<String> = vec![what.into(), "--backend".into(), backend.into()];
    match what {
        "run" => a.extend(["--variant".into(), "xen-head".into()]),
        _ => a.extend(["--seed".into(), "1".into()]),
    }
    let per = if what == "run" { rounds } else { rounds / 2 };
    a.extend(["--rounds".into(), per.to_string()]);
    a
}

/// The memory and CPU section; returns whether every command ran.
fn memory_section(quick: bool, kvm_1m: bool) -> bool {
    let (small, mid, large) = if quick {
        (1_000u64, 10_000u64, 100_000u64)
    } else {
        (10_000, 100_000, 1_000_000)
    };
    println!(
        "\nMemory and CPU as the rounds grow (2 vCPUs; run: xen-head; compare: xen-4.15 vs \
         xen-6ca022a1, seed 1, the rounds in all, half per variant; stdout discarded)"
    );
    println!(
        "  {:<8} {:<7} {:>10} {:>13} {:>9} {:>10} {:>17} {:>17}",
        "command",
        "backend",
        "rounds",
        "peak RSS KiB",
        "wall s",
        "rounds/s",
        "CPU us/round",
        "main thread us/r"
    );
    let mut ok = true;
    let mut ratios = Vec::new();
    for what in ["run", "compare"] {
        for backend in ["host", "kvm"] {
            let counts: Vec<u64> = if backend == "kvm" && !kvm_1m {
                vec![small, mid]
            } else {
                vec![small, mid, large]
            };
            let mut costs = Vec::new();
            for &n in &counts {
                match cost_of(&command(what, backend, n)) {
                    Ok(c) => {
                        println!(
                            "  {what:<8} {backend:<7} {n:>10} {:>13} {:>9.1} {:>10.0} {:>17.2} {:>17.2}",
                            c.peak_kib,
                            c.wall_s,
                            n as f64 / c.wall_s,
                            c.all_cpu_us / n as f64,
                            c.main_cpu_us / n as f64
                        );
                        costs.push((n, c));
                    }
                    Err(e) => {
                        println!("  {what:<8} {backend:<7} {n:>10} failed: {e}");
                        ok = false;
                    }
                }
            }
            if let (Some((n0, c0)), Some((n1, c1))) = (costs.first(), costs.last()) {
                if n1 > n0 {
                    ratios.push(format!(
                        "  {what} {backend}: peak RSS {n1} / {n0} rounds = {:.3}; main-thread CPU \
                         per round {:.3}x, all CPU per round {:.3}x",
                        c1.peak_kib as f64 / c0.peak_kib.max(1) as f64,
                        (c1.main_cpu_us / *n1 as f64) / (c0.main_cpu_us / *n0 as f64),
                        (c1.all_cpu_us / *n1 as f64) / (c0.all_cpu_us / *n0 as f64)
                    ));
                }
            }
        }
    }
    println!("\nRatios, largest count against the smallest (goal: peak RSS under 1.2; CPU per round flat or falling)");
    for r in ratios {
        println!("{r}");
    }
    if !kvm_1m {
        println!(
            "  (kvm: {} rounds not run: about 12 minutes per command at ~1,450 rounds/s; \
             --kvm-1m runs it)",
            large
        );
    }
    ok
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--as-cli") {
        return as_cli(&args[1..]);
    }
    if args.iter().any(|a| a == "--first-result-child") {
        return first_result_child();
    }
    let quick = args.iter().any(|a| a == "--quick");
    let kvm_1m = args.iter().any(|a| a == "--kvm-1m");
    if args.iter().any(|a| a == "--memory-only") {
        println!("tsc-bench: memory and CPU only");
        return if memory_section(quick, kvm_1m) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    let base: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 300 } else { 3000 });
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("tsc-bench: variant xen-head, {cores} host core(s) available");
    println!("\nRounds per second (back to back in one VM)");
    println!(
        "  {:>5} {:>8} {:>14} {:>18}",
        "vCPUs", "rounds", "rounds/s", "incl. VM setup"
    );
    let mut failed = false;
    // Overcommitted rounds are slower (tens of ms on a 2-core PVM host): fewer.
    for (n, rounds) in [(1, base), (2, base), (4, base / 10), (8, base / 30)] {
        let rounds = rounds.max(20);
        match rounds_per_second(n, rounds) {
            Ok((steady, total)) => {
                println!("  {n:>5} {rounds:>8} {steady:>14.0} {total:>18.0}")
            }
            Err(e) => {
                println!("  {n:>5} {rounds:>8} failed: {e}");
                failed = true;
            }
        }
    }
    let reps = if quick { 3 } else { 7 };
    let mut firsts = Vec::new();
    for _ in 0..reps {
        match time_to_first_result() {
            Ok(d) => firsts.push(d.as_secs_f64() * 1e3),
            Err(e) => {
                println!("time to first result failed: {e}");
                failed = true;
                break;
            }
        }
    }
    if !firsts.is_empty() {
        let min = firsts.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "\nTime from process start to the first result, 2 vCPUs: median {:.1} ms, min {min:.1} ms ({} runs)",
            median(firsts.clone()),
            firsts.len()
        );
    }
    println!("\nWall time of 10 rounds, overcommitted ({cores} host cores), VM setup included");
    for n in [16, 32, 64] {
        let start = Instant::now();
        match run_streaming(&opts(n, 10), &mut |_| Ok(())) {
            Ok(_) => println!("  {n:>3} vCPUs: {:>8.3} s", start.elapsed().as_secs_f64()),
            Err(f) => {
                println!(
                    "  {n:>3} vCPUs: failed after {:.3} s: {f}",
                    start.elapsed().as_secs_f64()
                );
                failed = true;
            }
        }
    }
    if !memory_section(quick, kvm_1m) {
        failed = true;
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
