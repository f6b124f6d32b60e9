//! TSC synchronisation algorithms, generic over the CPU operations they need:
//! Xen's TSC calibration rendezvous (`time_calibration_tsc_rendezvous()` in
//! `xen/arch/x86/time.c`) in its historic variants and an unmerged RFC, Xen's
//! standard rendezvous (`time_calibration_std_rendezvous()`), and Linux's
//! source/target TSC warp check with TSC_ADJUST compensation
//! (`arch/x86/kernel/tsc_sync.c`, in [`linux`]).
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
//! Xen's, with the semaphore and both stamps on one cache line (line 0 of
//! [`Shared`]). The RFC that moved the stamp to a cache line of its own uses
//! the stamps on line 1 instead.
//!
//! Not reproduced: the master's read of platform time when the TSC is not
//! constant-rate (a guest has no platform timer to read, and the variants this
//! tool compares run with CONSTANT_TSC, where HEAD skips it).
//!
//! # Entry points
//! - [`rendezvous`]: one of the contract's [`Variant`]s (kept for the existing
//!   callers; maps the variant through [`XenAlgorithm::for_variant`]).
//! - [`xen_tsc_rendezvous`]: the TSC rendezvous with explicit [`XenParams`]
//!   ([`XEN_4_15`], [`XEN_6CA022A1`], [`XEN_HEAD`], [`XEN_RFC_V3`]).
//! - [`xen_std_rendezvous`]: the standard rendezvous (no TSC write).
//! - [`linux::linux_tsc_sync`]: Linux's pairwise warp check, CPU 0 against
//!   every AP in turn.
#![no_std]
#![deny(missing_docs)]

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use tsc_contract::Variant;

pub mod handoff;
pub mod linux;
pub mod pvclock;
pub mod warp;

pub use linux::{linux_tsc_sync, LinuxParams, LinuxShared, LinuxSyncResult, TscAdjust};

/// The CPU operations the algorithms need.
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
    ///
    /// [`xen_std_rendezvous`] calls it once, with 0; [`linux::linux_tsc_sync`]
    /// calls it at the start of every warp-check run with the run's 0-based
    /// index.
    #[inline(always)]
    fn iteration_start(&mut self, iteration: u32) {
        let _ = iteration;
    }
    /// Called on the last iteration just before the TSC read that precedes
    /// the write (so outside the measured write latency). Not part of Xen: the
    /// guest injects a delay here for fault testing. Does nothing by default.
    #[inline(always)]
    fn before_write(&mut self) {}
    /// Xen's `prefetch()`: a hint to bring the cache line holding `addr` into
    /// this CPU's cache (`prefetcht0`). Only a hint: it must not fault and has
    /// no architectural effect, which is why doing nothing (the default) is a
    /// correct implementation. Used by [`XEN_RFC_V3`] on the non-final
    /// iterations.
    #[inline(always)]
    fn prefetch(&mut self, addr: *const u8) {
        let _ = addr;
    }
}

/// The two stamps of one calibration on a cache line of their own, as Jan
/// Beulich's RFC v3 4/4 laid them out (`master_tsc_stamp` aligned to a new
/// cache line, `max_tsc_stamp` right after it).
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct StampLine {
    /// Xen's `master_tsc_stamp`: the TSC value every CPU writes on the last
    /// iteration.
    pub master_tsc_stamp: AtomicU64,
    /// Xen's `max_tsc_stamp`: the largest first-iteration TSC seen on any AP.
    pub max_tsc_stamp: AtomicU64,
    _rest: [u64; 6],
}

const _: () = assert!(core::mem::size_of::<StampLine>() == 64);
const _: () = assert!(core::mem::offset_of!(StampLine, master_tsc_stamp) == 0);
const _: () = assert!(core::mem::offset_of!(StampLine, max_tsc_stamp) == 8);

impl StampLine {
    /// Both stamps zero.
    pub const fn new() -> StampLine {
        StampLine {
            master_tsc_stamp: AtomicU64::new(0),
            max_tsc_stamp: AtomicU64::new(0),
            _rest: [0; 6],
        }
    }
}

