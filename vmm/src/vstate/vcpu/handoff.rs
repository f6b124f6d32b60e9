//! The hand-off between the pool (the coordinator) and its vCPU threads,
//! without a system call on the common path of a round.
//!
//! - Commands go through each vCPU thread's [`Mailbox`]: the coordinator
//!   stores the command and bumps `posted`. A vCPU thread that has just
//!   reported spins for its next command for [`SPIN`] without giving its
//!   core away (a `pause` per spin, the clock read every [`CLOCK_EVERY`]
//!   spins), then parks; only then does the coordinator have to unpark it
//!   (`sleeping` says so). A yield per spin would hand the core to any
//!   runnable thread for a scheduler slice, even a `nice 19` one, and the
//!   command would wait for it. With more vCPUs than host cores the threads
//!   park at once (their cores are needed by the vCPUs still running).
//! - Events go through the pool's channel; the [`Hub`] counts them, and the
//!   coordinator sleeps until as many as it waits for have been sent: the
//!   vCPU thread whose event completes that count (or any thread that ends)
//!   unparks it, once, instead of every event waking it.
//!
//! Both use the same pattern against lost wake-ups: the sleeper publishes
//! that it sleeps, then looks again; the waker publishes its news, then
//! looks whether someone sleeps (every access sequentially consistent, so
//! at least one of the two sees the other's store).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::tsc::{TscError, TscState};

/// How long a vCPU thread spins for its next command before it parks.
pub const SPIN: Duration = Duration::from_millis(1);

/// How many spins between two reads of the clock while spinning.
pub const CLOCK_EVERY: u32 = 64;

/// How long a park lasts at most before the sleeper looks again (a safety
/// net: the waker unparks a sleeper it sees).
const PARK: Duration = Duration::from_millis(50);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One vCPU thread's commands (of type `C`).
#[derive(Debug)]
pub struct Mailbox<C> {
    posted: AtomicU64,
    command: Mutex<C>,
    sleeping: AtomicBool,
    /// How long a park lasts at most ([`PARK`]; longer in the tests, so
    /// that a lost wake-up shows as a stall instead of being rescued).
    park: Duration,
    /// How long to spin before parking ([`SPIN`]; other values in the
    /// tests).
    spin: Duration,
}

impl<C: Copy> Mailbox<C> {
    /// An empty mailbox (`initial` is never handed out: only what is
    /// posted is).
    pub fn new(initial: C) -> Mailbox<C> {
        Mailbox {
            posted: AtomicU64::new(0),
            command: Mutex::new(initial),
            sleeping: AtomicBool::new(false),
            park: PARK,
            spin: SPIN,
        }
    }

    /// As [`Mailbox::new`], spinning for `spin` and parking up to `park`
    /// at a time.
    #[cfg(test)]
    fn with_times(initial: C, spin: Duration, park: Duration) -> Mailbox<C> {
        Mailbox {
            park,
            spin,
            ..Mailbox::new(initial)
        }
    }

    /// The coordinator: hands `cmd` to the vCPU thread `thread` (replacing
    /// one it has not taken yet) and wakes it if it sleeps.
    pub fn post(&self, cmd: C, thread: &Thread) {
        *lock(&self.command) = cmd;
        self.posted.fetch_add(1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            thread.unpark();
        }
    }

    /// The vCPU thread: the command posted after the one numbered `last`
    /// (which it updates), spinning for [`SPIN`] first when `spin`.
    pub fn next(&self, last: &mut u64, spin: bool) -> C {
        let start = Instant::now();
        let mut spinning = spin;
        let mut spins = 0u32;
        loop {
            let seq = self.posted.load(Ordering::SeqCst);
            if seq != *last {
                *last = seq;
                return *lock(&self.command);
            }
            if spinning {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                if spins % CLOCK_EVERY == 0 {
                    spinning = start.elapsed() < self.spin;
                }
                continue;
            }
            self.sleeping.store(true, Ordering::SeqCst);
            if self.posted.load(Ordering::SeqCst) == *last {
                std::thread::park_timeout(self.park);
            }
            self.sleeping.store(false, Ordering::SeqCst);
        }
    }
}

