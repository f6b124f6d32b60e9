//! The guest-visible warp test run after a rendezvous: Linux's
//! `check_tsc_warp()` pattern. Every CPU repeatedly takes a spinlock, reads
//! the TSC the previous holder stored, reads its own TSC and stores it. A
//! stored value above one's own later reading is a real cross-CPU backwards
//! step of the TSC ("warp"), as a guest would see it.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::Cpu;

/// Shared state of one warp test; all zero at the start.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct WarpShared {
    /// The spinlock (0 free, 1 held).
    pub lock: AtomicU32,
    /// How many CPUs have arrived (the test starts when all have).
    pub started: AtomicU32,
    /// The TSC the last lock holder read.
    pub last_tsc: AtomicU64,
}

impl WarpShared {
    /// A fresh, all-zero state.
    pub const fn new() -> WarpShared {
        WarpShared {
            lock: AtomicU32::new(0),
            started: AtomicU32::new(0),
            last_tsc: AtomicU64::new(0),
        }
    }
}

/// What one CPU saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WarpOutcome {
    /// The largest backwards step seen, in cycles (0: none).
    pub max_warp: u64,
    /// How many backwards steps were seen.
    pub warps: u64,
}

/// Runs `iterations` lock-ordered TSC reads on one of `total` CPUs, all of
/// which must call this with the same zeroed `shared` state.
pub fn warp_test<C: Cpu>(
    shared: &WarpShared,
    total: u32,
    iterations: u64,
    ops: &mut C,
) -> WarpOutcome {
    shared.started.fetch_add(1, Ordering::AcqRel);
    while shared.started.load(Ordering::Acquire) < total {
        ops.relax();
    }
    let mut out = WarpOutcome::default();
    for _ in 0..iterations {
        while shared.lock.swap(1, Ordering::Acquire) != 0 {
            while shared.lock.load(Ordering::Relaxed) != 0 {
                ops.relax();
            }
        }
        let prev = shared.last_tsc.load(Ordering::Relaxed);
        let now = ops.rdtsc_ordered();
        shared.last_tsc.store(now, Ordering::Relaxed);
        shared.lock.store(0, Ordering::Release);
        if prev > now {
            out.max_warp = out.max_warp.max(prev - now);
            out.warps += 1;
        }
    }
    out
}
