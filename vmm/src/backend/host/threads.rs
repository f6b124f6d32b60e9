//! The host backend's threads: one per "vCPU", started once per run, pinned
//! where there are enough host CPUs, each owning its [`ThreadCpu`] (its TSC
//! offset and TSC_ADJUST) for the whole run.
//!
//! The coordinator (the thread that calls [`Workers::start`] and every other
//! method) hands each thread one job at a time through the thread's
//! [`Slot`]: it stores the job, bumps `posted` and unparks the thread; the
//! thread does the job, stores its reply, sets `done` to the job's number
//! and unparks the coordinator. Between jobs every thread is parked
//! (blocked, not spinning), so the coordinator and the readback never compete
//! with spinning threads for a CPU.
//!
//! Jobs: a round (every thread at once, with one fresh shared state), and a
//! bracketed TSC read (one thread at a time: the coordinator reads its own
//! TSC, hands the job over, the thread reads its TSC on its own CPU, the
//! coordinator reads its TSC again once the reply is in).
//!
//! Stopping: every wait of the coordinator looks at the stop request and the
//! deadline; on either it sets the shared abort flag, at which every spin
//! of every thread unwinds ([`super::cpu`]) and the threads report
//! [`Reply::Aborted`]. Dropping [`Workers`] ends the threads: it aborts and
//! shuts them down, joins those that end within [`GRACE`] and leaves any other
//! one running detached rather than wait for it.

use std::os::unix::thread::JoinHandleExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use tsc_contract::{Progress, RoundRecord, Variant};
use tsc_sync::{LinuxParams, LinuxSyncResult};

use super::affinity;
use super::cpu::{Aborted, StopControl, ThreadCpu};
use super::round::{one_round, RoundOutput};
use super::shared::RoundShared;
use crate::error::RunError;
use crate::stop;
use crate::tsc::{host_rdtsc, TscState};
use crate::watchdog::Stall;

/// How long a parked thread or the coordinator sleeps between looks at the
/// shutdown flag, the stop request and the deadline.
const POLL: Duration = Duration::from_millis(10);

/// How long threads get to react to an abort or a shutdown before the
/// coordinator gives up on them.
pub const GRACE: Duration = Duration::from_secs(5);

/// What the coordinator asks of one thread.
#[derive(Debug)]
enum Job {
    /// Run one round of `variant` on `shared`.
    Round {
        round: u32,
        variant: Variant,
        shared: Arc<RoundShared>,
    },
    /// Read the TSC now, on this thread's CPU.
    Read,
}

/// A thread's TSC state as one read saw it.
#[derive(Clone, Copy, Debug)]
struct ThreadState {
    raw_tsc: u64,
    offset: u64,
    adjust: u64,
}

/// What a thread answers.
#[derive(Debug)]
enum Reply {
    Round(Box<RoundOutput>),
    State(ThreadState),
    /// The round was aborted (stop request, deadline, another thread).
    Aborted,
    /// The algorithm panicked (a bug), with the message.
    Panicked(String),
}

/// Keeps a value on cache lines of its own.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Line<T>(T);

/// One thread's mailbox.
#[derive(Debug, Default)]
struct Slot {
    /// Where the thread is ([`tsc_contract::progress_word`]), written only
    /// by the thread, during rounds.
    progress: Line<AtomicU64>,
    /// The number of the last job posted.
    posted: Line<AtomicU64>,
    /// The number of the last job done.
    done: AtomicU64,
    job: Mutex<Option<Job>>,
    reply: Mutex<Option<Reply>>,
}

/// Locks `m`, also when a thread panicked while holding it (nothing here
/// holds a lock across code that can panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the threads share.
#[derive(Debug)]
struct Control {
    stop: StopControl,
    shutdown: AtomicBool,
    coordinator: Thread,
    slots: Vec<Slot>,
    vcpus: u32,
    params: LinuxParams,
}

/// Why a wait ended early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// SIGINT/SIGTERM.
    Signal(i32),
    /// The run's deadline.
    Timeout,
    /// A thread aborted on its own (its own deadline check, or a panic).
    Aborted,
}

