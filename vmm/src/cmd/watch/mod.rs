//! `kvmclock-watch`: how long a pvclock page KVM left stale after a guest
//! IA32_TSC write stays stale. One command-mode VM, one write of
//! [`measure::WRITE_SECONDS`] of cycles on vCPU 0, then every vCPU's
//! kvmclock against the host's CLOCK_MONOTONIC_RAW at every interval for
//! the duration ([`measure`]); per vCPU, when kvmclock left real time, each
//! change of its page's version and when it came back ([`analysis`]); the
//! findings as text or JSON ([`report`]). Exit codes: 0 watched for the
//! duration (whatever it found), 1 failed after it started, 2 could not run
//! (no usable /dev/kvm, no kvmclock), 130/143 stopped by SIGINT/SIGTERM
//! (what was measured is reported).

pub mod analysis;
pub mod measure;
pub mod report;

use std::time::Duration;

use clap::Args;

use super::args::{parse_timeout, parse_vcpus};
use super::common::{cannot_run, install_stop_handlers, Exit};
use crate::output;
use measure::{measure, Plan};

/// The longest `--seconds`: a day.
pub const MAX_SECONDS: u64 = 86_400;

/// `--seconds`: 1..=[`MAX_SECONDS`].
pub fn parse_seconds(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of seconds"))?;
    if n == 0 || n > MAX_SECONDS {
        return Err(format!(
            "watch for 1..={MAX_SECONDS} s (KVM's periodic kvmclock sync comes every 300 s: \
             330 s sees one)"
        ));
    }
    Ok(n)
}

/// `--interval-ms`: 10..=60000.
pub fn parse_interval_ms(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of milliseconds"))?;
    if !(10..=60_000).contains(&n) {
        return Err("sample every 10..=60000 ms".into());
    }
    Ok(n)
}

/// `--settle-ms`: 0..=60000.
pub fn parse_settle_ms(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of milliseconds"))?;
    if n > 60_000 {
        return Err("settle for 0..=60000 ms".into());
    }
    Ok(n)
}

/// Options of `kvmclock-watch`.
#[derive(Debug, Args, Clone)]
pub struct WatchArgs {
    /// How long to watch after the write, seconds (KVM's periodic kvmclock
    /// sync, KVMCLOCK_SYNC_PERIOD, is 300 s after the VM's creation).
    #[arg(long, default_value_t = 330, value_parser = parse_seconds)]
    pub seconds: u64,

    /// Milliseconds between the VM's creation and the write, sampling
    /// meanwhile (0..=60000): KVM updates every pvclock page 100 ms after a
    /// vCPU enables kvmclock, which would end a stale page written earlier.
    #[arg(long, default_value_t = 2_000, value_parser = parse_settle_ms)]
    pub settle_ms: u64,

    /// Milliseconds between samples (10..=60000).
    #[arg(long, default_value_t = 1_000, value_parser = parse_interval_ms)]
    pub interval_ms: u64,

    /// Number of vCPUs: vCPU 0 writes, the others are the control (their
    /// kvmclock must stay on real time).
    #[arg(long, default_value_t = 2, value_parser = parse_vcpus)]
    pub vcpus: u32,

    /// Print one JSON document (schema `tsc-rendezvous/kvmclock-watch/v1`,
    /// vmm/schema/kvmclock-watch-v1.json: every sample with its error bars)
    /// instead of the short text.
    #[arg(long)]
    pub json: bool,

    /// Give up on the VM after this many seconds. Default: the watch and
    /// the settling plus 60 s plus 1 s per vCPU.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
}

impl WatchArgs {
    /// What the measurement is asked to do.
    pub fn plan(&self) -> Plan {
        let default = self.seconds + self.settle_ms / 1000 + 60 + u64::from(self.vcpus);
        Plan {
            vcpus: self.vcpus,
            seconds: self.seconds,
            settle_ms: self.settle_ms,
            interval_ms: self.interval_ms,
            timeout_s: self
                .timeout
                .map_or(default, |t| t.as_secs_f64().ceil() as u64)
                .max(1),
        }
    }
}

/// Runs `kvmclock-watch`.
pub fn main(args: &WatchArgs) -> Exit {
    if let Err(exit) = install_stop_handlers() {
        return exit;
    }
    let plan = args.plan();
    let mut last = 0;
    let (measured, error) = match measure(&plan, |m| {
        log::debug!("kvmclock-watch: sample {} taken", m.ticks.len());
        // A line a minute at info, so that a long watch shows it is alive.
        let minutes = m.ticks.len() as u64 * plan.interval_ms / 60_000;
        if minutes > last {
            last = minutes;
            log::info!("kvmclock-watch: {} samples", m.ticks.len());
        }
    }) {
        Ok(r) => r,
        Err(e) => return cannot_run(e),
    };
    let incomplete = error.as_ref().map(ToString::to_string);
    let r = report::build(plan, measured, incomplete);
    let mut exit = Exit::Done;
    if let Err(e) = output::print(&r, args.json, report::render_text) {
        eprintln!("error: cannot print the report: {e}");
        exit = Exit::Failed;
    }
    if let Some(e) = error {
        if let Some(signal) = e.signal() {
            crate::stop::seen(signal);
        }
        eprintln!("error: {e}");
        exit = exit.worst(Exit::of(&e));
    }
    exit
}

#[cfg(test)]
mod tests;
