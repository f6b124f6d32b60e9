//! Linux's TSC synchronisation check at AP bring-up (`arch/x86/kernel/tsc_sync.c`,
//! 6.x): the boot CPU (the *source*) and one freshly booted AP (the *target*)
//! run `check_tsc_warp()` at the same time; when either saw the TSC go
//! backwards across CPUs (a *warp*) and TSC_ADJUST exists, the target moves
//! its own IA32_TSC_ADJUST by the warp it measured and they try again, up to
//! three runs in all.
//!
//! Faithful to Linux: the `start_count`/`stop_count` barriers and who resets
//! what, the lock-ordered `prev = last_tsc; now = rdtsc_ordered(); last_tsc =
//! now` loop that ends when the window has passed or after 10M iterations
//! (checked every 8), the warp and "random warp" accounting under the lock,
//! `test_runs` (3 with TSC_ADJUST, else 1; a clean run or random warps end it),
//! and the target's compensation (`adjusted += cur`, where `cur` is its own
//! largest warp, or `-max_warp` when it saw none but the source did).
//!
//! Differences, all documented where they matter:
//! - Linux runs this only for an AP that is the first of its package (or for
//!   every AP without TSC_ADJUST): a later CPU of a package with TSC_ADJUST
//!   gets the package's TSC_ADJUST value written and skips the test. Here
//!   every AP is tested, so every AP has a result.
//! - Linux stops testing later APs once the TSC has been marked unstable; here
//!   every AP is tested regardless.
//! - The target's `cur` is its own largest warp of the run. Linux keeps the
//!   global maximum as of the target's last warp, the same number whenever a
//!   compensation follows (only one CPU warped, else the warps were random and
//!   nothing is compensated).
//! - Linux's `arch_spin_lock` is a queued spinlock; this is a ticket lock, as
//!   fair (FIFO), zero-valid and small.
//! - The source cannot be sent an IPI here: [`linux_tsc_sync`] has CPU 0 poll
//!   for the next AP instead, and serialises the APs as Linux's CPU hotplug
//!   does (the next AP starts only once the previous one has finished).
//! - The results the source reports to the target (and the target's own warp
//!   to the source) travel through a second cache line of [`LinuxShared`]; Linux
//!   prints them instead.
//!
//! TSC_ADJUST access is the separate trait [`TscAdjust`], required only here:
//! a do-nothing default on [`crate::Cpu`] would let the algorithm believe it
//! had moved the TSC when nothing happened, and report compensations that
//! never took effect.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::Cpu;

/// Access to IA32_TSC_ADJUST (MSR 0x3b), needed by the target's compensation.
///
/// Deliberately not part of [`Cpu`] and without default bodies: a CPU that
/// cannot move its TSC_ADJUST must not pretend to. The target calls
/// [`TscAdjust::read_tsc_adjust`] once, just before its first compensation, and
/// [`TscAdjust::write_tsc_adjust`] for every compensation; neither is called
/// when the source's `test_runs` is 1 (no TSC_ADJUST), so a CPU without the
/// MSR may implement both as unreachable (e.g. a guest panic).
pub trait TscAdjust {
    /// `rdmsr IA32_TSC_ADJUST` (the signed MSR value, as two's complement).
    fn read_tsc_adjust(&mut self) -> u64;
    /// `wrmsr IA32_TSC_ADJUST`: moves this CPU's TSC by `value` minus the
    /// previous value (also under KVM).
    fn write_tsc_adjust(&mut self, value: u64);
}

/// The most runs of one source/target pair (Linux's `test_runs` with
/// TSC_ADJUST).
pub const MAX_RUNS: usize = 3;
/// The most TSC_ADJUST writes of one target: one between any two runs.
pub const MAX_COMPENSATIONS: usize = MAX_RUNS - 1;
/// `check_tsc_warp()`'s safety exit: it stops after this many iterations even
/// if the window has not passed (a broken TSC).
pub const LOOP_LIMIT: u32 = 10_000_000;

