//! `tsc-rendezvous`: the command-line entry point.
//!
//! Exit codes: 0 the run completed and was reported; 1 the run failed after it
//! started (a vCPU error, a timeout, invalid guest data), with the rounds
//! completed before still reported; 2 it could not run (bad arguments, no
//! usable /dev/kvm, a missing KVM capability, a bad guest image); 128 + the
//! signal number when SIGINT (130) or SIGTERM (143) stopped it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

use clap::Parser;
use std::time::Instant;

use tsc_vmm::check::{self, CheckOptions};
use tsc_vmm::cli::{CheckArgs, Cli, Cmd, RunArgs};
use tsc_vmm::guest_image;
use tsc_vmm::report::{self, Report, VariantReport};
use tsc_vmm::runner::{self, RunError, RunOptions, RunOutput};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // clap: 0 for --help/--version, 2 for usage errors.
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp_millis()
        .init();
    match cli.command {
        Some(Cmd::Check(args)) => check(&args),
        Some(Cmd::Compare(args)) => tsc_vmm::compare::cmd::main(&args),
        _ => match cli.run_args() {
            Some(args) => run(&args),
            None => ExitCode::from(2),
        },
    }
}

fn check(args: &CheckArgs) -> ExitCode {
    let baseline = match &args.baseline {
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| check::baseline::load(&t))
        {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("error: baseline {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let opts = CheckOptions {
        vcpus: args.vcpus,
        rounds: args.rounds,
        variant: args.variant.name().to_string(),
        warp_iterations: args.warp_iterations,
        max_skew_ns: args.max_skew_ns,
        max_skew_cycles: args.max_skew_cycles,
        timeout_secs: args.timeout().as_secs_f64(),
    };
    let started = Instant::now();
    let mut report = match check::run_checks(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: the checks could not run: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(b) = &baseline {
        let out = check::baseline::compare(&mut report, b, args.tolerance / 100.0);
        for m in out.missing {
            eprintln!("warning: check '{m}' is in the baseline but not in this run");
        }
    }
    if let Some(path) = &args.junit {
        let xml = check::junit::render(&report, started.elapsed().as_secs_f64());
        if let Err(e) = std::fs::write(path, xml) {
            eprintln!("error: cannot write the JUnit file {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    match report::print(&report, args.json, check::render_text) {
        Ok(()) => {}
        Err(e @ report::PrintError::Json(_)) => {
            eprintln!("error: the check result: {e}");
            return ExitCode::from(2);
        }
        Err(report::PrintError::Write(_)) => return ExitCode::from(1),
    }
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

extern "C" fn on_stop_signal(signal: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if runner::stop_requested().is_some() {
        // The second one: the user insists. Die of the signal at once.
        // SAFETY: signal(2) and raise(3) are async-signal-safe; restoring the
        // default action makes the raise terminate the process.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
        return;
    }
    // Async-signal-safe: it only stores to an atomic. The run then stops
    // its vCPUs, keeps the completed rounds and exits with 128 + signal.
    runner::request_stop(signal);
}

/// Ctrl-C and SIGTERM stop the run cleanly instead of killing the process.
fn install_stop_handlers() -> Result<(), String> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        vmm_sys_util::signal::register_signal_handler(signal, on_stop_signal).map_err(|e| {
            format!(
                "cannot install the {} handler: {e}",
                runner::signal_name(signal)
            )
        })?;
    }
    Ok(())
}

/// A usage-level error: one line, exit code 2.
fn usage_error(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(2)
}

fn read_guest(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "cannot read the guest image {}: {e}; give the path of a guest ELF",
            path.display()
        )
    })?;
    guest_image::check(&bytes).map_err(|e| {
        format!(
            "the guest image {} is unusable: {e}; give a static, non-PIE x86-64 ELF linked inside {:#x}..{:#x}",
            path.display(),
            tsc_contract::layout::IMAGE,
            tsc_contract::layout::IMAGE_END
        )
    })?;
    Ok(bytes)
}

