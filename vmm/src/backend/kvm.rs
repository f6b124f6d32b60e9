//! The KVM backend: a VM whose guest runs the rounds on its vCPUs, real
//! `wrmsr IA32_TSC` writes, every vCPU's TSC state read back through KVM
//! while all of them are parked outside KVM_RUN.

use std::sync::Arc;
use std::time::Duration;

use kvm_ioctls::VcpuFd;
use vm_memory::GuestMemoryMmap;

use tsc_contract::{ports, Variant};

use super::{Backend, RoundData};
use crate::error::RunError;
use crate::guest_image;
use crate::host::{HostInfo, Pacing};
use crate::initial_skew::{targets, SkewError};
use crate::options::RunOptions;
use crate::stop;
use crate::tsc::clock::{get_clock, ClockSample};
use crate::tsc::clock_points::{ClockPoint, ClockPoints};
use crate::tsc::{self, TscState};
use crate::vstate::chain::{self, Chain, Report, RoundWork, Taken};
use crate::vstate::vcpu::{handoff::Arrive, Command};
use crate::vstate::vm::{self, Vm, VmSpec};
use crate::vstate::{memory, spin, sync_area, PoolError, VcpuPool, VmError};

/// Said of runs whose guest yielded in its spin-waits.
pub const GUEST_YIELD_NOTE: &str = "more vCPUs than host cores: the VMM rewrote every `pause` \
    of the guest's spin-waits into an exit that yields the vCPU's host thread (a stand-in for \
    pause-loop exiting); skews and exit times then reflect host scheduling, not the rendezvous";

/// A running VM and what the rounds need of it.
pub struct KvmBackend {
    pool: VcpuPool,
    /// The rounds after the first, run back to back by the vCPU threads;
    /// it owns the work between two rounds ([`RoundWork`]), which the first
    /// round, driven by this thread, does through it as well.
    chain: Arc<Chain<Between>>,
    /// Every vCPU's report of the round taken last (reused).
    reports: Vec<Report>,
    /// `--kvmclock` asked for; whether the guest could enable it is the
    /// pool's [`VcpuPool::kvmclock`].
    kvmclock_asked: bool,
    /// How the run is paced.
    pacing: Pacing,
    /// `--kvmclock`: KVM_GET_CLOCK at the run's fixed points so far
    /// (`None` without it).
    clock_points: Option<ClockPoints>,
    /// The last round run.
    last_round: Option<u32>,
}

/// The work between two rounds, on guest memory with every vCPU parked:
/// one place for the first round (driven by the coordinator) and the
/// chained ones (done by the vCPU thread that completes a round).
struct Between {
    vcpus: u32,
    /// The variant the guest's config names now.
    current: Variant,
    /// Exchanges per pair of the guest's hand-off test after every round
    /// (0: none).
    guest_view: u32,
    /// Whether the guest records its kvmclock at every TSC write.
    record_clock: bool,
}

impl RoundWork for Between {
    type Data = RoundData;
    type Error = RunError;

    fn before(
        &mut self,
        mem: &GuestMemoryMmap,
        _round: u32,
        variant: Variant,
    ) -> Result<(), RunError> {
        if self.current != variant {
            memory::set_variant(mem, variant)?;
            self.current = variant;
        }
        if variant == Variant::LinuxTscSync {
            memory::clear_sync_results(mem, self.vcpus)?;
        }
        Ok(())
    }

    fn after(
        &mut self,
        mem: &GuestMemoryMmap,
        round: u32,
        variant: Variant,
        data: &mut RoundData,
    ) -> Result<(), RunError> {
        let vcpus = self.vcpus;
        memory::read_records(mem, vcpus, &mut data.records)
            .map_err(|vcpu| RunError::UnreadableRecord { vcpu, round })?;
        data.sync = (variant == Variant::LinuxTscSync)
            .then(|| sync_area::read(mem, vcpus))
            .transpose()
            .map_err(|error| RunError::Sync { round, error })?;
        data.guest_view.clear();
        if self.guest_view > 0 {
            memory::read_handoff(
                mem,
                vcpus,
                false,
                round,
                self.guest_view,
                &mut data.guest_view,
            )
            .map_err(|error| RunError::Handoff { round, error })?;
        }
        data.clock.clear();
        if self.record_clock {
            for vcpu in 0..vcpus {
                data.clock.push(memory::read_clock_record(mem, vcpu)?);
            }
        }
        // Xen starts every calibration with a fresh shared state.
        memory::reset_rendezvous(mem)?;
        Ok(())
    }
}