/// The shared state of [`linux_tsc_sync`]: two 64-byte cache lines, all zero at
/// the start (the host zeroes [`LINUX_SHARED_SIZE`] bytes once before the whole
/// multi-AP sync).
///
/// Line 0 is Linux's file-scope state of the pairwise protocol. As in Linux,
/// the protocol resets it itself between runs and between APs (the source
/// clears `start_count`, the warp counters, `max_warp` and `last_tsc` before
/// releasing the target; the target clears `stop_count`), so it need not be
/// zeroed again between APs; after the last AP it is all zero again except
/// the lock's two tickets, which are equal (free).
///
/// Line 1 is not Linux: whose turn it is, and what the source and the target
/// tell each other about a run.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct LinuxShared {
    /// The spinlock's next ticket (Linux's `sync_lock`).
    pub lock_next: AtomicU32,
    /// The ticket being served: the lock is free when it equals `lock_next`.
    pub lock_owner: AtomicU32,
    /// Linux's `start_count`: the target's arrival (1), the source's go (2).
    pub start_count: AtomicU32,
    /// Linux's `stop_count`: the target is done (1), the source is done (2).
    pub stop_count: AtomicU32,
    /// Linux's `test_runs`: runs left; 0 once the pair is finished.
    pub test_runs: AtomicU32,
    /// Linux's `nr_warps`: warps seen in this run, by either CPU.
    pub nr_warps: AtomicU32,
    /// Linux's `random_warps`: warps of one CPU after a warp of the other.
    pub random_warps: AtomicU32,
    _pad0: u32,
    /// Linux's `last_tsc`: the TSC the last lock holder read.
    pub last_tsc: AtomicU64,
    /// Linux's `max_warp`: the largest warp seen in this run, by either CPU.
    pub max_warp: AtomicU64,
    _rest0: [u64; 2],
    /// The AP whose turn it is (0 before the first: APs are 1..total).
    pub turn: AtomicU32,
    /// The last AP that has finished (0 before the first).
    pub finished: AtomicU32,
    /// The run's `nr_warps`, from the source to the target.
    pub report_warps: AtomicU32,
    /// The run's `random_warps`, from the source to the target.
    pub report_random_warps: AtomicU32,
    /// The source's largest warp of the run, from the source to the target.
    pub report_source_max_warp: AtomicU64,
    /// The run's final `max_warp`, from the source to the target.
    pub report_max_warp: AtomicU64,
    /// The target's largest warp of the run, from the target to the source.
    pub report_target_max_warp: AtomicU64,
    _rest1: [u64; 3],
}

/// Size of [`LinuxShared`]: two cache lines.
pub const LINUX_SHARED_SIZE: usize = 128;
const _: () = assert!(core::mem::size_of::<LinuxShared>() == LINUX_SHARED_SIZE);
const _: () = assert!(core::mem::align_of::<LinuxShared>() == 64);
const _: () = assert!(core::mem::offset_of!(LinuxShared, lock_next) == 0);
const _: () = assert!(core::mem::offset_of!(LinuxShared, lock_owner) == 4);
const _: () = assert!(core::mem::offset_of!(LinuxShared, start_count) == 8);
const _: () = assert!(core::mem::offset_of!(LinuxShared, stop_count) == 12);
const _: () = assert!(core::mem::offset_of!(LinuxShared, test_runs) == 16);
const _: () = assert!(core::mem::offset_of!(LinuxShared, nr_warps) == 20);
const _: () = assert!(core::mem::offset_of!(LinuxShared, random_warps) == 24);
const _: () = assert!(core::mem::offset_of!(LinuxShared, last_tsc) == 32);
const _: () = assert!(core::mem::offset_of!(LinuxShared, max_warp) == 40);
const _: () = assert!(core::mem::offset_of!(LinuxShared, turn) == 64);
const _: () = assert!(core::mem::offset_of!(LinuxShared, finished) == 68);
const _: () = assert!(core::mem::offset_of!(LinuxShared, report_warps) == 72);
const _: () = assert!(core::mem::offset_of!(LinuxShared, report_random_warps) == 76);
const _: () = assert!(core::mem::offset_of!(LinuxShared, report_source_max_warp) == 80);
const _: () = assert!(core::mem::offset_of!(LinuxShared, report_max_warp) == 88);
const _: () = assert!(core::mem::offset_of!(LinuxShared, report_target_max_warp) == 96);

