//! `check`: the regression checks, their report (text, `--json`, `--junit`,
//! `--ktap`, `--markdown`, `--kcidb`, `--openmetrics`; each file option takes
//! `-` for stdout), the baseline comparison and the exit code: 0 every check
//! passed (or was skipped) and nothing regressed, 1 a check failed or
//! regressed, 2 the checks could not run, 130/143 stopped by SIGINT/SIGTERM
//! (what was measured is reported, marked incomplete); with
//! `--kselftest-exit-codes` 4 when every check was skipped or undecided.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use tsc_contract::Variant;

use super::args::{
    parse_one_variant, parse_percent, parse_positive, parse_rounds, parse_timeout, parse_tsc_khz,
    parse_vcpus, TSC_KHZ_HELP,
};
use super::common::{cannot_run, create_output, install_stop_handlers, stdout_once, Exit};
use crate::check::baseline::DEFAULT_TOLERANCE;
use crate::check::kcidb::{self, Submission};
use crate::check::kselftest::{self, Outcome};
use crate::check::{
    self, baseline, junit, ktap, markdown, openmetrics, CheckOptions, CheckReport,
    DEFAULT_EXCHANGES, DEFAULT_WARP_ITERATIONS,
};
use crate::host::host_name;
use crate::options::default_timeout;
use crate::output;
use crate::output::target::{Atomic, OutputTarget, Sink};
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
    #[arg(long, default_value_t = DEFAULT_WARP_ITERATIONS, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
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

    /// Also write a JUnit XML file (one testcase per check). Every file
    /// option takes `-` for stdout: then only that is printed there (one
    /// such option, not with --json); files are created before anything is
    /// measured.
    #[arg(long, value_name = "FILE", value_parser = OutputTarget::parse)]
    pub junit: Option<OutputTarget>,

    /// Also write the results in KTAP version 1, the kernel selftests'
    /// format (one result line per check; SKIP and UNDECIDED as `# SKIP`).
    #[arg(long, value_name = "FILE", value_parser = OutputTarget::parse)]
    pub ktap: Option<OutputTarget>,

    /// Also write the verdict table as GitHub-flavoured Markdown (for
    /// `$GITHUB_STEP_SUMMARY`): environment, one row per check, totals and
    /// regressions.
    #[arg(long, value_name = "FILE", value_parser = OutputTarget::parse)]
    pub markdown: Option<OutputTarget>,

    /// Also write the run as KernelCI's KCIDB I/O JSON (schema 5.3): the
    /// running kernel as checkout and build, one test per check.
    #[arg(long, value_name = "FILE", value_parser = OutputTarget::parse)]
    pub kcidb: Option<OutputTarget>,

    /// The KCIDB origin (the submitting CI system's name; lower-case
    /// letters, digits and `_`), the prefix of every id.
    #[arg(long, value_name = "NAME", default_value = kcidb::DEFAULT_ORIGIN, value_parser = kcidb::parse_origin)]
    pub kcidb_origin: String,

    /// Also write Prometheus/OpenMetrics gauges for node_exporter's
    /// textfile collector (a verdict gauge per check and verdict, the
    /// measured values, the time of the run), replaced atomically.
    #[arg(long, value_name = "FILE", value_parser = OutputTarget::parse)]
    pub openmetrics: Option<OutputTarget>,

    /// Exit as a kselftest does: 0 nothing failed and something passed, 1 a
    /// check failed or regressed, 4 (KSFT_SKIP) every check was skipped or
    /// undecided, or no usable KVM (as the kernel's KVM selftests skip
    /// without /dev/kvm). 2 (other setup errors) and 130/143 as without it.
    #[arg(long)]
    pub kselftest_exit_codes: bool,

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

/// The file outputs, opened before anything is measured.
struct Outputs {
    junit: Option<Sink>,
    ktap: Option<Sink>,
    markdown: Option<Sink>,
    kcidb: Option<Sink>,
    openmetrics: Option<Atomic>,
}

impl Outputs {
    /// Opens every file option's target: an unwritable path fails now.
    fn open(args: &CheckArgs) -> Result<Outputs, Exit> {
        let open = |t: &Option<OutputTarget>, what| t.as_ref().map(|t| create_output(t, what));
        Ok(Outputs {
            junit: open(&args.junit, "JUnit").transpose()?,
            ktap: open(&args.ktap, "KTAP").transpose()?,
            markdown: open(&args.markdown, "Markdown").transpose()?,
            kcidb: open(&args.kcidb, "KCIDB").transpose()?,
            openmetrics: args
                .openmetrics
                .as_ref()
                .map(|t| {
                    t.create_atomic().map_err(|e| {
                        cannot_run(format_args!(
                            "cannot create the OpenMetrics file {t}: {e}; give a writable path"
                        ))
                    })
                })
                .transpose()?,
        })
    }
}

