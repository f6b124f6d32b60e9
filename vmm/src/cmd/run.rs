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
    parse_backend, parse_inject, parse_rounds, parse_timeout, parse_variants, parse_vcpus,
    parse_windows, VariantChoice,
};
use super::common::{
    cannot_run, create_output, incomplete_note, install_stop_handlers, load_guest, Exit,
};
use crate::analysis::RoundResult;
use crate::error::RunError;
use crate::options::{default_timeout, Backend, Injection, RunOptions};
use crate::report::{self, Report, VariantReport};
use crate::rounds::{self, RunFacts};
use crate::stop;
use crate::vstate::sync_area::{FIRST_WINDOW_MS, WINDOW_MS};

/// Options of `run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Where the algorithms run: `kvm` (in a KVM guest, real `wrmsr
    /// IA32_TSC`, readback through KVM) or `host` (on threads of this OS, one
    /// per vCPU, pinned to their own CPUs where there are enough; TSC writes
    /// simulated as per-thread offsets; no hypervisor involved).
    #[arg(long, default_value = "kvm", value_parser = parse_backend)]
    pub backend: Backend,

    /// Number of vCPUs taking part (1 up to what KVM and the guest layout
    /// allow); with `--backend host`, the number of threads.
    #[arg(long, default_value_t = 2, value_parser = parse_vcpus)]
    pub vcpus: u32,

    /// The variant to run, or `all` for every variant one after another.
    /// Variants: xen-4.15 (before the seed), xen-6ca022a1 (the seed: latched
    /// value), xen-head (the seed plus a PAUSE after the write), xen-rfc-v3
    /// (the RFC: the stamp on its own cache line, prefetched), xen-std (Xen's
    /// std rendezvous: no TSC write), linux-tsc-sync (Linux's warp check and
    /// TSC_ADJUST compensation, CPU 0 against each AP).
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

    /// The windows of linux-tsc-sync's warp checks, in ms: for an AP that
    /// starts a package, and for every other AP (Linux: 20,2). All vCPUs are
    /// one package, so every AP uses REST_MS.
    #[arg(long, value_name = "FIRST_MS,REST_MS", default_value = "20,2", value_parser = parse_windows)]
    pub linux_windows: (u64, u64),
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            backend: Backend::Kvm,
            vcpus: 2,
            variant: VariantChoice::All,
            rounds: 100,
            json: false,
            timeout: None,
            guest: None,
            output: None,
            inject: None,
            linux_windows: (FIRST_WINDOW_MS, WINDOW_MS),
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
        if self.backend == Backend::Host {
            host_backend_refuses(self.guest.is_some(), self.inject.is_some())?;
        }
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

/// What the host backend cannot do, named with the fix: it runs no guest,
/// so it has no guest image to replace and no guest to inject faults into.
pub fn host_backend_refuses(guest: bool, inject: bool) -> Result<(), String> {
    if guest {
        return Err("--guest needs a guest: use it with --backend kvm".into());
    }
    if inject {
        return Err("--inject makes the guest misbehave: use it with --backend kvm".into());
    }
    Ok(())
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
            backend: args.backend,
            vcpus: args.vcpus,
            schedule: vec![variant; args.rounds as usize],
            timeout: args.timeout(),
            image: image.clone(),
            inject: args.inject,
            sync_windows_ms: args.linux_windows,
        };
        log::info!(
            "running {} on {} vCPUs ({} backend), {} rounds",
            variant.name(),
            args.vcpus,
            args.backend.name(),
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cmd::{Cli, Cmd};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tsc-rendezvous").chain(args.iter().copied()))
    }

    fn run_args(args: &[&str]) -> RunArgs {
        parse(args)
            .expect("valid arguments")
            .run_args()
            .expect("a run")
    }

    #[test]
    fn the_backend_and_the_windows_default_to_kvm_and_linux() {
        let a = run_args(&[]);
        assert_eq!((a.backend, a.linux_windows), (Backend::Kvm, (20, 2)));
        let d = RunArgs::default();
        assert_eq!((d.backend, d.linux_windows), (a.backend, a.linux_windows));
        let a = run_args(&["--backend", "host", "--linux-windows", "50,5"]);
        assert_eq!((a.backend, a.linux_windows), (Backend::Host, (50, 5)));
        let a = run_args(&["run", "--backend", "host"]);
        assert_eq!(a.backend, Backend::Host);
        assert!(parse(&["--backend", "qemu"]).is_err());
        assert!(parse(&["--linux-windows", "20"]).is_err());
        let c = match parse(&["compare", "--backend", "host", "--linux-windows", "3,1"])
            .expect("valid")
            .command
        {
            Some(Cmd::Compare(c)) => c,
            other => panic!("not compare: {other:?}"),
        };
        assert_eq!((c.backend, c.linux_windows), (Backend::Host, (3, 1)));
    }

    #[test]
    fn the_host_backend_refuses_guest_options_with_the_fix() {
        let a = run_args(&["--backend", "host", "--inject", "panic"]);
        let e = a.validate().expect_err("no guest to inject into");
        assert!(e.contains("--backend kvm"), "{e}");
        let a = run_args(&["--backend", "host", "--guest", "g.elf"]);
        assert!(a.validate().is_err());
        assert!(run_args(&["--backend", "host"]).validate().is_ok());
        assert!(run_args(&["--inject", "panic"]).validate().is_ok());
    }
}
