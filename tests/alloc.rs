//! The per-round path allocates nothing but the round's own result record:
//! counts heap allocations (all threads) of runs of two lengths in one
//! process; the difference per extra round must stay at a small constant.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tsc_sync::Variant;
use tsc_vmm::run;
use tsc_vmm::RunOptions;

mod common;
use common::kvm_or_skip;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: defers every operation to the system allocator unchanged; the
// counter is a relaxed atomic, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `layout` is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for dealloc; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_of(vcpus: u32, rounds: usize) -> u64 {
    let opts = RunOptions {
        vcpus,
        schedule: vec![Variant::XenHead; rounds],
        timeout: Duration::from_secs(120),
        ..RunOptions::default()
    };
    let before = ALLOCS.load(Ordering::Relaxed);
    let out = run(&opts).unwrap_or_else(|f| panic!("run failed: {f}"));
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(out.rounds.len(), rounds);
    after - before
}

#[test]
fn extra_rounds_cost_only_their_result_records() {
    if !kvm_or_skip() {
        return;
    }
    for vcpus in [1u32, 2] {
        // Warm up lazily initialised state (logging, signal handlers).
        allocations_of(vcpus, 5);
        let short = allocations_of(vcpus, 50);
        let long = allocations_of(vcpus, 250);
        let per_round = long.saturating_sub(short) as f64 / 200.0;
        eprintln!("{vcpus} vCPU(s): {short} allocations for 50 rounds, {long} for 250: {per_round:.2} per round");
        // One per round is the result record's per-vCPU vector; the event
        // channels allocate a block every few dozen messages.
        assert!(
            per_round <= 2.0,
            "{per_round:.2} allocations per round with {vcpus} vCPU(s)"
        );
    }
}