impl LinuxShared {
    /// A fresh, all-zero state.
    pub const fn new() -> LinuxShared {
        LinuxShared {
            lock_next: AtomicU32::new(0),
            lock_owner: AtomicU32::new(0),
            start_count: AtomicU32::new(0),
            stop_count: AtomicU32::new(0),
            test_runs: AtomicU32::new(0),
            nr_warps: AtomicU32::new(0),
            random_warps: AtomicU32::new(0),
            _pad0: 0,
            last_tsc: AtomicU64::new(0),
            max_warp: AtomicU64::new(0),
            _rest0: [0; 2],
            turn: AtomicU32::new(0),
            finished: AtomicU32::new(0),
            report_warps: AtomicU32::new(0),
            report_random_warps: AtomicU32::new(0),
            report_source_max_warp: AtomicU64::new(0),
            report_max_warp: AtomicU64::new(0),
            report_target_max_warp: AtomicU64::new(0),
            _rest1: [0; 3],
        }
    }

    /// Takes the ticket lock; returns the ticket for [`LinuxShared::unlock`].
    #[inline(always)]
    fn lock<C: Cpu>(&self, ops: &mut C) -> u32 {
        let ticket = self.lock_next.fetch_add(1, Ordering::Relaxed);
        while self.lock_owner.load(Ordering::Acquire) != ticket {
            ops.relax();
        }
        ticket
    }

    /// Releases the ticket lock taken with `ticket`.
    #[inline(always)]
    fn unlock(&self, ticket: u32) {
        self.lock_owner
            .store(ticket.wrapping_add(1), Ordering::Release);
    }
}

/// How a pair ended, as [`LinuxApResult::state`] holds it.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinuxState {
    /// Not tested (yet).
    NotRun = 0,
    /// The last run saw no warp: synchronised after [`LinuxApResult::runs`]
    /// runs.
    Synchronised = 1,
    /// Warps persisted through the last run, or were random: Linux marks the
    /// TSC unstable ("Measured %lld cycles TSC warp between CPUs, turning off
    /// TSC clock.").
    Unstable = 2,
}

impl LinuxState {
    /// Decodes a raw state, `None` for anything unknown.
    pub const fn from_raw(raw: u32) -> Option<LinuxState> {
        match raw {
            0 => Some(LinuxState::NotRun),
            1 => Some(LinuxState::Synchronised),
            2 => Some(LinuxState::Unstable),
            _ => None,
        }
    }
}

/// What one run of `check_tsc_warp()` on a source/target pair measured, in TSC
/// cycles. A warp is a backwards step `prev - now > 0` between the TSC the
/// other CPU stored under the lock and this CPU's own read right after.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinuxRun {
    /// The largest warp the source saw (0: none).
    pub source_max_warp: u64,
    /// The largest warp the target saw (0: none).
    pub target_max_warp: u64,
    /// Linux's `max_warp` at the end of the run: the larger of the two.
    pub max_warp: u64,
    /// `max_warp` as the target read it right after its own loop (Linux's
    /// `gbl_max_warp`), the base of a `-max_warp` compensation. Can be below
    /// `max_warp` when the source saw a warp after the target had finished.
    pub target_read_max_warp: u64,
    /// Linux's `nr_warps`: warps seen by either CPU.
    pub warps: u32,
    /// Linux's `random_warps`: warps seen by one CPU after the other had seen
    /// one; any makes the pair unstable at once.
    pub random_warps: u32,
}

const _: () = assert!(core::mem::size_of::<LinuxRun>() == 40);
const _: () = assert!(core::mem::offset_of!(LinuxRun, source_max_warp) == 0);
const _: () = assert!(core::mem::offset_of!(LinuxRun, target_max_warp) == 8);
const _: () = assert!(core::mem::offset_of!(LinuxRun, max_warp) == 16);
const _: () = assert!(core::mem::offset_of!(LinuxRun, target_read_max_warp) == 24);
const _: () = assert!(core::mem::offset_of!(LinuxRun, warps) == 32);
const _: () = assert!(core::mem::offset_of!(LinuxRun, random_warps) == 36);

