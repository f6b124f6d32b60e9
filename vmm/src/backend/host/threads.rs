//! The host backend's threads: one per "vCPU", started once per run, pinned
//! where there are enough host CPUs, each owning its [`ThreadCpu`] (its TSC
//! offset and TSC_ADJUST) for the whole run.
//!
//! Thread 0 is the coordinator itself: the thread that calls
//! [`Workers::start`] and every other method runs thread 0's part of every
//! round between handing the others theirs and collecting their replies, and
//! is pinned (when the others are) to thread 0's CPU for the run, its
//! affinity restored at the end. So N threads of this OS take part in a
//! round of N, and no thread competes with them for a CPU while it runs.
//!
//! The coordinator hands threads 1..N one job at a time through the
//! thread's [`Slot`] ([`super::worker`]): it stores the job and bumps `posted`; the thread does
//! the job, stores its reply and sets `done` to the job's number. Hand-offs
//! are spin waits, no system call: a thread waits for its next job spinning
//! for [`SPIN`] (the coordinator's work between two rounds is far shorter),
//! then parks until the coordinator unparks it (`sleeping` tells it to);
//! the coordinator spins until the threads it waits for are done. With more
//! threads than host CPUs every spin yields.
//!
//! Jobs: a round (every thread at once, on one shared state cleared before
//! every round), and a bracketed TSC read (one thread at a time: the
//! coordinator reads its own TSC, hands the job over, the thread reads its
//! TSC on its own CPU, the coordinator reads its TSC again once the reply is
//! in; thread 0's is read between two reads on its own CPU). A round's job
//! ends with that read: each thread, its part done, spins until the
//! coordinator, its own part done, asks for it through the thread's
//! [`Slot::read`] (bracketed the same way), and replies its record and its
//! state at once. A thread's TSC state is final once its own part is over
//! (no thread writes another's TSC), so this reads what a read after the
//! whole round would, without a second hand-off per round.
//!
//! Stopping: every wait of the coordinator looks at the stop request and the
//! deadline; on either it sets the shared abort flag, at which every spin
//! of every thread unwinds ([`super::cpu`]) and the threads report
//! [`Reply::Aborted`]. A round some thread did not report leaves the run
//! unusable ([`Workers::run_round`] refuses the next one: that thread may
//! still be using the shared state). Dropping [`Workers`] ends the threads:
//! it aborts and shuts them down, joins those that end within [`GRACE`] and
//! leaves any other one running detached rather than wait for it.

use std::os::unix::thread::JoinHandleExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tsc_contract::{Progress, RoundRecord, Variant};
use tsc_sync::{LinuxParams, LinuxSyncResult};

use super::affinity::{self, Affinity};
use super::cpu::{StopControl, ThreadCpu};
use super::round::one_round;
use super::shared::RoundShared;
use super::worker::{
    lock, reply_of, worker, Control, Job, Reply, SharedCell, Slot, ThreadState, CLOCK_EVERY, SPIN,
};
use crate::error::RunError;
use crate::stop;
use crate::tsc::{host_rdtsc, TscState};
use crate::watchdog::Stall;

/// How long threads get to react to an abort or a shutdown before the
/// coordinator gives up on them.
pub const GRACE: Duration = Duration::from_secs(5);

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

/// Thread 0's TSC, kept by the coordinator between rounds.
#[derive(Clone, Copy, Debug)]
struct Cpu0 {
    offset: u64,
    adjust: u64,
}

/// A run's threads.
#[derive(Debug)]
pub struct Workers {
    ctl: Arc<Control>,
    /// Threads 1..N.
    handles: Vec<JoinHandle<()>>,
    cpu0: Cpu0,
    /// The coordinator's affinity before it was pinned, restored on drop.
    restore: Option<Affinity>,
    seq: u64,
    /// Whether every thread reported the last round (see [`SharedCell`]).
    clean: bool,
    deadline: Instant,
    timeout: Duration,
    tsc_khz: u32,
    rounds: u32,
    pinned: Vec<Option<u32>>,
    pin_failures: Vec<String>,
}

