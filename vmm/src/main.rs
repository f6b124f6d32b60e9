//! `tsc-rendezvous`: the command-line entry point.
//!
//! Exit codes: 0 the run completed and was reported; 1 the run failed after it
//! started (a vCPU error, a timeout, invalid guest data); 2 it could not run
//! (bad arguments, no usable /dev/kvm, a missing KVM capability, a bad guest
//! image).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use tsc_rendezvous::cli::{Cli, Cmd, RunArgs};
use tsc_rendezvous::report::{self, Report};
use tsc_rendezvous::runner::{self, RunError, RunOptions};

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
    if let Some(Cmd::Compare(args)) = &cli.command {
        return tsc_rendezvous::compare::cmd::main(args);
    }
    run(&cli.run_args())
}

fn run(args: &RunArgs) -> ExitCode {
    let image = match &args.guest {
        Some(path) => match std::fs::read(path) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                eprintln!(
                    "error: cannot read the guest image {}: {e}; give the path of a guest ELF",
                    path.display()
                );
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let mut runs = Vec::new();
    let mut host = None;
    for variant in args.variants() {
        let opts = RunOptions {
            vcpus: args.vcpus,
            schedule: vec![variant; args.rounds as usize],
            timeout: args.timeout(),
            image: image.clone(),
        };
        log::info!(
            "running {} on {} vCPUs, {} rounds",
            variant.name(),
            args.vcpus,
            args.rounds
        );
        match runner::run(&opts) {
            Ok(out) => {
                host.get_or_insert_with(|| out.host.clone());
                runs.push(report::variant_report(variant.name(), out));
            }
            Err(f) => {
                eprintln!("error: {} (variant {})", f.error, variant.name());
                if !f.completed.is_empty() {
                    eprintln!(
                        "note: {} round(s) had completed before the error",
                        f.completed.len()
                    );
                }
                let setup = matches!(f.error, RunError::Vm(_) | RunError::Signal(_));
                return ExitCode::from(if setup { 2 } else { 1 });
            }
        }
    }
    let Some(host) = host else {
        eprintln!("error: nothing ran");
        return ExitCode::from(1);
    };
    let report = Report {
        schema: report::SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        host,
        vcpus: args.vcpus,
        rounds_per_variant: args.rounds,
        runs,
    };
    let text = if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => s + "\n",
            Err(e) => {
                eprintln!("error: cannot encode the report as JSON: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        report::render_text(&report)
    };
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
        .is_err()
    {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