/// The events' count, and who waits for them.
#[derive(Debug)]
pub struct Hub {
    /// Events sent so far (each counted after it is in the channel).
    sent: AtomicU64,
    /// The count the coordinator waits for.
    target: AtomicU64,
    waiting: AtomicBool,
    /// The thread that drives the pool (the one that created the hub).
    coordinator: Thread,
}

impl Hub {
    /// A hub whose coordinator is the calling thread.
    pub fn new() -> Hub {
        Hub {
            sent: AtomicU64::new(0),
            target: AtomicU64::new(u64::MAX),
            waiting: AtomicBool::new(false),
            coordinator: std::thread::current(),
        }
    }

    /// The vCPU thread, after it has sent an event: wakes the coordinator
    /// when this event completes what it waits for, or at once when
    /// `urgent` (the thread ends).
    pub fn notify(&self, urgent: bool) {
        let count = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
        if self.waiting.load(Ordering::SeqCst)
            && (urgent || count >= self.target.load(Ordering::SeqCst))
        {
            self.coordinator.unpark();
        }
    }

    /// The coordinator, having received `received` events: sleeps until
    /// `received + wanted` have been sent, or `timeout` (or a spurious
    /// wake-up: the caller looks again). Called from another thread than
    /// the one that created the hub, nobody wakes it: it sleeps 1 ms at
    /// most and looks again.
    pub fn wait(&self, received: u64, wanted: u64, timeout: Duration) {
        let target = received.saturating_add(wanted);
        let timeout = if self.coordinator.id() == std::thread::current().id() {
            timeout
        } else {
            timeout.min(Duration::from_millis(1))
        };
        self.target.store(target, Ordering::SeqCst);
        self.waiting.store(true, Ordering::SeqCst);
        if self.sent.load(Ordering::SeqCst) < target {
            std::thread::park_timeout(timeout);
        }
        self.waiting.store(false, Ordering::SeqCst);
    }
}

/// What a vCPU thread tells a chain of rounds ([`crate::vstate::chain`]),
/// and what the pool asks it; the chain resumes the threads with commands
/// of type `C`.
pub trait Arrive<C>: Send + Sync {
    /// The threads to resume, in vCPU order (set once, after they start).
    fn connect(&self, targets: Vec<(Arc<Mailbox<C>>, Thread)>);

    /// vCPU `vcpu` reported the end of round `reported` and read its state
    /// back; true when its report completed the round (the round is in the
    /// ring then, and the next one may already run).
    fn arrive(&self, vcpu: u32, reported: u32, state: Result<TscState, TscError>) -> bool;

    /// Whether vCPU `vcpu` has reported the round running (for a stall's
    /// diagnosis).
    fn arrived(&self, vcpu: u32) -> bool;

    /// Rounds completed so far (every one below is in the ring or taken).
    fn completed(&self) -> u32;

    /// Starts no further round.
    fn close(&self);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Command {
        Run,
        Readback,
        Stop,
    }

    /// A command posted while the thread sleeps wakes it; one posted while
    /// it spins is taken without a wake-up; the hub wakes the coordinator
    /// once the events it waits for are in.
    #[test]
    fn commands_and_events_are_handed_over() {
        let mb = Arc::new(Mailbox::new(Command::Stop));
        let hub = Arc::new(Hub::new());
        let (m, h) = (mb.clone(), hub.clone());
        let t = std::thread::spawn(move || {
            let mut last = 0;
            let mut seen = Vec::new();
            for spin in [false, true, true] {
                let c = m.next(&mut last, spin);
                seen.push(c);
                h.notify(false);
            }
            seen
        });
        let thread = t.thread().clone();
        for (received, cmd) in [Command::Run, Command::Readback, Command::Stop]
            .into_iter()
            .enumerate()
        {
            mb.post(cmd, &thread);
            while hub.sent.load(Ordering::SeqCst) <= received as u64 {
                hub.wait(received as u64, 1, Duration::from_millis(100));
            }
        }
        let seen = t.join().expect("the thread ends");
        assert_eq!(seen, [Command::Run, Command::Readback, Command::Stop]);
    }

