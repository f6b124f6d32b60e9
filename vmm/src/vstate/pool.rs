//! A VM with one thread per vCPU: start them, resume them all and wait until
//! every one has reported, read their state back while they are parked, and
//! stop them, joining every thread within a bounded time or, if one cannot
//! be stopped, leaking the VM rather than unmapping memory under it.
//!
//! Both the KVM backend's rounds and the command-mode session drive their VM
//! through this and nothing else; what goes wrong is a [`PoolError`].

use std::os::fd::AsRawFd;
use std::os::unix::thread::JoinHandleExt;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use tsc_contract::Progress;
use vm_memory::GuestMemoryMmap;

use super::error::PoolError;
use super::kick::{self, Kicker};
use super::memory;
use super::spin::{self, SpinBreaker};
use super::vcpu::handoff::{Arrive, Hub, Mailbox};
use super::vcpu::state::Saved;
use super::vcpu::{self, Command, Event, Link, VcpuThread};
use super::vm::Vm;
use crate::backend::host::affinity;
use crate::host::VmFacts;
use crate::options::Windows;
use crate::stop::{self, Signal};
use crate::tsc::frequency::{FrequencySetting, Scaling};
use crate::tsc::{self, debugfs, OffsetReader, OffsetSource, TscState};
use crate::watchdog::Stall;

mod chained;

/// How often a wait looks for a stop request.
const POLL: Duration = Duration::from_millis(50);

/// How long stopped vCPU threads get to end before they are abandoned.
pub const JOIN_GRACE: Duration = Duration::from_secs(5);

/// Why waiting for a vCPU event ended without one.
enum Wait {
    Timeout,
    Disconnected,
    Interrupted(i32),
}

/// The running vCPU threads of one VM.
pub struct VcpuPool {
    mailboxes: Vec<Arc<Mailbox<Command>>>,
    events: Receiver<Event>,
    hub: Arc<Hub>,
    /// Events taken from the channel so far.
    received: u64,
    handles: Vec<JoinHandle<VcpuFd>>,
    kickers: Vec<Kicker>,
    breaker: Option<SpinBreaker>,
    deadline: Instant,
    timeout: Duration,
    /// Rounds the guest was configured for (to decode progress slots).
    rounds: u32,
    with_offset: bool,
    offset_source: OffsetSource,
    /// The VM without its vCPU fds (the threads own them). Dropped only after
    /// every thread has been joined; leaked if one could not be.
    vm: Option<Vm>,
    /// Reused by every wait, so the per-round path allocates nothing.
    done: Vec<bool>,
    /// Where the vCPU threads report chained rounds.
    chain: Option<Arc<dyn Arrive<Command>>>,
    /// A vCPU's failure seen while rounds completed before it were still
    /// to be taken.
    failure: Option<PoolError>,
}

impl VcpuPool {
    /// Starts one thread per vCPU of `vm`; everything must be done within
    /// `timeout` from now. `rounds` is what the guest was configured for.
    /// With more vCPUs than host cores the spin breaker runs.
    pub fn start(vm: Vm, timeout: Duration, rounds: u32) -> Result<VcpuPool, PoolError> {
        let breaker = spin::overcommitted(vm.vcpus.len() as u32);
        VcpuPool::start_with(vm, timeout, rounds, breaker, None)
    }

