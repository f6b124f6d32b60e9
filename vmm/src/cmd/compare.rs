//! `compare`: options to [`CompareOptions`], a progress line, the outputs.
//! Exit codes as for `run`: 0 done, 1 failed after it started, 2 could not
//! start, 130/143 stopped by SIGINT/SIGTERM; what was measured is reported,
//! written to `--csv` and `--output` (round by round, as measured) and drawn
//! into `--plot` whatever stopped it. A comparison runs a number of rounds
//! or, with `--duration`, for a time; its memory does not grow with either.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;

use super::args::{
    parse_backend, parse_bootstrap, parse_duration, parse_initial_skew, parse_inject, parse_rounds,
    parse_summary_every, parse_timeout, parse_tsc_khz, parse_variant_list, parse_vcpus,
    parse_windows, VariantList, TSC_KHZ_HELP, TSC_KHZ_NEEDS_KVM,
};
use super::common::{
    cannot_run, create_output, install_stop_handlers, load_guest, stdout_once, Exit,
};
use super::run::host_backend_refuses;
use crate::compare::{
    measure, render_plot, render_text, ByTime, CompareOptions, CsvWriter, Partial, SummaryRecord,
    Tallies,
};
use crate::options::{default_round_timeout, default_timeout, Backend, Injection, MAX_ROUNDS};
use crate::output::progress::{self, ProgressLine};
use crate::output::target::{OutputTarget, Sink};
use crate::report::summary::{self, Every};
use crate::tsc::frequency::TscRequest;

/// Options of `compare`.
#[derive(Debug, Args, Clone)]
pub struct CompareArgs {
    /// Where the algorithms run: `kvm` (one KVM guest) or `host` (threads of
    /// this OS, one per vCPU; no hypervisor involved). See `run --help`.
    #[arg(long, default_value = "kvm", value_parser = parse_backend)]
    pub backend: Backend,

    /// Number of vCPUs taking part (host threads with `--backend host`).
    #[arg(long, default_value_t = 2, value_parser = parse_vcpus)]
    pub vcpus: u32,

    /// The variants to compare, comma-separated; the first is the baseline.
    #[arg(long, default_value = "xen-4.15,xen-6ca022a1", value_parser = parse_variant_list)]
    pub variants: VariantList,

    /// Measured rounds per variant.
    #[arg(long, default_value_t = 1000, value_parser = parse_rounds)]
    pub rounds: u32,

    /// Measure for this long instead of a number of rounds (a soak): e.g.
    /// 30s, 90m, 8h; at most 30d. It ends at the first block boundary after
    /// the time is up. Not with --rounds. Each round then has its own
    /// watchdog deadline (see --timeout).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, conflicts_with = "rounds")]
    pub duration: Option<Duration>,

    /// Warm-up rounds at the start of every VM: run, counted, excluded.
    #[arg(long, default_value_t = 20)]
    pub warmup: u32,

    /// Seed of the round order and of the bootstrap (default: from the clock;
    /// it is printed either way).
    #[arg(long)]
    pub seed: Option<u64>,

    /// Create a fresh VM every this many blocks (a block runs each variant
    /// once); 0 runs everything in one VM, 1 is a fresh VM per block. With
    /// `--backend host`: fresh threads (offsets and TSC_ADJUST back to 0).
    #[arg(long, default_value_t = 0, value_name = "BLOCKS")]
    pub fresh_vm_every: u32,

    /// Bootstrap replicates of each confidence interval.
    #[arg(long, default_value_t = 2000, value_parser = parse_bootstrap)]
    pub bootstrap: u32,

    /// Print one JSON document (schema `tsc-rendezvous/compare/v1`).
    #[arg(long)]
    pub json: bool,

    /// Write the raw data, one row per measured round and vCPU, to this CSV
    /// file, as the rounds are measured.
    #[arg(long, value_name = "PATH", value_parser = OutputTarget::parse)]
    pub csv: Option<OutputTarget>,

