//! One run: create the VM, start a thread per vCPU, and for every round wait
//! until all vCPUs have parked, read their TSC state back, check the guest's
//! records and analyse the round. The coordinator is the calling thread.

use std::fmt;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_ioctls::VcpuFd;
use serde::Serialize;
use tsc_contract::{
    layout, Config, Inject, Progress, RecordError, RoundRecord, Variant, RECORD_SIZE,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::analysis::{self, RoundResult, VcpuSample};
use crate::host::HostInfo;
use crate::tsc::{self, TscError, TscState};
use crate::vstate::spin;
use crate::vstate::vcpu::{self, Command, Event, Kicker, VcpuError, VcpuThread};
use crate::vstate::vm::{self, Vm, VmError};

/// What to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Number of vCPUs.
    pub vcpus: u32,
    /// The variant of each round, in order.
    pub schedule: Vec<Variant>,
    /// The whole run must finish within this.
    pub timeout: Duration,
    /// The guest image; the embedded one when `None`.
    pub image: Option<Vec<u8>>,
    /// A fault for the guest to inject (testing the error handling).
    pub inject: Option<Injection>,
}

impl Default for RunOptions {
    /// 2 vCPUs, one round of the seed, the default timeout, the embedded guest.
    fn default() -> Self {
        RunOptions {
            vcpus: 2,
            schedule: vec![Variant::Xen6ca022a1],
            timeout: crate::cli::default_timeout(2, 1),
            image: None,
            inject: None,
        }
    }
}

/// A fault the guest injects on purpose (`--inject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injection {
    /// What to do.
    pub kind: Inject,
    /// On which vCPU.
    pub vcpu: u32,
    /// In which round (0-based).
    pub round: u32,
    /// In which rendezvous iteration (0-based; stall, triple fault, panic).
    pub iteration: u32,
    /// For [`Inject::Delay`]: TSC cycles before the final write.
    pub cycles: u64,
}

impl Injection {
    /// Writes the injection into a guest config.
    pub fn apply(&self, c: &mut Config) {
        c.inject_kind = self.kind as u32;
        c.inject_vcpu = self.vcpu;
        c.inject_round = self.round;
        c.inject_iteration = self.iteration;
        c.inject_cycles = self.cycles;
    }
}

/// The signal that asked the run to stop, 0 for none.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Asks every run in this process to stop as soon as it can, keeping the
/// rounds completed so far (it ends with [`RunError::Interrupted`]). Only
/// stores to an atomic: safe to call from a signal handler.
pub fn request_stop(signal: i32) {
    STOP_SIGNAL.store(signal.max(1), Ordering::SeqCst);
}

/// The signal passed to [`request_stop`], if any.
pub fn stop_requested() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// How often the coordinator looks for a stop request while it waits.
const POLL: Duration = Duration::from_millis(50);

/// How long stopped vCPU threads get to end before they are abandoned.
const JOIN_GRACE: Duration = Duration::from_secs(5);