    /// As [`VcpuPool::start`], with the spin breaker only when `breaker`
    /// (a guest whose spin-waits yield on their own needs none), and the
    /// vCPU threads reporting chained rounds to `chain`
    /// ([`VcpuPool::wait_chained`]).
    pub fn start_with(
        mut vm: Vm,
        timeout: Duration,
        rounds: u32,
        breaker: bool,
        chain: Option<Arc<dyn Arrive<Command>>>,
    ) -> Result<VcpuPool, PoolError> {
        kick::install_kick_handler().map_err(PoolError::KickHandler)?;
        let with_offset = vm.vcpus.first().is_some_and(tsc::has_offset_attr);
        // KVM's debugfs is needed only without the attribute (or when a test
        // asks for another source): /proc/self/mounts is not read otherwise.
        let need_dir = !with_offset || std::env::var_os(tsc::OFFSET_SOURCE_ENV).is_some();
        let vm_dir = need_dir
            .then(debugfs::mounted)
            .flatten()
            .map(|root| debugfs::vm_dir(&root, vm.creator_tid, vm.fd.as_raw_fd()));
        let mut readers = OffsetReader::choose(&vm.vcpus, vm_dir.as_deref()).into_iter();
        let offset_source = readers
            .as_slice()
            .first()
            .map_or(OffsetSource::None, OffsetReader::source);
        let scaling = vm.scaling;
        let fds = std::mem::take(&mut vm.vcpus);
        let n = fds.len();
        let (event_tx, event_rx) = mpsc::channel();
        let hub = Arc::new(Hub::new());
        // Spinning for the next command pays when every vCPU thread has a
        // core; with more, it would take the core the coordinator needs.
        let spin = !spin::overcommitted(n as u32);
        let mut pool = VcpuPool {
            mailboxes: Vec::with_capacity(n),
            events: event_rx,
            hub: hub.clone(),
            received: 0,
            handles: Vec::with_capacity(n),
            kickers: Vec::with_capacity(n),
            breaker: None,
            deadline: Instant::now() + timeout,
            timeout,
            rounds,
            with_offset,
            offset_source,
            vm: Some(vm),
            done: vec![false; n],
            chain: chain.clone(),
            failure: None,
        };
        let cpus = if spin {
            affinity::plan(n as u32, &affinity::allowed_cpus())
        } else {
            Vec::new()
        };
        for (index, fd) in fds.into_iter().enumerate() {
            let mailbox = Arc::new(Mailbox::new(Command::Stop));
            let link = Link {
                mailbox: mailbox.clone(),
                spin,
                events: event_tx.clone(),
                hub: hub.clone(),
                chain: chain.clone(),
            };
            let offsets = readers.next().unwrap_or(OffsetReader::None);
            let (thread, kicker) = VcpuThread::new(index as u32, fd, link, offsets, scaling);
            // On failure the pool drops here: it joins (or leaks) the threads
            // already started and the VM with them.
            let handle = vcpu::spawn(thread).map_err(PoolError::Spawn)?;
            if let Some(&Some(cpu)) = cpus.get(index) {
                // A vCPU that cannot be pinned runs where the scheduler
                // puts it, as before.
                let _ = affinity::pin(handle.as_pthread_t(), cpu);
            }
            pool.mailboxes.push(mailbox);
            pool.handles.push(handle);
            pool.kickers.push(kicker);
        }
        if let Some(c) = &pool.chain {
            let targets = pool.mailboxes.iter().cloned();
            let threads = pool.handles.iter().map(|h| h.thread().clone());
            c.connect(targets.zip(threads).collect());
        }
        // Only when asked for; stopped in Drop before the threads are
        // joined (it signals them by pthread_t).
        if breaker {
            let targets = pool.handles.iter().map(|h| h.as_pthread_t()).collect();
            pool.breaker = SpinBreaker::start(targets, spin::PERIOD).ok();
        }
        Ok(pool)
    }

    /// Re-arms the watchdog: what follows must be done within `timeout`
    /// from now (a run whose every round has its own deadline).
    pub fn rearm(&mut self, timeout: Duration) {
        self.deadline = Instant::now() + timeout;
        self.timeout = timeout;
    }

    /// Number of vCPUs.
    pub fn vcpus(&self) -> u32 {
        self.handles.len() as u32
    }

    /// Guest memory.
    pub fn mem(&self) -> &GuestMemoryMmap {
        match &self.vm {
            Some(vm) => &vm.mem,
            // `vm` is taken only in Drop.
            None => unreachable!("the pool's VM is gone before the pool"),
        }
    }

    /// The KVM system fd (for capability checks).
    pub fn kvm(&self) -> Option<&Kvm> {
        self.vm.as_ref().map(|vm| &vm.kvm)
    }

    /// The VM fd (for VM-wide state such as KVM_GET_CLOCK).
    pub fn vm_fd(&self) -> Option<&VmFd> {
        self.vm.as_ref().map(|vm| &vm.fd)
    }

    /// How KVM scales this VM's TSCs, and how `--tsc-khz` was applied.
    pub fn scaling(&self) -> (Scaling, Option<FrequencySetting>) {
        self.vm
            .as_ref()
            .map_or((Scaling::default(), None), |vm| (vm.scaling, vm.frequency))
    }

