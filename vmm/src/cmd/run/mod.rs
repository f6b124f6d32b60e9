//! `run` (the default command): every variant asked for, one VM each, for a
//! number of rounds or for a time (`--duration`), the rounds streamed to
//! `--output` as they complete (with a summary record every
//! `--summary-every` minutes), `--json` streamed to stdout as it goes, else
//! the readable report at the end; what completed is reported whatever
//! stopped the run. Memory does not grow with the rounds: each variant keeps
//! its statistics and its typical round ([`VariantAccumulator`]), never its
//! rounds.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use tsc_contract::Variant;

use super::args::{
    parse_backend, parse_duration, parse_initial_skew, parse_inject, parse_rounds,
    parse_summary_every, parse_timeout, parse_tsc_khz, parse_variants, parse_vcpus, parse_windows,
    VariantChoice, TSC_KHZ_HELP, TSC_KHZ_NEEDS_KVM,
};
use super::common::{
    cannot_run, create_output, incomplete_note, install_stop_handlers, load_guest, stdout_once,
    Exit,
};
use crate::error::RunError;
use crate::host::HostInfo;
use crate::options::{
    default_round_timeout, default_timeout, Backend, Injection, RunOptions, MAX_ROUNDS,
};
use crate::options::{FIRST_WINDOW_MS, WINDOW_MS};
use crate::output::progress::{self, ProgressLine};
use crate::output::target::OutputTarget;
use crate::report::summary::{self, Every, RunEntry, RunRecord};
use crate::report::{self, Report, VariantAccumulator, VariantReport};
use crate::run::{self, Repeat, RunFacts};
use crate::stop;
use crate::tsc::frequency::TscRequest;