impl Workers {
    /// Starts the threads of a run of `rounds` rounds and pins them as
    /// planned, the calling thread as thread 0 (a failed pin leaves that
    /// thread unpinned and is said in [`Workers::pin_failures`]).
    pub fn start(setup: &Setup, rounds: u32) -> Result<Workers, RunError> {
        let deadline_tsc = AtomicU64::new(tsc_deadline(setup.tsc_khz, setup.timeout));
        let spin_cycles = u64::from(setup.tsc_khz).saturating_mul(SPIN.as_micros() as u64) / 1000;
        let ctl = Arc::new(Control {
            stop: StopControl {
                abort: AtomicBool::new(false),
                deadline_tsc,
                overcommitted: setup.overcommitted,
            },
            shutdown: AtomicBool::new(false),
            slots: (0..setup.vcpus).map(|_| Slot::default()).collect(),
            vcpus: setup.vcpus,
            params: setup.params,
            shared: SharedCell::default(),
            spin_cycles,
        });
        let n = setup.vcpus as usize;
        let mut w = Workers {
            ctl,
            handles: Vec::with_capacity(n.saturating_sub(1)),
            cpu0: Cpu0 {
                offset: setup.offsets.first().copied().unwrap_or(0),
                adjust: 0,
            },
            restore: None,
            seq: 0,
            clean: true,
            deadline: Instant::now() + setup.timeout,
            timeout: setup.timeout,
            tsc_khz: setup.tsc_khz,
            rounds,
            pinned: Vec::with_capacity(n),
            pin_failures: Vec::new(),
        };
        // The others first: they inherit this thread's mask before it is
        // pinned.
        for k in 1..setup.vcpus {
            let ctl = w.ctl.clone();
            let offset = setup.offsets.get(k as usize).copied().unwrap_or(0);
            // On failure `w` drops here and ends the threads already started.
            let handle = std::thread::Builder::new()
                .name(format!("tsc-host-{k}"))
                .spawn(move || worker(&ctl, k, offset))
                .map_err(RunError::Spawn)?;
            w.handles.push(handle);
        }
        w.pin_all(&setup.plan);
        Ok(w)
    }

    /// Pins thread k to `plan[k]`: the coordinator (thread 0) after saving
    /// its affinity, the others by their handles.
    fn pin_all(&mut self, plan: &[Option<u32>]) {
        let threads = (0..plan.len()).map(|k| match k {
            // SAFETY: pthread_self has no arguments and always succeeds.
            0 => unsafe { libc::pthread_self() },
            k => self.handles[k - 1].as_pthread_t(),
        });
        let threads: Vec<libc::pthread_t> = threads.collect();
        for (k, (&t, cpu)) in threads.iter().zip(plan).enumerate() {
            let pinned = match cpu {
                Some(cpu) => {
                    if k == 0 {
                        self.restore = Affinity::of_current();
                    }
                    match affinity::pin(t, *cpu) {
                        Ok(()) => Some(*cpu),
                        Err(e) => {
                            self.pin_failures
                                .push(format!("thread {k} could not be pinned to CPU {cpu}: {e}"));
                            None
                        }
                    }
                }
                None => None,
            };
            self.pinned.push(pinned);
        }
    }

    /// Re-arms the deadline: what follows must be done within `timeout`
    /// from now (every thread is waiting for a job).
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

    /// Hands `job` to thread `k` (1..N) as job number `seq`.
    fn post(&self, k: usize, seq: u64, job: Job) {
        let slot = self.slot(k);
        *lock(&slot.job.0) = Some(job);
        slot.posted.0.store(seq, Ordering::SeqCst);
        if slot.sleeping.load(Ordering::SeqCst) {
            if let Some(h) = self.handles.get(k - 1) {
                h.thread().unpark();
            }
        }
    }

    fn take_reply(&self, k: usize) -> Option<Reply> {
        lock(&self.slot(k).reply.0).take()
    }

