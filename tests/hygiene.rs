//! 1,000 VM create/run/destroy cycles in one process leave no thread and no
//! file descriptor behind, and memory flat.
//!
//! One vCPU and one round per cycle keeps it well under a minute even in a
//! debug build; no wall-clock limit is asserted (each cycle is bounded by
//! the watchdog of its run instead). Needs a usable /dev/kvm: skipped
//! without one, except when `CI` is set: then it fails. When /proc cannot
//! be read the test fails: counts of 0 would pass every leak check.
//!
//! The only test in this file on purpose: the counts are process-wide.

use std::time::Instant;

use tsc_sync::Variant;
use tsc_vmm::run;
use tsc_vmm::{default_timeout, RunOptions};

mod common;
use common::kvm_or_skip;

/// Entries of a /proc directory. Unreadable is a failure, never 0: a count
/// of 0 before and after would make every leak check pass.
fn count(dir: &str) -> usize {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {dir}: {e}"));
    let mut n = 0;
    for e in entries {
        e.unwrap_or_else(|e| panic!("cannot read an entry of {dir}: {e}"));
        n += 1;
    }
    // This process has at least stdin/stdout/stderr and its main thread.
    assert!(n > 0, "{dir} is empty: not this process's /proc");
    n
}

/// The page size, from the kernel (statm counts pages).
fn page_kib() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    assert!(size > 0, "sysconf(_SC_PAGESIZE) failed");
    size as u64 / 1024
}

/// Field `field` of /proc/self/statm (0: virtual size, 1: resident), in KiB.
/// Unreadable or malformed is a failure, never 0 (which would make the
/// growth checks pass).
fn statm_kib(field: usize) -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm")
        .unwrap_or_else(|e| panic!("cannot read /proc/self/statm: {e}"));
    let pages: u64 = statm
        .split_whitespace()
        .nth(field)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no field {field} in /proc/self/statm: {statm:?}"));
    assert!(
        pages > 0,
        "field {field} of /proc/self/statm is 0: {statm:?}"
    );
    pages * page_kib()
}

fn rss_kib() -> u64 {
    statm_kib(1)
}

/// (fds, threads, RSS KiB) of this process.
fn snapshot() -> (usize, usize, u64) {
    (count("/proc/self/fd"), count("/proc/self/task"), rss_kib())
}

fn cycle(i: usize) {
    let opts = RunOptions {
        vcpus: 1,
        schedule: vec![Variant::ALL[i % Variant::ALL.len()]],
        // Each cycle is bounded by the tool's own watchdog: a hang fails it.
        timeout: default_timeout(1, 1),
        ..RunOptions::default()
    };
    if let Err(f) = run(&opts) {
        panic!("cycle {i} failed: {}", f.error);
    }
}

#[test]
fn a_thousand_vms_leave_no_threads_fds_or_memory_behind() {
    if !kvm_or_skip() {
        return;
    }
    const CYCLES: usize = 1000;
    const WARMUP: usize = 20;
    let started = Instant::now();
    // Warm up: the kick handler, the logger, allocator arenas and the like
    // are set up once per process.
    for i in 0..WARMUP {
        cycle(i);
    }
    let (fds0, threads0, rss0) = snapshot();
    let virt0 = statm_kib(0);
    let mut rss_mid = 0;
    for i in WARMUP..CYCLES {
        cycle(i);
        if i == CYCLES / 2 {
            rss_mid = rss_kib();
        }
    }
    let (fds1, threads1, rss1) = snapshot();
    let virt1 = statm_kib(0);
    eprintln!(
        "{CYCLES} cycles in {:?}: fds {fds0} -> {fds1}, threads {threads0} -> {threads1}, \
         RSS {rss0} -> {rss_mid} -> {rss1} KiB, virtual {virt0} -> {virt1} KiB",
        started.elapsed()
    );
    // Guest memory is mapped but barely touched, so a leaked mapping (16 MiB
    // each) or thread stack would hardly move the RSS: check the address
    // space too.
    assert!(
        virt1 <= virt0 + 64 * 1024,
        "virtual size grew from {virt0} to {virt1} KiB: mappings leaked"
    );
    assert_eq!(fds1, fds0, "file descriptors leaked");
    assert_eq!(threads1, threads0, "threads left behind");
    // Flat: a leak of even one guest memory (16 MiB) per 100 cycles would
    // show; allocator noise stays far below this.
    assert!(
        rss1 <= rss0 + 32 * 1024,
        "RSS grew from {rss0} to {rss1} KiB"
    );
    assert!(
        rss1 <= rss_mid + 16 * 1024,
        "RSS still growing in the second half: {rss_mid} -> {rss1} KiB"
    );
}