mod sinks;
use sinks::{Json, Stream};

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

    /// Rendezvous rounds per variant (1 to 4294967295).
    #[arg(long, default_value_t = 100, value_parser = parse_rounds)]
    pub rounds: u32,

    /// Run for this long instead of a number of rounds (a soak): e.g. 30s,
    /// 90m, 8h, 1h30m; at most 30d. With several variants each gets an
    /// equal share, one after another. Not with --rounds. Each round then
    /// has its own watchdog deadline (see --timeout).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, conflicts_with = "rounds")]
    pub duration: Option<Duration>,

    /// Print one JSON document (schema `tsc-rendezvous/run/v1`, see the README)
    /// instead of the readable report, written as the rounds complete: each
    /// round as it comes, each variant's summary after its rounds.
    #[arg(long)]
    pub json: bool,

    /// Watchdog: give up after this many seconds per variant, stop every vCPU
    /// and report where each one was. Default: 60 s plus 100 ms per round and
    /// vCPU. With --duration the deadline is per round instead (default 60 s
    /// plus 100 ms per vCPU), on both backends.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,

    /// Run this guest ELF instead of the embedded one (for testing guests).
    #[arg(long, value_name = "PATH")]
    pub guest: Option<PathBuf>,

    /// Stream one JSON line per completed round to FILE (schema
    /// `tsc-rendezvous/round/v1`), flushed as it goes, so an interrupted or
    /// failed run keeps every round it measured; and every --summary-every
    /// minutes a summary record of the statistics so far (schema
    /// `tsc-rendezvous/summary/v1`).
    /// `-` streams them to stdout (then no readable report; not with --json).
    #[arg(long, value_name = "FILE", value_parser = OutputTarget::parse)]
    pub output: Option<OutputTarget>,

    /// With --output: write a summary record (the statistics so far) into it
    /// every this many minutes (fractions allowed); default 10.
    #[arg(long, value_name = "MINUTES", value_parser = parse_summary_every, requires = "output")]
    pub summary_every: Option<Duration>,

    /// Inject a fault, to test the error handling: KIND[,vcpu=K][,round=R][,iter=I][,cycles=C]
    /// (K, R, I default to 0; I is the rendezvous iteration, 0..=4 in execution order).
    /// KINDs: stall (vCPU K spins forever at the start of round R iteration I; the
    /// watchdog ends the run), delay (vCPU K spins C TSC cycles before its final
    /// write in round R), triple-fault (vCPU K triple-faults in round R iteration I),
    /// panic (the guest panics on vCPU K in round R iteration I), corrupt-size
    /// (vCPU K reports round R with a 2-byte port write), corrupt-index (vCPU K's
    /// record of round R names a vCPU out of range), corrupt-value (vCPU K's record
    /// of round R holds impossible TSC values), gp (vCPU K reads an MSR no CPU has
    /// at the start of round R iteration I: #GP), sse (vCPU K executes an SSE
    /// instruction at the start of round R iteration I: a KVM internal error on
    /// PVM, #UD on VMX/SVM), bad-port (vCPU K reports the end of round R to an
    /// unknown port), wrong-round (vCPU K reports round R as round R+1),
    /// early-done (vCPU K reports at the end of round R that it finished every
    /// round, and halts).
    #[arg(long, value_name = "SPEC", value_parser = parse_inject, verbatim_doc_comment)]
    pub inject: Option<Injection>,

    /// The windows of linux-tsc-sync's warp checks, in ms: for an AP that
    /// starts a package, and for every other AP (Linux: 20,2). All vCPUs are
    /// one package, so every AP uses REST_MS.
    #[arg(long, value_name = "FIRST_MS,REST_MS", default_value = "20,2", value_parser = parse_windows)]
    pub linux_windows: (u64, u64),

    /// Start from a skew for the algorithm to remove: vCPU k starts
    /// k * CYCLES / (N - 1) cycles ahead of vCPU 0, set before the first
    /// round (KVM: through KVM_VCPU_TSC_OFFSET, Linux >= 5.16; host: the
    /// threads' offsets) and verified by the readback. Where it cannot be
    /// applied or verified the command says why and exits 2.
    #[arg(long, value_name = "CYCLES", value_parser = parse_initial_skew)]
    pub initial_skew: Option<u64>,

    /// What the guest sees (method d): after every round, vCPU 0 and every
    /// other vCPU hand TSC readings back and forth EXCHANGES times in each
    /// direction (default 16), which bounds each vCPU's offset relative to
    /// vCPU 0 as the guest sees it; cross-checked with the exact offsets and
    /// the bracketed reads of the same moment. KVM only.
    #[arg(long, value_name = "EXCHANGES", num_args = 0..=1, default_missing_value = "16",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub guest_view: Option<u32>,

    /// Read kvmclock around every TSC write of the rendezvous (every vCPU
    /// registers its kvmclock page) and report how far it jumped, per round
    /// beside the skew: a kvmclock that follows a guest TSC write instead of
    /// running on is a stale pvclock page. KVM only; the reads add to the
    /// exit time measured.
    #[arg(long)]
    pub kvmclock: bool,

    #[arg(long, value_name = "KHZ|RATIOx", value_parser = parse_tsc_khz, help = TSC_KHZ_HELP)]
    pub tsc_khz: Option<TscRequest>,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            backend: Backend::Kvm,
            vcpus: 2,
            variant: VariantChoice::All,
            rounds: 100,
            duration: None,
            json: false,
            timeout: None,
            guest: None,
            output: None,
            summary_every: None,
            inject: None,
            linux_windows: (FIRST_WINDOW_MS, WINDOW_MS),
            initial_skew: None,
            guest_view: None,
            kvmclock: false,
            tsc_khz: None,
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
            if self.guest_view.is_some() {
                return Err(
                    "--guest-view runs the hand-off test in the guest: use it with --backend kvm"
                        .into(),
                );
            }
            if self.kvmclock {
                return Err(
                    "--kvmclock reads the guest's kvmclock: use it with --backend kvm".into(),
                );
            }
            if self.tsc_khz.is_some() {
                return Err(TSC_KHZ_NEEDS_KVM.into());
            }
        }
        match &self.inject {
            Some(inj) => inj.check(self.vcpus, self.max_rounds()),
            None => Ok(()),
        }
    }

    /// The most rounds a variant's run may have.
    pub fn max_rounds(&self) -> u32 {
        match self.duration {
            Some(_) => MAX_ROUNDS,
            None => self.rounds,
        }
    }

    /// The deadline of one variant's run (by rounds).
    pub fn timeout(&self) -> Duration {
        match self.timeout {
            Some(t) => t,
            None => default_timeout(self.vcpus, self.rounds),
        }
    }

    /// The deadline of every round of a run by time (`--duration`); `None`
    /// for a run by rounds.
    pub fn round_timeout(&self) -> Option<Duration> {
        self.duration.map(|_| {
            self.timeout
                .unwrap_or_else(|| default_round_timeout(self.vcpus))
        })
    }

    /// Each variant's share of `--duration`.
    pub fn duration_per_variant(&self) -> Option<Duration> {
        let n = self.variants().len().max(1) as u32;
        self.duration.map(|d| d / n)
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

/// Runs `run`.
pub fn main(args: &RunArgs) -> Exit {
    if let Err(e) = args.validate() {
        return cannot_run(e);
    }
    match prepare_and_run(args) {
        Ok(exit) | Err(exit) => exit,
    }
}

/// What every variant's run shares: the outputs, the progress line and the
/// summary records.
struct Outputs {
    stream: Stream,
    json: Json,
    progress: ProgressLine,
    summaries: Option<Every>,
    /// The variants that have ended, for the summary records.
    ended: Vec<RunEntry>,
    started: Instant,
}

impl Outputs {
    /// A summary record with the ended variants and `current`.
    fn summary_record(&mut self, current: RunEntry) -> Result<(), String> {
        self.ended.push(current);
        let line = summary::line(&RunRecord::new(
            self.stream.vcpus,
            self.started.elapsed(),
            &self.ended,
        ));
        self.ended.pop();
        self.stream.line(line)
    }
}

fn prepare_and_run(args: &RunArgs) -> Result<Exit, Exit> {
    let stdout_taken = stdout_once(args.json, &[("--output", args.output.as_ref())])?;
    let image = load_guest(args.guest.as_deref())?;
    let out = match &args.output {
        Some(path) => Some(BufWriter::new(create_output(path, "--output")?)),
        None => None,
    };
    let summaries = out.as_ref().map(|_| {
        Every::new(
            args.summary_every
                .unwrap_or(Duration::from_secs(60 * summary::DEFAULT_EVERY_MINUTES)),
        )
    });
    install_stop_handlers()?;
    let mut o = Outputs {
        stream: Stream {
            out,
            vcpus: args.vcpus,
        },
        json: if args.json { Json::Pending } else { Json::Off },
        progress: ProgressLine::on_stderr(args.json),
        summaries,
        ended: Vec::new(),
        started: Instant::now(),
    };

    let share = args.duration_per_variant();
    let mut runs: Vec<VariantReport> = Vec::new();
    let mut host: Option<HostInfo> = None;
    let mut failure: Option<(RunError, Variant)> = None;
    for variant in args.variants() {
        if let Some(signal) = stop::requested() {
            failure = Some((RunError::interrupted(signal, 0), variant));
            break;
        }
        let (report, error) = one_variant(args, &image, variant, share, &mut o, &mut host);
        runs.extend(report);
        if let Some(error) = error {
            failure = Some((error, variant));
            break;
        }
    }
    o.progress.clear();

    // Whatever completed is reported, failure or not.
    let mut exit = Exit::Done;
    let rounds_per_variant = match share {
        Some(_) => runs
            .iter()
            .map(|v| u32::try_from(v.summary.rounds).unwrap_or(MAX_ROUNDS))
            .max()
            .unwrap_or(0),
        None => args.rounds,
    };
    let mut json_failed = None;
    match std::mem::replace(&mut o.json, Json::Off) {
        Json::Open(s) => match &host {
            Some(h) => {
                if let Err(e) = s.end(h, rounds_per_variant, share) {
                    eprintln!("error: cannot write the JSON report to standard output: {e}");
                    exit = Exit::Failed;
                }
            }
            None => {
                eprintln!("error: the JSON report has no host facts to end with");
                exit = Exit::Failed;
            }
        },
        Json::Failed(msg) => {
            eprintln!("error: {msg}");
            exit = Exit::Failed;
            json_failed = Some(msg);
        }
        Json::Off | Json::Pending => {}
    }
    let readable = !args.json && !stdout_taken;
    if let (true, Some(host)) = (readable, host.filter(|_| !runs.is_empty())) {
        let report = Report {
            tool_version: env!("CARGO_PKG_VERSION"),
            host,
            vcpus: args.vcpus,
            rounds_per_variant,
            duration_per_variant: share,
            runs,
        };
        let text = report::render_text(&report);
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout
            .write_all(text.as_bytes())
            .and_then(|_| stdout.flush())
        {
            eprintln!("error: cannot print the report: {e}");
            exit = Exit::Failed;
        }
    }
    if let Some((error, variant)) = failure {
        // The JSON's own failure, which ended the run, was said above.
        let said = matches!(&error, RunError::Output(m) if json_failed.as_ref() == Some(m));
        if !said {
            eprintln!("error: {error} (variant {})", variant.name());
        }
        return Ok(Exit::of(&error).worst(exit));
    }
    Ok(exit)
}

/// Runs one variant and makes its report of whatever it measured; the
/// error, if one ended it. `host` keeps the first host facts seen (a run
/// that fails early has none of its own).
fn one_variant(
    args: &RunArgs,
    image: &Option<Vec<u8>>,
    variant: Variant,
    share: Option<Duration>,
    o: &mut Outputs,
    host: &mut Option<HostInfo>,
) -> (Option<VariantReport>, Option<RunError>) {
    let opts = RunOptions {
        backend: args.backend,
        vcpus: args.vcpus,
        schedule: Vec::new(),
        timeout: args.timeout(),
        round_timeout: args.round_timeout(),
        image: image.clone(),
        inject: args.inject,
        sync_windows_ms: args.linux_windows,
        initial_skew: args.initial_skew,
        guest_view: args.guest_view,
        kvmclock: args.kvmclock,
        tsc: args.tsc_khz,
    };
    log::info!(
        "running {} on {} vCPUs ({} backend), {}",
        variant.name(),
        args.vcpus,
        args.backend.name(),
        share.map_or_else(
            || format!("{} rounds", args.rounds),
            |d| format!("for {:.1} s", d.as_secs_f64())
        )
    );
    let (result, acc) = run_variant(args, &opts, variant, share, o);
    let mut report = None;
    let (facts, error) = match result {
        Ok(facts) => (Some(facts), None),
        Err(f) => {
            let h = f.host.map(|h| *h).or_else(|| host.clone());
            let facts = h.filter(|_| acc.rounds() > 0).map(|h| RunFacts {
                host: h,
                vcpus: args.vcpus,
                initial: Vec::new(),
                spin_breaker: false,
                kvm_clock: None,
                notes: vec![match share {
                    Some(_) => format!(
                        "incomplete: {} round(s) completed before the error: {}",
                        acc.rounds(),
                        f.error
                    ),
                    None => incomplete_note(f.rounds_completed, u64::from(args.rounds), &f.error),
                }],
            });
            (facts, Some(f.error))
        }
    };
    if let Some(mut facts) = facts {
        host.get_or_insert_with(|| facts.host.clone());
        if share.is_some() && acc.rounds() >= u64::from(MAX_ROUNDS) {
            facts.notes.push(format!(
                "stopped after {} rounds, the most the 32-bit round counter holds, before \
                 its time was up",
                crate::units::fmt_num(f64::from(MAX_ROUNDS))
            ));
        }
        let v = report::variant_report(variant.name(), facts, &acc);
        o.json.end_run(&v);
        o.ended.push(RunEntry {
            variant: v.variant.clone(),
            complete: error.is_none(),
            writes_honoured: v.writes_honoured,
            summary: v.summary.clone(),
        });
        report = Some(v);
    }
    (report, error)
}

/// Runs one variant, by rounds or for its share of the duration; returns
/// how it ended and what its rounds added up to.
#[allow(clippy::result_large_err)]
fn run_variant(
    args: &RunArgs,
    opts: &RunOptions,
    variant: Variant,
    share: Option<Duration>,
    o: &mut Outputs,
) -> (Result<RunFacts, crate::error::Failure>, VariantAccumulator) {
    let started = Instant::now();
    let mut schedule = Repeat {
        variant,
        rounds: args.max_rounds(),
        until: share.map(|d| started + d),
    };
    let mut acc = VariantAccumulator::new();
    let tsc_khz = std::cell::Cell::new(None::<u32>);
    let result = run::run_scheduled(opts, &mut schedule, &mut |r| {
        acc.add(&r);
        if tsc_khz.get().is_none() {
            tsc_khz.set(r.vcpus.first().map(|v| v.tsc_khz).filter(|&k| k > 0));
        }
        let streamed = o.stream.write(&r);
        let json = o.json.round(variant.name(), args.vcpus, &r);
        if o.progress.due() {
            let elapsed = started.elapsed();
            let done = acc.rounds();
            let (total, left) = match share {
                Some(d) => (None, Some(d.saturating_sub(elapsed))),
                None => {
                    let total = u64::from(args.rounds);
                    (Some(total), progress::eta(elapsed, done, total))
                }
            };
            let median = acc.median_skew();
            o.progress
                .draw(|| progress::status(variant.name(), done, total, &[median], elapsed, left));
        }
        if o.summaries.as_mut().is_some_and(Every::due) {
            let current = RunEntry {
                variant: variant.name().to_string(),
                complete: false,
                writes_honoured: acc.writes_honoured(),
                summary: acc.summary(tsc_khz.get()),
            };
            o.summary_record(current)?;
        }
        streamed.and(json)
    });
    (result, acc)
}

#[cfg(test)]
mod tests;
