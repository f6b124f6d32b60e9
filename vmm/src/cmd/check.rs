//! `check`: the regression checks, their report (text, `--json`, `--junit`,
//! `--ktap`, `--markdown`), the baseline comparison and the exit code: 0
//! every check passed (or was skipped) and nothing regressed, 1 a check
//! failed or regressed, 2 the checks could not run, 130/143 stopped by
//! SIGINT/SIGTERM (what was measured is reported, marked incomplete).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use tsc_contract::Variant;

use super::args::{
    parse_one_variant, parse_percent, parse_positive, parse_rounds, parse_timeout, parse_tsc_khz,
    parse_vcpus, TSC_KHZ_HELP,
};
use super::common::{cannot_run, create_output, install_stop_handlers, Exit};
use crate::check::baseline::DEFAULT_TOLERANCE;
use crate::check::{
    self, baseline, junit, ktap, markdown, CheckOptions, CheckReport, DEFAULT_EXCHANGES,
};
use crate::options::default_timeout;
use crate::output;
use crate::stop;
use crate::tsc::frequency::TscRequest;

/// Options of `check`.
#[derive(Debug, Args, Clone)]
pub struct CheckArgs {
    /// vCPUs for the rendezvous, warp and skew checks.
    #[arg(long, default_value_t = 2, value_parser = parse_vcpus)]
    pub vcpus: u32,

    /// Rendezvous rounds for checks 3-6.
    #[arg(long, default_value_t = 200, value_parser = parse_rounds)]
    pub rounds: u32,

    /// The variant to run (xen-4.15, xen-6ca022a1, xen-head).
    #[arg(long, default_value = "xen-head", value_parser = parse_one_variant)]
    pub variant: Variant,

    /// Iterations of the guest's lock-ordered warp test per vCPU.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub warp_iterations: u64,

    /// Exchanges per ordered pair of vCPUs in the forced hand-off test
    /// (check 5): each pair's initiator reads its TSC and hands it over, the
    /// responder reads its own and replies, the initiator reads again.
    #[arg(long, default_value_t = DEFAULT_EXCHANGES, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub exchanges: u32,

    /// Check 6 fails when the median or p99 skew exceeds this many ns.
    #[arg(long, value_name = "NS", value_parser = parse_positive)]
    pub max_skew_ns: Option<f64>,

    /// Check 6 fails when the median or p99 skew exceeds this many cycles.
    #[arg(long, value_name = "CYCLES")]
    pub max_skew_cycles: Option<u64>,

    /// Print the result as JSON (schema `tsc-rendezvous/check/v1`,
    /// vmm/schema/check-v1.json) instead of the readable table.
    #[arg(long)]
    pub json: bool,

    /// Also write a JUnit XML file (one testcase per check).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Also write the results in KTAP version 1, the kernel selftests'
    /// format (one result line per check; SKIP and UNDECIDED as `# SKIP`).
    #[arg(long, value_name = "FILE")]
    pub ktap: Option<PathBuf>,

    /// Also write the verdict table as GitHub-flavoured Markdown (for
    /// `$GITHUB_STEP_SUMMARY`): environment, one row per check, totals and
    /// regressions. Created before anything is measured.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,

    /// Compare with an earlier `check --json` result: a check whose verdict
    /// got worse (PASS > UNDECIDED > SKIP > FAIL; PASS to UNDECIDED is no
    /// evidence of a regression), a missing check, or a median skew that grew
    /// beyond the tolerance fails (exit code 1).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// Allowed growth of the median skew against the baseline, in percent
    /// (growth below 1,000 cycles never counts).
    #[arg(long, value_name = "PERCENT", default_value_t = DEFAULT_TOLERANCE * 100.0, value_parser = parse_percent)]
    pub tolerance: f64,

    /// Give up after this many seconds. Default: 120 s plus 100 ms per round
    /// and vCPU.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,