/// The shared state of one calibration: two 64-byte cache lines, all zero at
/// the start of a calibration (the host zeroes [`SHARED_SIZE`] bytes).
///
/// Line 0 is laid out as Xen's `struct calibration_rendezvous` past its
/// cpumask: the semaphore and both stamps share one cache line. Every variant
/// uses its semaphore; the variants with [`StampPlace::SemaphoreLine`] use
/// its stamps. Line 1 ([`Shared::own_line`]) holds the stamps of the variants
/// with [`StampPlace::OwnLine`] (the RFC). The stamps a variant does not use
/// stay zero.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Shared {
    /// Xen's `atomic_t semaphore`.
    pub semaphore: AtomicU32,
    _pad: u32,
    /// Xen's `master_stime` (unused with a constant-rate TSC, kept for layout).
    pub master_stime: AtomicU64,
    /// The TSC value every CPU writes on the last iteration (line 0).
    pub master_tsc_stamp: AtomicU64,
    /// The largest first-iteration TSC seen on any AP (line 0).
    pub max_tsc_stamp: AtomicU64,
    _rest: [u64; 4],
    /// Line 1: the stamps on a cache line of their own.
    pub own_line: StampLine,
}

/// Size of [`Shared`]: two cache lines. Line 0 is byte for byte what the
/// single-line layout was, so the existing variants see the same offsets.
pub const SHARED_SIZE: usize = 128;
// It must fit the region the guest layout reserves for it.
const _: () =
    assert!(SHARED_SIZE as u64 <= tsc_contract::layout::RECORDS - tsc_contract::layout::RENDEZVOUS);
const _: () = assert!(core::mem::size_of::<Shared>() == SHARED_SIZE);
const _: () = assert!(core::mem::align_of::<Shared>() == 64);
const _: () = assert!(core::mem::offset_of!(Shared, semaphore) == 0);
const _: () = assert!(core::mem::offset_of!(Shared, master_stime) == 8);
const _: () = assert!(core::mem::offset_of!(Shared, master_tsc_stamp) == 16);
const _: () = assert!(core::mem::offset_of!(Shared, max_tsc_stamp) == 24);
const _: () = assert!(core::mem::offset_of!(Shared, own_line) == 64);
/// Offset of the RFC's `master_tsc_stamp` in [`Shared`] (line 1).
pub const OWN_LINE_MASTER_TSC_STAMP_OFFSET: usize = 64;
/// Offset of the RFC's `max_tsc_stamp` in [`Shared`] (line 1).
pub const OWN_LINE_MAX_TSC_STAMP_OFFSET: usize = 72;
const _: () = assert!(
    core::mem::offset_of!(Shared, own_line) + core::mem::offset_of!(StampLine, master_tsc_stamp)
        == OWN_LINE_MASTER_TSC_STAMP_OFFSET
);
const _: () = assert!(
    core::mem::offset_of!(Shared, own_line) + core::mem::offset_of!(StampLine, max_tsc_stamp)
        == OWN_LINE_MAX_TSC_STAMP_OFFSET
);
// The guest reserves one page for it (tsc_contract::layout::RENDEZVOUS).
const _: () = assert!(SHARED_SIZE <= 4096);

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
            own_line: StampLine::new(),
        }
    }

    /// `(master_tsc_stamp, max_tsc_stamp)` at `place`.
    #[inline(always)]
    pub fn stamps(&self, place: StampPlace) -> (&AtomicU64, &AtomicU64) {
        match place {
            StampPlace::SemaphoreLine => (&self.master_tsc_stamp, &self.max_tsc_stamp),
            StampPlace::OwnLine => (
                &self.own_line.master_tsc_stamp,
                &self.own_line.max_tsc_stamp,
            ),
        }
    }
}