/// Why a run ended early.
#[derive(Debug)]
pub enum RunError {
    /// The VM could not be set up.
    Vm(VmError),
    /// A vCPU thread could not be started.
    Spawn(std::io::Error),
    /// The kick signal handler could not be installed.
    Signal(String),
    /// A vCPU stopped with an error.
    Vcpu {
        /// The vCPU.
        vcpu: u32,
        /// In which round.
        round: u32,
        /// What happened.
        error: VcpuError,
    },
    /// Reading a vCPU's TSC state back failed.
    Readback {
        /// The vCPU.
        vcpu: u32,
        /// The error.
        error: TscError,
    },
    /// A guest record failed validation.
    BadRecord {
        /// The vCPU.
        vcpu: u32,
        /// The round.
        round: u32,
        /// Why.
        error: RecordError,
    },
    /// The guest reported a round other than the one running.
    WrongRound {
        /// The vCPU.
        vcpu: u32,
        /// The round running.
        expected: u32,
        /// What the guest reported.
        found: u32,
    },
    /// The deadline passed.
    Timeout {
        /// The round running.
        round: u32,
        /// vCPUs that had not reported, with where each said it was (from its
        /// progress slot in guest memory; `None` when unreadable).
        missing: Vec<(u32, Option<Progress>)>,
        /// The rendezvous semaphore, read from guest memory.
        semaphore: Option<u32>,
        /// The deadline.
        timeout: Duration,
    },
    /// SIGINT or SIGTERM (or [`request_stop`]) stopped the run.
    Interrupted {
        /// The signal.
        signal: i32,
        /// The round running.
        round: u32,
    },
    /// A completed round could not be streamed out (`--output`).
    Output(String),
    /// A vCPU thread ended without saying why.
    Lost(u32),
    /// The guest said it had finished every round (and halted) while a round
    /// was still running.
    FinishedEarly {
        /// The vCPU.
        vcpu: u32,
        /// The round running.
        round: u32,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Vm(e) => write!(f, "{e}"),
            RunError::Spawn(e) => write!(f, "cannot start a vCPU thread: {e}"),
            RunError::Signal(e) => write!(f, "cannot install the vCPU kick signal handler: {e}"),
            RunError::Vcpu { vcpu, round, error } => {
                write!(f, "vCPU {vcpu} in round {round}: {error}")
            }
            RunError::Readback { vcpu, error } => {
                write!(f, "reading vCPU {vcpu}'s TSC state failed: {error}")
            }
            RunError::BadRecord { vcpu, round, error } => write!(
                f,
                "vCPU {vcpu}'s record of round {round} is invalid: {error}"
            ),
            RunError::WrongRound {
                vcpu,
                expected,
                found,
            } => write!(
                f,
                "vCPU {vcpu} reported the end of round {found} while round {expected} was running"
            ),
            RunError::Timeout {
                round,
                missing,
                semaphore,
                timeout,
            } => {
                let ids: Vec<String> = missing.iter().map(|(v, _)| v.to_string()).collect();
                write!(
                    f,
                    "timed out after {:.1} s in round {round}: vCPU(s) {} had not arrived",
                    timeout.as_secs_f64(),
                    ids.join(", ")
                )?;
                for (i, (v, p)) in missing.iter().enumerate() {
                    let sep = if i == 0 { "; " } else { ", " };
                    match p {
                        Some(p) => write!(f, "{sep}vCPU {v} {p}")?,
                        None => write!(f, "{sep}vCPU {v}'s progress is unreadable")?,
                    }
                }
                match semaphore {
                    Some(s) => write!(f, "; rendezvous semaphore = {s} (read from guest memory)")?,
                    None => write!(f, "; rendezvous semaphore unreadable")?,
                }
                write!(f, "; raise --timeout if the host is only slow")
            }
            RunError::Interrupted { signal, round } => write!(
                f,
                "interrupted by {} in round {round}; the vCPUs were stopped",
                signal_name(*signal)
            ),
            RunError::Output(e) => write!(f, "cannot write a round to --output: {e}"),
            RunError::Lost(v) => write!(f, "vCPU {v}'s thread ended unexpectedly"),
            RunError::FinishedEarly { vcpu, round } => write!(
                f,
                "vCPU {vcpu} reported it had finished every round while round {round} was running"
            ),
        }
    }
}

impl std::error::Error for RunError {}

/// A signal's name, for messages.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT (Ctrl-C)".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        s => format!("signal {s}"),
    }
}

/// A run that ended early, with the rounds it completed.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong.
    pub error: RunError,
    /// Rounds completed before it.
    pub completed: Vec<RoundResult>,
    /// Host facts, when the run got as far as reading them (boxed: keeps the
    /// error small).
    pub host: Option<Box<HostInfo>>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.error)
    }
}