    /// Whether KVM has the KVM_VCPU_TSC_OFFSET attribute.
    pub fn has_offset_attr(&self) -> bool {
        self.with_offset
    }

    /// Whether the guest registered its kvmclock pages.
    pub fn kvmclock(&self) -> bool {
        self.vm.as_ref().is_some_and(|vm| vm.kvmclock)
    }

    /// Whether the guest's CPUID exposes IA32_TSC_ADJUST.
    pub fn guest_tsc_adjust(&self) -> bool {
        self.vm.as_ref().is_some_and(|vm| vm.guest_tsc_adjust)
    }

    /// What this VM says about the host, given every vCPU's first readback.
    pub fn facts(&self, initial: &[TscState]) -> VmFacts {
        VmFacts {
            tsc_khz: initial.first().map(|s| s.tsc_khz),
            tsc_offset_attr: self.with_offset,
            offset_source: self.offset_source,
            guest_tsc_adjust: self.guest_tsc_adjust(),
            host_tsc_khz: self
                .vm
                .as_ref()
                .map(|vm| vm.scaling.host_khz)
                .filter(|&k| k > 0),
            guest_tsc: self.vm.as_ref().and_then(|vm| vm.frequency),
        }
    }

    /// The windows of Linux's sync in the guest's config.
    pub fn sync_windows(&self) -> Windows {
        self.vm
            .as_ref()
            .map(|vm| vm.sync_windows)
            .unwrap_or_default()
    }

    /// Whether the spin breaker runs (vCPUs outnumber host cores).
    pub fn spin_breaker(&self) -> bool {
        self.breaker.is_some()
    }

    /// Hands `cmd` to vCPU `k`'s thread (a thread that has ended reports it
    /// through its last event).
    fn post(&self, k: usize, cmd: Command) {
        if let (Some(m), Some(h)) = (self.mailboxes.get(k), self.handles.get(k)) {
            m.post(cmd, h.thread());
        }
    }

    fn send_all(&self, cmd: Command) {
        for k in 0..self.mailboxes.len() {
            self.post(k, cmd);
        }
    }

