//! The guest-visible warp test run after a rendezvous: Linux's
//! `check_tsc_warp()` pattern. Every CPU repeatedly takes a spinlock, reads
//! the TSC the previous holder stored (and who stored it), reads its own TSC
//! and stores it. A stored value above one's own later reading is a real
//! cross-CPU backwards step of the TSC ("warp"), as a guest would see it.
//!
//! A warp can only show when the lock passes from one CPU to another, and
//! only if it passes faster than the skew between them: so the test counts
//! those hand-offs and the shortest one, and a caller can tell "no warp" from
//! "no chance to see one".

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
    /// Which CPU stored `last_tsc`, plus one (0: nobody yet).
    pub last_cpu: AtomicU32,
}

/// Size of [`WarpShared`]: one cache line.
pub const WARP_SHARED_SIZE: usize = 64;
const _: () = assert!(core::mem::size_of::<WarpShared>() == WARP_SHARED_SIZE);
const _: () = assert!(core::mem::offset_of!(WarpShared, last_tsc) == 8);
const _: () = assert!(core::mem::offset_of!(WarpShared, last_cpu) == 16);

impl WarpShared {
    /// A fresh, all-zero state.
    pub const fn new() -> WarpShared {
        WarpShared {
            lock: AtomicU32::new(0),
            started: AtomicU32::new(0),
            last_tsc: AtomicU64::new(0),
            last_cpu: AtomicU32::new(0),
        }
    }
}

/// What one CPU saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarpOutcome {
    /// The largest backwards step seen, in cycles (0: none).
    pub max_warp: u64,
    /// How many backwards steps were seen.
    pub warps: u64,
    /// How many times this CPU took the lock right after another CPU.
    pub handoffs: u64,
    /// The shortest forward step across a hand-off (its TSC minus the other
    /// CPU's stored one), cycles; `u64::MAX` when there was none.
    pub shortest_handoff: u64,
}

impl Default for WarpOutcome {
    fn default() -> Self {
        WarpOutcome {
            max_warp: 0,
            warps: 0,
            handoffs: 0,
            shortest_handoff: u64::MAX,
        }
    }
}

/// Runs `iterations` lock-ordered TSC reads on CPU `cpu` of `total`, all of
/// which must call this with the same zeroed `shared` state.
pub fn warp_test<C: Cpu>(
    shared: &WarpShared,
    cpu: u32,
    total: u32,
    iterations: u64,
    ops: &mut C,
) -> WarpOutcome {
    shared.started.fetch_add(1, Ordering::AcqRel);
    while shared.started.load(Ordering::Acquire) < total {
        ops.relax();
    }
    let me = cpu.wrapping_add(1);
    let mut out = WarpOutcome::default();
    for _ in 0..iterations {
        while shared.lock.swap(1, Ordering::Acquire) != 0 {
            while shared.lock.load(Ordering::Relaxed) != 0 {
                ops.relax();
            }
        }
        let prev = shared.last_tsc.load(Ordering::Relaxed);
        let prev_cpu = shared.last_cpu.load(Ordering::Relaxed);
        let now = ops.rdtsc_ordered();
        shared.last_tsc.store(now, Ordering::Relaxed);
        shared.last_cpu.store(me, Ordering::Relaxed);
        shared.lock.store(0, Ordering::Release);
        if prev > now {
            out.max_warp = out.max_warp.max(prev - now);
            out.warps += 1;
        }
        if prev_cpu != 0 && prev_cpu != me {
            out.handoffs += 1;
            if now >= prev {
                out.shortest_handoff = out.shortest_handoff.min(now - prev);
            }
        }
    }
    out
}
