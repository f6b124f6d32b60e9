//! One run: create the VM, start a thread per vCPU, and for every round wait
//! until all vCPUs have parked, read their TSC state back, check the guest's
//! records and analyse the round. The coordinator is the calling thread.

use std::fmt;
use std::os::unix::thread::JoinHandleExt;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_ioctls::VcpuFd;
use serde::Serialize;
use tsc_contract::{layout, RecordError, RoundRecord, Variant, RECORD_SIZE};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::analysis::{self, RoundResult, VcpuSample};
use crate::host::{self, HostInfo};
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
}

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
        /// vCPUs that had not reported.
        missing: Vec<u32>,
        /// The rendezvous semaphore, read from guest memory.
        semaphore: Option<u32>,
        /// The deadline.
        timeout: Duration,
    },
    /// A vCPU thread ended without saying why.
    Lost(u32),
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
                write!(
                    f,
                    "timed out after {:.1} s in round {round}: vCPU(s) {missing:?} had not arrived",
                    timeout.as_secs_f64()
                )?;
                if let Some(s) = semaphore {
                    write!(f, " (rendezvous semaphore = {s})")?;
                }
                Ok(())
            }
            RunError::Lost(v) => write!(f, "vCPU {v}'s thread ended unexpectedly"),
        }
    }
}

impl std::error::Error for RunError {}

/// A run that ended early, with the rounds it completed.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong.
    pub error: RunError,
    /// Rounds completed before it.
    pub completed: Vec<RoundResult>,
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
}

fn fail(error: RunError) -> Failure {
    Failure {
        error,
        completed: Vec::new(),
    }
}

struct Threads {
    commands: Vec<Sender<Command>>,
    events: Receiver<Event>,
    handles: Vec<JoinHandle<VcpuFd>>,
    kickers: Vec<Kicker>,
    deadline: Instant,
    timeout: Duration,
}

impl Threads {
    fn send_all(&self, cmd: Command) {
        for c in &self.commands {
            // A thread that has ended reports it through its last event.
            let _ = c.send(cmd);
        }
    }

    fn recv(&self) -> Result<Event, RecvTimeoutError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.events.recv_timeout(left)
    }

    /// Stops every vCPU thread and joins them within a bounded time.
    fn shutdown(mut self) {
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
            return;
        }
        // Join every thread, and only then drop the vCPU fds and the kickers
        // that point into their mappings.
        let fds: Vec<_> = self.handles.into_iter().map(|h| h.join()).collect();
        drop(self.kickers);
        drop(fds);
    }
}

/// Collects one event of `want` kind from every vCPU, failing on any error.
fn collect<T>(
    t: &Threads,
    n: u32,
    round: u32,
    mem: &GuestMemoryMmap,
    mut pick: impl FnMut(Event) -> Result<Option<(u32, T)>, RunError>,
) -> Result<Vec<T>, RunError> {
    let mut got: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let mut remaining = n;
    while remaining > 0 {
        let ev = match t.recv() {
            Ok(ev) => ev,
            Err(RecvTimeoutError::Timeout) => {
                return Err(RunError::Timeout {
                    round,
                    missing: (0..n).filter(|&i| got[i as usize].is_none()).collect(),
                    semaphore: vm::read_semaphore(mem),
                    timeout: t.timeout,
                })
            }
            Err(RecvTimeoutError::Disconnected) => {
                let lost = (0..n).find(|&i| got[i as usize].is_none()).unwrap_or(0);
                return Err(RunError::Lost(lost));
            }
        };
        match ev {
            Event::Failed { vcpu, error } => return Err(RunError::Vcpu { vcpu, round, error }),
            Event::Stopped { vcpu } => return Err(RunError::Lost(vcpu)),
            other => {
                if let Some((vcpu, value)) = pick(other)? {
                    if let Some(slot) = got.get_mut(vcpu as usize) {
                        if slot.is_none() {
                            remaining -= 1;
                        }
                        *slot = Some(value);
                    }
                }
            }
        }
    }
    Ok(got.into_iter().flatten().collect())
}

fn readback_all(
    t: &Threads,
    n: u32,
    round: u32,
    mem: &GuestMemoryMmap,
) -> Result<Vec<TscState>, RunError> {
    t.send_all(Command::Readback);
    collect(t, n, round, mem, |ev| match ev {
        Event::Readback { vcpu, state } => match state {
            Ok(s) => Ok(Some((vcpu, s))),
            Err(error) => Err(RunError::Readback { vcpu, error }),
        },
        _ => Ok(None),
    })
}

/// Lets every vCPU run round `round` and read itself back as soon as it has
/// parked after it: one hand-off per vCPU and round. A vCPU's TSC_ADJUST and
/// offset change only through its own writes, which are done by then, so
/// reading it while another vCPU still finishes the round reads the same state.
fn run_round(
    t: &Threads,
    n: u32,
    round: u32,
    mem: &GuestMemoryMmap,
) -> Result<Vec<TscState>, RunError> {
    t.send_all(Command::RunThenReadback);
    collect(t, n, round, mem, |ev| match ev {
        Event::RoundRead {
            vcpu,
            round: r,
            state,
        } if r == round => match state {
            Ok(s) => Ok(Some((vcpu, s))),
            Err(error) => Err(RunError::Readback { vcpu, error }),
        },
        Event::RoundRead { vcpu, round: r, .. } | Event::RoundDone { vcpu, round: r } => {
            Err(RunError::WrongRound {
                vcpu,
                expected: round,
                found: r,
            })
        }
        Event::Finished { vcpu } => Err(RunError::WrongRound {
            vcpu,
            expected: round,
            found: u32::MAX,
        }),
        _ => Ok(None),
    })
}