impl KvmBackend {
    /// Creates the VM for `rounds` rounds, the first of `first`, with the
    /// options' vCPUs, guest image, injected fault, Linux windows and
    /// initial skew (set before any vCPU runs; the first readback verifies
    /// it), and starts its vCPU threads.
    pub fn start(opts: &RunOptions, rounds: u32, first: Variant) -> Result<KvmBackend, RunError> {
        let image = opts.image.as_deref().unwrap_or(guest_image::EMBEDDED);
        let spec = VmSpec {
            vcpus: opts.vcpus,
            rounds,
            variant: first,
            command_mode: false,
            windows_ms: opts.sync_windows_ms,
            inject: opts.inject,
            handoff_exchanges: opts.guest_view.unwrap_or(0),
            kvmclock: opts.kvmclock,
            record_clock: opts.kvmclock,
            tsc: opts.tsc,
            image,
        };
        let machine = Vm::new(vm::open_kvm()?, &spec)?;
        if let Some(cycles) = opts.initial_skew {
            apply_initial_skew(&machine.vcpus, cycles)?;
        }
        // With more vCPUs than cores a spinning vCPU would keep its core
        // while the one it waits for cannot run: its `pause`s yield
        // instead, or (an image that lists none) the spin breaker kicks it.
        let pacing = if !spin::overcommitted(opts.vcpus) {
            Pacing::None
        } else if guest_image::patch_pause_sites(&machine.mem, image, ports::YIELD)
            .map_err(VmError::Image)?
            > 0
        {
            Pacing::GuestYield
        } else {
            Pacing::SpinBreaker
        };
        let timeout = opts.round_timeout.unwrap_or(opts.timeout);
        let breaker = pacing == Pacing::SpinBreaker;
        // The fresh VM's clock, before any vCPU thread starts.
        let clock_points = opts.kvmclock.then(|| ClockPoints {
            fresh: Some(ClockPoint::new(None, get_clock(&machine.fd))),
            ..ClockPoints::default()
        });
        let between = Between {
            vcpus: opts.vcpus,
            current: first,
            guest_view: opts.guest_view.unwrap_or(0),
            record_clock: opts.kvmclock && machine.kvmclock,
        };
        // The first round is driven by this thread; the chain starts at the
        // second.
        let chain = Arc::new(Chain::new(machine.mem.clone(), opts.vcpus, between, 1));
        let arrive: Arc<dyn Arrive<Command>> = chain.clone();
        Ok(KvmBackend {
            pool: VcpuPool::start_with(machine, timeout, rounds, breaker, Some(arrive))?,
            chain,
            reports: Vec::with_capacity(opts.vcpus as usize),
            kvmclock_asked: opts.kvmclock,
            pacing,
            clock_points,
            last_round: None,
        })
    }

    /// The first round, driven by this thread: every vCPU resumed, each
    /// reading itself back right after its round, parked outside KVM_RUN
    /// with its round done; then KVM_GET_CLOCK, every vCPU parked.
    fn driven_round(
        &mut self,
        round: u32,
        variant: Variant,
        data: &mut RoundData,
    ) -> Result<(), RunError> {
        let not_paused = || RunError::from(PoolError::NotPlanned { round });
        self.chain
            .with_work(|w, mem| w.before(mem, round, variant))
            .ok_or_else(not_paused)??;
        self.pool.run_round_readback(round, &mut data.after)?;
        self.chain
            .with_work(|w, mem| w.after(mem, round, variant, data))
            .ok_or_else(not_paused)??;
        if self
            .clock_points
            .as_ref()
            .is_some_and(|p| p.after_first.is_none())
        {
            let point = ClockPoint::new(Some(round), self.clock());
            if let Some(p) = self.clock_points.as_mut() {
                p.after_first = Some(point);
            }
        }
        Ok(())
    }