/// How the threads are set up.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Threads.
    pub vcpus: u32,
    /// Each thread's TSC offset at the start (missing: 0).
    pub offsets: Vec<u64>,
    /// Each thread's CPU ([`affinity::plan`]).
    pub plan: Vec<Option<u32>>,
    /// Whether the threads outnumber the host CPUs.
    pub overcommitted: bool,
    /// The whole run must end within this.
    pub timeout: Duration,
    /// The host TSC's frequency.
    pub tsc_khz: u32,
    /// Linux's sync's parameters.
    pub params: LinuxParams,
}

/// A run's threads.
#[derive(Debug)]
pub struct Workers {
    ctl: Arc<Control>,
    handles: Vec<JoinHandle<()>>,
    seq: u64,
    deadline: Instant,
    timeout: Duration,
    tsc_khz: u32,
    rounds: u32,
    pinned: Vec<Option<u32>>,
    pin_failures: Vec<String>,
}

impl Workers {
    /// Starts the threads of a run of `rounds` rounds and pins them as
    /// planned (a failed pin leaves that thread unpinned and is said in
    /// [`Workers::pin_failures`]).
    pub fn start(setup: &Setup, rounds: u32) -> Result<Workers, RunError> {
        let deadline_tsc = AtomicU64::new(tsc_deadline(setup.tsc_khz, setup.timeout));
        let ctl = Arc::new(Control {
            stop: StopControl {
                abort: AtomicBool::new(false),
                deadline_tsc,
                overcommitted: setup.overcommitted,
            },
            shutdown: AtomicBool::new(false),
            coordinator: std::thread::current(),
            slots: (0..setup.vcpus).map(|_| Slot::default()).collect(),
            vcpus: setup.vcpus,
            params: setup.params,
        });
        let mut w = Workers {
            ctl,
            handles: Vec::with_capacity(setup.vcpus as usize),
            seq: 0,
            deadline: Instant::now() + setup.timeout,
            timeout: setup.timeout,
            tsc_khz: setup.tsc_khz,
            rounds,
            pinned: Vec::with_capacity(setup.vcpus as usize),
            pin_failures: Vec::new(),
        };
        for k in 0..setup.vcpus {
            let ctl = w.ctl.clone();
            let offset = setup.offsets.get(k as usize).copied().unwrap_or(0);
            // On failure `w` drops here and ends the threads already started.
            let handle = std::thread::Builder::new()
                .name(format!("tsc-host-{k}"))
                .spawn(move || worker(&ctl, k, offset))
                .map_err(RunError::Spawn)?;
            let pinned = match setup.plan.get(k as usize).copied().flatten() {
                Some(cpu) => match affinity::pin(handle.as_pthread_t(), cpu) {
                    Ok(()) => Some(cpu),
                    Err(e) => {
                        w.pin_failures
                            .push(format!("thread {k} could not be pinned to CPU {cpu}: {e}"));
                        None
                    }
                },
                None => None,
            };
            w.pinned.push(pinned);
            w.handles.push(handle);
        }
        Ok(w)
    }

    /// Re-arms the deadline: what follows must be done within `timeout`
    /// from now (every thread is parked).
    pub fn rearm(&mut self, timeout: Duration) {
        self.deadline = Instant::now() + timeout;
        self.timeout = timeout;
        let at = tsc_deadline(self.tsc_khz, timeout);
        self.ctl.stop.deadline_tsc.store(at, Ordering::Relaxed);
    }

    /// Per thread, the CPU it is pinned to.
    pub fn pinned(&self) -> &[Option<u32>] {
        &self.pinned
    }

    /// Pins that failed, in words.
    pub fn pin_failures(&self) -> &[String] {
        &self.pin_failures
    }

    fn slot(&self, k: usize) -> &Slot {
        &self.ctl.slots[k]
    }

    /// Hands `job` to thread `k` as job number `seq`.
    fn post(&self, k: usize, seq: u64, job: Job) {
        let slot = self.slot(k);
        *lock(&slot.job) = Some(job);
        slot.posted.0.store(seq, Ordering::Release);
        if let Some(h) = self.handles.get(k) {
            h.thread().unpark();
        }
    }

