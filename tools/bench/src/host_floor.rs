//! The host backend's floor: the same `tsc-sync` variant code on N pinned
//! threads, rounds back to back with nothing else in between — no
//! coordinator, no readback, no analysis, no channels. Each round gets a
//! fresh (all-zero) shared state: two states alternate, and thread 0 clears
//! the next one while the others finish the current round; a spinning
//! sense-reversing barrier ends every round. The CPU is the least a host
//! thread can be: `lfence; rdtsc` plus an offset, a TSC write that sets the
//! offset, `pause`.
//!
//! Thread 0 keeps its exit latency of every round (the seed's metric, the
//! TSC after the loop minus the value written), so the floor can be seen to
//! measure what the tool measures.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tsc_sync::{Cpu, Shared, Variant, XenAlgorithm};

/// `lfence; rdtsc`.
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: lfence and rdtsc have no memory effects and are available on
    // every x86-64 CPU (CR4.TSD is clear for user space on Linux).
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}

/// The least CPU the algorithms run on: the host TSC plus an offset.
struct FloorCpu {
    offset: u64,
}

impl Cpu for FloorCpu {
    #[inline(always)]
    fn rdtsc_ordered(&mut self) -> u64 {
        rdtsc().wrapping_add(self.offset)
    }

    #[inline(always)]
    fn write_tsc(&mut self, value: u64) {
        self.offset = value.wrapping_sub(rdtsc());
    }

    #[inline(always)]
    fn relax(&mut self) {
        core::hint::spin_loop();
    }

    #[inline(always)]
    fn prefetch(&mut self, addr: *const u8) {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetcht0 is a hint: it never faults, whatever the
        // address, and changes no architectural state.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(addr.cast()) };
    }
}

/// A value on a cache line of its own.
#[repr(align(64))]
struct Line<T>(T);

/// A spinning sense-reversing barrier.
struct Barrier {
    count: Line<AtomicU32>,
    sense: Line<AtomicU32>,
}

impl Barrier {
    fn wait(&self, n: u32, local: &mut u32) {
        *local ^= 1;
        if self.count.0.fetch_add(1, Ordering::AcqRel) + 1 == n {
            self.count.0.store(0, Ordering::Relaxed);
            self.sense.0.store(*local, Ordering::Release);
        } else {
            while self.sense.0.load(Ordering::Acquire) != *local {
                core::hint::spin_loop();
            }
        }
    }
}

/// Clears `s` to a fresh calibration state (every field the algorithms
/// use; the rest is padding nobody writes).
fn clear(s: &Shared) {
    s.semaphore.store(0, Ordering::Relaxed);
    s.master_stime.store(0, Ordering::Relaxed);
    s.master_tsc_stamp.store(0, Ordering::Relaxed);
    s.max_tsc_stamp.store(0, Ordering::Relaxed);
    s.own_line.master_tsc_stamp.store(0, Ordering::Relaxed);
    s.own_line.max_tsc_stamp.store(0, Ordering::Relaxed);
}

/// What the floor measured.
#[derive(Clone, Debug)]
pub struct FloorRun {
    /// Rounds per second, first round to last.
    pub rounds_per_s: f64,
    /// The median of thread 0's exit latencies, cycles.
    pub cpu0_exit_median: f64,
    /// Whether every thread could be pinned to a CPU of its own.
    pub pinned: bool,
}

/// Pins the calling thread to `cpu`; whether that worked.
fn pin_self(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: all-zero is the empty cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the call only reads `set`.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: all-zero is the empty cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: writes at most size_of::<cpu_set_t>() bytes into `set`.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Runs `rounds` rounds of `variant` on `threads` pinned threads.
pub fn run(threads: u32, rounds: u32, variant: Variant) -> Result<FloorRun, String> {
    let alg = XenAlgorithm::for_variant(variant).ok_or("the floor runs Xen's variants only")?;
    let cpus = allowed_cpus();
    if (threads as usize) > cpus.len() {
        return Err(format!(
            "{threads} threads need as many CPUs ({} allowed)",
            cpus.len()
        ));
    }
    let states = [Shared::default(), Shared::default()];
    let barrier = Barrier {
        count: Line(AtomicU32::new(0)),
        sense: Line(AtomicU32::new(0)),
    };
    let pinned = AtomicU32::new(0);
    let mut exits = vec![0i64; rounds as usize];
    let mut took = Duration::ZERO;
    std::thread::scope(|s| {
        let (states, barrier, pinned) = (&states, &barrier, &pinned);
        for k in 1..threads {
            let cpu = cpus[k as usize];
            s.spawn(move || {
                pinned.fetch_add(u32::from(pin_self(cpu)), Ordering::Relaxed);
                let (mut sense, mut ops) = (0, FloorCpu { offset: 0 });
                barrier.wait(threads, &mut sense);
                for r in 0..rounds {
                    alg.run(&states[r as usize % 2], k, threads, &mut ops);
                    barrier.wait(threads, &mut sense);
                }
            });
        }
        let (exits, took) = (&mut exits, &mut took);
        s.spawn(move || {
            pinned.fetch_add(u32::from(pin_self(cpus[0])), Ordering::Relaxed);
            let (mut sense, mut ops) = (0, FloorCpu { offset: 0 });
            barrier.wait(threads, &mut sense);
            let start = Instant::now();
            for (r, exit) in exits.iter_mut().enumerate() {
                let out = alg.run(&states[r % 2], 0, threads, &mut ops);
                *exit = out.tsc_after_loop.wrapping_sub(out.written) as i64;
                clear(&states[(r + 1) % 2]);
                barrier.wait(threads, &mut sense);
            }
            *took = start.elapsed();
        });
    });
    exits.sort_unstable();
    let secs = took.as_secs_f64();
    Ok(FloorRun {
        rounds_per_s: if secs > 0.0 {
            f64::from(rounds) / secs
        } else {
            f64::NAN
        },
        cpu0_exit_median: exits.get(exits.len() / 2).map_or(f64::NAN, |&e| e as f64),
        pinned: pinned.load(Ordering::Relaxed) == threads,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The floor runs and every round's shared state starts fresh (the
    /// rendezvous would hang otherwise).
    #[test]
    fn the_floor_runs_rounds() {
        let n = allowed_cpus().len().min(2) as u32;
        let r = run(n, 1_000, Variant::Xen6ca022a1).expect("the floor runs");
        assert!(r.rounds_per_s > 0.0);
    }
}
