//! Which host CPUs the threads may use, and pinning a thread to one
//! (`sched_getaffinity`, `pthread_setaffinity_np`).

use std::io;

/// The CPUs this process may run on (its affinity mask), in increasing
/// order; `[]` when the mask cannot be read.
pub fn allowed_cpus() -> Vec<u32> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most `size_of::<cpu_set_t>()` bytes
    // into `set`, which is valid and writable for the call; pid 0 is this
    // thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads bit `cpu` of `set`, and `cpu` is below
        // CPU_SETSIZE, the number of bits a cpu_set_t holds.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .map(|cpu| cpu as u32)
        .collect()
}

/// Pins the thread `thread` to host CPU `cpu`.
pub fn pin(thread: libc::pthread_t, cpu: u32) -> io::Result<()> {
    let cpu = cpu as usize;
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: as in `allowed_cpus`, all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above); CPU_SET sets one
    // bit of `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `thread` is a live thread of this process (the caller holds
    // its JoinHandle); the call only reads `set`, valid for its size.
    let rc = unsafe {
        libc::pthread_setaffinity_np(thread, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// A thread's affinity mask, saved to be restored (the coordinator's,
/// pinned for a run).
#[derive(Debug)]
pub struct Affinity {
    thread: libc::pthread_t,
    set: libc::cpu_set_t,
}

impl Affinity {
    /// The calling thread's mask (`None` when it cannot be read).
    pub fn of_current() -> Option<Affinity> {
        // SAFETY: pthread_self has no arguments and always succeeds.
        let thread = unsafe { libc::pthread_self() };
        // SAFETY: as in `allowed_cpus`, all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `thread` is the calling thread; the call writes at most
        // `size_of::<cpu_set_t>()` bytes into `set`.
        let rc = unsafe {
            libc::pthread_getaffinity_np(thread, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
        };
        (rc == 0).then_some(Affinity { thread, set })
    }

    /// Gives the thread its saved mask back, when called on that thread
    /// (a `pthread_t` of another thread may have ended; then nothing is
    /// done, with a warning).
    pub fn restore(self) {
        // SAFETY: pthread_self has no arguments and always succeeds;
        // pthread_equal only compares the two values.
        let same = unsafe { libc::pthread_equal(libc::pthread_self(), self.thread) } != 0;
        if !same {
            log::warn!(
                "the host threads ended on another thread: its CPU affinity is left as it is"
            );
            return;
        }
        // SAFETY: `thread` is the calling thread (checked above); the call
        // only reads `set`, valid for its size.
        let rc = unsafe {
            libc::pthread_setaffinity_np(
                self.thread,
                std::mem::size_of::<libc::cpu_set_t>(),
                &self.set,
            )
        };
        if rc != 0 {
            log::warn!("the coordinator's CPU affinity could not be restored (error {rc})");
        }
    }
}

#[cfg(test)]
/// The CPU the calling thread runs on now (`None`: unknown).
pub fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu has no arguments and no memory effects.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// Which CPU each of `threads` threads is pinned to: the first `threads` of
/// `cpus` when there are enough of them, else none (the scheduler places
/// them).
pub fn plan(threads: u32, cpus: &[u32]) -> Vec<Option<u32>> {
    if threads as usize <= cpus.len() {
        cpus.iter()
            .take(threads as usize)
            .copied()
            .map(Some)
            .collect()
    } else {
        vec![None; threads as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::thread::JoinHandleExt;

    #[test]
    fn this_thread_runs_on_an_allowed_cpu() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
        if let Some(c) = current_cpu() {
            assert!(cpus.contains(&c), "CPU {c} not in {cpus:?}");
        }
    }

    /// A pinned thread runs on its CPU (and only there).
    #[test]
    fn a_pinned_thread_runs_where_it_was_pinned() {
        let cpus = allowed_cpus();
        let Some(&last) = cpus.last() else {
            panic!("no CPU allowed")
        };
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            // Wait until pinned, then say where we are.
            let _ = rx.recv();
            std::thread::yield_now();
            current_cpu()
        });
        pin(h.as_pthread_t(), last).expect("pinning works");
        let _ = tx.send(());
        assert_eq!(h.join().ok().flatten(), Some(last));
        assert!(pin(h_dummy(), libc::CPU_SETSIZE as u32).is_err());
    }

    fn h_dummy() -> libc::pthread_t {
        // SAFETY: pthread_self has no arguments and always succeeds.
        unsafe { libc::pthread_self() }
    }

    #[test]
    fn threads_are_pinned_only_when_there_are_enough_cpus() {
        assert_eq!(plan(2, &[0, 1, 3]), vec![Some(0), Some(1)]);
        assert_eq!(plan(3, &[0, 1]), vec![None; 3]);
        assert_eq!(plan(0, &[0]), Vec::<Option<u32>>::new());
    }
}