    /// A round the vCPU threads ran back to back with the ones before:
    /// taken from the chain's ring, waiting for it (and the batch after it)
    /// when it has not completed.
    fn chained_round(&mut self, round: u32, data: &mut RoundData) -> Result<(), RunError> {
        loop {
            match self.chain.take(round, data, &mut self.reports) {
                Taken::Round => break,
                Taken::Failed(e) => return Err(e),
                Taken::Stuck => {
                    return Err(match stop::requested() {
                        Some(signal) => RunError::interrupted(signal, round),
                        None => PoolError::NotPlanned { round }.into(),
                    })
                }
                Taken::Pending => {
                    let until = self.chain.batch_end(round);
                    let chain = &self.chain;
                    self.pool.wait_chained(round, until, || chain.paused())?;
                }
            }
        }
        data.after.clear();
        for (vcpu, report) in self.reports.drain(..).enumerate() {
            let vcpu = vcpu as u32;
            match report {
                Some((r, Ok(state))) if r == round => data.after.push(state),
                Some((found, Ok(_))) => {
                    return Err(PoolError::WrongRound {
                        vcpu,
                        expected: round,
                        found,
                    }
                    .into())
                }
                Some((_, Err(error))) => return Err(PoolError::Readback { vcpu, error }.into()),
                None => return Err(PoolError::Lost(vcpu).into()),
            }
        }
        Ok(())
    }

    /// KVM_GET_CLOCK now.
    fn clock(&self) -> Result<ClockSample, String> {
        match self.pool.vm_fd() {
            Some(fd) => get_clock(fd),
            None => Err("the VM is gone".into()),
        }
    }
}

impl Backend for KvmBackend {
    fn vcpus(&self) -> u32 {
        self.pool.vcpus()
    }

    fn readback(&mut self, round: u32, out: &mut Vec<TscState>) -> Result<(), RunError> {
        Ok(self.pool.readback_into(round, out)?)
    }

    fn run_round(
        &mut self,
        round: u32,
        variant: Variant,
        data: &mut RoundData,
    ) -> Result<(), RunError> {
        if round == 0 {
            self.driven_round(round, variant, data)?;
        } else {
            self.chained_round(round, data)?;
        }
        self.last_round = Some(round);
        Ok(())
    }

    fn lookahead(&self) -> u32 {
        chain::DEPTH
    }

    fn plan(&mut self, variant: Variant) {
        self.chain.plan(variant);
    }

    fn completed(&self, round: u32) -> bool {
        round > 0 && self.chain.completed() > round
    }

    fn finish(&mut self, rounds: u32) -> Result<(), RunError> {
        Ok(self.pool.run_to_end(rounds)?)
    }

    fn rearm(&mut self, timeout: Duration) {
        self.pool.rearm(timeout);
    }

    fn host(&self, initial: &[TscState]) -> HostInfo {
        let mut host = HostInfo::collect(self.pool.facts(initial));
        host.sync_windows = Some(self.pool.sync_windows());
        host.pacing = Some(self.pacing);
        host
    }

    fn skew_set_by(&self) -> &'static str {
        "KVM_VCPU_TSC_OFFSET"
    }

    fn setup_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.pacing == Pacing::GuestYield {
            notes.push(GUEST_YIELD_NOTE.to_string());
        }
        if self.kvmclock_asked && !self.pool.kvmclock() {
            notes.push(
                "--kvmclock: KVM does not offer kvmclock to this guest (CPUID lacks \
                 KVM_FEATURE_CLOCKSOURCE2): no kvmclock jumps were measured"
                    .into(),
            );
        }
        notes
    }

    fn unequal_start(&self, offset: Option<u64>, first: Option<u64>) -> String {
        format!("the vCPUs did not start with the same TSC offset ({offset:?} vs {first:?})")
    }

    fn spin_breaker(&self) -> bool {
        self.pool.spin_breaker()
    }

    fn clock_points(&mut self) -> Option<ClockPoints> {
        let mut points = self.clock_points.take()?;
        if let Some(round) = self.last_round {
            points.after_last = Some(ClockPoint::new(Some(round), self.clock()));
        }
        points.settle();
        Some(points)
    }
}

/// Sets every vCPU's offset to vCPU 0's plus its target (wrapping), through
/// KVM_VCPU_TSC_OFFSET. The vCPUs must not be running.
fn apply_initial_skew(vcpus: &[VcpuFd], cycles: u64) -> Result<(), SkewError> {
    let Some(first) = vcpus.first() else {
        return Ok(());
    };
    if !tsc::has_offset_attr(first) {
        return Err(SkewError::NoOffsetAttr);
    }
    let base = tsc::get_offset(first).map_err(|error| SkewError::Set { vcpu: 0, error })?;
    let n = u32::try_from(vcpus.len()).unwrap_or(u32::MAX);
    for (k, (fd, t)) in vcpus.iter().zip(targets(n, cycles)).enumerate().skip(1) {
        tsc::set_offset(fd, base.wrapping_add(t)).map_err(|error| SkewError::Set {
            vcpu: k as u32,
            error,
        })?;
    }
    Ok(())
}
