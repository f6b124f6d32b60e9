//! Simulated CPUs on host threads: one shared, globally monotonic clock and a
//! per-CPU offset, as under a hypervisor (KVM's TSC offset). `write_tsc` sets
//! the offset so that the TSC reads the value written; a TSC_ADJUST write
//! moves the offset by the difference to the previous value, as real KVM does.
//!
//! Every spin of the algorithms calls `relax`, which yields (the test machine
//! may have only 2 cores and tests run in parallel) and panics instead of
//! hanging: past a generous deadline, or as soon as another simulated CPU of
//! the same run has panicked.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tsc_sync::{Cpu, TscAdjust};

/// Clock value at the start of every run: far from 0, so that negative
/// offsets of a few seconds never wrap the simulated TSC.
pub const BASE: u64 = 1 << 40;

/// The shared clock: elapsed time in ticks of `tick_ns`, plus [`BASE`].
/// Globally monotonic: a read never returns less than any read that
/// happened before it on any thread (the last value is kept with
/// `fetch_max`).
pub struct Clock {
    start: Instant,
    tick_ns: u64,
    last: AtomicU64,
}

impl Clock {
    /// A clock counting ticks of `tick_ns` nanoseconds.
    pub fn new(tick_ns: u64) -> Arc<Clock> {
        Arc::new(Clock {
            start: Instant::now(),
            tick_ns,
            last: AtomicU64::new(0),
        })
    }

    /// The current tick.
    pub fn now(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_nanos()).expect("elapsed fits");
        let raw = BASE + elapsed / self.tick_ns;
        let prev = self.last.fetch_max(raw, Ordering::AcqRel);
        prev.max(raw)
    }
}

/// One simulated CPU.
pub struct Sim {
    /// Its index.
    pub cpu: u32,
    /// The shared clock.
    pub clock: Arc<Clock>,
    /// TSC = clock + offset (wrapping).
    pub offset: u64,
    /// Every value written with `write_tsc`.
    pub tsc_writes: Vec<u64>,
    /// Every `prefetch` address.
    pub prefetches: Vec<usize>,
    /// Every `iteration_start` index.
    pub iterations: Vec<u32>,
    /// `before_write` calls.
    pub before_writes: u32,
    /// TSC reads.
    pub rdtsc_count: u64,
    /// Whether it has IA32_TSC_ADJUST; accessing a missing one panics.
    pub has_tsc_adjust: bool,
    /// IA32_TSC_ADJUST.
    pub tsc_adjust: u64,
    /// TSC_ADJUST reads.
    pub tsc_adjust_reads: u32,
    /// Every value written to TSC_ADJUST.
    pub tsc_adjust_writes: Vec<u64>,
    /// Each TSC read adds a pseudo-random amount in `0..jitter` (0: none):
    /// a TSC that is not monotonic across CPUs in either direction.
    pub jitter: u64,
    rng: u64,
    deadline: Instant,
    abort: Arc<AtomicBool>,
}

impl Sim {
    /// The TSC this CPU reads now, without counting a read.
    pub fn tsc_now(&self) -> u64 {
        self.clock.now().wrapping_add(self.offset)
    }

    fn next_jitter(&mut self) -> u64 {
        if self.jitter == 0 {
            return 0;
        }
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % self.jitter
    }
}

impl Cpu for Sim {
    fn rdtsc_ordered(&mut self) -> u64 {
        self.rdtsc_count += 1;
        let j = self.next_jitter();
        self.tsc_now().wrapping_add(j)
    }

    fn write_tsc(&mut self, value: u64) {
        self.offset = value.wrapping_sub(self.clock.now());
        self.tsc_writes.push(value);
    }

    fn relax(&mut self) {
        std::thread::yield_now();
        assert!(
            !self.abort.load(Ordering::Relaxed),
            "CPU {}: another simulated CPU of this run failed",
            self.cpu
        );
        assert!(
            Instant::now() < self.deadline,
            "CPU {}: a spin did not end before the deadline",
            self.cpu
        );
    }