    /// Waits, spinning, until the threads `ks` have done job `seq`. A stop
    /// request or the deadline aborts the threads; the wait then lasts
    /// until they have reported (at most [`GRACE`] more) and says why.
    fn wait(&self, ks: std::ops::Range<usize>, seq: u64) -> Result<(), Ended> {
        let mut ended: Option<(Instant, Ended)> = None;
        let mut spins = 0u32;
        loop {
            let all = ks
                .clone()
                .all(|k| self.slot(k).done.0.load(Ordering::Acquire) == seq);
            if all {
                return ended.map_or(Ok(()), |(_, why)| Err(why));
            }
            spins = spins.wrapping_add(1);
            if self.ctl.stop.overcommitted {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            if spins % CLOCK_EVERY != 0 {
                continue;
            }
            let now = Instant::now();
            match ended {
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
        }
    }

    /// The error of a wait that ended early in `round`, `missing` being the
    /// threads that did not finish (with `variant`, the round's).
    fn ended(
        &self,
        why: Ended,
        round: u32,
        missing: &[usize],
        variant: Option<Variant>,
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
        let semaphore = variant.filter(|v| *v != Variant::LinuxTscSync).map(|_| {
            // SAFETY: only the atomic semaphore is read, through a shared
            // reference; the coordinator writes the cell only between rounds
            // (see SharedCell), never while it reads here.
            unsafe { &*self.ctl.shared.0.get() }
                .xen
                .semaphore
                .load(Ordering::Relaxed)
        });
        RunError::Timeout(Stall {
            round,
            missing,
            semaphore,
            timeout: self.timeout,
        })
    }

    /// Thread 0's part of round `round`, on this thread.
    fn own_part(&mut self, round: u32, variant: Variant) -> Reply {
        let ctl = &*self.ctl;
        let mut cpu = ThreadCpu::resumed(
            self.cpu0.offset,
            self.cpu0.adjust,
            &ctl.stop,
            &ctl.slots[0].progress.0,
        );
        // SAFETY: a shared borrow for the round, as every thread's (see
        // SharedCell); the cell is not written until the round is over.
        let shared = unsafe { &*ctl.shared.0.get() };
        let run = catch_unwind(AssertUnwindSafe(|| {
            one_round(&mut cpu, 0, ctl.vcpus, round, variant, shared, ctl.params)
        }));
        self.cpu0 = Cpu0 {
            offset: cpu.offset(),
            adjust: cpu.tsc_adjust(),
        };
        reply_of(ctl, run)
    }

    /// Runs round `round` of `variant` on every thread with a fresh shared
    /// state; fills `records` (raw: the round driver validates them) and
    /// `syncs` (Linux's results, `None` for the other variants) in thread
    /// order, and `after` with every thread's TSC state read right after
    /// its part (as [`Workers::read_back_into`] reads it: thread 0's on its
    /// own CPU, then each other thread's between two reads of the
    /// coordinator's, the thread spinning for the request once its part is
    /// done).
    pub fn run_round(
        &mut self,
        round: u32,
        variant: Variant,
        records: &mut Vec<RoundRecord>,
        syncs: &mut Vec<Option<LinuxSyncResult>>,
        after: &mut Vec<TscState>,
    ) -> Result<(), RunError> {
        if !self.clean {
            // A thread that did not report its last round may still use
            // the shared state: no round can run on it.
            return Err(RunError::Lost(0));
        }
        // SAFETY: every thread reported the last round (`clean`), so none
        // holds a reference into the cell, and none gets one before the
        // round is posted below (see SharedCell).
        unsafe { *self.ctl.shared.0.get() = RoundShared::default() };
        let n = self.ctl.slots.len();
        self.seq += 1;
        let seq = self.seq;
        for k in 1..n {
            self.post(k, seq, Job::Round { round, variant });
        }
        let own = self.own_part(round, variant);
        after.clear();
        after.push(self.own_state());
        let waited = self.read_each(1..n, seq, after);
        records.clear();
        syncs.clear();
        let (mut missing, mut panicked) = (Vec::new(), None);
        for (k, reply) in std::iter::once(Some(own))
            .chain((1..n).map(|k| self.take_reply(k)))
            .enumerate()
        {
            match reply {
                Some(Reply::Round(out, state)) if k == 0 || state.is_some() => {
                    records.push(out.record);
                    syncs.push(out.sync);
                    if let (Some(s), Some(slot)) = (state, after.get_mut(k)) {
                        *slot = self.state(s, slot.host_before, slot.host_after);
                    }
                }
                Some(Reply::Panicked(msg)) => {
                    log::error!("host thread {k} panicked in round {round}: {msg}");
                    panicked.get_or_insert(k as u32);
                }
                _ => missing.push(k),
            }
        }
        // Threads that never answered may still be in the round.
        self.clean = (1..n).all(|k| self.slot(k).done.0.load(Ordering::Acquire) == seq);
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
            return Err(self.ended(why, round, &missing, Some(variant)));
        }
        Ok(())
    }

    /// Thread 0's TSC state, read on its own CPU between two reads.
    fn own_state(&self) -> TscState {
        let host_before = host_rdtsc();
        let raw_tsc = host_rdtsc();
        let host_after = host_rdtsc();
        let s = ThreadState {
            raw_tsc,
            offset: self.cpu0.offset,
            adjust: self.cpu0.adjust,
        };
        self.state(s, host_before, host_after)
    }

    /// Asks threads `ks`, one at a time, for round job `seq`'s read, each
    /// between two reads of this thread's TSC, and waits for its reply:
    /// pushes one bracket per thread onto `after` (its state is filled in
    /// from the reply). A wait that ends early says why; the threads after
    /// it (aborted by then, they reply without a read) are waited for
    /// together, within one more grace period at most.
    fn read_each(
        &self,
        ks: std::ops::Range<usize>,
        seq: u64,
        after: &mut Vec<TscState>,
    ) -> Result<(), Ended> {
        let none = ThreadState {
            raw_tsc: 0,
            offset: 0,
            adjust: 0,
        };
        for k in ks.clone() {
            let host_before = host_rdtsc();
            self.slot(k).read.0.store(seq, Ordering::SeqCst);
            let waited = self.wait(k..k + 1, seq);
            let host_after = host_rdtsc();
            after.push(self.state(none, host_before, host_after));
            if let Err(why) = waited {
                let _ = self.wait(k + 1..ks.end, seq);
                return Err(why);
            }
        }
        Ok(())
    }

    /// Reads every thread's TSC state, one thread at a time, into `out`:
    /// the exact offset and the simulated TSC_ADJUST, and the thread's TSC
    /// read on its own CPU between two reads of the coordinator's.
    pub fn read_back_into(&mut self, round: u32, out: &mut Vec<TscState>) -> Result<(), RunError> {
        out.clear();
        out.push(self.own_state());
        for k in 1..self.ctl.slots.len() {
            self.seq += 1;
            let seq = self.seq;
            let host_before = host_rdtsc();
            self.post(k, seq, Job::Read);
            let waited = self.wait(k..k + 1, seq);
            let host_after = host_rdtsc();
            let reply = self.take_reply(k);
            if let Err(why) = waited {
                return Err(self.ended(why, round, &[k], None));
            }
            let Some(Reply::State(s)) = reply else {
                return Err(RunError::Lost(k as u32));
            };
            out.push(self.state(s, host_before, host_after));
        }
        Ok(())
    }

    fn state(&self, s: ThreadState, host_before: u64, host_after: u64) -> TscState {
        TscState {
            adjust: s.adjust,
            tsc: s.raw_tsc.wrapping_add(s.offset),
            host_before,
            host_after,
            offset: Some(s.offset),
            tsc_khz: self.tsc_khz,
            host_khz: 0,
            scaled: false,
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.ctl.stop.abort.store(true, Ordering::Relaxed);
        self.ctl.shutdown.store(true, Ordering::SeqCst);
        for h in &self.handles {
            h.thread().unpark();
        }
        if let Some(a) = self.restore.take() {
            a.restore();
        }
        let until = Instant::now() + GRACE;
        while self.handles.iter().any(|h| !h.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        for (k, h) in self.handles.drain(..).enumerate() {
            if h.is_finished() {
                let _ = h.join();
            } else {
                log::warn!(
                    "host thread {} did not end within {GRACE:?}; left running",
                    k + 1
                );
            }
        }
    }
}

/// The host TSC `timeout` from now at `tsc_khz`.
fn tsc_deadline(tsc_khz: u32, timeout: Duration) -> u64 {
    let cycles = u128::from(tsc_khz) * timeout.as_millis();
    host_rdtsc().saturating_add(u64::try_from(cycles).unwrap_or(u64::MAX))
}