    fn take_reply(&self, k: usize) -> Option<Reply> {
        lock(&self.slot(k).reply).take()
    }

    /// Waits until the threads `ks` have done job `seq`: parked between
    /// looks, or (`spin`) yielding, for the quick hand-off of a readback. A
    /// stop request or the deadline aborts the threads; the wait then lasts
    /// until they have reported (at most [`GRACE`] more) and says why.
    fn wait(&self, ks: std::ops::Range<usize>, seq: u64, spin: bool) -> Result<(), Ended> {
        let mut ended: Option<(Instant, Ended)> = None;
        loop {
            let all = ks
                .clone()
                .all(|k| self.slot(k).done.load(Ordering::Acquire) == seq);
            let now = Instant::now();
            match ended {
                _ if all => return ended.map_or(Ok(()), |(_, why)| Err(why)),
                Some((at, why)) if now.duration_since(at) > GRACE => return Err(why),
                Some(_) => {}
                None => {
                    let why = match stop::requested() {
                        Some(signal) => Some(Ended::Signal(signal)),
                        None if now >= self.deadline => Some(Ended::Timeout),
                        None if self.ctl.stop.abort.load(Ordering::Relaxed) => Some(Ended::Aborted),
                        None => None,
                    };
                    if let Some(why) = why {
                        self.ctl.stop.abort.store(true, Ordering::Relaxed);
                        ended = Some((now, why));
                    }
                }
            }
            if spin {
                std::thread::yield_now();
            } else {
                std::thread::park_timeout(POLL);
            }
        }
    }

    /// The error of a wait that ended early in `round`, `missing` being the
    /// threads that did not finish (with `shared`, the round's state).
    fn ended(
        &self,
        why: Ended,
        round: u32,
        missing: &[usize],
        shared: Option<(&RoundShared, Variant)>,
    ) -> RunError {
        if let Ended::Signal(signal) = why {
            return RunError::interrupted(signal, round);
        }
        if let Some(signal) = stop::requested() {
            return RunError::interrupted(signal, round);
        }
        let missing = missing
            .iter()
            .map(|&k| {
                let word = self.slot(k).progress.0.load(Ordering::Relaxed);
                (k as u32, Some(Progress::decode(word, self.rounds)))
            })
            .collect();
        let semaphore = shared
            .filter(|(_, v)| *v != Variant::LinuxTscSync)
            .map(|(s, _)| s.xen.semaphore.load(Ordering::Relaxed));
        RunError::Timeout(Stall {
            round,
            missing,
            semaphore,
            timeout: self.timeout,
        })
    }

    /// Runs round `round` of `variant` on every thread with a fresh shared
    /// state; fills `records` (raw: the round driver validates them) and
    /// `syncs` (Linux's results, `None` for the other variants) in thread
    /// order.
    pub fn run_round(
        &mut self,
        round: u32,
        variant: Variant,
        records: &mut Vec<RoundRecord>,
        syncs: &mut Vec<Option<LinuxSyncResult>>,
    ) -> Result<(), RunError> {
        let n = self.handles.len();
        let shared = Arc::new(RoundShared::default());
        self.seq += 1;
        let seq = self.seq;
        for k in 0..n {
            let job = Job::Round {
                round,
                variant,
                shared: shared.clone(),
            };
            self.post(k, seq, job);
        }
        let waited = self.wait(0..n, seq, false);
        records.clear();
        syncs.clear();
        let (mut missing, mut panicked) = (Vec::new(), None);
        for k in 0..n {
            match self.take_reply(k) {
                Some(Reply::Round(out)) => {
                    records.push(out.record);
                    syncs.push(out.sync);
                }
                Some(Reply::Panicked(msg)) => {
                    log::error!("host thread {k} panicked in round {round}: {msg}");
                    panicked.get_or_insert(k as u32);
                }
                _ => missing.push(k),
            }
        }
        if let Some(k) = panicked {
            return Err(RunError::Lost(k));
        }
        // Threads that aborted on their own (their own look at the deadline
        // or the stop request) may all have reported before the wait saw
        // the abort: aborted replies mean an aborted round either way.
        let waited = match waited {
            Ok(()) if !missing.is_empty() => Err(Ended::Aborted),
            w => w,
        };
        if let Err(why) = waited {
            return Err(self.ended(why, round, &missing, Some((&shared, variant))));
        }
        Ok(())
    }