    /// Draw the distributions (CDFs) into this SVG file.
    #[arg(long, value_name = "PATH", value_parser = OutputTarget::parse)]
    pub plot: Option<OutputTarget>,

    /// Stream one JSON line per measured round to FILE (schema
    /// `tsc-rendezvous/round/v1`, as `run --output`), and every
    /// --summary-every minutes a summary record of the statistics so far
    /// (schema `tsc-rendezvous/summary/v1`). `-` for any of --csv, --plot,
    /// --output writes it to stdout instead (one of them, not with --json;
    /// the readable report is then not printed).
    #[arg(long, value_name = "FILE", value_parser = OutputTarget::parse)]
    pub output: Option<OutputTarget>,

    /// With --output: write a summary record into it every this many
    /// minutes (fractions allowed); default 10.
    #[arg(long, value_name = "MINUTES", value_parser = parse_summary_every, requires = "output")]
    pub summary_every: Option<Duration>,

    /// Give up after this many seconds per VM. Default: 60 s plus 100 ms per
    /// round and vCPU. With --duration the deadline is per round instead
    /// (default 60 s plus 100 ms per vCPU), on both backends.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,

    /// Run this guest ELF instead of the embedded one.
    #[arg(long, value_name = "PATH")]
    pub guest: Option<PathBuf>,

    /// The windows of linux-tsc-sync's warp checks, in ms (see `run --help`;
    /// Linux: 20,2).
    #[arg(long, value_name = "FIRST_MS,REST_MS", default_value = "20,2", value_parser = parse_windows)]
    pub linux_windows: (u64, u64),

    /// Start from a skew for the algorithm to remove: vCPU k starts
    /// k * CYCLES / (N - 1) cycles ahead of vCPU 0, set before the first
    /// round (KVM: through KVM_VCPU_TSC_OFFSET, Linux >= 5.16; host: the
    /// threads' offsets) and verified by the readback. Where it cannot be
    /// applied or verified the command says why and exits 2.
    #[arg(long, value_name = "CYCLES", value_parser = parse_initial_skew)]
    pub initial_skew: Option<u64>,

    /// Read kvmclock around every TSC write of the rendezvous (every vCPU
    /// registers its kvmclock page) and report how far it jumped, per round
    /// beside the skew: a kvmclock that follows a guest TSC write instead of
    /// running on is a stale pvclock page. KVM only; the reads add to the
    /// exit time measured.
    #[arg(long)]
    pub kvmclock: bool,

    #[arg(long, value_name = "KHZ|RATIOx", value_parser = parse_tsc_khz, help = TSC_KHZ_HELP)]
    pub tsc_khz: Option<TscRequest>,

    /// Make the guest misbehave, to test the error handling (see `run
    /// --help` for the kinds). Round R counts the rounds of a VM, its
    /// warm-up included; every VM injects it. KVM only.
    #[arg(long, value_name = "SPEC", value_parser = parse_inject)]
    pub inject: Option<Injection>,
}

impl CompareArgs {
    /// Checks what clap cannot check alone: the rounds asked for must fit
    /// the 32-bit round counters (every measured round's number, and every
    /// VM's rounds with its warm-up). The error names the limit.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.variants.0.len().max(1) as u64;
        let warmup = u64::from(self.warmup);
        let max = u64::from(MAX_ROUNDS);
        if warmup + n > max {
            return Err(format!(
                "--warmup {} leaves no room for a block in the 32-bit round counter of a VM; \
                 use at most {}",
                self.warmup,
                max - n
            ));
        }
        if self.duration.is_none() && u64::from(self.rounds) * n > max {
            return Err(format!(
                "--rounds {} with {n} variants is {} measured rounds, more than the 32-bit round \
                 counter holds; use at most {} rounds per variant (or give a duration)",
                self.rounds,
                u64::from(self.rounds) * n,
                max / n
            ));
        }
        let blocks_per_vm = match (self.duration, self.fresh_vm_every) {
            (Some(_), 0) => 0,
            (Some(_), k) => u64::from(k),
            (None, 0) => u64::from(self.rounds),
            (None, k) => u64::from(k.min(self.rounds)),
        };
        if let Some(inj) = &self.inject {
            // A VM's rounds: its warm-up and its blocks (by time: as many as
            // the counter holds).
            let per_vm = match blocks_per_vm {
                0 if self.duration.is_some() => max,
                b => (b * n + warmup).min(max),
            };
            inj.check(self.vcpus, u32::try_from(per_vm).unwrap_or(MAX_ROUNDS))?;
        }
        if blocks_per_vm * n + warmup > max {
            return Err(format!(
                "{blocks_per_vm} blocks of {n} variants and {} warm-up rounds are more rounds than \
                 a VM's 32-bit round counter holds; use at most {} blocks per VM",
                self.warmup,
                (max - warmup) / n
            ));
        }
        Ok(())
    }
}