/// The result of one source/target pair, as the target records it (see
/// [`check_tsc_sync_target`]); plain integers, so the guest can copy it into
/// guest memory for the host.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinuxApResult {
    /// The AP (target) index.
    pub ap: u32,
    /// A [`LinuxState`] (raw).
    pub state: u32,
    /// Runs done (1..=[`MAX_RUNS`]); `run[..runs]` are valid.
    pub runs: u32,
    /// TSC_ADJUST writes done (0..=[`MAX_COMPENSATIONS`]); `compensation[..n]`
    /// and `tsc_adjust_written[..n]` are valid.
    pub compensations: u32,
    /// The length of every run's window, in TSC cycles.
    pub window_cycles: u64,
    /// IA32_TSC_ADJUST as read before the first compensation (Linux's
    /// `adjusted` before it); 0 when nothing was compensated (not read then).
    pub tsc_adjust_initial: u64,
    /// Every run's measurements.
    pub run: [LinuxRun; MAX_RUNS],
    /// Linux's `cur` of every compensation: the TSC_ADJUST (and so TSC) change
    /// written after run k, negative when the target was ahead.
    pub compensation: [i64; MAX_COMPENSATIONS],
    /// The IA32_TSC_ADJUST value written after run k: `tsc_adjust_initial`
    /// plus the compensations up to k (wrapping).
    pub tsc_adjust_written: [u64; MAX_COMPENSATIONS],
}

const _: () = assert!(core::mem::size_of::<LinuxApResult>() == 184);
const _: () = assert!(core::mem::offset_of!(LinuxApResult, window_cycles) == 16);
const _: () = assert!(core::mem::offset_of!(LinuxApResult, tsc_adjust_initial) == 24);
const _: () = assert!(core::mem::offset_of!(LinuxApResult, run) == 32);
const _: () = assert!(core::mem::offset_of!(LinuxApResult, compensation) == 152);
const _: () = assert!(core::mem::offset_of!(LinuxApResult, tsc_adjust_written) == 168);

impl LinuxApResult {
    /// The decoded [`LinuxApResult::state`].
    pub const fn state(&self) -> Option<LinuxState> {
        LinuxState::from_raw(self.state)
    }

    /// `Some(k)` when the pair was synchronised after run k (1-based).
    pub const fn synchronised_after(&self) -> Option<u32> {
        if self.state == LinuxState::Synchronised as u32 {
            Some(self.runs)
        } else {
            None
        }
    }

    /// Whether any run saw random warps.
    pub fn random(&self) -> bool {
        self.run.iter().any(|r| r.random_warps != 0)
    }

    /// Copies this result to `dst` (e.g. guest memory the host reads) with
    /// one volatile 8-byte store per word. A plain copy of the whole struct
    /// may be compiled into SSE moves, which the guest must not contain.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size_of::<LinuxApResult>()` bytes
    /// and 8-byte aligned.
    pub unsafe fn write_volatile_to(&self, dst: *mut LinuxApResult) {
        // SAFETY: `LinuxApResult` is `repr(C)`, 8-byte aligned, a multiple
        // of 8 bytes long and has no padding (checked below), so it reads as
        // initialised u64 words; the caller vouches for `dst`.
        unsafe { copy_words_volatile(self, dst) }
    }
}

const _: () = assert!(core::mem::align_of::<LinuxApResult>() == 8);
// No padding: every field starts where the previous one ends, the last one
// ends at the end.
const _: () = assert!(core::mem::offset_of!(LinuxApResult, ap) == 0);
const _: () = assert!(core::mem::offset_of!(LinuxApResult, state) == 4);
const _: () = assert!(core::mem::offset_of!(LinuxApResult, runs) == 8);
const _: () = assert!(core::mem::offset_of!(LinuxApResult, compensations) == 12);
const _: () = assert!(
    core::mem::offset_of!(LinuxApResult, tsc_adjust_written) + 8 * MAX_COMPENSATIONS
        == core::mem::size_of::<LinuxApResult>()
);

/// What CPU 0 (the source) returns from [`linux_tsc_sync`]: a summary over
/// every AP. Plain integers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinuxSummary {
    /// APs tested (`total - 1`).
    pub aps: u32,
    /// APs that ended synchronised.
    pub synchronised: u32,
    /// APs that ended unstable.
    pub unstable: u32,
    /// APs whose runs saw random warps.
    pub random: u32,
    /// Runs over all APs.
    pub runs: u32,
    /// Compensations (TSC_ADJUST writes) over all APs.
    pub compensations: u32,
    /// APs synchronised on their first run (no warp at all).
    pub clean_first_run: u32,
    /// The first AP that ended unstable (0: none).
    pub first_unstable_ap: u32,
    /// The largest warp of any run of any AP (Linux prints it when it gives
    /// up).
    pub max_warp: u64,
}

