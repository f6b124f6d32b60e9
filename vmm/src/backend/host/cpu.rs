//! One host thread as the CPU the algorithms run on: real `lfence; rdtsc`,
//! real `prefetcht0`, `pause`, and a TSC that can be "written" without
//! touching the hardware.
//!
//! The thread's TSC is its CPU's TSC plus a per-thread offset (wrapping), as a
//! vCPU's is under KVM. The two writes behave as KVM makes them behave for a
//! guest:
//! - `write_tsc(v)`: the offset becomes `v - rdtsc_now`, so the thread's TSC
//!   reads `v` at that instant and runs on from there; the write's delta
//!   (`v` minus the thread's TSC just before) is added to its TSC_ADJUST.
//! - `write_tsc_adjust(v)`: the offset moves by `v` minus the old TSC_ADJUST.
//!
//! So the offset and TSC_ADJUST always move together, exactly, and the
//! algorithms (Xen's writes, Linux's compensations) run unchanged.
//!
//! `relax()` is where a spin can be stopped: it unwinds with [`Aborted`]
//! (without the panic hook, so without a message) when the run is being
//! aborted, its deadline has passed or SIGINT/SIGTERM asked to stop; the
//! thread's loop catches it. When threads outnumber host CPUs it also yields
//! in every spin, and otherwise after a long spin within one iteration, so a
//! thread waiting for a descheduled one gives its CPU up.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tsc_sync::{Cpu, TscAdjust};

use crate::stop;
use crate::tsc::host_rdtsc;

/// The payload a thread unwinds with when its round is aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aborted;

/// How often (in `relax()` calls) a spin looks at the clock and the stop
/// request when it does not yield every time.
const CHECK_EVERY: u32 = 1024;

/// After this many `relax()` calls in one iteration a thread that does not
/// yield every time yields once: it has spun for a long time (hundreds of
/// microseconds), the thread it waits for has most likely been descheduled.
const YIELD_AFTER: u32 = 8192;

/// What every thread of a run shares with the coordinator for stopping.
#[derive(Debug)]
pub struct StopControl {
    /// Set by whoever aborts first: every spin unwinds at its next `relax()`.
    pub abort: AtomicBool,
    /// The deadline on the host TSC (raw `rdtsc`): the run's, or the
    /// current round's when every round has its own (re-armed between
    /// rounds, while every thread is parked).
    pub deadline_tsc: AtomicU64,
    /// Whether the threads outnumber the host CPUs (yield in every spin).
    pub overcommitted: bool,
}

impl StopControl {
    /// Whether the run must stop now; sets [`StopControl::abort`] if so.
    pub fn must_stop(&self) -> bool {
        if self.abort.load(Ordering::Relaxed) {
            return true;
        }
        if stop::requested().is_some() || host_rdtsc() >= self.deadline_tsc.load(Ordering::Relaxed)
        {
            self.abort.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// One thread's CPU.
#[derive(Debug)]
pub struct ThreadCpu<'a> {
    /// TSC = hardware TSC + offset (wrapping).
    offset: u64,
    /// The simulated IA32_TSC_ADJUST.
    tsc_adjust: u64,
    /// The round running (for the progress word).
    round: u32,
    /// `relax()` calls in the current iteration.
    spins: u32,
    stop: &'a StopControl,
    progress: &'a AtomicU64,
}

impl<'a> ThreadCpu<'a> {
    /// A thread whose TSC starts `offset` cycles from its CPU's, with
    /// TSC_ADJUST 0, publishing its progress to `progress`.
    pub fn new(offset: u64, stop: &'a StopControl, progress: &'a AtomicU64) -> ThreadCpu<'a> {
        ThreadCpu {
            offset,
            tsc_adjust: 0,
            round: 0,
            spins: 0,
            stop,
            progress,
        }
    }

    /// A thread whose TSC is `offset` cycles from its CPU's and whose
    /// TSC_ADJUST is `tsc_adjust`: one that ran rounds before (the
    /// coordinator's thread 0, whose state is kept between its rounds).
    pub fn resumed(
        offset: u64,
        tsc_adjust: u64,
        stop: &'a StopControl,
        progress: &'a AtomicU64,
    ) -> ThreadCpu<'a> {
        ThreadCpu {
            tsc_adjust,
            ..ThreadCpu::new(offset, stop, progress)
        }
    }

    /// The thread's TSC offset from its CPU's TSC.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The simulated IA32_TSC_ADJUST.
    pub fn tsc_adjust(&self) -> u64 {
        self.tsc_adjust
    }

    /// Sets the round the next progress words name.
    pub fn set_round(&mut self, round: u32) {
        self.round = round;
    }

    /// Publishes a progress word ([`tsc_contract::progress_word`]).
    pub fn publish(&self, word: u64) {
        self.progress.store(word, Ordering::Relaxed);
    }
}

