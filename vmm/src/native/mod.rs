//! The host backend (`--backend host`): the very same algorithms (the
//! `tsc-sync` crate) on threads of this OS instead of in a KVM guest. No
//! hypervisor of this tool is involved: it measures what the algorithms cost
//! on this CPU's caches and interconnect, the seed's metric natively.
//!
//! - One thread per "vCPU" ([`threads`]), started once per run and pinned to
//!   its own host CPU where there are enough ([`affinity`]); with more
//!   threads than CPUs they are not pinned and yield in every spin (and a
//!   note and a warning on stderr say so).
//! - Each thread is the CPU the algorithms run on ([`cpu`]): real
//!   `lfence; rdtsc`, `pause` and `prefetcht0`, and a TSC that is its CPU's
//!   plus a per-thread offset. A TSC write sets the offset (the hardware TSC
//!   is never written) and adds its delta to a simulated TSC_ADJUST; a
//!   TSC_ADJUST write moves the offset by the change: as KVM does for a guest.
//! - Every round runs every thread on a fresh shared state and writes the
//!   record the guest would write ([`round`]). With every thread parked, the
//!   coordinator then reads each thread's TSC state back: the exact offset,
//!   the simulated TSC_ADJUST, and the thread's TSC read on its own CPU
//!   between two reads of the coordinator's TSC (method (c)'s bracket), at
//!   the host TSC frequency measured once against CLOCK_MONOTONIC
//!   ([`clock`]). Records and readback go through the same
//!   [`RoundAccumulator`] as KVM's, Linux's results through the KVM path's
//!   own decoder: reports, JSON and CSV treat both backends alike.
//! - The run's deadline and SIGINT/SIGTERM stop it between rounds and inside
//!   one: every spin of every thread unwinds at its next `relax()` once the
//!   run aborts, and the rounds completed are kept.

pub mod affinity;
pub mod clock;
pub mod cpu;
pub mod round;
pub mod threads;

use std::sync::atomic::{AtomicBool, Ordering};

use tsc_contract::{RoundRecord, Variant};
use tsc_sync::{LinuxParams, LinuxSyncResult};

use crate::analysis::{RoundAccumulator, RoundResult};
use crate::error::{Failure, RunError};
use crate::host::{has_cpu_flag, HostInfo, HostThreads};
use crate::options::RunOptions;
use crate::rounds::RunFacts;
use crate::stop;
use crate::tsc::{TscError, TscState};
use crate::vstate::sync_area::Windows;

use round::SyncStaging;
use threads::{Setup, Workers};

/// Runs every round of `opts.schedule` on host threads, handing each to
/// `on_round` as soon as it is complete (as [`crate::rounds::run_streaming`]
/// does on KVM). The guest image and fault injection do not apply here and
/// are ignored (the commands refuse them).
#[allow(clippy::result_large_err)]
pub fn run_streaming(
    opts: &RunOptions,
    on_round: &mut dyn FnMut(RoundResult) -> Result<(), String>,
) -> Result<RunFacts, Failure> {
    let offsets = opts
        .initial_skew
        .map(|cycles| crate::skew::thread_offsets(opts.vcpus, cycles))
        .unwrap_or_default();
    run_streaming_from(opts, &offsets, on_round)
}

/// As [`run_streaming`], with thread k's TSC starting `offsets[k]` cycles
/// (wrapping) from its CPU's TSC (missing ones: 0): a skew for the
/// algorithms to remove, set exactly.
#[allow(clippy::result_large_err)]
pub fn run_streaming_from(
    opts: &RunOptions,
    offsets: &[u64],
    on_round: &mut dyn FnMut(RoundResult) -> Result<(), String>,
) -> Result<RunFacts, Failure> {
    if opts.schedule.is_empty() || opts.vcpus == 0 {
        return Err(Failure::early(RunError::NothingToRun));
    }
    let tsc_khz = clock::tsc_khz().ok_or_else(|| {
        Failure::early(RunError::Readback {
            vcpu: 0,
            error: TscError::GetTscKhz(
                "the host TSC frequency could not be measured against CLOCK_MONOTONIC".into(),
            ),
        })
    })?;
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
        timeout: opts.timeout,
        tsc_khz,
        // The threads have (simulated) TSC_ADJUST: Linux's 3 runs.
        params: LinuxParams::new(true, windows.first_cycles, windows.cycles),
    };
    let rounds = u32::try_from(opts.schedule.len()).unwrap_or(u32::MAX);
    let mut workers = Workers::start(&setup, rounds).map_err(Failure::early)?;

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
    host.initial_skew_cycles = opts.initial_skew;

    let mut completed = 0;
    match drive(&mut workers, opts, on_round, &mut completed) {
        Ok(initial) => {
            if let Some(cycles) = opts.initial_skew {
                let set_by = "the threads' own offsets";
                notes.push(crate::skew::note(initial.len(), cycles, set_by));
            } else if let Some(s) = initial.iter().find(|s| s.offset != initial[0].offset) {
                notes.push(format!(
                    "the threads did not start with the same TSC offset ({:?} vs {:?}): \
                     set on purpose",
                    s.offset, initial[0].offset
                ));
            }
            Ok(RunFacts {
                host,
                vcpus,
                initial,
                notes,
                spin_breaker: false,
            })
        }
        Err(error) => Err(Failure {
            error,
            rounds_completed: completed,
            host: Some(Box::new(host)),
        }),
    }
    // `workers` drops here: every thread is aborted, shut down and joined.
}

/// The round loop: the initial readback, then per round the threads, the
/// readback with all of them parked, the analysis. Returns the initial
/// readback.
fn drive(
    workers: &mut Workers,
    opts: &RunOptions,
    on_round: &mut dyn FnMut(RoundResult) -> Result<(), String>,
    completed: &mut u32,
) -> Result<Vec<TscState>, RunError> {
    let n = opts.vcpus as usize;
    let mut initial = Vec::with_capacity(n);
    workers.read_back_into(0, &mut initial)?;
    if let Some(cycles) = opts.initial_skew {
        crate::skew::verify(&initial, cycles)?;
    }
    let staging = if opts.schedule.contains(&Variant::LinuxTscSync) {
        Some(SyncStaging::new(opts.vcpus)?)
    } else {
        None
    };
    let mut acc = RoundAccumulator::new(&initial);
    let mut after: Vec<TscState> = Vec::with_capacity(n);
    let mut records: Vec<RoundRecord> = Vec::with_capacity(n);
    let mut syncs: Vec<Option<LinuxSyncResult>> = Vec::with_capacity(n);
    for (round, &variant) in opts.schedule.iter().enumerate() {
        let round = round as u32;
        if let Some(signal) = stop::requested() {
            return Err(RunError::interrupted(signal, round));
        }
        workers.run_round(round, variant, &mut records, &mut syncs)?;
        // Every thread is parked now: read them all back.
        workers.read_back_into(round, &mut after)?;
        let sync = match (&staging, variant) {
            (Some(s), Variant::LinuxTscSync) => Some(s.read(round, &syncs)?),
            _ => None,
        };
        let result = acc.add(round, variant, &records, &after, sync);
        for d in &result.disagreements {
            log::warn!("round {round}: {d}");
        }
        on_round(result).map_err(RunError::Output)?;
        *completed += 1;
    }
    Ok(initial)
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
