//! `compare`: options to [`CompareOptions`], a progress bar, the outputs.
//! Exit codes as for `run`: 0 done, 1 failed after it started, 2 could not
//! start, 130/143 stopped by SIGINT/SIGTERM; what was measured is reported,
//! written to `--csv` and drawn into `--plot` whatever stopped it.

use std::io::{BufWriter, IsTerminal};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::args::{
    parse_backend, parse_bootstrap, parse_rounds, parse_timeout, parse_variant_list, parse_vcpus,
    parse_windows, VariantList,
};
use super::common::{cannot_run, create_output, install_stop_handlers, load_guest, Exit};
use super::run::host_backend_refuses;
use crate::compare::{
    analyse, draw_plot, measure, render_text, write_csv, CompareOptions, Partial,
};
use crate::options::{default_timeout, Backend};

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

    /// Write the raw data, one row per measured round and vCPU, to this CSV file.
    #[arg(long, value_name = "PATH")]
    pub csv: Option<PathBuf>,

    /// Draw the distributions (CDFs) into this SVG file.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,

    /// Give up after this many seconds per VM. Default: 60 s plus 100 ms per
    /// round and vCPU.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,

    /// Run this guest ELF instead of the embedded one.
    #[arg(long, value_name = "PATH")]
    pub guest: Option<PathBuf>,

    /// The windows of linux-tsc-sync's warp checks, in ms (see `run --help`;
    /// Linux: 20,2).
    #[arg(long, value_name = "FIRST_MS,REST_MS", default_value = "20,2", value_parser = parse_windows)]
    pub linux_windows: (u64, u64),
}

/// A progress bar on stderr that appears only once the run has taken a
/// second, and never when stderr is not a terminal or output is JSON.
struct ProgressBarOnStderr {
    bar: Option<ProgressBar>,
    started: Instant,
    shown: bool,
}

impl ProgressBarOnStderr {
    fn new(enabled: bool) -> ProgressBarOnStderr {
        let bar = enabled.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            if let Ok(style) = ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} rounds, {eta} left",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        ProgressBarOnStderr {
            bar,
            started: Instant::now(),
            shown: false,
        }
    }

    fn update(&mut self, done: u64, total: u64) {
        let Some(bar) = &self.bar else { return };
        if !self.shown {
            if self.started.elapsed() < Duration::from_secs(1) {
                return;
            }
            bar.set_length(total);
            bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        bar.set_position(done);
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Runs `compare`.
pub fn main(args: &CompareArgs) -> Exit {
    match compare(args) {
        Ok(exit) | Err(exit) => exit,
    }
}

fn compare(args: &CompareArgs) -> Result<Exit, Exit> {
    if args.backend == Backend::Host {
        host_backend_refuses(args.guest.is_some(), false).map_err(cannot_run)?;
    }
    let image = load_guest(args.guest.as_deref())?;
    // Fail before measuring when an output cannot be written.
    let csv_file = args
        .csv
        .as_deref()
        .map(|p| create_output(p, "CSV"))
        .transpose()?;
    if let Some(p) = &args.plot {
        create_output(p, "plot")?;
    }
    install_stop_handlers()?;
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let variants = args.variants.0.clone();
    let blocks_per_vm = if args.fresh_vm_every == 0 {
        args.rounds
    } else {
        args.fresh_vm_every.min(args.rounds)
    };
    let rounds_per_vm = blocks_per_vm
        .saturating_mul(variants.len() as u32)
        .saturating_add(args.warmup);
    let opts = CompareOptions {
        backend: args.backend,
        sync_windows_ms: args.linux_windows,
        vcpus: args.vcpus,
        variants,
        rounds: args.rounds,
        warmup: args.warmup,
        seed,
        fresh_vm_every: args.fresh_vm_every,
        bootstrap: args.bootstrap,
        timeout: args
            .timeout
            .unwrap_or_else(|| default_timeout(args.vcpus, rounds_per_vm)),
        image,
    };
    log::info!(
        "comparing {:?} on {} vCPUs ({} backend), {} rounds each, seed {seed}",
        opts.variants,
        opts.vcpus,
        opts.backend.name(),
        opts.rounds
    );
    let mut progress = ProgressBarOnStderr::new(!args.json && std::io::stderr().is_terminal());
    let measured = measure(&opts, &mut |done, total| progress.update(done, total));
    progress.finish();
    let (data, failure) = match measured {
        Ok(d) => (d, None),
        Err(Partial { data, error }) => {
            let exit = Exit::of(&error);
            let msg = format!("{error} (seed {seed})");
            match data {
                Some(d) => (*d, Some((msg, exit))),
                None => {
                    eprintln!("error: {msg}");
                    return Ok(exit);
                }
            }
        }
    };
    let incomplete = failure.as_ref().map(|(msg, _)| {
        format!(
            "stopped after {} measured round(s): {msg}",
            data.rounds.len()
        )
    });
    let rounds = data.rounds.clone();
    let report = analyse(&opts, data, incomplete);
    let mut exit = Exit::Done;
    if let (Some(file), Some(path)) = (csv_file, &args.csv) {
        let mut w = BufWriter::new(file);
        if let Err(e) = write_csv(&mut w, &rounds) {
            eprintln!("error: writing {} failed: {e}", path.display());
            exit = Exit::Failed;
        }
    }
    if let Some(path) = &args.plot {
        if let Err(e) = draw_plot(path, &report, &rounds) {
            eprintln!("error: drawing {} failed: {e}", path.display());
            exit = Exit::Failed;
        }
    }
    if let Err(e) = crate::report::print(&report, args.json, render_text) {
        if let crate::report::PrintError::Json(_) = e {
            eprintln!("error: the report: {e}");
        }
        exit = Exit::Failed;
    }
    if let Some((msg, stopped)) = failure {
        eprintln!("error: {msg}");
        exit = exit.worst(stopped);
    }
    Ok(exit)
}
