//! `run` (the default command): every variant asked for, one VM each, the
//! rounds streamed to `--output` as they complete, then the readable report
//! or the JSON document; what completed is reported whatever stopped the run.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tsc_contract::Variant;

use super::args::{
    parse_inject, parse_rounds, parse_timeout, parse_variants, parse_vcpus, VariantChoice,
};
use super::common::{
    cannot_run, create_output, incomplete_note, install_stop_handlers, load_guest, Exit,
};
use crate::analysis::RoundResult;
use crate::error::RunError;
use crate::options::{default_timeout, Injection, RunOptions};
use crate::report::{self, Report, VariantReport};
use crate::rounds::{self, RunFacts};
use crate::stop;

/// Options of `run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Number of vCPUs taking part (1 up to what KVM and the guest layout allow).
    #[arg(long, default_value_t = 2, value_parser = parse_vcpus)]
    pub vcpus: u32,

    /// The variant to run, or `all` for every variant one after another.
    /// Variants: xen-4.15 (before the seed), xen-6ca022a1 (the seed: latched
    /// value), xen-head (the seed plus a PAUSE after the write).
    #[arg(long, default_value = "all", value_parser = parse_variants)]
    pub variant: VariantChoice,

    /// Rendezvous rounds per variant.
    #[arg(long, default_value_t = 100, value_parser = parse_rounds)]
    pub rounds: u32,

    /// Print one JSON document (schema `tsc-rendezvous/run/v1`, see the README)
    /// instead of the readable report.
    #[arg(long)]
    pub json: bool,

    /// Watchdog: give up after this many seconds per variant, stop every vCPU
    /// and report where each one was. Default: 60 s plus 100 ms per round and
    /// vCPU.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,

    /// Run this guest ELF instead of the embedded one (for testing guests).
    #[arg(long, value_name = "PATH")]
    pub guest: Option<PathBuf>,

    /// Stream one JSON line per completed round to FILE (schema
    /// `tsc-rendezvous/round/v1`), flushed as it goes, so an interrupted or
    /// failed run keeps every round it measured.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Inject a fault, to test the error handling: KIND[,vcpu=K][,round=R][,iter=I][,cycles=C]
    /// (K, R, I default to 0; I is the rendezvous iteration, 0..=4 in execution order).
    /// KINDs: stall (vCPU K spins forever at the start of round R iteration I; the
    /// watchdog ends the run), delay (vCPU K spins C TSC cycles before its final
    /// write in round R), triple-fault (vCPU K triple-faults in round R iteration I),
    /// panic (the guest panics on vCPU K in round R iteration I), corrupt-size
    /// (vCPU K reports round R with a 2-byte port write), corrupt-index (vCPU K's
    /// record of round R names a vCPU out of range), corrupt-value (vCPU K's record
    /// of round R holds impossible TSC values).
    #[arg(long, value_name = "SPEC", value_parser = parse_inject, verbatim_doc_comment)]
    pub inject: Option<Injection>,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            vcpus: 2,
            variant: VariantChoice::All,
            rounds: 100,
            json: false,
            timeout: None,
            guest: None,
            output: None,
            inject: None,
        }
    }
}

impl RunArgs {
    /// The variants to run, in order.
    pub fn variants(&self) -> Vec<Variant> {
        match &self.variant {
            VariantChoice::All => Variant::ALL.to_vec(),
            VariantChoice::One(v) => vec![*v],
        }
    }

    /// Checks what clap cannot check alone (options against each other);
    /// the error names the problem and the fix.
    pub fn validate(&self) -> Result<(), String> {
        match &self.inject {
            Some(inj) => inj.check(self.vcpus, self.rounds),
            None => Ok(()),
        }
    }

    /// The deadline of one variant's run.
    pub fn timeout(&self) -> Duration {
        match self.timeout {
            Some(t) => t,
            None => default_timeout(self.vcpus, self.rounds),
        }
    }
}

/// The `--output` stream: one JSON line per completed round, flushed at once.
struct Stream {
    out: Option<BufWriter<File>>,
    vcpus: u32,
}

impl Stream {
    fn write(&mut self, round: &RoundResult) -> Result<(), String> {
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

/// Runs `run`.
pub fn main(args: &RunArgs) -> Exit {
    if let Err(e) = args.validate() {
        return cannot_run(e);
    }
    match prepare_and_run(args) {
        Ok(exit) | Err(exit) => exit,
    }
}

fn prepare_and_run(args: &RunArgs) -> Result<Exit, Exit> {
    let image = load_guest(args.guest.as_deref())?;
    let out = match &args.output {
        Some(path) => Some(BufWriter::new(create_output(path, "--output")?)),
        None => None,
    };
    let mut stream = Stream {
        out,
        vcpus: args.vcpus,
    };
    install_stop_handlers()?;

    let mut runs: Vec<VariantReport> = Vec::new();
    let mut host = None;
    let mut failure: Option<(RunError, Variant)> = None;
    for variant in args.variants() {
        if let Some(signal) = stop::requested() {
            failure = Some((RunError::interrupted(signal, 0), variant));
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
        let mut rounds: Vec<RoundResult> = Vec::with_capacity(args.rounds as usize);
        let result = rounds::run_streaming(&opts, &mut |r| {
            // Kept for the report even when it cannot be streamed.
            let written = stream.write(&r);
            rounds.push(r);
            written
        });
        match result {
            Ok(facts) => {
                host.get_or_insert_with(|| facts.host.clone());
                runs.push(report::variant_report(variant.name(), facts, rounds));
            }
            Err(f) => {
                if host.is_none() {
                    host = f.host.map(|h| *h);
                }
                if let (false, Some(h)) = (rounds.is_empty(), &host) {
                    let partial = RunFacts {
                        host: h.clone(),
                        vcpus: args.vcpus,
                        initial: Vec::new(),
                        spin_breaker: false,
                        notes: vec![incomplete_note(
                            f.rounds_completed,
                            u64::from(args.rounds),
                            &f.error,
                        )],
                    };
                    runs.push(report::variant_report(variant.name(), partial, rounds));
                }
                failure = Some((f.error, variant));
                break;
            }
        }
    }

    // Whatever completed is reported, failure or not.
    let mut exit = Exit::Done;
    if let Some(host) = host.filter(|_| !runs.is_empty()) {
        let report = Report {
            schema: report::SCHEMA,
            tool_version: env!("CARGO_PKG_VERSION"),
            host,
            vcpus: args.vcpus,
            rounds_per_variant: args.rounds,
            runs,
        };
        if let Err(e) = report::print(&report, args.json, report::render_text) {
            eprintln!("error: cannot print the report: {e}");
            exit = Exit::Failed;
        }
    }
    if let Some((error, variant)) = failure {
        eprintln!("error: {error} (variant {})", variant.name());
        return Ok(Exit::of(&error));
    }
    Ok(exit)
}