/// Runs `compare`.
pub fn main(args: &CompareArgs) -> Exit {
    match compare(args) {
        Ok(exit) | Err(exit) => exit,
    }
}

/// Writes JSON lines to `--output`, flushed as they go.
struct Lines {
    out: BufWriter<Sink>,
}

impl Lines {
    fn line(&mut self, line: serde_json::Result<String>) -> Result<(), String> {
        let line = line.map_err(|e| e.to_string())?;
        self.out
            .write_all(line.as_bytes())
            .and_then(|_| self.out.write_all(b"\n"))
            .and_then(|_| self.out.flush())
            .map_err(|e| format!("cannot write to --output: {e}"))
    }
}

impl CompareArgs {
    /// Measured blocks per VM.
    fn blocks_per_vm(&self) -> u32 {
        if self.fresh_vm_every == 0 {
            self.rounds
        } else {
            self.fresh_vm_every.min(self.rounds)
        }
    }

    /// What the measurement is asked to do, with the guest `image` and the
    /// interleaving's `seed`.
    fn options(&self, image: Option<Vec<u8>>, seed: u64) -> CompareOptions {
        let n = self.variants.0.len() as u32;
        let rounds_per_vm = self
            .blocks_per_vm()
            .saturating_mul(n)
            .saturating_add(self.warmup);
        CompareOptions {
            backend: self.backend,
            sync_windows_ms: self.linux_windows,
            initial_skew: self.initial_skew,
            kvmclock: self.kvmclock,
            tsc: self.tsc_khz,
            inject: self.inject,
            vcpus: self.vcpus,
            variants: self.variants.0.clone(),
            rounds: self.rounds,
            warmup: self.warmup,
            seed,
            fresh_vm_every: self.fresh_vm_every,
            bootstrap: self.bootstrap,
            timeout: self
                .timeout
                .unwrap_or_else(|| default_timeout(self.vcpus, rounds_per_vm)),
            image,
        }
    }

    /// A comparison by time: its duration and every round's deadline.
    fn by_time(&self) -> Option<ByTime> {
        self.duration.map(|duration| ByTime {
            duration,
            round_timeout: self
                .timeout
                .unwrap_or_else(|| default_round_timeout(self.vcpus)),
        })
    }
}