impl Cpu for ThreadCpu<'_> {
    #[inline(always)]
    fn rdtsc_ordered(&mut self) -> u64 {
        host_rdtsc().wrapping_add(self.offset)
    }

    #[inline(always)]
    fn write_tsc(&mut self, value: u64) {
        let now = host_rdtsc();
        let delta = value.wrapping_sub(now.wrapping_add(self.offset));
        self.tsc_adjust = self.tsc_adjust.wrapping_add(delta);
        self.offset = value.wrapping_sub(now);
    }

    #[inline(always)]
    fn relax(&mut self) {
        core::hint::spin_loop();
        if self.stop.abort.load(Ordering::Relaxed) {
            std::panic::resume_unwind(Box::new(Aborted));
        }
        self.spins = self.spins.wrapping_add(1);
        let overcommitted = self.stop.overcommitted;
        if (overcommitted || self.spins % CHECK_EVERY == 0) && self.stop.must_stop() {
            std::panic::resume_unwind(Box::new(Aborted));
        }
        if overcommitted || self.spins % YIELD_AFTER == 0 {
            std::thread::yield_now();
        }
    }

    #[inline(always)]
    fn iteration_start(&mut self, iteration: u32) {
        self.spins = 0;
        self.publish(tsc_contract::progress_word(self.round, iteration));
    }

    #[inline(always)]
    fn prefetch(&mut self, addr: *const u8) {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetcht0 is part of SSE, which every x86-64 CPU has; it
        // is a hint that never faults and has no architectural effect,
        // whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(addr.cast()) };
    }
}

impl TscAdjust for ThreadCpu<'_> {
    fn read_tsc_adjust(&mut self) -> u64 {
        self.tsc_adjust
    }

    fn write_tsc_adjust(&mut self, value: u64) {
        self.offset = self
            .offset
            .wrapping_add(value.wrapping_sub(self.tsc_adjust));
        self.tsc_adjust = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    fn control(overcommitted: bool) -> StopControl {
        StopControl {
            abort: AtomicBool::new(false),
            deadline_tsc: AtomicU64::new(u64::MAX),
            overcommitted,
        }
    }

    fn signed(a: u64, b: u64) -> i64 {
        a.wrapping_sub(b) as i64
    }

    /// A TSC write moves the offset by exactly what it adds to TSC_ADJUST,
    /// and the thread's TSC reads the value written plus the time since.
    #[test]
    fn a_tsc_write_moves_offset_and_tsc_adjust_together() {
        let (stop, progress) = (control(false), AtomicU64::new(0));
        let mut cpu = ThreadCpu::new(12_345, &stop, &progress);
        let before = cpu.rdtsc_ordered();
        let value = before.wrapping_sub(1 << 30);
        cpu.write_tsc(value);
        let raw_after = host_rdtsc();
        let after = cpu.rdtsc_ordered();
        assert_eq!(
            signed(cpu.offset(), 12_345),
            cpu.tsc_adjust() as i64,
            "offset delta == TSC_ADJUST delta"
        );
        assert!(signed(after, value) >= 0, "reads on from the value written");
        assert!(
            signed(after, value) < signed(before, value),
            "the TSC went back by about what was asked"
        );
        // The delta is the value written minus the thread's TSC at the
        // write, which lies between `before` and the old timeline's TSC at
        // `raw_after`.
        let d = cpu.tsc_adjust() as i64;
        assert!(d <= signed(value, before), "{d}");
        assert!(d >= signed(value, raw_after.wrapping_add(12_345)), "{d}");
    }

    /// A TSC_ADJUST write moves the TSC by the change, exactly (as KVM).
    #[test]
    fn a_tsc_adjust_write_moves_the_offset_by_the_change() {
        let (stop, progress) = (control(false), AtomicU64::new(0));
        let mut cpu = ThreadCpu::new(0, &stop, &progress);
        cpu.write_tsc_adjust(1_000);
        assert_eq!((cpu.offset(), cpu.read_tsc_adjust()), (1_000, 1_000));
        cpu.write_tsc_adjust((-500i64) as u64);
        assert_eq!(cpu.offset() as i64, -500);
        assert_eq!(cpu.read_tsc_adjust() as i64, -500);
    }

    /// A spin unwinds with [`Aborted`] once the run aborts, and past the
    /// deadline, instead of hanging.
    #[test]
    fn relax_unwinds_when_aborted_or_late() {
        let progress = AtomicU64::new(0);
        let stop = control(false);
        stop.abort.store(true, Ordering::Relaxed);
        let mut cpu = ThreadCpu::new(0, &stop, &progress);
        let r = catch_unwind(AssertUnwindSafe(|| loop {
            cpu.relax();
        }));
        assert!(r.is_err_and(|p| p.is::<Aborted>()));
        for overcommitted in [false, true] {
            let late = StopControl {
                deadline_tsc: AtomicU64::new(0),
                ..control(overcommitted)
            };
            let mut cpu = ThreadCpu::new(0, &late, &progress);
            let r = catch_unwind(AssertUnwindSafe(|| loop {
                cpu.relax();
            }));
            assert!(r.is_err_and(|p| p.is::<Aborted>()));
            assert!(late.abort.load(Ordering::Relaxed), "the others stop too");
        }
    }

    #[test]
    fn iterations_publish_progress() {
        let (stop, progress) = (control(false), AtomicU64::new(0));
        let mut cpu = ThreadCpu::new(0, &stop, &progress);
        cpu.set_round(7);
        cpu.iteration_start(3);
        assert_eq!(
            progress.load(Ordering::Relaxed),
            tsc_contract::progress_word(7, 3)
        );
        let x = 0u64;
        cpu.prefetch(core::ptr::from_ref(&x).cast());
    }
}