const _: () = assert!(core::mem::size_of::<LinuxSummary>() == 40);
const _: () = assert!(core::mem::align_of::<LinuxSummary>() == 8);
// No padding: eight u32 and one u64.
const _: () = assert!(core::mem::offset_of!(LinuxSummary, aps) == 0);
const _: () = assert!(core::mem::offset_of!(LinuxSummary, compensations) == 20);
const _: () = assert!(core::mem::offset_of!(LinuxSummary, first_unstable_ap) == 28);
const _: () = assert!(core::mem::offset_of!(LinuxSummary, max_warp) == 32);

impl LinuxSummary {
    /// Copies this summary to `dst` with one volatile 8-byte store per word
    /// (see [`LinuxApResult::write_volatile_to`]).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size_of::<LinuxSummary>()` bytes
    /// and 8-byte aligned.
    pub unsafe fn write_volatile_to(&self, dst: *mut LinuxSummary) {
        // SAFETY: `LinuxSummary` is `repr(C)`, 8-byte aligned, 40 bytes, no
        // padding (checked above); the caller vouches for `dst`.
        unsafe { copy_words_volatile(self, dst) }
    }
}

/// Copies `*src` to `dst` one u64 at a time, each store volatile.
///
/// # Safety
/// `T` must be 8-byte aligned, a multiple of 8 bytes long and without
/// padding; `dst` must be valid for writes of a `T` and 8-byte aligned.
#[inline(always)]
unsafe fn copy_words_volatile<T>(src: &T, dst: *mut T) {
    let words = core::mem::size_of::<T>() / 8;
    let from = core::ptr::from_ref(src).cast::<u64>();
    let to = dst.cast::<u64>();
    let mut k = 0;
    while k < words {
        // SAFETY: `k < words` keeps both accesses inside their `T`; the
        // caller guarantees alignment, initialised words and a writable
        // `dst`.
        unsafe { core::ptr::write_volatile(to.add(k), core::ptr::read(from.add(k))) };
        k += 1;
    }
}

/// What one CPU returns from [`linux_tsc_sync`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxSyncResult {
    /// CPU 0: the summary over every AP.
    Source(LinuxSummary),
    /// An AP: its own pair's result.
    Target(LinuxApResult),
}

/// The parameters of [`linux_tsc_sync`]; every CPU must pass the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinuxParams {
    /// Linux's `test_runs`: 3 when the CPUs have TSC_ADJUST, else 1 (values
    /// outside `1..=MAX_RUNS` are clamped). With 1 the target never touches
    /// TSC_ADJUST.
    pub test_runs: u32,
    /// The window, in TSC cycles, for an AP that is the first CPU of its
    /// package (Linux: 20 ms).
    pub package_first_window_cycles: u64,
    /// The window, in TSC cycles, for an AP whose package already has a CPU
    /// online (Linux: 2 ms).
    pub window_cycles: u64,
    /// CPUs per package, numbered contiguously from CPU 0; 0 for one package
    /// holding every CPU.
    pub cpus_per_package: u32,
}

impl LinuxParams {
    /// Linux's choices: 3 runs with TSC_ADJUST, else 1; the windows as given
    /// (the guest computes 20 ms and 2 ms from the TSC frequency); one
    /// package.
    pub const fn new(
        has_tsc_adjust: bool,
        package_first_window_cycles: u64,
        window_cycles: u64,
    ) -> LinuxParams {
        LinuxParams {
            test_runs: if has_tsc_adjust { MAX_RUNS as u32 } else { 1 },
            package_first_window_cycles,
            window_cycles,
            cpus_per_package: 0,
        }
    }

    /// The window of AP `ap`'s runs (Linux's `loop_timeout()`: the long one
    /// when no other CPU of its package is online yet, which with contiguous
    /// packages brought up in order is when `ap` starts a package).
    pub const fn window_for(&self, ap: u32) -> u64 {
        if matches!(ap.checked_rem(self.cpus_per_package), Some(0)) {
            self.package_first_window_cycles
        } else {
            self.window_cycles
        }
    }
}

/// `test_runs` clamped to `1..=MAX_RUNS`.
const fn clamp_runs(test_runs: u32) -> u32 {
    if test_runs == 0 {
        1
    } else if test_runs > MAX_RUNS as u32 {
        MAX_RUNS as u32
    } else {
        test_runs
    }
}