fn check(args: &CheckArgs) -> Result<Exit, Exit> {
    let stdout_taken = stdout_once(
        args.json,
        &[
            ("--junit", args.junit.as_ref()),
            ("--ktap", args.ktap.as_ref()),
            ("--markdown", args.markdown.as_ref()),
            ("--kcidb", args.kcidb.as_ref()),
            ("--openmetrics", args.openmetrics.as_ref()),
        ],
    )?;
    let base = match &args.baseline {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|t| baseline::load(&t))
                .map_err(|e| cannot_run(format_args!("baseline {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let outputs = Outputs::open(args)?;
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
    let started_at = SystemTime::now();
    let mut report = match check::run_checks(&opts) {
        Ok(r) => r,
        Err(e) => {
            if let Some(signal) = e.0.signal() {
                stop::seen(signal);
                eprintln!("error: {e}");
                return Ok(Exit::Stopped(signal));
            }
            if args.kselftest_exit_codes && e.0.kvm_unavailable() {
                // kselftest's convention for a missing prerequisite (the
                // kernel's KVM selftests skip without /dev/kvm): KSFT_SKIP.
                eprintln!("error: the checks could not run: {e} (a kselftest skip: exit code 4)");
                return Ok(Exit::Skipped);
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
    let when = (started, started_at);
    write_files(args, &report, when, outputs)?;
    if !stdout_taken {
        match output::print(&report, args.json, check::render_text) {
            Ok(()) => {}
            Err(e @ output::PrintError::Json(_)) => {
                return Err(cannot_run(format_args!("the check result: {e}")))
            }
            Err(output::PrintError::Write(_)) => return Ok(Exit::Failed),
        }
    }
    if let Some(why) = &report.incomplete {
        eprintln!("error: {why}");
        if let Some(signal) = stop::requested() {
            return Ok(Exit::Stopped(signal));
        }
    }
    Ok(
        match (args.kselftest_exit_codes, kselftest::outcome(&report)) {
            (true, Outcome::Skip) => Exit::Skipped,
            (true, Outcome::Fail) => Exit::Failed,
            (true, Outcome::Pass) => Exit::Done,
            (false, _) if report.ok => Exit::Done,
            (false, _) => Exit::Failed,
        },
    )
}

/// Writes the file outputs of the report; `when`: the run's start (monotonic
/// and wall clock).
fn write_files(
    args: &CheckArgs,
    report: &CheckReport,
    (started, started_at): (Instant, SystemTime),
    outputs: Outputs,
) -> Result<(), Exit> {
    type Text<'a> = &'a dyn Fn() -> Result<String, String>;
    let write = |sink: Option<Sink>, target: &Option<OutputTarget>, what, text: Text<'_>| {
        let (Some(mut sink), Some(target)) = (sink, target) else {
            return Ok(());
        };
        text()
            .and_then(|t| sink.write_text(&t).map_err(|e| e.to_string()))
            .map_err(|e| cannot_run(format_args!("cannot write the {what} file {target}: {e}")))
    };
    let elapsed = started.elapsed().as_secs_f64();
    write(outputs.junit, &args.junit, "JUnit", &|| {
        Ok(junit::render(report, elapsed))
    })?;
    write(outputs.ktap, &args.ktap, "KTAP", &|| {
        Ok(ktap::render(report))
    })?;
    write(outputs.markdown, &args.markdown, "Markdown", &|| {
        Ok(markdown::render(report))
    })?;
    write(outputs.kcidb, &args.kcidb, "KCIDB", &|| {
        let host = host_name();
        let s = Submission {
            origin: &args.kcidb_origin,
            host: &host,
            started: started_at,
        };
        let doc = kcidb::render(report, &s);
        serde_json::to_string_pretty(&doc)
            .map(|t| t + "\n")
            .map_err(|e| e.to_string())
    })?;
    if let (Some(file), Some(target)) = (outputs.openmetrics, &args.openmetrics) {
        file.commit(&openmetrics::render(report, started_at))
            .map_err(|e| {
                cannot_run(format_args!(
                    "cannot write the OpenMetrics file {target}: {e}"
                ))
            })?;
    }
    Ok(())
}
