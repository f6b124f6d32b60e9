//! Xen's TSC calibration rendezvous (`time_calibration_tsc_rendezvous()` in
//! `xen/arch/x86/time.c`), in its historic variants, generic over the CPU
//! operations it needs.
//!
//! The very same code runs in the guest, on real `rdtsc`/`wrmsr`/`pause`
//! instructions, and on host threads in tests, on a simulated TSC. It allocates
//! nothing, formats nothing and uses no floating point, so the guest build
//! contains no SSE/x87 instruction because of it.
//!
//! Faithful to Xen: CPU 0 is the master, five iterations (`i = 4..=0`), the same
//! wait conditions (an AP's final wait is `semaphore > N`, not `== 0`), the
//! max-TSC rule (APs publish their first-iteration TSC with a `cmpxchg` loop, the
//! master adopts the maximum), `tsc += !tsc`, and the shared state laid out like
//! Xen's, with the semaphore and both stamps on one cache line.
//!
//! Not reproduced: the master's read of platform time on the last iteration when
//! the TSC is not constant-rate (a guest has no platform timer to read, and the
//! variants this tool compares run with CONSTANT_TSC, where HEAD skips it).
#![no_std]
#![deny(missing_docs)]

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use tsc_contract::Variant;

pub mod warp;

/// The CPU operations the rendezvous needs.
pub trait Cpu {
    /// Xen's `rdtsc_ordered()`: a TSC read that is not executed before earlier
    /// instructions (`lfence; rdtsc`).
    fn rdtsc_ordered(&mut self) -> u64;
    /// Xen's `write_tsc()`: `wrmsr IA32_TSC`.
    fn write_tsc(&mut self, value: u64);
    /// Xen's `cpu_relax()`: `pause` plus a compiler barrier.
    fn relax(&mut self);
    /// Called at the start of every iteration with its 0-based index in
    /// execution order (0 is Xen's `i == 4`, the last is `i == 0`), before any
    /// wait. Not part of Xen: the guest publishes its progress here (one plain
    /// store to its own cache line) so that a watchdog can tell where a vCPU
    /// got stuck. Keep it cheap. Does nothing by default.
    #[inline(always)]
    fn iteration_start(&mut self, iteration: u32) {
        let _ = iteration;
    }
    /// Called on the last iteration just before the TSC read that precedes
    /// the write (so outside the measured write latency). Not part of Xen: the
    /// guest injects a delay here for fault testing. Does nothing by default.
    #[inline(always)]
    fn before_write(&mut self) {}
}

/// The shared state of one calibration, laid out as Xen's
/// `struct calibration_rendezvous` past its cpumask: the semaphore and both
/// stamps share one 64-byte cache line. All zero at the start of a calibration.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Shared {
    /// Xen's `atomic_t semaphore`.
    pub semaphore: AtomicU32,
    _pad: u32,
    /// Xen's `master_stime` (unused with a constant-rate TSC, kept for layout).
    pub master_stime: AtomicU64,
    /// The TSC value every CPU writes on the last iteration.
    pub master_tsc_stamp: AtomicU64,
    /// The largest first-iteration TSC seen on any AP.
    pub max_tsc_stamp: AtomicU64,
    _rest: [u64; 4],
}

/// Size of [`Shared`]: exactly one cache line.
pub const SHARED_SIZE: usize = 64;
const _: () = assert!(core::mem::size_of::<Shared>() == SHARED_SIZE);
const _: () = assert!(core::mem::offset_of!(Shared, master_tsc_stamp) == 16);
const _: () = assert!(core::mem::offset_of!(Shared, max_tsc_stamp) == 24);

impl Shared {
    /// A fresh, all-zero calibration state.
    pub const fn new() -> Shared {
        Shared {
            semaphore: AtomicU32::new(0),
            _pad: 0,
            master_stime: AtomicU64::new(0),
            master_tsc_stamp: AtomicU64::new(0),
            max_tsc_stamp: AtomicU64::new(0),
            _rest: [0; 4],
        }
    }
}

/// What one CPU measured in one rendezvous.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The CPU's first-iteration TSC (Xen's `tsc` local, after `tsc += !tsc`).
    pub tsc_first: u64,
    /// The value this CPU wrote to its TSC on the last iteration.
    pub written: u64,
    /// The TSC read just before that write.
    pub tsc_before_write: u64,
    /// The TSC read just after the loop.
    pub tsc_after_loop: u64,
}