/// The target's compensation after a run with warps (Linux's `cur_max_warp`):
/// its own largest warp when it saw one (it is behind: move it forward), else
/// minus the largest warp the source saw (it is ahead: move it back).
pub const fn compensation(target_max_warp: u64, max_warp: u64) -> i64 {
    if target_max_warp != 0 {
        target_max_warp as i64
    } else {
        (max_warp as i64).wrapping_neg()
    }
}

/// Linux's `check_tsc_warp()` on one CPU of the pair: lock-ordered TSC reads
/// until `window_cycles` have passed on this CPU's TSC (or [`LOOP_LIMIT`]
/// iterations, checked every 8). Returns this CPU's largest warp (0: none).
fn check_tsc_warp<C: Cpu>(s: &LinuxShared, window_cycles: u64, ops: &mut C) -> u64 {
    let start = ops.rdtsc_ordered();
    let end = start.saturating_add(window_cycles);
    let mut own_max_warp: u64 = 0;
    // `nr_warps` right after this CPU's last warp: a different value at its
    // next warp means the other CPU warped in between.
    let mut cur_warps: u32 = 0;
    let mut i: u32 = 0;
    loop {
        // Read the TSC under the lock, after the previous holder's read.
        let ticket = s.lock(ops);
        let prev = s.last_tsc.load(Ordering::Relaxed);
        let now = ops.rdtsc_ordered();
        s.last_tsc.store(now, Ordering::Relaxed);
        s.unlock(ticket);

        // Every 8 iterations: done yet (or the safety exit)? Be nice.
        if i & 7 == 0 {
            if now > end || i > LOOP_LIMIT {
                break;
            }
            ops.relax();
        }

        if prev > now {
            let warp = prev - now;
            own_max_warp = own_max_warp.max(warp);
            let ticket = s.lock(ops);
            if warp > s.max_warp.load(Ordering::Relaxed) {
                s.max_warp.store(warp, Ordering::Relaxed);
            }
            let nr = s.nr_warps.load(Ordering::Relaxed);
            if cur_warps != nr {
                let random = s.random_warps.load(Ordering::Relaxed);
                s.random_warps
                    .store(random.wrapping_add(1), Ordering::Relaxed);
            }
            cur_warps = nr.wrapping_add(1);
            s.nr_warps.store(cur_warps, Ordering::Relaxed);
            s.unlock(ticket);
        }
        i = i.wrapping_add(1);
    }
    own_max_warp
}

/// The runs of one pair, in three locals rather than an array: with an
/// index known only at run time an array would live in memory, zero-filled
/// up front, and the compiler fills memory with SSE stores, which the guest
/// must not contain.
#[derive(Clone, Copy, Default)]
struct Runs {
    r0: LinuxRun,
    r1: LinuxRun,
    r2: LinuxRun,
}

impl Runs {
    /// Records run `k` (0-based); a run past the last slot overwrites it.
    #[inline(always)]
    fn set(&mut self, k: u32, m: LinuxRun) {
        match k {
            0 => self.r0 = m,
            1 => self.r1 = m,
            _ => self.r2 = m,
        }
    }

    #[inline(always)]
    fn all(self) -> [LinuxRun; MAX_RUNS] {
        [self.r0, self.r1, self.r2]
    }
}