fn compare(args: &CompareArgs) -> Result<Exit, Exit> {
    stdout_once(
        args.json,
        &[
            ("--csv", args.csv.as_ref()),
            ("--plot", args.plot.as_ref()),
            ("--output", args.output.as_ref()),
        ],
    )?;
    args.validate().map_err(cannot_run)?;
    if args.backend == Backend::Host {
        host_backend_refuses(args.guest.is_some(), args.inject.is_some()).map_err(cannot_run)?;
        if args.kvmclock {
            return Err(cannot_run(
                "--kvmclock reads the guest's kvmclock: use it with --backend kvm",
            ));
        }
        if args.tsc_khz.is_some() {
            return Err(cannot_run(TSC_KHZ_NEEDS_KVM));
        }
    }
    let image = load_guest(args.guest.as_deref())?;
    // Fail before measuring when an output cannot be written.
    let csv_file = args
        .csv
        .as_ref()
        .map(|p| create_output(p, "CSV"))
        .transpose()?;
    let plot_file = args
        .plot
        .as_ref()
        .map(|p| create_output(p, "plot"))
        .transpose()?;
    let mut lines = args
        .output
        .as_ref()
        .map(|p| create_output(p, "--output"))
        .transpose()?
        .map(|f| Lines {
            out: BufWriter::new(f),
        });
    install_stop_handlers()?;
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let n = args.variants.0.len() as u32;
    let blocks_per_vm = args.blocks_per_vm();
    let opts = args.options(image, seed);
    let by_time = args.by_time();
    log::info!(
        "comparing {:?} on {} vCPUs ({} backend), {}, seed {seed}",
        opts.variants,
        opts.vcpus,
        opts.backend.name(),
        match args.duration {
            Some(d) => format!("for {:.1} s", d.as_secs_f64()),
            None => format!("{} rounds each", opts.rounds),
        }
    );
    let names: Vec<String> = opts.variants.iter().map(|v| v.name().to_string()).collect();
    // Every round planned, warm-up included (by rounds).
    let total = by_time.is_none().then(|| {
        let vms = u64::from(args.rounds).div_ceil(u64::from(blocks_per_vm.max(1)));
        u64::from(args.rounds) * u64::from(n) + vms * u64::from(args.warmup)
    });
    let mut csv_error: Option<String> = None;
    let mut csv = csv_file.and_then(|f| match CsvWriter::new(BufWriter::new(f)) {
        Ok(w) => Some(w),
        Err(e) => {
            csv_error = Some(e.to_string());
            None
        }
    });
    let mut summaries = lines.as_ref().map(|_| {
        Every::new(
            args.summary_every
                .unwrap_or(Duration::from_secs(60 * summary::DEFAULT_EVERY_MINUTES)),
        )
    });
    let mut progress = ProgressLine::on_stderr(args.json);
    let started = Instant::now();
    let mut on_round =
        |round: Option<&crate::compare::MeasuredRound>, t: &Tallies| -> Result<(), String> {
            if let Some(r) = round {
                if let Some(w) = csv.as_mut() {
                    if let Err(e) = w.round(r) {
                        csv_error = Some(e.to_string());
                        csv = None;
                    }
                }
                if let Some(l) = lines.as_mut() {
                    l.line(crate::output::lines::round_line(args.vcpus, &r.result))?;
                }
            }
            if progress.due() {
                let elapsed = started.elapsed();
                let done = t.measured_rounds + u64::from(t.warmup_rounds_run);
                let left = match (args.duration, total) {
                    (Some(d), _) => Some(d.saturating_sub(elapsed)),
                    (None, Some(total)) => progress::eta(elapsed, done, total),
                    (None, None) => None,
                };
                let medians: Vec<Option<f64>> = names
                    .iter()
                    .map(|v| t.tally(v).and_then(|x| x.median_skew()))
                    .collect();
                progress.draw(|| progress::status("compare", done, total, &medians, elapsed, left));
            }
            if let (Some(l), true) = (lines.as_mut(), summaries.as_mut().is_some_and(Every::due)) {
                let record = SummaryRecord::new(t, args.vcpus, seed, &names, started.elapsed());
                l.line(summary::line(&record))?;
            }
            Ok(())
        };
    let measured = measure(&opts, by_time, &mut on_round);
    progress.clear();
    Ok(finish(args, &opts, measured, csv_error, plot_file))
}

