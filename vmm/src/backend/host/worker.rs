//! One host thread of a run (threads 1..N; thread 0 is the coordinator,
//! [`super::threads`]): its mailbox ([`Slot`]), what the threads share
//! ([`Control`]: the stop control, the slots, the round's shared state), and
//! its life: wait for the next job (spinning for [`SPIN`], then parked),
//! do it, reply. A round's job ends with the round's read: the thread, its
//! part done, spins until the coordinator asks for its TSC ([`Slot::read`],
//! set between two reads of the coordinator's own), reads it and replies
//! both at once, so a round costs one hand-off each way and no second job.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tsc_contract::Variant;
use tsc_sync::LinuxParams;

use super::cpu::{Aborted, StopControl, ThreadCpu};
use super::round::{one_round, RoundOutput};
use super::shared::RoundShared;
use crate::tsc::host_rdtsc;

/// How long a parked thread or the coordinator sleeps between looks at the
/// shutdown flag, the stop request and the deadline.
pub const POLL: Duration = Duration::from_millis(10);

/// How long a thread spins for its next job before it parks.
pub const SPIN: Duration = Duration::from_millis(2);

/// How many spins pass between two looks at the clock.
pub const CLOCK_EVERY: u32 = 64;

/// What the coordinator asks of one thread.
#[derive(Clone, Copy, Debug)]
pub enum Job {
    /// Run one round of `variant` on the shared state, then read the TSC
    /// once the coordinator asks ([`Slot::read`]).
    Round {
        /// The round's number.
        round: u32,
        /// Its variant.
        variant: Variant,
    },
    /// Read the TSC now, on this thread's CPU.
    Read,
}

/// A thread's TSC state as one read saw it.
#[derive(Clone, Copy, Debug)]
pub struct ThreadState {
    /// The host TSC, read on the thread's CPU.
    pub raw_tsc: u64,
    /// The thread's TSC offset from its CPU's.
    pub offset: u64,
    /// Its simulated TSC_ADJUST.
    pub adjust: u64,
}

/// What a thread answers.
// Kept in the thread's slot and moved once: boxing the round's output would
// allocate once per round and thread.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Reply {
    /// A round's record (and Linux's result) and the TSC read after it
    /// (`None`: the run was aborted or shut down before it was asked for).
    Round(RoundOutput, Option<ThreadState>),
    /// A TSC read.
    State(ThreadState),
    /// The round was aborted (stop request, deadline, another thread).
    Aborted,
    /// The algorithm panicked (a bug), with the message.
    Panicked(String),
}

/// Keeps a value on cache lines of its own.
#[repr(align(64))]
#[derive(Debug, Default)]
pub struct Line<T>(pub T);

/// One thread's mailbox.
#[derive(Debug, Default)]
pub struct Slot {
    /// Where the thread is ([`tsc_contract::progress_word`]), written only
    /// by the thread, during rounds.
    pub progress: Line<AtomicU64>,
    /// The number of the last job posted.
    pub posted: Line<AtomicU64>,
    /// The number of the last job done.
    pub done: Line<AtomicU64>,
    /// The number of the round job whose TSC read the coordinator asks for
    /// now (it has read its own TSC just before).
    pub read: Line<AtomicU64>,
    /// The thread has stopped spinning for its next job and parks: the
    /// coordinator unparks it after posting one.
    pub sleeping: AtomicBool,
    /// The job posted last.
    pub job: Line<Mutex<Option<Job>>>,
    /// The reply to the job done last.
    pub reply: Line<Mutex<Option<Reply>>>,
}

/// Locks `m`, also when a thread panicked while holding it (nothing here
/// holds a lock across code that can panic).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The round's shared state, cleared by the coordinator between rounds.
#[derive(Debug, Default)]
pub struct SharedCell(pub UnsafeCell<RoundShared>);

// SAFETY: the cell is written only by the coordinator, in
// `super::threads::Workers::run_round` before it posts a round, when every thread has
// reported the previous round (so none holds a reference into it: a thread
// only borrows it while it runs a round, and reports after); a round some
// thread did not report makes `run_round` refuse every later round. During a
// round every access is through `&RoundShared`, whose fields are atomics.
unsafe impl Sync for SharedCell {}