/// Linux's `check_tsc_sync_source()`: CPU 0's side of the pair with AP `ap`,
/// all runs. `test_runs` as in [`LinuxParams::test_runs`]; `window_cycles`
/// must be the target's.
///
/// Returns the pair's result as the source sees it: the runs, the state, how
/// many compensations the target made, but not their values nor the
/// TSC_ADJUST values (`compensation` and `tsc_adjust_*` are 0; the target's
/// result has them), and `target_read_max_warp` 0.
pub fn check_tsc_sync_source<C: Cpu>(
    s: &LinuxShared,
    ap: u32,
    window_cycles: u64,
    test_runs: u32,
    ops: &mut C,
) -> LinuxApResult {
    s.test_runs.store(clamp_runs(test_runs), Ordering::Relaxed);

    let mut runs = Runs::default();
    let mut run: u32 = 0;
    let mut compensations: u32 = 0;
    let state = loop {
        ops.iteration_start(run);
        // Wait for the target to arrive, then let it start too.
        while s.start_count.load(Ordering::Acquire) != 1 {
            ops.relax();
        }
        s.start_count.fetch_add(1, Ordering::AcqRel);

        let source_max_warp = check_tsc_warp(s, window_cycles, ops);

        while s.stop_count.load(Ordering::Acquire) != 1 {
            ops.relax();
        }

        let m = LinuxRun {
            source_max_warp,
            target_max_warp: s.report_target_max_warp.load(Ordering::Relaxed),
            max_warp: s.max_warp.load(Ordering::Relaxed),
            target_read_max_warp: 0,
            warps: s.nr_warps.load(Ordering::Relaxed),
            random_warps: s.random_warps.load(Ordering::Relaxed),
        };
        runs.set(run, m);
        run += 1;

        // Success ends the pair; failure uses up a run, and random warps
        // end it at once.
        let state = if m.warps == 0 {
            s.test_runs.store(0, Ordering::Relaxed);
            LinuxState::Synchronised
        } else {
            let left = s.test_runs.fetch_sub(1, Ordering::Relaxed).wrapping_sub(1);
            if left == 0 || m.random_warps != 0 {
                s.test_runs.store(0, Ordering::Relaxed);
                LinuxState::Unstable
            } else {
                // The target compensates and tries again.
                compensations += 1;
                LinuxState::NotRun
            }
        };

        // Tell the target what this run measured (Linux prints it).
        s.report_source_max_warp
            .store(m.source_max_warp, Ordering::Relaxed);
        s.report_max_warp.store(m.max_warp, Ordering::Relaxed);
        s.report_warps.store(m.warps, Ordering::Relaxed);
        s.report_random_warps
            .store(m.random_warps, Ordering::Relaxed);

        // Reset for the next run (or the next AP), then release the target.
        s.start_count.store(0, Ordering::Relaxed);
        s.random_warps.store(0, Ordering::Relaxed);
        s.nr_warps.store(0, Ordering::Relaxed);
        s.max_warp.store(0, Ordering::Relaxed);
        s.last_tsc.store(0, Ordering::Relaxed);
        s.stop_count.fetch_add(1, Ordering::AcqRel);

        if s.test_runs.load(Ordering::Relaxed) == 0 {
            break state;
        }
    };

    LinuxApResult {
        ap,
        state: state as u32,
        runs: run,
        compensations,
        window_cycles,
        tsc_adjust_initial: 0,
        run: runs.all(),
        compensation: [0; MAX_COMPENSATIONS],
        tsc_adjust_written: [0; MAX_COMPENSATIONS],
    }
}

/// Linux's `check_tsc_sync_target()`: AP `cpu`'s side of the pair with CPU 0,
/// all runs, compensating its TSC_ADJUST between runs when the source says a
/// run follows. `window_cycles` must be the source's.
///
/// Returns the pair's full result (see [`LinuxApResult`]).
pub fn check_tsc_sync_target<C: Cpu + TscAdjust>(
    s: &LinuxShared,
    cpu: u32,
    window_cycles: u64,
    ops: &mut C,
) -> LinuxApResult {
    let mut runs = Runs::default();
    let mut run: u32 = 0;
    // Linux's `cur->adjusted`, once read.
    let mut adjusted: Option<u64> = None;
    let mut tsc_adjust_initial: u64 = 0;
    let mut compensations: u32 = 0;
    let (mut cur0, mut cur1): (i64, i64) = (0, 0);
    let (mut written0, mut written1): (u64, u64) = (0, 0);
    let state = loop {
        ops.iteration_start(run);
        // Register, then wait for the source to start the measurement.
        s.start_count.fetch_add(1, Ordering::AcqRel);
        while s.start_count.load(Ordering::Acquire) != 2 {
            ops.relax();
        }

        let target_max_warp = check_tsc_warp(s, window_cycles, ops);
        // Linux's `gbl_max_warp`: read right away, before the source resets
        // it (the source may still be in its loop).
        let target_read_max_warp = s.max_warp.load(Ordering::Relaxed);

        s.report_target_max_warp
            .store(target_max_warp, Ordering::Relaxed);
        s.stop_count.fetch_add(1, Ordering::AcqRel);
        // Wait for the source's verdict.
        while s.stop_count.load(Ordering::Acquire) != 2 {
            ops.relax();
        }
        s.stop_count.store(0, Ordering::Relaxed);

        let m = LinuxRun {
            source_max_warp: s.report_source_max_warp.load(Ordering::Relaxed),
            target_max_warp,
            max_warp: s.report_max_warp.load(Ordering::Relaxed),
            target_read_max_warp,
            warps: s.report_warps.load(Ordering::Relaxed),
            random_warps: s.report_random_warps.load(Ordering::Relaxed),
        };
        runs.set(run, m);
        run += 1;

        // No run left: the test either passed or failed for good.
        if s.test_runs.load(Ordering::Relaxed) == 0 {
            break if m.warps == 0 {
                LinuxState::Synchronised
            } else {
                LinuxState::Unstable
            };
        }

        // Another run follows: move this CPU's TSC by the warp measured.
        let cur = compensation(target_max_warp, target_read_max_warp);
        let base = match adjusted {
            Some(v) => v,
            None => {
                let v = ops.read_tsc_adjust();
                tsc_adjust_initial = v;
                v
            }
        };
        let value = base.wrapping_add(cur as u64);
        ops.write_tsc_adjust(value);
        adjusted = Some(value);
        if compensations == 0 {
            (cur0, written0) = (cur, value);
        } else {
            (cur1, written1) = (cur, value);
        }
        compensations += 1;
    };

    LinuxApResult {
        ap: cpu,
        state: state as u32,
        runs: run,
        compensations,
        window_cycles,
        tsc_adjust_initial,
        run: runs.all(),
        compensation: [cur0, cur1],
        tsc_adjust_written: [written0, written1],
    }
}

