//! The bench re-executes itself for what must be timed from a process's
//! start or measured per process: the tool's command line (`--as-cli`, which
//! reports its peak RSS and CPU times), the tool's first result
//! (`--first-result-child`), the bare-boot floor (`--bare-boot-child N`) and
//! an empty child (`--noop-child`: what starting a process costs).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use tsc_contract::Variant;
use tsc_vmm::{run_streaming, Cli, RunOptions};

use crate::bare;

/// The line a `--as-cli` child ends with on stderr.
pub const CHILD_MARK: &str = "tsc-bench-child";

/// The options of `vcpus` vCPUs and `rounds` rounds of xen-head.
pub fn opts(vcpus: u32, rounds: usize) -> RunOptions {
    RunOptions {
        vcpus,
        schedule: vec![Variant::XenHead; rounds],
        timeout: Duration::from_secs(600),
        ..RunOptions::default()
    }
}

/// Prints `line` on stdout and flushes it.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The child of the time-to-first-result measurement. Its first line also
/// gives, on CLOCK_MONOTONIC (one clock for every process), when its `main`
/// ran and when the result came: `first SKEW main_ns=T result_ns=T`, so the
/// parent can split its time into the process's start and the tool's part.
pub fn first_result() -> ExitCode {
    let main_ns = monotonic_ns();
    let mut printed = false;
    let res = run_streaming(&opts(2, 1), &mut |r| {
        if !printed {
            let result_ns = monotonic_ns();
            say(&format!(
                "first {} main_ns={main_ns} result_ns={result_ns}",
                r.skew_cycles
            ));
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

/// The child of the bare-boot floor: boots `vcpus` vCPUs, says `first` at
/// their first exit, then the teardown's time in microseconds.
pub fn bare_boot(vcpus: &str) -> ExitCode {
    let n = vcpus.parse().unwrap_or(2);
    match bare::boot(n, || say("first")) {
        Ok(b) => {
            say(&format!("teardown_us {}", b.teardown.as_secs_f64() * 1e6));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds (the clock `Instant` reads on Linux,
/// shared by every process), or 0 if it cannot be read.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// The time to a first result, split where the child's own clock reads fall
/// (all on CLOCK_MONOTONIC): the parent's spawn to the child's `main` (the
/// kernel starting a process: fork, exec, the loader, the wait for a core),
/// the child's `main` to its result (the tool), and the result to the
/// parent reading it (the bench's own wake-up).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FirstResult {
    /// Spawn to the parent reading the first line.
    pub total: Duration,
    /// Spawn to the child's `main`.
    pub start: Duration,
    /// The child's `main` to its result.
    pub tool: Duration,
}

impl FirstResult {
    /// Splits `total` (read by the parent, which spawned at `spawn_ns`) with
    /// the `main_ns=` and `result_ns=` fields of the child's `line`; `None`
    /// when the line lacks them or they are out of order.
    pub fn parse(line: &str, spawn_ns: u64, total: Duration) -> Option<FirstResult> {
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let (main, result) = (field("main_ns=")?, field("result_ns=")?);
        let start = main.checked_sub(spawn_ns)?;
        let tool = result.checked_sub(main)?;
        Some(FirstResult {
            total,
            start: Duration::from_nanos(start),
            tool: Duration::from_nanos(tool),
        })
    }
}

/// [`time_to_first_line`] of the first-result child, split by
/// [`FirstResult::parse`].
pub fn time_to_first_result() -> Result<FirstResult, String> {
    let spawn_ns = monotonic_ns();
    let (total, _, line) = first_line_and_rest(&["--first-result-child"])?;
    FirstResult::parse(&line, spawn_ns, total)
        .ok_or_else(|| format!("the first-result child's line has no times: {line:?}"))
}

/// Runs this binary with `args` and times its start to its first line
/// starting with `first`; returns the time and the rest of its output.
pub fn time_to_first_line(args: &[&str]) -> Result<(Duration, String), String> {
    let (took, rest, _) = first_line_and_rest(args)?;
    Ok((took, rest))
}

/// [`time_to_first_line`], with the first line itself.
fn first_line_and_rest(args: &[&str]) -> Result<(Duration, String, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| e.to_string())?;
    let took = start.elapsed();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
    let status = child.wait().map_err(|e| e.to_string())?;
    if !line.starts_with("first") || !status.success() {
        return Err(format!("the child {args:?} failed ({status}): {line:?}"));
    }
    Ok((took, rest, line))
}

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

/// The CPU time of clock `clock` (a thread's or the process's), seconds.
pub fn cpu_clock(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
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
pub fn as_cli(args: &[String]) -> ExitCode {
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
pub struct Cost {
    /// Peak RSS, KiB.
    pub peak_kib: u64,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// The main thread's CPU, microseconds.
    pub main_cpu_us: f64,
    /// Every thread's CPU, microseconds.
    pub all_cpu_us: f64,
}

/// Runs the tsc-rendezvous command line `args` in a child and reads what it
/// cost; exit codes other than those in `ok_codes` are errors. Its stdout
/// is discarded.
pub fn cost_of(args: &[String], ok_codes: &[i32]) -> Result<Cost, String> {
    cost_and_output(args, ok_codes, false).map(|(c, _)| c)
}

/// As [`cost_of`], with the child's stdout when `keep` (else empty).
pub fn cost_and_output(
    args: &[String],
    ok_codes: &[i32],
    keep: bool,
) -> Result<(Cost, Vec<u8>), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let start = Instant::now();
    let out = Command::new(exe)
        .arg("--as-cli")
        .args(args)
        .stdout(if keep { Stdio::piped() } else { Stdio::null() })
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    let wall_s = start.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.code().is_some_and(|c| ok_codes.contains(&c)) {
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
    let cost = Cost {
        peak_kib: field("vmhwm_kib").unwrap_or(0.0) as u64,
        wall_s,
        main_cpu_us: field("main_cpu_us").unwrap_or(f64::NAN),
        all_cpu_us: field("all_cpu_us").unwrap_or(f64::NAN),
    };
    Ok((cost, out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_line_splits_at_the_childs_clock_reads() {
        let f = FirstResult::parse(
            "first 12 main_ns=1003000000 result_ns=1008000000",
            1_000_000_000,
            Duration::from_millis(9),
        );
        assert_eq!(
            f,
            Some(FirstResult {
                total: Duration::from_millis(9),
                start: Duration::from_millis(3),
                tool: Duration::from_millis(5),
            })
        );
    }

    #[test]
    fn a_first_line_without_times_or_out_of_order_does_not_split() {
        let total = Duration::from_millis(9);
        assert_eq!(FirstResult::parse("first 12", 5, total), None);
        // main before the spawn: not this spawn's child.
        assert_eq!(
            FirstResult::parse("first 12 main_ns=4 result_ns=9", 5, total),
            None
        );
        // the result before main.
        assert_eq!(
            FirstResult::parse("first 12 main_ns=8 result_ns=7", 5, total),
            None
        );
    }
}