    fn iteration_start(&mut self, iteration: u32) {
        self.iterations.push(iteration);
    }

    fn before_write(&mut self) {
        self.before_writes += 1;
    }

    fn prefetch(&mut self, addr: *const u8) {
        self.prefetches.push(addr as usize);
    }
}

impl TscAdjust for Sim {
    fn read_tsc_adjust(&mut self) -> u64 {
        assert!(
            self.has_tsc_adjust,
            "CPU {}: no TSC_ADJUST to read",
            self.cpu
        );
        self.tsc_adjust_reads += 1;
        self.tsc_adjust
    }

    fn write_tsc_adjust(&mut self, value: u64) {
        assert!(
            self.has_tsc_adjust,
            "CPU {}: no TSC_ADJUST to write",
            self.cpu
        );
        // As KVM: the TSC moves by the change of TSC_ADJUST.
        self.offset = self
            .offset
            .wrapping_add(value.wrapping_sub(self.tsc_adjust));
        self.tsc_adjust = value;
        self.tsc_adjust_writes.push(value);
    }
}

/// How to set up the simulated CPUs of one run.
#[derive(Clone)]
pub struct Setup {
    /// Tick of the shared clock, in ns.
    pub tick_ns: u64,
    /// Initial offset of each CPU (missing ones: 0).
    pub offsets: Vec<u64>,
    /// Initial TSC_ADJUST of each CPU (missing ones: 0).
    pub tsc_adjust: Vec<u64>,
    /// Whether the CPUs have TSC_ADJUST.
    pub has_tsc_adjust: bool,
    /// See [`Sim::jitter`].
    pub jitter: u64,
    /// How long any run may take before its spins panic.
    pub deadline: Duration,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            tick_ns: 1,
            offsets: Vec::new(),
            tsc_adjust: Vec::new(),
            has_tsc_adjust: true,
            jitter: 0,
            deadline: Duration::from_secs(120),
        }
    }
}

/// Sets `abort` when its thread unwinds, so the other CPUs stop at once.
struct AbortOnPanic(Arc<AtomicBool>);

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs `body` on `n` simulated CPUs, one thread each, all started together;
/// returns each CPU's result and final state, in CPU order. A panic on any
/// thread is re-raised here.
pub fn run_cpus<T, F>(n: u32, setup: &Setup, body: F) -> Vec<(T, Sim)>
where
    T: Send,
    F: Fn(&mut Sim) -> T + Sync,
{
    let clock = Clock::new(setup.tick_ns);
    let abort = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + setup.deadline;
    let barrier = std::sync::Barrier::new(n as usize);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|cpu| {
                let k = cpu as usize;
                let mut sim = Sim {
                    cpu,
                    clock: clock.clone(),
                    offset: setup.offsets.get(k).copied().unwrap_or(0),
                    tsc_writes: Vec::new(),
                    prefetches: Vec::new(),
                    iterations: Vec::new(),
                    before_writes: 0,
                    rdtsc_count: 0,
                    has_tsc_adjust: setup.has_tsc_adjust,
                    tsc_adjust: setup.tsc_adjust.get(k).copied().unwrap_or(0),
                    tsc_adjust_reads: 0,
                    tsc_adjust_writes: Vec::new(),
                    jitter: setup.jitter,
                    rng: 0x9E37_79B9_7F4A_7C15
                        ^ (u64::from(cpu) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03),
                    deadline,
                    abort: abort.clone(),
                };
                let (barrier, body, abort) = (&barrier, &body, abort.clone());
                scope.spawn(move || {
                    let _guard = AbortOnPanic(abort);
                    barrier.wait();
                    let out = body(&mut sim);
                    (out, sim)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// `a - b` as a signed number (both wrapping u64 TSC values or offsets).
pub fn signed_diff(a: u64, b: u64) -> i64 {
    a.wrapping_sub(b) as i64
}