/// Reports what was measured, however the measurement ended: the report
/// (text or JSON), the plot, the errors; the exit code says how it went.
fn finish(
    args: &CompareArgs,
    opts: &CompareOptions,
    measured: Result<crate::compare::Measured, Partial>,
    csv_error: Option<String>,
    plot_file: Option<Sink>,
) -> Exit {
    let seed = opts.seed;
    let (data, failure) = match measured {
        Ok(d) => (d, None),
        Err(Partial { data, error }) => {
            let exit = Exit::of(&error);
            let msg = format!("{error} (seed {seed})");
            match data {
                Some(d) => (*d, Some((msg, exit))),
                None => {
                    eprintln!("error: {msg}");
                    return exit;
                }
            }
        }
    };
    let incomplete = failure.as_ref().map(|(msg, _)| {
        format!(
            "stopped after {} measured round(s): {msg}",
            data.tallies.measured_rounds
        )
    });
    let report = crate::compare::analyse_measured(opts, &data, incomplete);
    let mut exit = Exit::Done;
    if let (Some(e), Some(target)) = (&csv_error, &args.csv) {
        eprintln!("error: writing {target} failed: {e}");
        exit = Exit::Failed;
    }
    if let (Some(mut sink), Some(target)) = (plot_file, &args.plot) {
        let drawn = render_plot(&report, &data)
            .and_then(|svg| sink.write_text(&svg).map_err(|e| e.to_string()));
        if let Err(e) = drawn {
            eprintln!("error: drawing {target} failed: {e}");
            exit = Exit::Failed;
        }
    }
    let stdout_taken = [&args.csv, &args.plot, &args.output]
        .iter()
        .any(|t| t.as_ref().is_some_and(OutputTarget::is_stdout));
    if stdout_taken {
        // Stdout carries that output alone.
    } else if let Err(e) = crate::output::print(&report, args.json, render_text) {
        if let crate::output::PrintError::Json(_) = e {
            eprintln!("error: the report: {e}");
        }
        exit = Exit::Failed;
    }
    if let Some((msg, stopped)) = failure {
        eprintln!("error: {msg}");
        exit = exit.worst(stopped);
    }
    exit
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cmd::{Cli, Cmd};

    fn compare_args(args: &[&str]) -> CompareArgs {
        let cli = Cli::try_parse_from(
            ["tsc-rendezvous", "compare"]
                .into_iter()
                .chain(args.iter().copied()),
        )
        .expect("valid arguments");
        match cli.command {
            Some(Cmd::Compare(c)) => c,
            other => panic!("not compare: {other:?}"),
        }
    }

    /// Counts that the 32-bit round counters cannot hold are refused with
    /// the limit; the hundred million rounds are not.
    #[test]
    fn rounds_beyond_the_counters_are_refused_with_the_limit() {
        assert!(compare_args(&["--rounds", "100000000"]).validate().is_ok());
        let e = compare_args(&["--rounds", "3000000000"])
            .validate()
            .expect_err("6e9 measured rounds");
        assert!(
            e.contains("use at most 2147483647 rounds per variant"),
            "{e}"
        );
        let e = compare_args(&["--rounds", "2147483647"])
            .validate()
            .expect_err("with the warm-up, more than a VM holds");
        assert!(e.contains("use at most 2147483637 blocks per VM"), "{e}");
        assert!(compare_args(&["--rounds", "2147483647", "--warmup", "0"])
            .validate()
            .is_ok());
        let e = compare_args(&["--warmup", "4294967295"])
            .validate()
            .expect_err("no room for a block");
        assert!(e.contains("--warmup"), "{e}");
        // By time: only a VM's share must fit.
        assert!(compare_args(&["--duration", "30d"]).validate().is_ok());
        let e = compare_args(&["--duration", "1h", "--fresh-vm-every", "4294967295"])
            .validate()
            .expect_err("a VM's share");
        assert!(e.contains("blocks per VM"), "{e}");
    }

    #[test]
    fn rounds_and_duration_exclude_each_other() {
        let e = Cli::try_parse_from([
            "tsc-rendezvous",
            "compare",
            "--rounds",
            "5",
            "--duration",
            "1m",
        ])
        .expect_err("both");
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        let c = compare_args(&["--duration", "90m"]);
        assert_eq!(c.duration, Some(Duration::from_secs(5400)));
        assert!(
            Cli::try_parse_from(["tsc-rendezvous", "compare", "--summary-every", "1"]).is_err()
        );
    }
}