    /// How long a hand-off may take before the hammer counts it lost: far
    /// beyond any scheduling delay, far below the test's park.
    const LOST_AFTER: Duration = Duration::from_secs(5);

    /// Lost wake-ups in `handoffs` hand-offs each way between a coordinator
    /// and a vCPU thread that parks up to 10 minutes at a time (so nothing
    /// but a wake-up ends its park in time): (the mailbox's, the hub's).
    /// `pause(i)`: how long the coordinator waits before posting command
    /// `i` (to land in the thread's spin, at its end, or in its park).
    fn hammer(handoffs: u64, spin: bool, pause: fn(u64) -> Duration) -> (u64, u64) {
        let long = Duration::from_secs(600);
        let mb = Arc::new(Mailbox::with_times(0u64, SPIN, long));
        let hub = Arc::new(Hub::new());
        let taken = Arc::new(AtomicU64::new(0));
        let (m, h, tk) = (mb.clone(), hub.clone(), taken.clone());
        let t = std::thread::spawn(move || {
            let mut last = 0;
            loop {
                let c = m.next(&mut last, spin);
                tk.store(c, Ordering::SeqCst);
                h.notify(false);
                if c == handoffs {
                    break;
                }
            }
        });
        let thread = t.thread().clone();
        let (mut lost_mailbox, mut lost_hub) = (0, 0);
        for i in 1..=handoffs {
            let p = pause(i);
            if !p.is_zero() {
                std::thread::sleep(p);
            }
            mb.post(i, &thread);
            let start = Instant::now();
            let mut counted = false;
            while hub.sent.load(Ordering::SeqCst) < i {
                hub.wait(i - 1, 1, long);
                if !counted && start.elapsed() > LOST_AFTER {
                    counted = true;
                    if taken.load(Ordering::SeqCst) < i {
                        lost_mailbox += 1;
                        thread.unpark();
                    } else {
                        lost_hub += 1;
                    }
                }
            }
        }
        t.join().expect("the vCPU thread ends");
        (lost_mailbox, lost_hub)
    }

    /// 20,000 hand-offs to a thread that parks at once: every command is
    /// posted in the race between its `sleeping` flag and its park.
    #[test]
    fn no_wake_up_is_lost_when_the_thread_parks_at_once() {
        assert_eq!(hammer(20_000, false, |_| Duration::ZERO), (0, 0));
    }

    /// 20,000 hand-offs to a spinning thread, every 16th posted about when
    /// its spin ends (some then find it parked, some still spinning).
    #[test]
    fn no_wake_up_is_lost_around_the_end_of_the_spin() {
        let pause = |i: u64| match i % 16 {
            0 => SPIN + Duration::from_micros(i % 200),
            _ => Duration::ZERO,
        };
        assert_eq!(hammer(20_000, true, pause), (0, 0));
    }

    /// The spin keeps looking: a command posted while the thread spins is
    /// taken without a wake-up (the post here does not unpark). The spin
    /// lasts 10 minutes, so that a thread that parked instead (for 10
    /// minutes too) would not see it in time, however loaded the host.
    #[test]
    fn a_command_posted_during_the_spin_needs_no_wake_up() {
        let long = Duration::from_secs(600);
        let mb = Arc::new(Mailbox::with_times(0u64, long, long));
        let m = mb.clone();
        let t = std::thread::spawn(move || {
            let mut last = 0;
            m.next(&mut last, true)
        });
        std::thread::sleep(Duration::from_millis(5));
        *lock(&mb.command) = 7;
        mb.posted.fetch_add(1, Ordering::SeqCst);
        let start = Instant::now();
        while !t.is_finished() && start.elapsed() < LOST_AFTER {
            std::thread::sleep(Duration::from_millis(1));
        }
        let finished = t.is_finished();
        t.thread().unpark();
        assert_eq!(t.join().expect("the thread ends"), 7);
        assert!(finished, "the spinning thread did not see the command");
        assert!(!mb.sleeping.load(Ordering::SeqCst));
    }
}