/// What one CPU measured in one rendezvous.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readings {
    /// The CPU's first-iteration TSC (Xen's `tsc` local, after `tsc += !tsc`).
    /// For [`xen_std_rendezvous`], which has no iterations, its only TSC read
    /// (the value Xen hands to the tail).
    pub tsc_first: u64,
    /// The value this CPU wrote to its TSC on the last iteration (0 when
    /// nothing was written, see [`Readings::wrote`]).
    pub written: u64,
    /// The TSC read just before that write (0 when nothing was written).
    pub tsc_before_write: u64,
    /// The TSC read just after the loop. For [`xen_std_rendezvous`], its only
    /// TSC read (equal to `tsc_first`).
    pub tsc_after_loop: u64,
    /// Whether this CPU wrote its TSC: true for the TSC rendezvous (every
    /// [`XenParams`], every [`Variant`]), false for [`xen_std_rendezvous`].
    pub wrote: bool,
}

/// Number of iterations of the rendezvous loop.
pub const ITERATIONS: u32 = 5;
const _: () = assert!(ITERATIONS == tsc_contract::PROGRESS_PAST_LOOP);

/// Where a TSC rendezvous keeps `master_tsc_stamp` and `max_tsc_stamp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StampPlace {
    /// On the semaphore's cache line (line 0 of [`Shared`]), as in every
    /// released Xen.
    SemaphoreLine,
    /// On a cache line of their own (line 1 of [`Shared`]), as in the RFC.
    OwnLine,
}

/// How a TSC rendezvous does its final write: what distinguishes the
/// variants of [`xen_tsc_rendezvous`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct XenParams {
    /// Which cache line holds the stamps.
    pub stamps: StampPlace,
    /// The value written is latched into a local at the end of every
    /// iteration (6ca022a1) instead of read from shared memory right after the
    /// release.
    pub latched: bool,
    /// One `cpu_relax()` (PAUSE) right after the write (f1a042b9).
    pub pause_after_write: bool,
    /// `prefetch(&r->master_tsc_stamp)` on every non-final iteration, where
    /// the final one writes (the RFC).
    pub prefetch: bool,
}

/// Before the seed (Xen 4.15, 76aff7f6): the final write reads the stamp from
/// the semaphore's cache line right after the release.
pub const XEN_4_15: XenParams = XenParams {
    stamps: StampPlace::SemaphoreLine,
    latched: false,
    pause_after_write: false,
    prefetch: false,
};
/// The seed, 6ca022a1 (Xen 4.16): the value is latched into a local.
pub const XEN_6CA022A1: XenParams = XenParams {
    stamps: StampPlace::SemaphoreLine,
    latched: true,
    pause_after_write: false,
    prefetch: false,
};
/// Xen HEAD (f1a042b9): as the seed, plus a PAUSE right after the write.
pub const XEN_HEAD: XenParams = XenParams {
    stamps: StampPlace::SemaphoreLine,
    latched: true,
    pause_after_write: true,
    prefetch: false,
};
/// Jan Beulich's RFC v3 4/4 (xen-devel, 9 Feb 2021, not merged), on top of the
/// 4.15 state: the stamps on a cache line of their own, the stamp prefetched
/// on the non-final iterations, the final write reading it from shared memory
/// right after the release (not latched), no PAUSE.
pub const XEN_RFC_V3: XenParams = XenParams {
    stamps: StampPlace::OwnLine,
    latched: false,
    pause_after_write: false,
    prefetch: true,
};

/// One of Xen's calibration rendezvous functions that this crate implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XenAlgorithm {
    /// `time_calibration_tsc_rendezvous()` with these parameters.
    Tsc(XenParams),
    /// `time_calibration_std_rendezvous()`: no TSC write.
    Std,
}