/// The result of a run.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutput {
    /// Host facts.
    pub host: HostInfo,
    /// vCPU count.
    pub vcpus: u32,
    /// Every round, in order.
    pub rounds: Vec<RoundResult>,
    /// KVM's view of every vCPU before the first round.
    pub initial: Vec<TscState>,
    /// Observations about the run as a whole, in words.
    pub notes: Vec<String>,
    /// Whether the vCPUs outnumbered the host's cores, so that guest
    /// spin-waits were broken up from the host (see [`crate::vstate::spin`]).
    pub spin_breaker: bool,
}

fn fail(error: RunError) -> Failure {
    Failure {
        error,
        completed: Vec::new(),
        host: None,
    }
}

/// Why waiting for a vCPU event ended without one.
enum Wait {
    Timeout,
    Disconnected,
    Interrupted(i32),
}

/// The vCPU threads of one VM and the channels to them.
pub(crate) struct Threads {
    commands: Vec<Sender<Command>>,
    events: Receiver<Event>,
    handles: Vec<JoinHandle<VcpuFd>>,
    kickers: Vec<Kicker>,
    deadline: Instant,
    timeout: Duration,
    rounds: u32,
}

impl Threads {
    pub(crate) fn send_all(&self, cmd: Command) {
        for c in &self.commands {
            // A thread that has ended reports it through its last event.
            let _ = c.send(cmd);
        }
    }

    pub(crate) fn send(&self, vcpu: u32, cmd: Command) {
        if let Some(c) = self.commands.get(vcpu as usize) {
            // A thread that has ended reports it through its last event.
            let _ = c.send(cmd);
        }
    }