/// Linux's TSC sync check for every AP, as at bring-up: CPU 0 (the source)
/// pairs with AP 1, then AP 2, ..., each pair running [`check_tsc_sync_source`]
/// against [`check_tsc_sync_target`] with the AP's window
/// ([`LinuxParams::window_for`]); the other APs wait their turn.
///
/// All `total` CPUs must call this with the same zeroed `shared` state (zeroed
/// once: the protocol resets itself between runs and APs) and the same
/// `params`. An AP returns its own [`LinuxSyncResult::Target`] as soon as its
/// pair is done; CPU 0 returns [`LinuxSyncResult::Source`] after the last AP.
/// With `total == 1` CPU 0 returns at once with an empty summary. `cpu` must be
/// below `total`, else the call spins forever.
///
/// APs are strictly serialised, as Linux's CPU hotplug serialises bring-up:
/// CPU 0 moves on to AP k+1 only once AP k has left the protocol.
pub fn linux_tsc_sync<C: Cpu + TscAdjust>(
    shared: &LinuxShared,
    cpu: u32,
    total: u32,
    params: LinuxParams,
    ops: &mut C,
) -> LinuxSyncResult {
    let s = shared;
    if cpu != 0 {
        while s.turn.load(Ordering::Acquire) != cpu {
            ops.relax();
        }
        let out = check_tsc_sync_target(s, cpu, params.window_for(cpu), ops);
        s.finished.store(cpu, Ordering::Release);
        return LinuxSyncResult::Target(out);
    }

    // Scalars, not a zero-filled struct in memory (see `Runs`).
    let (mut aps, mut synchronised, mut unstable, mut random) = (0u32, 0u32, 0u32, 0u32);
    let (mut runs, mut compensations, mut clean_first_run) = (0u32, 0u32, 0u32);
    let mut first_unstable_ap: u32 = 0;
    let mut max_warp: u64 = 0;
    for ap in 1..total {
        s.turn.store(ap, Ordering::Release);
        let r = check_tsc_sync_source(s, ap, params.window_for(ap), params.test_runs, ops);
        aps += 1;
        runs += r.runs;
        compensations += r.compensations;
        if r.state == LinuxState::Synchronised as u32 {
            synchronised += 1;
            if r.runs == 1 {
                clean_first_run += 1;
            }
        } else {
            unstable += 1;
            if first_unstable_ap == 0 {
                first_unstable_ap = ap;
            }
        }
        let [a, b, c] = r.run;
        if (a.random_warps | b.random_warps | c.random_warps) != 0 {
            random += 1;
        }
        max_warp = max_warp.max(a.max_warp).max(b.max_warp).max(c.max_warp);
        // Bring-up is serial: the next AP only once this one is out.
        while s.finished.load(Ordering::Acquire) != ap {
            ops.relax();
        }
    }
    LinuxSyncResult::Source(LinuxSummary {
        aps,
        synchronised,
        unstable,
        random,
        runs,
        compensations,
        clean_first_run,
        first_unstable_ap,
        max_warp,
    })
}