    #[arg(long, value_name = "KHZ|RATIOx", value_parser = parse_tsc_khz, help = TSC_KHZ_HELP)]
    pub tsc_khz: Option<TscRequest>,
}

impl CheckArgs {
    /// The deadline of the whole check.
    pub fn timeout(&self) -> Duration {
        match self.timeout {
            Some(t) => t,
            None => Duration::from_secs(60) + default_timeout(self.vcpus, self.rounds),
        }
    }
}

/// Runs `check`.
pub fn main(args: &CheckArgs) -> Exit {
    match check(args) {
        Ok(exit) | Err(exit) => exit,
    }
}

fn check(args: &CheckArgs) -> Result<Exit, Exit> {
    let base = match &args.baseline {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|t| baseline::load(&t))
                .map_err(|e| cannot_run(format_args!("baseline {}: {e}", path.display())))?,
        ),
        None => None,
    };
    // An unwritable --markdown path fails now, not after the measurement.
    let markdown_file = match &args.markdown {
        Some(path) => Some((create_output(path, "Markdown")?, path)),
        None => None,
    };
    install_stop_handlers()?;
    let opts = CheckOptions {
        vcpus: args.vcpus,
        rounds: args.rounds,
        variant: args.variant,
        warp_iterations: args.warp_iterations,
        exchanges: args.exchanges,
        max_skew_ns: args.max_skew_ns,
        max_skew_cycles: args.max_skew_cycles,
        timeout: args.timeout(),
        tsc: args.tsc_khz,
    };
    let started = Instant::now();
    let mut report = match check::run_checks(&opts) {
        Ok(r) => r,
        Err(e) => {
            if let Some(signal) = e.0.signal() {
                stop::seen(signal);
                eprintln!("error: {e}");
                return Ok(Exit::Stopped(signal));
            }
            return Err(cannot_run(format_args!("the checks could not run: {e}")));
        }
    };
    if let (Some(_), Some(signal)) = (&report.incomplete, stop::requested()) {
        stop::seen(signal);
    }
    if let Some(b) = &base {
        let out = baseline::compare(&mut report, b, args.tolerance / 100.0);
        for m in out.missing {
            eprintln!("warning: check '{m}' is in the baseline but not in this run");
        }
    }
    write_files(args, &report, started, markdown_file)?;
    match output::print(&report, args.json, check::render_text) {
        Ok(()) => {}
        Err(e @ output::PrintError::Json(_)) => {
            return Err(cannot_run(format_args!("the check result: {e}")))
        }
        Err(output::PrintError::Write(_)) => return Ok(Exit::Failed),
    }
    if let Some(why) = &report.incomplete {
        eprintln!("error: {why}");
        if let Some(signal) = stop::requested() {
            return Ok(Exit::Stopped(signal));
        }
    }
    Ok(if report.ok { Exit::Done } else { Exit::Failed })
}

/// Writes the `--junit`, `--ktap` and `--markdown` files of the report.
fn write_files(
    args: &CheckArgs,
    report: &CheckReport,
    started: Instant,
    markdown_file: Option<(std::fs::File, &PathBuf)>,
) -> Result<(), Exit> {
    if let Some(path) = &args.junit {
        let xml = junit::render(report, started.elapsed().as_secs_f64());
        std::fs::write(path, xml).map_err(|e| {
            cannot_run(format_args!(
                "cannot write the JUnit file {}: {e}",
                path.display()
            ))
        })?;
    }
    if let Some(path) = &args.ktap {
        std::fs::write(path, ktap::render(report)).map_err(|e| {
            cannot_run(format_args!(
                "cannot write the KTAP file {}: {e}",
                path.display()
            ))
        })?;
    }
    if let Some((mut file, path)) = markdown_file {
        file.write_all(markdown::render(report).as_bytes())
            .map_err(|e| {
                cannot_run(format_args!(
                    "cannot write the Markdown file {}: {e}",
                    path.display()
                ))
            })?;
    }
    Ok(())
}
