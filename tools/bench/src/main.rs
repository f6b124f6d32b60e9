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
//!   hosts: they must finish, not hang), VM creation included.
//!
//! Options: `--quick` (fewer rounds), `--rounds R` (rounds for N <= 2).
//! Timings depend on the host and its load; they are reported, never asserted.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use tsc_contract::Variant;
use tsc_vmm::options::RunOptions;
use tsc_vmm::rounds::run_streaming;

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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--first-result-child") {
        return first_result_child();
    }
    let quick = args.iter().any(|a| a == "--quick");
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
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