/// The `--output` stream: one JSON line per completed round, flushed at once.
struct Stream {
    out: Option<BufWriter<File>>,
    vcpus: u32,
}

impl Stream {
    fn write(&mut self, round: &tsc_vmm::analysis::RoundResult) -> Result<(), String> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let line = report::round_line(self.vcpus, round).map_err(|e| e.to_string())?;
        out.write_all(line.as_bytes())
            .and_then(|_| out.write_all(b"\n"))
            .and_then(|_| out.flush())
            .map_err(|e| e.to_string())
    }
}

fn run(args: &RunArgs) -> ExitCode {
    if let Err(e) = args.validate() {
        return usage_error(e);
    }
    let image = match &args.guest {
        Some(path) => match read_guest(path) {
            Ok(bytes) => Some(bytes),
            Err(e) => return usage_error(e),
        },
        None => None,
    };
    let mut stream = Stream {
        out: None,
        vcpus: args.vcpus,
    };
    if let Some(path) = &args.output {
        match File::create(path) {
            Ok(f) => stream.out = Some(BufWriter::new(f)),
            Err(e) => {
                return usage_error(format_args!(
                    "cannot create the --output file {}: {e}; give a writable path",
                    path.display()
                ))
            }
        }
    }
    if let Err(e) = install_stop_handlers() {
        return usage_error(e);
    }

    let mut runs: Vec<VariantReport> = Vec::new();
    let mut host = None;
    let mut failure = None;
    for variant in args.variants() {
        if let Some(signal) = runner::stop_requested() {
            failure = Some((RunError::Interrupted { signal, round: 0 }, variant));
            break;
        }
        let opts = RunOptions {
            vcpus: args.vcpus,
            schedule: vec![variant; args.rounds as usize],
            timeout: args.timeout(),
            image: image.clone(),
            inject: args.inject,
        };
        log::info!(
            "running {} on {} vCPUs, {} rounds",
            variant.name(),
            args.vcpus,
            args.rounds
        );
        match runner::run_streaming(&opts, &mut |r| stream.write(r)) {
            Ok(out) => {
                host.get_or_insert_with(|| out.host.clone());
                runs.push(report::variant_report(variant.name(), out));
            }
            Err(f) => {
                if host.is_none() {
                    host = f.host.map(|h| *h);
                }
                if let (false, Some(h)) = (f.completed.is_empty(), &host) {
                    let partial = RunOutput {
                        host: h.clone(),
                        vcpus: args.vcpus,
                        initial: Vec::new(),
                        spin_breaker: false,
                        notes: vec![format!(
                            "incomplete: {} of {} round(s) completed before the error: {}",
                            f.completed.len(),
                            args.rounds,
                            f.error
                        )],
                        rounds: f.completed,
                    };
                    runs.push(report::variant_report(variant.name(), partial));
                }
                failure = Some((f.error, variant));
                break;
            }
        }
    }

    // Whatever completed is reported, failure or not.
    if let Some(host) = host.filter(|_| !runs.is_empty()) {
        let report = Report {
            schema: report::SCHEMA,
            tool_version: env!("CARGO_PKG_VERSION"),
            host,
            vcpus: args.vcpus,
            rounds_per_variant: args.rounds,
            runs,
        };
        if let Err(e) = print_report(&report, args.json) {
            eprintln!("error: cannot print the report: {e}");
            if failure.is_none() {
                return ExitCode::from(1);
            }
        }
    }

    let Some((error, variant)) = failure else {
        return ExitCode::SUCCESS;
    };
    eprintln!("error: {error} (variant {})", variant.name());
    ExitCode::from(exit_code(&error))
}

fn print_report(report: &Report, json: bool) -> Result<(), String> {
    report::print(report, json, report::render_text).map_err(|e| e.to_string())
}

/// 2: could not run; 128 + signal: stopped by a signal; 1: failed while running.
fn exit_code(error: &RunError) -> u8 {
    match error {
        RunError::Vm(_) | RunError::Signal(_) => 2,
        RunError::Interrupted { signal, .. } => (128 + (*signal).clamp(1, 127)) as u8,
        _ => 1,
    }
}
