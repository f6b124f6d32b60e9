//! The host backend (`--backend host`): the very same algorithms (the
//! `tsc-sync` crate) on threads of this OS instead of in a KVM guest. No
//! hypervisor of this tool is involved: it measures what the algorithms cost
//! on this CPU's caches and interconnect, the seed's metric natively.
//!
//! - One thread per "vCPU" ([`threads`]), started once per run, pinned to
//!   its own host CPU where there are enough ([`affinity`]); thread 0 is the
//!   coordinator itself (the thread that drives the rounds), so no extra
//!   thread competes for a CPU. Hand-offs are spin waits, no system call
//!   per round. With more threads than CPUs they are not pinned and yield
//!   in every spin (and a note and a warning on stderr say so).
//! - Each thread is the CPU the algorithms run on ([`cpu`]): real
//!   `lfence; rdtsc`, `pause` and `prefetcht0`, and a TSC that is its CPU's
//!   plus a per-thread offset. A TSC write sets the offset (the hardware TSC
//!   is never written) and adds its delta to a simulated TSC_ADJUST; a
//!   TSC_ADJUST write moves the offset by the change: as KVM does for a guest.
//! - Every round runs every thread on a fresh shared state ([`shared`]) and
//!   writes the record the guest would write ([`round`]; Linux's results
//!   as the guest lays them out: [`staging`]). Each thread's part of the
//!   round ends with the coordinator reading its TSC state back (a thread
//!   writes only its own TSC, so its state is final then): the exact
//!   offset, the simulated TSC_ADJUST, and the thread's TSC read on its own
//!   CPU between two reads of the coordinator's TSC (method (c)'s bracket;
//!   thread 0's on its own CPU),
//!   at the host TSC frequency measured once against
//!   CLOCK_MONOTONIC ([`clock`]). The round driver ([`crate::run`]) treats
//!   them exactly as KVM's, Linux's results go through the KVM path's own
//!   decoder: reports, JSON and CSV treat both backends alike.
//! - The deadline (the run's, or every round's: [`Backend::rearm`]) and
//!   SIGINT/SIGTERM stop it between rounds and inside one: every spin of
//!   every thread unwinds at its next `relax()` once the run aborts, and the
//!   rounds completed are kept.

pub mod affinity;
pub mod clock;
pub mod cpu;
pub mod round;
pub mod shared;
pub mod staging;
pub mod threads;
pub mod worker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tsc_contract::Variant;
use tsc_sync::{LinuxParams, LinuxSyncResult};

use super::{Backend, RoundData};
use crate::error::RunError;
use crate::host::{has_cpu_flag, HostInfo, HostThreads, Pacing};
use crate::options::{RunOptions, Windows};
use crate::tsc::TscState;

use staging::SyncStaging;
use threads::{Setup, Workers};

/// A run's host threads and what the rounds need of them.
pub struct HostBackend {
    workers: Workers,
    /// Linux's results laid out as a guest's, mapped at the first
    /// `linux-tsc-sync` round.
    staging: Option<SyncStaging>,
    /// Each thread's Linux result of the last round.
    syncs: Vec<Option<LinuxSyncResult>>,
    host: HostInfo,
    notes: Vec<String>,
}

impl HostBackend {
    /// Starts one thread per vCPU of `opts` for `rounds` rounds, thread k's
    /// TSC `offsets[k]` cycles (wrapping) from its CPU's (missing ones: 0).
    /// The guest image and fault injection do not apply here and are
    /// ignored (the commands refuse them).
    pub fn start(opts: &RunOptions, offsets: &[u64], rounds: u32) -> Result<HostBackend, RunError> {
        if opts.vcpus == 0 {
            return Err(RunError::NothingToRun);
        }
        let tsc_khz = clock::tsc_khz().ok_or(RunError::HostTscKhz)?;
        let vcpus = opts.vcpus;
        let mut host_cpus = affinity::allowed_cpus();
        if host_cpus.is_empty() {
            // The mask could not be read: assume the CPUs the OS reports.
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            host_cpus = (0..n as u32).collect();
        }
        let overcommitted = vcpus as usize > host_cpus.len();
        let windows = Windows::at(tsc_khz, opts.sync_windows_ms);
        let setup = Setup {
            vcpus,
            offsets: offsets.to_vec(),
            plan: affinity::plan(vcpus, &host_cpus),
            overcommitted,
            timeout: opts.round_timeout.unwrap_or(opts.timeout),
            tsc_khz,
            // The threads have (simulated) TSC_ADJUST: Linux's 3 runs.
            params: LinuxParams::new(true, windows.first_cycles, windows.cycles),
        };
        let workers = Workers::start(&setup, rounds)?;
        let mut notes = Vec::new();
        if overcommitted {
            let note = overcommit_note(vcpus, host_cpus.len());
            warn_once(&note);
            notes.push(note);
        }
        notes.extend(workers.pin_failures().iter().cloned());
        let threads = HostThreads {
            threads: vcpus,
            host_cpus,
            pinned: workers.pinned().to_vec(),
            overcommitted,
            tsc_khz_source: clock::source(),
            os_under_hypervisor: has_cpu_flag("hypervisor"),
        };
        let mut host = HostInfo::host_backend(tsc_khz, threads);
        host.sync_windows = Some(windows);
        host.pacing = Some(if overcommitted {
            Pacing::ThreadYield
        } else {
            Pacing::None
        });
        Ok(HostBackend {
            workers,
            staging: None,
            syncs: Vec::with_capacity(vcpus as usize),
            host,
            notes,
        })
    }
}

impl Backend for HostBackend {
    fn vcpus(&self) -> u32 {
        self.host.host_threads.as_ref().map_or(0, |t| t.threads)
    }

    fn readback(&mut self, round: u32, out: &mut Vec<TscState>) -> Result<(), RunError> {
        self.workers.read_back_into(round, out)
    }

    fn run_round(
        &mut self,
        round: u32,
        variant: Variant,
        data: &mut RoundData,
    ) -> Result<(), RunError> {
        // Every thread's TSC is read right after its part of the round.
        self.workers.run_round(
            round,
            variant,
            &mut data.records,
            &mut self.syncs,
            &mut data.after,
        )?;
        data.sync = None;
        if variant == Variant::LinuxTscSync {
            let staging = match &mut self.staging {
                Some(s) => s,
                None => self.staging.insert(SyncStaging::new(self.vcpus())?),
            };
            data.sync = Some(staging.read(round, &self.syncs)?);
        }
        Ok(())
    }

    fn rearm(&mut self, timeout: Duration) {
        self.workers.rearm(timeout);
    }

    fn host(&self, _initial: &[TscState]) -> HostInfo {
        self.host.clone()
    }

    fn setup_notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    fn skew_set_by(&self) -> &'static str {
        "the threads' own offsets"
    }

    fn unequal_start(&self, offset: Option<u64>, first: Option<u64>) -> String {
        format!(
            "the threads did not start with the same TSC offset ({offset:?} vs {first:?}): set \
             on purpose"
        )
    }
}

/// Said of (and warned about) every run whose threads outnumber the host
/// CPUs.
pub fn overcommit_note(threads: u32, cpus: usize) -> String {
    format!(
        "{threads} threads on {cpus} host CPU(s): the threads are not pinned and yield in every \
         spin; skews and exit times then reflect host scheduling, not the algorithm"
    )
}

/// Prints `note` as a warning on stderr, once per process.
fn warn_once(note: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!("warning: {note}");
    }
}

#[cfg(test)]
mod tests;