impl XenAlgorithm {
    /// Every named algorithm, by its user-facing name (the names of the
    /// contract's [`Variant`]s).
    pub const NAMED: [(&'static str, XenAlgorithm); 5] = [
        ("xen-4.15", XenAlgorithm::Tsc(XEN_4_15)),
        ("xen-6ca022a1", XenAlgorithm::Tsc(XEN_6CA022A1)),
        ("xen-head", XenAlgorithm::Tsc(XEN_HEAD)),
        ("xen-rfc-v3", XenAlgorithm::Tsc(XEN_RFC_V3)),
        ("xen-std", XenAlgorithm::Std),
    ];

    /// Looks an algorithm up by its name in [`XenAlgorithm::NAMED`].
    pub fn from_name(name: &str) -> Option<XenAlgorithm> {
        Self::NAMED
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, alg)| alg)
    }

    /// The algorithm of a contract [`Variant`]; `None` for
    /// [`Variant::LinuxTscSync`], which is not a Xen rendezvous (see
    /// [`linux::linux_tsc_sync`]).
    pub const fn for_variant(variant: Variant) -> Option<XenAlgorithm> {
        match variant {
            Variant::Xen415 => Some(XenAlgorithm::Tsc(XEN_4_15)),
            Variant::Xen6ca022a1 => Some(XenAlgorithm::Tsc(XEN_6CA022A1)),
            Variant::XenHead => Some(XenAlgorithm::Tsc(XEN_HEAD)),
            Variant::XenRfcV3 => Some(XenAlgorithm::Tsc(XEN_RFC_V3)),
            Variant::XenStd => Some(XenAlgorithm::Std),
            Variant::LinuxTscSync => None,
        }
    }

    /// Runs the algorithm on CPU `cpu` of `total` (see [`xen_tsc_rendezvous`]
    /// and [`xen_std_rendezvous`]).
    #[inline]
    pub fn run<C: Cpu>(self, shared: &Shared, cpu: u32, total: u32, ops: &mut C) -> Readings {
        match self {
            XenAlgorithm::Tsc(params) => xen_tsc_rendezvous(params, shared, cpu, total, ops),
            XenAlgorithm::Std => xen_std_rendezvous(shared, cpu, total, ops),
        }
    }
}

/// Runs one rendezvous of `variant` on CPU `cpu` of `total` (CPU 0 is the
/// master): [`XenAlgorithm::for_variant`], then [`XenAlgorithm::run`].
///
/// Every CPU `0..total` must call this with the same `shared` state, zeroed
/// beforehand, and the same `variant`. `total` must be at least 1 and `cpu`
/// below it; otherwise the call spins forever, exactly as Xen's would.
///
/// # Panics
/// For [`Variant::LinuxTscSync`], which is not a rendezvous: run
/// [`linux::linux_tsc_sync`] instead.
pub fn rendezvous<C: Cpu>(
    variant: Variant,
    shared: &Shared,
    cpu: u32,
    total: u32,
    ops: &mut C,
) -> Readings {
    match XenAlgorithm::for_variant(variant) {
        Some(alg) => alg.run(shared, cpu, total, ops),
        None => panic!("tsc-sync: linux-tsc-sync is not a rendezvous"),
    }
}