    /// The next event, of `wanted` still awaited: sleeping until that many
    /// have been sent, the deadline at most, and looking for a stop request
    /// every [`POLL`].
    fn recv(&mut self, wanted: usize) -> Result<Event, Wait> {
        loop {
            match self.events.try_recv() {
                Ok(ev) => {
                    self.received += 1;
                    return Ok(ev);
                }
                Err(TryRecvError::Disconnected) => return Err(Wait::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            if let Some(signal) = stop::requested() {
                return Err(Wait::Interrupted(signal));
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Wait::Timeout);
            }
            self.hub
                .wait(self.received, wanted.max(1) as u64, left.min(POLL));
        }
    }

    /// Waits for one event per vCPU in `wanted` (all when `None`), handing
    /// each to `take`, which returns the vCPU it answers for (`None`: not
    /// the awaited kind, ignored). `round` names the round (or command) in
    /// errors.
    fn collect(
        &mut self,
        round: u32,
        wanted: Option<u32>,
        mut take: impl FnMut(Event) -> Result<Option<u32>, PoolError>,
    ) -> Result<(), PoolError> {
        let n = self.vcpus();
        for (i, d) in self.done.iter_mut().enumerate() {
            *d = wanted.is_some_and(|w| w != i as u32);
        }
        let mut remaining = if wanted.is_some() { 1 } else { n as usize };
        while remaining > 0 {
            let ev = match self.recv(remaining) {
                Ok(ev) => ev,
                Err(Wait::Timeout) => return Err(self.stall(round)),
                Err(Wait::Interrupted(signal)) => {
                    return Err(PoolError::Interrupted {
                        signal: Signal(signal),
                        round,
                    })
                }
                Err(Wait::Disconnected) => {
                    let lost = self.done.iter().position(|d| !d).unwrap_or(0);
                    return Err(PoolError::Lost(lost as u32));
                }
            };
            match ev {
                Event::Failed { vcpu, error } => {
                    return Err(PoolError::Vcpu { vcpu, round, error })
                }
                Event::Stopped { vcpu } => return Err(PoolError::Lost(vcpu)),
                other => {
                    if let Some(vcpu) = take(other)? {
                        if let Some(d) = self.done.get_mut(vcpu as usize) {
                            if !*d {
                                *d = true;
                                remaining -= 1;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// What the watchdog reports: who had not arrived and where each said it
    /// was. The vCPUs are still running: these are snapshots, which is all a
    /// diagnosis needs; every value is untrusted and decoded with checks.
    fn stall(&self, round: u32) -> PoolError {
        let mem = self.mem();
        PoolError::Timeout(Stall {
            round,
            missing: (0..self.vcpus())
                .filter(|&i| !self.done[i as usize])
                .map(|i| {
                    let p = memory::read_progress(mem, i).map(|w| Progress::decode(w, self.rounds));
                    (i, p)
                })
                .collect(),
            semaphore: memory::read_semaphore(mem),
            timeout: self.timeout,
        })
    }

    /// Resumes every vCPU, waits until each has reported the end of `round`
    /// and has read its own TSC state back right after (parked, its round
    /// done: [`Command::RunReadback`]), and puts the states into `out`, in
    /// vCPU order, reusing its storage.
    pub fn run_round_readback(
        &mut self,
        round: u32,
        out: &mut Vec<TscState>,
    ) -> Result<(), PoolError> {
        out.clear();
        out.resize(self.vcpus() as usize, TscState::default());
        self.send_all(Command::RunReadback);
        self.collect(round, None, |ev| match ev {
            Event::RoundDone {
                vcpu,
                round: r,
                state,
            } if r == round => {
                let s = state
                    .ok_or(PoolError::Lost(vcpu))?
                    .map_err(|error| PoolError::Readback { vcpu, error })?;
                if let Some(slot) = out.get_mut(vcpu as usize) {
                    *slot = s;
                }
                Ok(Some(vcpu))
            }
            Event::RoundDone { vcpu, round: r, .. } => Err(PoolError::WrongRound {
                vcpu,
                expected: round,
                found: r,
            }),
            Event::Finished { vcpu } => Err(PoolError::FinishedEarly { vcpu, round }),
            _ => Ok(None),
        })
    }

    /// Resumes every vCPU after the last of `rounds` rounds and waits until
    /// each has reported the end and halted.
    pub fn run_to_end(&mut self, rounds: u32) -> Result<(), PoolError> {
        self.send_all(Command::Run);
        self.collect(rounds, None, |ev| match ev {
            Event::Finished { vcpu } => Ok(Some(vcpu)),
            Event::RoundDone { vcpu, round, .. } => Err(PoolError::WrongRound {
                vcpu,
                expected: rounds,
                found: round,
            }),
            _ => Ok(None),
        })
    }

    /// Command mode: resumes every vCPU and waits until each has reported
    /// command `seq` done.
    pub fn run_command(&mut self, seq: u32) -> Result<(), PoolError> {
        self.send_all(Command::Run);
        self.collect(seq, None, |ev| match ev {
            Event::CommandDone { vcpu, seq: s } if s == seq => Ok(Some(vcpu)),
            Event::CommandDone { vcpu, seq: s } => Err(PoolError::WrongCommand {
                vcpu,
                expected: seq,
                found: s,
            }),
            Event::RoundDone { vcpu, round, .. } => Err(PoolError::WrongCommand {
                vcpu,
                expected: seq,
                found: round,
            }),
            Event::Finished { vcpu } => Err(PoolError::FinishedEarly { vcpu, round: seq }),
            _ => Ok(None),
        })
    }

    /// Reads every (parked) vCPU's TSC state back into `out`, in vCPU order,
    /// reusing its storage.
    pub fn readback_into(&mut self, round: u32, out: &mut Vec<TscState>) -> Result<(), PoolError> {
        out.clear();
        out.resize(self.vcpus() as usize, TscState::default());
        self.send_all(Command::Readback);
        self.collect(round, None, |ev| match ev {
            Event::Readback { vcpu, state } => {
                let s = state.map_err(|error| PoolError::Readback { vcpu, error })?;
                if let Some(slot) = out.get_mut(vcpu as usize) {
                    *slot = s;
                }
                Ok(Some(vcpu))
            }
            _ => Ok(None),
        })
    }

    /// Every (parked) vCPU's TSC state, in vCPU order.
    pub fn readback(&mut self, round: u32) -> Result<Vec<TscState>, PoolError> {
        let mut out = Vec::new();
        self.readback_into(round, &mut out)?;
        Ok(out)
    }

    /// Every (parked) vCPU's state for a snapshot, in vCPU order: each
    /// vCPU thread completes its pending port I/O and saves its registers
    /// and TSC state ([`Command::Save`]); the vCPUs stay parked. A vCPU whose
    /// state could not be saved answers with why.
    pub fn save_all(&mut self, round: u32) -> Result<Vec<Saved>, PoolError> {
        let mut out: Vec<Option<Saved>> = (0..self.vcpus()).map(|_| None).collect();
        self.send_all(Command::Save);
        self.collect(round, None, |ev| match ev {
            Event::Saved { vcpu, state } => {
                if let Some(slot) = out.get_mut(vcpu as usize) {
                    *slot = Some(state);
                }
                Ok(Some(vcpu))
            }
            _ => Ok(None),
        })?;
        out.into_iter()
            .enumerate()
            .map(|(i, s)| s.ok_or(PoolError::Lost(i as u32)))
            .collect()
    }

    /// A host access on one parked vCPU: [`Command::GetMsr`] returns the
    /// value read, [`Command::SetMsr`] and [`Command::SetOffset`] the value
    /// written.
    pub fn msr(&mut self, vcpu: u32, cmd: Command, round: u32) -> Result<u64, PoolError> {
        if vcpu >= self.vcpus() {
            return Err(PoolError::Lost(vcpu));
        }
        self.post(vcpu as usize, cmd);
        let mut value = None;
        self.collect(round, Some(vcpu), |ev| match ev {
            Event::Msr {
                vcpu: v, value: r, ..
            } if v == vcpu => {
                value = Some(r.map_err(|error| PoolError::Readback { vcpu, error })?);
                Ok(Some(vcpu))
            }
            _ => Ok(None),
        })?;
        value.ok_or(PoolError::Lost(vcpu))
    }

    /// Stops every vCPU thread and joins them within [`JOIN_GRACE`]. Returns
    /// false when a thread had to be abandoned.
    fn shutdown(&mut self) -> bool {
        if let Some(b) = self.breaker.take() {
            b.stop();
        }
        if let Some(c) = &self.chain {
            c.close();
        }
        self.send_all(Command::Stop);
        let started = Instant::now();
        let until = started + JOIN_GRACE;
        // Threads that only had to take the Stop end within microseconds:
        // look again soon, then less and less often.
        let mut pause = Duration::from_micros(20);
        loop {
            // Kick (again, in case a kick landed between a check and an entry).
            for (k, h) in self.kickers.iter().zip(&self.handles) {
                if !h.is_finished() {
                    k.kick(h);
                }
            }
            if Instant::now() >= until || self.handles.iter().all(|h| h.is_finished()) {
                break;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
        if self.handles.iter().any(|h| !h.is_finished()) {
            log::error!("a vCPU thread did not stop within {JOIN_GRACE:?}; abandoning it");
            return false;
        }
        // Join every thread, and only then drop the vCPU fds and the kickers
        // that point into their mappings.
        let threads = self.handles.len();
        let fds: Vec<_> = self.handles.drain(..).map(|h| h.join()).collect();
        self.kickers.clear();
        drop(fds);
        // The tests read this line: it measures the join itself, apart from
        // whatever ended the run.
        log::info!(
            "stopped and joined {threads} vCPU threads in {} us",
            started.elapsed().as_micros()
        );
        true
    }
}

impl Drop for VcpuPool {
    fn drop(&mut self) {
        if self.shutdown() {
            // The VM (and its memory) goes only now, after every vCPU thread.
            drop(self.vm.take());
        } else {
            // A vCPU thread is still alive and may still use the VM, its
            // memory, its kicker's mapping: leak them rather than unmap
            // memory under it. The process is about to report an error.
            std::mem::forget(self.vm.take());
            std::mem::forget(std::mem::take(&mut self.kickers));
            std::mem::forget(std::mem::take(&mut self.handles));
        }
    }
}