/// What the threads share.
#[derive(Debug)]
pub struct Control {
    /// Stopping every thread's spins.
    pub stop: StopControl,
    /// The run is over: every thread ends.
    pub shutdown: AtomicBool,
    /// One per thread; slot 0 (the coordinator's) holds only its progress.
    pub slots: Vec<Slot>,
    /// Threads.
    pub vcpus: u32,
    /// Linux's sync's parameters.
    pub params: LinuxParams,
    /// The round's shared state.
    pub shared: SharedCell,
    /// [`SPIN`] in host TSC cycles.
    pub spin_cycles: u64,
}

/// The next job after job `last`: spinning for [`SPIN`], then parked until
/// one is posted; `None` once the run shuts down.
fn next_job(ctl: &Control, slot: &Slot, last: u64) -> Option<(u64, Job)> {
    let start = host_rdtsc();
    let mut spins = 0u32;
    let mut parking = false;
    loop {
        if ctl.shutdown.load(Ordering::SeqCst) {
            return None;
        }
        let seq = slot.posted.0.load(Ordering::SeqCst);
        if seq != last {
            if let Some(job) = *lock(&slot.job.0) {
                return Some((seq, job));
            }
        }
        if parking {
            slot.sleeping.store(true, Ordering::SeqCst);
            // Posted after the look above: the coordinator saw `sleeping`
            // and unparks (the token makes this park return at once).
            if slot.posted.0.load(Ordering::SeqCst) == last && !ctl.shutdown.load(Ordering::SeqCst)
            {
                std::thread::park_timeout(POLL);
            }
            slot.sleeping.store(false, Ordering::SeqCst);
            continue;
        }
        spins = spins.wrapping_add(1);
        if ctl.stop.overcommitted {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        if spins % CLOCK_EVERY == 0 {
            parking = host_rdtsc().wrapping_sub(start) > ctl.spin_cycles;
        }
    }
}

/// What a round's run (caught) answers; a panic (a bug) stops the others
/// at once.
pub fn reply_of(ctl: &Control, run: std::thread::Result<RoundOutput>) -> Reply {
    match run {
        Ok(out) => Reply::Round(out, None),
        Err(p) if p.is::<Aborted>() => Reply::Aborted,
        Err(p) => {
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

/// This thread's TSC state once the coordinator asks for job `seq`'s read
/// (spinning, yielding when overcommitted); `None` if the run is aborted or
/// shut down first.
fn read_when_asked(
    ctl: &Control,
    slot: &Slot,
    seq: u64,
    cpu: &ThreadCpu<'_>,
) -> Option<ThreadState> {
    while slot.read.0.load(Ordering::Acquire) != seq {
        if ctl.stop.abort.load(Ordering::Relaxed) || ctl.shutdown.load(Ordering::Relaxed) {
            return None;
        }
        if ctl.stop.overcommitted {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    Some(ThreadState {
        raw_tsc: host_rdtsc(),
        offset: cpu.offset(),
        adjust: cpu.tsc_adjust(),
    })
}

/// One thread's life (threads 1..N): jobs until the run shuts down.
pub fn worker(ctl: &Control, index: u32, offset: u64) {
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
            Job::Round { round, variant } => {
                let (vcpus, params) = (ctl.vcpus, ctl.params);
                // SAFETY: a shared borrow for the round (see SharedCell): the
                // coordinator writes the cell only once this thread has
                // reported the round, after the borrow has ended.
                let shared = unsafe { &*ctl.shared.0.get() };
                let run = catch_unwind(AssertUnwindSafe(|| {
                    one_round(&mut cpu, index, vcpus, round, variant, shared, params)
                }));
                match reply_of(ctl, run) {
                    Reply::Round(out, _) => {
                        Reply::Round(out, read_when_asked(ctl, slot, seq, &cpu))
                    }
                    other => other,
                }
            }
        };
        *lock(&slot.reply.0) = Some(reply);
        slot.done.0.store(seq, Ordering::Release);
    }
}
