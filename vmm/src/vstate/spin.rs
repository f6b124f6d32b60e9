//! Breaking up guest spin-waits when vCPUs outnumber host cores.
//!
//! The rendezvous makes every vCPU spin in the guest until the others arrive.
//! With more vCPUs than host cores, a spinning vCPU thread keeps its core for
//! a whole scheduler slice (milliseconds) while the vCPU it waits for cannot
//! run, and one round takes hundreds of milliseconds. Hardware KVM breaks such
//! spins with pause-loop exiting; PVM's emulated ring 0 does not. The
//! [`SpinBreaker`] does it from the host: every `period` it signals each vCPU
//! thread with the kick signal (without the stop flag), which makes KVM_RUN
//! return EINTR; the vCPU thread then yields its core before re-entering
//! (see `vcpu.rs`). A signal that finds a thread outside KVM_RUN is harmless.
//!
//! A guest that lists its `pause`s needs no breaker: the KVM backend
//! rewrites them into yield exits ([`crate::guest_image::patch_pause_sites`],
//! [`tsc_contract::ports::YIELD`]), so that every spin-wait iteration gives
//! the host thread's CPU up, as pause-loop exiting would. The breaker is
//! left for images that list none (and for the command-mode session).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::kick::kick_signal;

/// Signals vCPU threads periodically until stopped.
pub struct SpinBreaker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// The period used when vCPUs outnumber the host's cores.
pub const PERIOD: Duration = Duration::from_micros(200);

/// The host cores this process may use (`available_parallelism`, which
/// reads the affinity mask and the cgroup's quota), found once per process.
pub fn host_cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Whether `vcpus` vCPU threads overcommit this host's cores.
pub fn overcommitted(vcpus: u32) -> bool {
    vcpus as usize > host_cores()
}

impl SpinBreaker {
    /// Starts signalling `targets` every `period`.
    ///
    /// The kick signal's handler must be installed
    /// ([`super::kick::install_kick_handler`]): its default action ends the
    /// process. The caller must stop the breaker (or drop it) before it joins any of
    /// the target threads: a `pthread_t` stays valid until its thread is
    /// joined, not after.
    pub fn start(targets: Vec<libc::pthread_t>, period: Duration) -> io::Result<SpinBreaker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let signal = kick_signal();
        let handle = std::thread::Builder::new()
            .name("spin-breaker".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(period);
                    for &t in &targets {
                        // SAFETY: every target is a joinable thread that has
                        // not been joined yet (the caller's contract), so its
                        // pthread_t is valid; a failure (e.g. the thread has
                        // ended) is harmless and ignored.
                        unsafe { libc::pthread_kill(t, signal) };
                    }
                }
            })?;
        Ok(SpinBreaker {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops signalling and waits for the breaker thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for SpinBreaker {
    fn drop(&mut self) {
        self.halt();
    }
}