/// Runs one TSC calibration rendezvous (`time_calibration_tsc_rendezvous()`)
/// with `params` on CPU `cpu` of `total` (CPU 0 is the master).
///
/// Every CPU `0..total` must call this with the same `shared` state, zeroed
/// beforehand, and the same `params`. `total` must be at least 1 and `cpu`
/// below it; otherwise the call spins forever, exactly as Xen's would.
///
/// Each CPU writes its TSC exactly once, on the last iteration, with the
/// largest first-iteration TSC seen on any CPU; the semaphore ends at 0.
pub fn xen_tsc_rendezvous<C: Cpu>(
    params: XenParams,
    shared: &Shared,
    cpu: u32,
    total: u32,
    ops: &mut C,
) -> Readings {
    let r = shared;
    let (stamp, max_stamp) = r.stamps(params.stamps);
    let mut tsc: u64 = 0;
    // The seed's latched copy of `r->master_tsc_stamp`.
    let mut master_tsc: u64 = 0;
    let mut out = Readings::default();

    // `i = 4, 3, 2, 1, 0`; `i == 0` is the last iteration.
    for i in (0..ITERATIONS).rev() {
        ops.iteration_start(ITERATIONS - 1 - i);
        if cpu == 0 {
            while r.semaphore.load(Ordering::Acquire) != total - 1 {
                ops.relax();
            }

            if tsc == 0 {
                tsc = ops.rdtsc_ordered();
                stamp.store(tsc, Ordering::Relaxed);
            } else if stamp.load(Ordering::Relaxed) < max_stamp.load(Ordering::Relaxed) {
                // Never move any CPU's TSC backwards: use the largest value
                // observed anywhere on the first iteration.
                stamp.store(max_stamp.load(Ordering::Relaxed), Ordering::Relaxed);
            }

            r.semaphore.fetch_add(1, Ordering::AcqRel);

            if i == 0 {
                final_write(stamp, &params, master_tsc, ops, &mut out);
            } else if params.prefetch {
                ops.prefetch(stamp_addr(stamp));
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
                let mut cur = max_stamp.load(Ordering::Relaxed);
                tsc = ops.rdtsc_ordered();
                while tsc > cur {
                    // Xen's cmpxchg() returns the previous value, success or not.
                    cur = match max_stamp.compare_exchange(
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
                final_write(stamp, &params, master_tsc, ops, &mut out);
            } else if params.prefetch {
                ops.prefetch(stamp_addr(stamp));
            }

            r.semaphore.fetch_add(1, Ordering::AcqRel);
            while r.semaphore.load(Ordering::Acquire) > total {
                ops.relax();
            }
        }

        // Just in case a read above ended up reading zero.
        tsc += u64::from(tsc == 0);

        if params.latched {
            // The seed: fetch the value to be written into a local on every
            // iteration (unconditionally, to avoid a hard-to-predict branch).
            master_tsc = stamp.load(Ordering::Relaxed);
        }
    }

    out.tsc_after_loop = ops.rdtsc_ordered();
    out.tsc_first = tsc;
    out
}

/// The address handed to [`Cpu::prefetch`].
#[inline(always)]
fn stamp_addr(stamp: &AtomicU64) -> *const u8 {
    core::ptr::from_ref(stamp).cast::<u8>()
}

/// The write on the last iteration, with the one instrumentation point inside
/// the loop: the TSC just before the write.
#[inline(always)]
fn final_write<C: Cpu>(
    stamp: &AtomicU64,
    params: &XenParams,
    master_tsc: u64,
    ops: &mut C,
    out: &mut Readings,
) {
    let value = if params.latched {
        master_tsc
    } else {
        stamp.load(Ordering::Relaxed)
    };
    ops.before_write();
    out.tsc_before_write = ops.rdtsc_ordered();
    ops.write_tsc(value);
    if params.pause_after_write {
        // Give a hyperthread sibling a chance to do the same as soon as possible.
        ops.relax();
    }
    out.written = value;
    out.wrote = true;
}

/// Runs Xen's standard calibration rendezvous
/// (`time_calibration_std_rendezvous()`) on CPU `cpu` of `total`: one pass, no
/// loop, no TSC write.
///
/// CPU 0 waits until every AP has incremented the semaphore (`== total - 1`),
/// then increments it; every AP increments it and waits for `== total`. The
/// semaphore is never reset (it ends at `total`: Xen uses a fresh state per
/// calibration, so zero `shared` before every call). Then every CPU reads its
/// TSC with `rdtsc_ordered()`, the value Xen hands to the tail.
///
/// Returns that read as [`Readings::tsc_first`] and [`Readings::tsc_after_loop`],
/// with [`Readings::wrote`] false and `written`/`tsc_before_write` 0. Calls
/// [`Cpu::iteration_start`] once, with 0, and never [`Cpu::before_write`].
/// Requirements on `total` and `cpu` as for [`xen_tsc_rendezvous`].
pub fn xen_std_rendezvous<C: Cpu>(shared: &Shared, cpu: u32, total: u32, ops: &mut C) -> Readings {
    let r = shared;
    ops.iteration_start(0);
    if cpu == 0 {
        while r.semaphore.load(Ordering::Acquire) != total - 1 {
            ops.relax();
        }
        // Xen reads platform time here only without CONSTANT_TSC.
        r.semaphore.fetch_add(1, Ordering::AcqRel);
    } else {
        r.semaphore.fetch_add(1, Ordering::AcqRel);
        // The Acquire load stands for Xen's smp_rmb() after the wait.
        while r.semaphore.load(Ordering::Acquire) != total {
            ops.relax();
        }
    }
    let tsc = ops.rdtsc_ordered();
    Readings {
        tsc_first: tsc,
        written: 0,
        tsc_before_write: 0,
        tsc_after_loop: tsc,
        wrote: false,
    }
}
