//! The `compare` subcommand: options to [`CompareOptions`], a progress bar,
//! the outputs, exit codes (as for `run`: 0 done, 1 failed after it started,
//! 2 could not start).

use std::fs::File;
use std::io::{BufWriter, IsTerminal};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{analyse, draw_plot, measure, render_text, write_csv, CompareOptions};
use crate::cli::{default_timeout, CompareArgs};
use crate::runner::RunError;

/// A progress bar on stderr that appears only once the run has taken a
/// second, and never when stderr is not a terminal or output is JSON.
struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    shown: bool,
}

impl Progress {
    fn new(enabled: bool) -> Progress {
        let bar = enabled.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            if let Ok(style) = ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} rounds, {eta} left",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        Progress {
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

fn create(path: &std::path::Path, what: &str) -> Result<File, ExitCode> {
    File::create(path).map_err(|e| {
        eprintln!(
            "error: cannot create the {what} file {}: {e}; give a writable path",
            path.display()
        );
        ExitCode::from(2)
    })
}

/// Runs `compare`.
pub fn main(args: &CompareArgs) -> ExitCode {
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
    // Fail before measuring when an output cannot be written.
    let csv_file = match args.csv.as_deref().map(|p| create(p, "CSV")).transpose() {
        Ok(f) => f,
        Err(code) => return code,
    };
    if let Some(p) = &args.plot {
        if let Err(code) = create(p, "plot") {
            return code;
        }
    }
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
        vcpus: args.vcpus,
        variants,
        rounds: args.rounds,
        warmup: args.warmup,
        seed,
        fresh_vm_every: args.fresh_vm_every,
        bootstrap: args.bootstrap,
        timeout: args
            .timeout
            .map(Duration::from_secs_f64)
            .unwrap_or_else(|| default_timeout(args.vcpus, rounds_per_vm)),
        image,
    };
    log::info!(
        "comparing {:?} on {} vCPUs, {} rounds each, seed {seed}",
        opts.variants,
        opts.vcpus,
        opts.rounds
    );
    let mut progress = Progress::new(!args.json && std::io::stderr().is_terminal());
    let data = measure(&opts, &mut |done, total| progress.update(done, total));
    progress.finish();
    let data = match data {
        Ok(d) => d,
        Err(f) => {
            eprintln!("error: {} (seed {seed})", f.error);
            let setup = matches!(f.error, RunError::Vm(_) | RunError::Signal(_));
            return ExitCode::from(if setup { 2 } else { 1 });
        }
    };
    let rounds = data.rounds.clone();
    let report = analyse(&opts, data);
    if let (Some(file), Some(path)) = (csv_file, &args.csv) {
        let mut w = BufWriter::new(file);
        if let Err(e) = write_csv(&mut w, &rounds) {
            eprintln!("error: writing {} failed: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if let Some(path) = &args.plot {
        if let Err(e) = draw_plot(path, &report, &rounds) {
            eprintln!("error: drawing {} failed: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if let Err(e) = crate::report::print(&report, args.json, render_text) {
        if let crate::report::PrintError::Json(_) = e {
            eprintln!("error: the report: {e}");
        }
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