    /// Reads every (parked) thread's TSC state, one thread at a time, into
    /// `out`: the exact offset and the simulated TSC_ADJUST, and the thread's
    /// TSC read on its own CPU between two reads of the coordinator's.
    pub fn read_back_into(&mut self, round: u32, out: &mut Vec<TscState>) -> Result<(), RunError> {
        out.clear();
        for k in 0..self.handles.len() {
            self.seq += 1;
            let seq = self.seq;
            let host_before = host_rdtsc();
            self.post(k, seq, Job::Read);
            let waited = self.wait(k..k + 1, seq, true);
            let host_after = host_rdtsc();
            let reply = self.take_reply(k);
            if let Err(why) = waited {
                return Err(self.ended(why, round, &[k], None));
            }
            let Some(Reply::State(s)) = reply else {
                return Err(RunError::Lost(k as u32));
            };
            out.push(TscState {
                adjust: s.adjust,
                tsc: s.raw_tsc.wrapping_add(s.offset),
                host_before,
                host_after,
                offset: Some(s.offset),
                tsc_khz: self.tsc_khz,
            });
        }
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.ctl.stop.abort.store(true, Ordering::Relaxed);
        self.ctl.shutdown.store(true, Ordering::Release);
        for h in &self.handles {
            h.thread().unpark();
        }
        let until = Instant::now() + GRACE;
        while self.handles.iter().any(|h| !h.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        for (k, h) in self.handles.drain(..).enumerate() {
            if h.is_finished() {
                let _ = h.join();
            } else {
                log::warn!("host thread {k} did not end within {GRACE:?}; left running");
            }
        }
    }
}

/// The host TSC `timeout` from now at `tsc_khz`.
fn tsc_deadline(tsc_khz: u32, timeout: Duration) -> u64 {
    let cycles = u128::from(tsc_khz) * timeout.as_millis();
    host_rdtsc().saturating_add(u64::try_from(cycles).unwrap_or(u64::MAX))
}

/// The next job after job `last`; `None` once the run shuts down.
fn next_job(ctl: &Control, slot: &Slot, last: u64) -> Option<(u64, Job)> {
    loop {
        if ctl.shutdown.load(Ordering::Acquire) {
            return None;
        }
        let seq = slot.posted.0.load(Ordering::Acquire);
        if seq != last {
            return lock(&slot.job).take().map(|job| (seq, job));
        }
        std::thread::park_timeout(POLL);
    }
}

/// One thread's life: jobs until the run shuts down.
fn worker(ctl: &Control, index: u32, offset: u64) {
    let Some(slot) = ctl.slots.get(index as usize) else {
        return;
    };
    let mut cpu = ThreadCpu::new(offset, &ctl.stop, &slot.progress.0);
    let mut last = 0;
    while let Some((seq, job)) = next_job(ctl, slot, last) {
        last = seq;
        let reply = match job {
            Job::Read => Reply::State(ThreadState {
                raw_tsc: host_rdtsc(),
                offset: cpu.offset(),
                adjust: cpu.tsc_adjust(),
            }),
            Job::Round {
                round,
                variant,
                shared,
            } => {
                let (vcpus, params) = (ctl.vcpus, ctl.params);
                let run = catch_unwind(AssertUnwindSafe(|| {
                    one_round(&mut cpu, index, vcpus, round, variant, &shared, params)
                }));
                match run {
                    Ok(out) => Reply::Round(Box::new(out)),
                    Err(p) if p.is::<Aborted>() => Reply::Aborted,
                    Err(p) => {
                        // A bug: stop the others at once.
                        ctl.stop.abort.store(true, Ordering::Relaxed);
                        let msg = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Reply::Panicked(msg)
                    }
                }
            }
        };
        *lock(&slot.reply) = Some(reply);
        slot.done.store(seq, Ordering::Release);
        ctl.coordinator.unpark();
    }
}
