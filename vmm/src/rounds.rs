//! One run: create the VM, start its vCPU pool, and for every round of the
//! schedule resume every vCPU, wait until all have parked, read their TSC
//! state back and their records out, and analyse the round. Rounds are handed
//! on one at a time as they complete (to a report, a file, a comparison);
//! [`run`] collects them. With [`Backend::Host`] the rounds run on host
//! threads instead ([`crate::native`]), analysed the same way.

use serde::Serialize;
use tsc_contract::{Config, RoundRecord, Variant};

use crate::analysis::{RoundAccumulator, RoundResult};
use crate::error::{Failure, RunError};
use crate::host::HostInfo;
use crate::options::{Backend, RunOptions};
use crate::pool::VcpuPool;
use crate::tsc::TscState;
use crate::vstate::sync_area::{self, Windows};
use crate::vstate::vm::{self, Vm};

/// What a run says about itself, apart from its rounds.
#[derive(Clone, Debug, Serialize)]
pub struct RunFacts {
    /// Host facts.
    pub host: HostInfo,
    /// vCPU count.
    pub vcpus: u32,
    /// KVM's view of every vCPU before the first round.
    pub initial: Vec<TscState>,
    /// Observations about the run as a whole, in words.
    pub notes: Vec<String>,
    /// Whether the vCPUs outnumbered the host's cores, so that guest
    /// spin-waits were broken up from the host (see [`crate::vstate::spin`]).
    pub spin_breaker: bool,
}

/// A whole run: its facts and every round, in order.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutput {
    /// What the run says about itself.
    pub facts: RunFacts,
    /// Every round, in order.
    pub rounds: Vec<RoundResult>,
}

/// Runs every round of `opts.schedule` and returns them all.
// A run returns once: the size of its error does not matter.
#[allow(clippy::result_large_err)]
pub fn run(opts: &RunOptions) -> Result<RunOutput, Failure> {
    let mut rounds = Vec::with_capacity(opts.schedule.len());
    let facts = run_streaming(opts, &mut |r| {
        rounds.push(r);
        Ok(())
    })?;
    Ok(RunOutput { facts, rounds })
}

/// Runs every round of `opts.schedule` on `opts.backend`, handing each to
/// `on_round` as soon as it is complete (it keeps, writes or summarises it);
/// an error from `on_round` ends the run with [`RunError::Output`].
#[allow(clippy::result_large_err)]
pub fn run_streaming(
    opts: &RunOptions,
    on_round: &mut dyn FnMut(RoundResult) -> Result<(), String>,
) -> Result<RunFacts, Failure> {
    if opts.backend == Backend::Host {
        return crate::native::run_streaming(opts, on_round);
    }
    let Some(&first) = opts.schedule.first() else {
        return Err(Failure::early(RunError::NothingToRun));
    };
    let rounds = u32::try_from(opts.schedule.len()).unwrap_or(u32::MAX);
    let image = opts
        .image
        .as_deref()
        .unwrap_or(crate::guest_image::EMBEDDED);
    let setup = || -> Result<(VcpuPool, Windows), RunError> {
        let kvm = vm::open_kvm()?;
        let mut machine = Vm::new(kvm, opts.vcpus, rounds, first, 0, image)?;
        if let Some(inj) = &opts.inject {
            let mut c = Config::default();
            inj.apply(&mut c);
            vm::write_injection(&machine.mem, &c)?;
        }
        // Linux's windows as asked, at the guest's TSC frequency (0 when KVM
        // cannot say, as Vm::new has it), before any vCPU runs.
        let khz = machine
            .vcpus
            .first()
            .and_then(|v| v.get_tsc_khz().ok())
            .unwrap_or(0);
        machine.sync_windows = Windows::at(khz, opts.sync_windows_ms);
        sync_area::write_windows(&machine.mem, machine.sync_windows)?;
        let windows = machine.sync_windows;
        Ok((VcpuPool::start(machine, opts.timeout, rounds)?, windows))
    };
    let (mut pool, windows) = setup().map_err(Failure::early)?;
    let mut driver = Driver {
        host: None,
        completed: 0,
        windows,
    };
    match driver.drive(&mut pool, opts, on_round) {
        Ok(facts) => Ok(facts),
        Err(error) => Err(Failure {
            error,
            rounds_completed: driver.completed,
            host: driver.host.map(Box::new),
        }),
    }
    // The pool drops here: every vCPU thread is stopped and joined (or the VM
    // leaked if one cannot be) whatever happened.
}

/// The round loop's state that outlives an error.
struct Driver {
    host: Option<HostInfo>,
    completed: u32,
    /// The windows Linux's sync runs with in this VM.
    windows: Windows,
}

impl Driver {
    fn drive(
        &mut self,
        pool: &mut VcpuPool,
        opts: &RunOptions,
        on_round: &mut dyn FnMut(RoundResult) -> Result<(), String>,
    ) -> Result<RunFacts, RunError> {
        let initial = pool.readback(0)?;
        let mut host = HostInfo::collect(pool.facts(&initial));
        host.sync_windows = Some(self.windows);
        self.host = Some(host.clone());
        let mut notes = Vec::new();
        if let Some(s) = initial.iter().find(|s| s.offset != initial[0].offset) {
            notes.push(format!(
                "the vCPUs did not start with the same TSC offset ({:?} vs {:?})",
                s.offset, initial[0].offset
            ));
        }
        if initial.iter().any(|s| s.adjust != 0) {
            notes.push("a vCPU started with a non-zero TSC_ADJUST".into());
        }

        // Buffers reused by every round: past the first round, the per-round
        // path allocates nothing but the round's own result.
        let mut acc = RoundAccumulator::new(&initial);
        let mut after: Vec<TscState> = Vec::with_capacity(initial.len());
        let mut records: Vec<RoundRecord> = Vec::with_capacity(initial.len());
        let mut current: Option<Variant> = opts.schedule.first().copied();
        for (round, &variant) in opts.schedule.iter().enumerate() {
            let round = round as u32;
            if current != Some(variant) {
                vm::set_variant(pool.mem(), variant)?;
                current = Some(variant);
            }
            if variant == Variant::LinuxTscSync {
                sync_area::clear_results(pool.mem(), pool.vcpus())?;
            }
            pool.run_round(round)?;
            // Every vCPU is parked outside KVM_RUN now: read them all back.
            pool.readback_into(round, &mut after)?;
            pool.read_records(round, variant, &mut records)?;
            let sync = (variant == Variant::LinuxTscSync)
                .then(|| sync_area::read(pool.mem(), pool.vcpus()))
                .transpose()
                .map_err(|error| RunError::Sync { round, error })?;
            let result = acc.add(round, variant, &records, &after, sync);
            for d in &result.disagreements {
                log::warn!("round {round}: {d}");
            }
            on_round(result).map_err(RunError::Output)?;
            self.completed += 1;
            vm::reset_rendezvous(pool.mem())?;
        }
        // Let every vCPU report the end and halt.
        pool.run_to_end(opts.schedule.len() as u32)?;
        Ok(RunFacts {
            host,
            vcpus: pool.vcpus(),
            initial,
            notes,
            spin_breaker: pool.spin_breaker(),
        })
    }
}