/// Number of iterations of the rendezvous loop.
pub const ITERATIONS: u32 = 5;
const _: () = assert!(ITERATIONS == tsc_contract::PROGRESS_PAST_LOOP);

/// Runs one rendezvous on CPU `cpu` of `total` (CPU 0 is the master).
///
/// Every CPU `0..total` must call this with the same `shared` state, zeroed
/// beforehand, and the same `variant`. `total` must be at least 1 and `cpu`
/// below it; otherwise the call spins forever, exactly as Xen's would.
pub fn rendezvous<C: Cpu>(
    variant: Variant,
    shared: &Shared,
    cpu: u32,
    total: u32,
    ops: &mut C,
) -> Outcome {
    let r = shared;
    let mut tsc: u64 = 0;
    // The seed's latched copy of `r->master_tsc_stamp`.
    let mut master_tsc: u64 = 0;
    let latched = !matches!(variant, Variant::Xen415);
    let pause_after_write = matches!(variant, Variant::XenHead);
    let mut out = Outcome::default();

    // `i = 4, 3, 2, 1, 0`; `i == 0` is the last iteration.
    for i in (0..ITERATIONS).rev() {
        ops.iteration_start(ITERATIONS - 1 - i);
        if cpu == 0 {
            while r.semaphore.load(Ordering::Acquire) != total - 1 {
                ops.relax();
            }

            if tsc == 0 {
                tsc = ops.rdtsc_ordered();
                r.master_tsc_stamp.store(tsc, Ordering::Relaxed);
            } else if r.master_tsc_stamp.load(Ordering::Relaxed)
                < r.max_tsc_stamp.load(Ordering::Relaxed)
            {
                // Never move any CPU's TSC backwards: use the largest value
                // observed anywhere on the first iteration.
                r.master_tsc_stamp
                    .store(r.max_tsc_stamp.load(Ordering::Relaxed), Ordering::Relaxed);
            }

            r.semaphore.fetch_add(1, Ordering::AcqRel);

            if i == 0 {
                final_write(r, latched, master_tsc, pause_after_write, ops, &mut out);
            }

            while r.semaphore.load(Ordering::Acquire) != 2 * total - 1 {
                ops.relax();
            }
            r.semaphore.store(0, Ordering::Release);
        } else {
            r.semaphore.fetch_add(1, Ordering::AcqRel);
            while r.semaphore.load(Ordering::Acquire) < total {
                ops.relax();
            }

            if tsc == 0 {
                let mut cur = r.max_tsc_stamp.load(Ordering::Relaxed);
                tsc = ops.rdtsc_ordered();
                while tsc > cur {
                    // Xen's cmpxchg() returns the previous value, success or not.
                    cur = match r.max_tsc_stamp.compare_exchange(
                        cur,
                        tsc,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(prev) | Err(prev) => prev,
                    };
                }
            }

            if i == 0 {
                final_write(r, latched, master_tsc, pause_after_write, ops, &mut out);
            }

            r.semaphore.fetch_add(1, Ordering::AcqRel);
            while r.semaphore.load(Ordering::Acquire) > total {
                ops.relax();
            }
        }

        // Just in case a read above ended up reading zero.
        tsc += u64::from(tsc == 0);

        if latched {
            // The seed: fetch the value to be written into a local on every
            // iteration (unconditionally, to avoid a hard-to-predict branch).
            master_tsc = r.master_tsc_stamp.load(Ordering::Relaxed);
        }
    }

    out.tsc_after_loop = ops.rdtsc_ordered();
    out.tsc_first = tsc;
    out
}

/// The write on the last iteration, with the one instrumentation point inside
/// the loop: the TSC just before the write.
#[inline(always)]
fn final_write<C: Cpu>(
    r: &Shared,
    latched: bool,
    master_tsc: u64,
    pause_after_write: bool,
    ops: &mut C,
    out: &mut Outcome,
) {
    let value = if latched {
        master_tsc
    } else {
        r.master_tsc_stamp.load(Ordering::Relaxed)
    };
    ops.before_write();
    out.tsc_before_write = ops.rdtsc_ordered();
    ops.write_tsc(value);
    if pause_after_write {
        // Give a hyperthread sibling a chance to do the same as soon as possible.
        ops.relax();
    }
    out.written = value;
}