    /// The next event, waiting until the deadline at most, and looking for a
    /// stop request every [`POLL`].
    fn recv(&self) -> Result<Event, Wait> {
        loop {
            if let Some(signal) = stop_requested() {
                return Err(Wait::Interrupted(signal));
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Wait::Timeout);
            }
            match self.events.recv_timeout(left.min(POLL)) {
                Ok(ev) => return Ok(ev),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(Wait::Disconnected),
            }
        }
    }

    /// Stops every vCPU thread and joins them within a bounded time. Returns
    /// false when a thread had to be abandoned: then the VM and its memory
    /// must not be freed either (the thread may still be in KVM_RUN).
    #[must_use]
    pub(crate) fn shutdown(mut self) -> bool {
        self.send_all(Command::Stop);
        self.commands.clear();
        for (k, h) in self.kickers.iter().zip(&self.handles) {
            if !h.is_finished() {
                k.kick(h);
            }
        }
        let until = Instant::now() + JOIN_GRACE;
        while Instant::now() < until && self.handles.iter().any(|h| !h.is_finished()) {
            // Kick again in case a kick landed between a check and an entry.
            for (k, h) in self.kickers.iter().zip(&self.handles) {
                if !h.is_finished() {
                    k.kick(h);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let stuck = self.handles.iter().any(|h| !h.is_finished());
        if stuck {
            log::error!("a vCPU thread did not stop within {JOIN_GRACE:?}; abandoning it");
            // Its kicker's mapping must outlive it: leak both.
            std::mem::forget(self.kickers);
            std::mem::forget(self.handles);
            return false;
        }
        // Join every thread, and only then drop the vCPU fds and the kickers
        // that point into their mappings.
        let fds: Vec<_> = self.handles.into_iter().map(|h| h.join()).collect();
        drop(self.kickers);
        drop(fds);
        true
    }
}

/// Collects one event of `want` kind from every vCPU, failing on any error.
pub(crate) fn collect<T>(
    t: &Threads,
    n: u32,
    round: u32,
    mem: &GuestMemoryMmap,
    pick: impl FnMut(Event) -> Result<Option<(u32, T)>, RunError>,
) -> Result<Vec<T>, RunError> {
    let mut got: Vec<Option<T>> = (0..n).map(|_| None).collect();
    collect_into(t, round, mem, &mut got, pick)?;
    Ok(got.into_iter().flatten().collect())
}

/// As [`collect`], into `slots` (one per vCPU, all set to `Some` on success),
/// allocating nothing: the per-round path reuses its slots.
pub(crate) fn collect_into<T>(
    t: &Threads,
    round: u32,
    mem: &GuestMemoryMmap,
    slots: &mut [Option<T>],
    mut pick: impl FnMut(Event) -> Result<Option<(u32, T)>, RunError>,
) -> Result<(), RunError> {
    for s in slots.iter_mut() {
        *s = None;
    }
    let n = slots.len() as u32;
    let mut remaining = slots.len();
    while remaining > 0 {
        let ev = match t.recv() {
            Ok(ev) => ev,
            Err(Wait::Timeout) => {
                // The vCPUs are still running: these are snapshots, which is
                // all a diagnosis needs. Every value is untrusted and decoded
                // with checks.
                let rounds = t.rounds;
                return Err(RunError::Timeout {
                    round,
                    missing: (0..n)
                        .filter(|&i| slots[i as usize].is_none())
                        .map(|i| {
                            let p = vm::read_progress(mem, i).map(|w| Progress::decode(w, rounds));
                            (i, p)
                        })
                        .collect(),
                    semaphore: vm::read_semaphore(mem),
                    timeout: t.timeout,
                });
            }
            Err(Wait::Interrupted(signal)) => return Err(RunError::Interrupted { signal, round }),
            Err(Wait::Disconnected) => {
                let lost = (0..n).find(|&i| slots[i as usize].is_none()).unwrap_or(0);
                return Err(RunError::Lost(lost));
            }
        };
        match ev {
            Event::Failed { vcpu, error } => return Err(RunError::Vcpu { vcpu, round, error }),
            Event::Stopped { vcpu } => return Err(RunError::Lost(vcpu)),
            other => {
                if let Some((vcpu, value)) = pick(other)? {
                    if let Some(slot) = slots.get_mut(vcpu as usize) {
                        if slot.is_none() {
                            remaining -= 1;
                        }
                        *slot = Some(value);
                    }
                }
            }
        }
    }
    Ok(())
}

fn pick_readback(ev: Event) -> Result<Option<(u32, TscState)>, RunError> {
    match ev {
        Event::Readback { vcpu, state } => match state {
            Ok(s) => Ok(Some((vcpu, s))),
            Err(error) => Err(RunError::Readback { vcpu, error }),
        },
        _ => Ok(None),
    }
}

pub(crate) fn readback_all(
    t: &Threads,
    n: u32,
    round: u32,
    mem: &GuestMemoryMmap,
) -> Result<Vec<TscState>, RunError> {
    t.send_all(Command::Readback);
    collect(t, n, round, mem, pick_readback)
}

pub(crate) fn read_record(mem: &GuestMemoryMmap, vcpu: u32) -> Option<RoundRecord> {
    let mut buf = [0u8; RECORD_SIZE];
    mem.read_slice(&mut buf, GuestAddress(layout::record(vcpu)))
        .ok()?;
    RoundRecord::from_bytes(&buf)
}

/// Starts one thread per vCPU of `machine` (taking its vCPU fds); the run's
/// deadline is `timeout` from now. On error, the flag says whether every
/// thread already started was joined.
pub(crate) fn spawn_threads(
    machine: &mut Vm,
    with_offset: bool,
    timeout: Duration,
    rounds: u32,
) -> Result<Threads, (RunError, bool)> {
    let (event_tx, event_rx) = mpsc::channel();
    let mut threads = Threads {
        commands: Vec::new(),
        events: event_rx,
        handles: Vec::new(),
        kickers: Vec::new(),
        deadline: Instant::now() + timeout,
        timeout,
        rounds,
    };
    for (index, fd) in std::mem::take(&mut machine.vcpus).into_iter().enumerate() {
        let (tx, rx) = mpsc::channel();
        let (thread, kicker) = VcpuThread::new(index as u32, fd, rx, event_tx.clone(), with_offset);
        match vcpu::spawn(thread) {
            Ok(h) => {
                threads.commands.push(tx);
                threads.handles.push(h);
                threads.kickers.push(kicker);
            }
            Err(e) => {
                // On failure the caller must leak the VM if not every thread
                // could be joined.
                let joined = threads.shutdown();
                return Err((RunError::Spawn(e), joined));
            }
        }
    }
    Ok(threads)
}

/// Runs the rendezvous on `opts.vcpus` vCPUs for every round of `opts.schedule`.
// A run returns once: the size of its error does not matter.
#[allow(clippy::result_large_err)]
pub fn run(opts: &RunOptions) -> Result<RunOutput, Failure> {
    run_streaming(opts, &mut |_| Ok(()))
}

/// As [`run`], handing every round to `on_round` as soon as it is complete
/// (e.g. to stream it to a file); an error from it ends the run with
/// [`RunError::Output`].
#[allow(clippy::result_large_err)]
pub fn run_streaming(
    opts: &RunOptions,
    on_round: &mut dyn FnMut(&RoundResult) -> Result<(), String>,
) -> Result<RunOutput, Failure> {
    let n = opts.vcpus;
    let rounds = u32::try_from(opts.schedule.len()).unwrap_or(u32::MAX);
    let first = opts
        .schedule
        .first()
        .copied()
        .unwrap_or(Variant::Xen6ca022a1);
    let image = opts
        .image
        .as_deref()
        .unwrap_or(crate::guest_image::EMBEDDED);
    let kvm = vm::open_kvm().map_err(|e| fail(RunError::Vm(e)))?;
    let mut machine =
        Vm::new(kvm, n, rounds, first, 0, image).map_err(|e| fail(RunError::Vm(e)))?;
    if let Some(inj) = &opts.inject {
        let mut c = Config::default();
        inj.apply(&mut c);
        vm::write_injection(&machine.mem, &c).map_err(|e| fail(RunError::Vm(e)))?;
    }
    vcpu::install_kick_handler().map_err(|e| fail(RunError::Signal(e.to_string())))?;

    let with_offset = machine.vcpus.first().is_some_and(tsc::has_offset_attr);
    let mem = machine.mem.clone();
    let threads = match spawn_threads(&mut machine, with_offset, opts.timeout, rounds) {
        Ok(t) => t,
        Err((e, joined)) => {
            if !joined {
                std::mem::forget(mem);
                std::mem::forget(machine);
            }
            return Err(fail(e));
        }
    };

    // Only when vCPUs outnumber host cores; stopped below before shutdown()
    // joins the vCPU threads (the breaker signals them by pthread_t).
    let breaker = if spin::overcommitted(n) {
        let targets = threads.handles.iter().map(|h| h.as_pthread_t()).collect();
        spin::SpinBreaker::start(targets, spin::PERIOD).ok()
    } else {
        None
    };
    let mut completed = Vec::new();
    let mut host = None;
    let mut result = drive(
        &threads,
        &mem,
        n,
        opts,
        (with_offset, machine.guest_tsc_adjust),
        &mut completed,
        &mut host,
        on_round,
    );
    if let Ok(out) = &mut result {
        out.spin_breaker = breaker.is_some();
    }
    if let Some(b) = breaker {
        b.stop();
    }
    if threads.shutdown() {
        // The VM (and its memory) is dropped only now, after every vCPU thread.
        drop(machine);
    } else {
        // A vCPU thread is still alive: leak what it may still use rather
        // than unmap memory under it. The process is about to report an error.
        std::mem::forget(mem);
        std::mem::forget(machine);
    }
    result.map_err(|error| Failure {
        error,
        completed,
        host: host.map(Box::new),
    })
}

#[allow(clippy::too_many_arguments)]
fn drive(
    t: &Threads,
    mem: &GuestMemoryMmap,
    n: u32,
    opts: &RunOptions,
    (with_offset, guest_tsc_adjust): (bool, bool),
    completed: &mut Vec<RoundResult>,
    host_out: &mut Option<HostInfo>,
    on_round: &mut dyn FnMut(&RoundResult) -> Result<(), String>,
) -> Result<RunOutput, RunError> {
    let initial = readback_all(t, n, 0, mem)?;
    let mut notes = Vec::new();
    let info = HostInfo::collect(
        initial.first().map(|s| s.tsc_khz),
        with_offset,
        guest_tsc_adjust,
    );
    *host_out = Some(info.clone());
    if let Some(s) = initial.iter().find(|s| s.offset != initial[0].offset) {
        notes.push(format!(
            "the vCPUs did not start with the same TSC offset ({:?} vs {:?})",
            s.offset, initial[0].offset
        ));
    }
    if initial.iter().any(|s| s.adjust != 0) {
        notes.push("a vCPU started with a non-zero TSC_ADJUST".into());
    }

    // Buffers reused by every round: past the first round, the per-round path
    // allocates nothing but the round's own result record (kept in `completed`,
    // reserved up front).
    let mut done: Vec<Option<()>> = vec![None; n as usize];
    let mut after: Vec<Option<TscState>> = vec![None; n as usize];
    let mut samples: Vec<VcpuSample> = Vec::with_capacity(n as usize);
    let mut before = initial.clone();
    let mut base_rel = vec![0i64; n as usize];
    completed.reserve(opts.schedule.len());
    let mut current = opts.schedule.first().copied();
    for (round, &variant) in opts.schedule.iter().enumerate() {
        let round = round as u32;
        if current != Some(variant) {
            vm::set_variant(mem, variant).map_err(RunError::Vm)?;
            current = Some(variant);
        }
        t.send_all(Command::Run);
        collect_into(t, round, mem, &mut done, |ev| match ev {
            Event::RoundDone { vcpu, round: r } if r == round => Ok(Some((vcpu, ()))),
            Event::RoundDone { vcpu, round: r } => Err(RunError::WrongRound {
                vcpu,
                expected: round,
                found: r,
            }),
            Event::Finished { vcpu } => Err(RunError::FinishedEarly { vcpu, round }),
            _ => Ok(None),
        })?;
        // Every vCPU is parked outside KVM_RUN now: read them all back.
        t.send_all(Command::Readback);
        collect_into(t, round, mem, &mut after, pick_readback)?;
        samples.clear();
        for vcpu in 0..n {
            let record = read_record(mem, vcpu).ok_or(RunError::BadRecord {
                vcpu,
                round,
                error: RecordError::BadMagic(0),
            })?;
            record
                .validate(vcpu, round, variant as u32)
                .map_err(|error| RunError::BadRecord { vcpu, round, error })?;
            let state = after[vcpu as usize].ok_or(RunError::Lost(vcpu))?;
            samples.push(VcpuSample {
                record,
                before: before[vcpu as usize],
                after: state,
            });
        }
        let result = analysis::analyse_round(round, variant.name(), &samples, &mut base_rel);
        for d in &result.disagreements {
            log::warn!("round {round}: {d}");
        }
        completed.push(result);
        if let Some(r) = completed.last() {
            on_round(r).map_err(RunError::Output)?;
        }
        for (b, s) in before.iter_mut().zip(&samples) {
            *b = s.after;
        }
        vm::reset_rendezvous(mem).map_err(RunError::Vm)?;
    }

    // Let every vCPU report the end and halt.
    t.send_all(Command::Run);
    let rounds = opts.schedule.len() as u32;
    collect(t, n, rounds, mem, |ev| match ev {
        Event::Finished { vcpu } => Ok(Some((vcpu, ()))),
        Event::RoundDone { vcpu, round } => Err(RunError::WrongRound {
            vcpu,
            expected: rounds,
            found: round,
        }),
        _ => Ok(None),
    })?;

    Ok(RunOutput {
        host: info,
        vcpus: n,
        rounds: std::mem::take(completed),
        initial,
        notes,
        spin_breaker: false,
    })
}