fn read_record(mem: &GuestMemoryMmap, vcpu: u32) -> Option<RoundRecord> {
    let mut buf = [0u8; RECORD_SIZE];
    mem.read_slice(&mut buf, GuestAddress(layout::record(vcpu)))
        .ok()?;
    RoundRecord::from_bytes(&buf)
}

/// Runs the rendezvous on `opts.vcpus` vCPUs for every round of `opts.schedule`.
pub fn run(opts: &RunOptions) -> Result<RunOutput, Failure> {
    run_with(opts, &mut |_| {})
}

/// As [`run`], calling `on_round` with every round's result as soon as it is
/// known (for progress reporting; it runs on the per-round path, keep it cheap).
pub fn run_with(
    opts: &RunOptions,
    on_round: &mut dyn FnMut(&RoundResult),
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
    let mut machine = Vm::new(kvm, n, rounds, first, image).map_err(|e| fail(RunError::Vm(e)))?;
    vcpu::install_kick_handler().map_err(|e| fail(RunError::Signal(e.to_string())))?;

    let with_offset = machine.vcpus.first().is_some_and(tsc::has_offset_attr);
    let mem = machine.mem.clone();
    let (event_tx, event_rx) = mpsc::channel();
    let mut threads = Threads {
        commands: Vec::new(),
        events: event_rx,
        handles: Vec::new(),
        kickers: Vec::new(),
        deadline: Instant::now() + opts.timeout,
        timeout: opts.timeout,
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
                threads.shutdown();
                return Err(fail(RunError::Spawn(e)));
            }
        }
    }
    drop(event_tx);
    // Stopped below before shutdown() joins the vCPU threads.
    let breaker = if spin::overcommitted(n) {
        let targets = threads.handles.iter().map(|h| h.as_pthread_t()).collect();
        spin::SpinBreaker::start(targets, spin::PERIOD).ok()
    } else {
        None
    };

    let mut completed = Vec::new();
    let result = drive(
        &threads,
        &mem,
        n,
        opts,
        with_offset,
        machine.guest_tsc_adjust,
        &mut completed,
        on_round,
    );
    if let Some(b) = breaker {
        b.stop();
    }
    threads.shutdown();
    // The VM (and its memory) is dropped only now, after every vCPU thread.
    drop(machine);
    result.map_err(|error| Failure { error, completed })
}

// One more than clippy likes: the per-round hook of `run_with`.
#[allow(clippy::too_many_arguments)]
fn drive(
    t: &Threads,
    mem: &GuestMemoryMmap,
    n: u32,
    opts: &RunOptions,
    with_offset: bool,
    guest_tsc_adjust: bool,
    completed: &mut Vec<RoundResult>,
    on_round: &mut dyn FnMut(&RoundResult),
) -> Result<RunOutput, RunError> {
    let initial = readback_all(t, n, 0, mem)?;
    let mut notes = Vec::new();
    let release = host::kernel_release();
    let info = HostInfo {
        kvm_flavor: host::detect_flavor_in(std::path::Path::new("/sys/module")),
        kernel_version: host::parse_kernel_version(&release),
        kernel_release: release,
        tsc_khz: initial.first().map(|s| s.tsc_khz),
        cpu_model: host::cpu_model(),
        cpu_tsc_flags: host::tsc_flags(),
        clocksource: host::clocksource(),
        tsc_offset_attr: with_offset,
        guest_tsc_adjust,
    };
    if let Some(s) = initial.iter().find(|s| s.offset != initial[0].offset) {
        notes.push(format!(
            "the vCPUs did not start with the same TSC offset ({:?} vs {:?})",
            s.offset, initial[0].offset
        ));
    }
    if initial.iter().any(|s| s.adjust != 0) {
        notes.push("a vCPU started with a non-zero TSC_ADJUST".into());
    }

    let mut before = initial.clone();
    let mut base_rel = vec![0i64; n as usize];
    let mut current = opts.schedule.first().copied();
    for (round, &variant) in opts.schedule.iter().enumerate() {
        let round = round as u32;
        if current != Some(variant) {
            vm::set_variant(mem, variant).map_err(RunError::Vm)?;
            current = Some(variant);
        }
        let after = run_round(t, n, round, mem)?;
        let mut samples = Vec::with_capacity(n as usize);
        for vcpu in 0..n {
            let record = read_record(mem, vcpu).ok_or(RunError::BadRecord {
                vcpu,
                round,
                error: RecordError::BadMagic(0),
            })?;
            record
                .validate(vcpu, round, variant as u32)
                .map_err(|error| RunError::BadRecord { vcpu, round, error })?;
            samples.push(VcpuSample {
                record,
                before: before[vcpu as usize],
                after: after[vcpu as usize],
            });
        }
        let result = analysis::analyse_round(round, variant.name(), &samples, &mut base_rel);
        for d in &result.disagreements {
            log::warn!("round {round}: {d}");
        }
        on_round(&result);
        completed.push(result);
        before = after;
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
    })
}
