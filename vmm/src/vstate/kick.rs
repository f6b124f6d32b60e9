//! Kicking a vCPU thread out of KVM_RUN from another thread, race-free: a
//! flag, `immediate_exit` in the vCPU's `kvm_run`, and a real-time signal
//! whose (empty) handler only interrupts the ioctl. Also used by the spin
//! breaker ([`super::spin`]) to make spinning vCPUs yield.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;

use kvm_bindings::kvm_run;
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

/// Stops one vCPU thread from another thread.
pub struct Kicker {
    stop: Arc<AtomicBool>,
    run: *mut kvm_run,
}

// SAFETY: the `kvm_run` pointer refers to the vCPU's shared mmap, which lives
// as long as the VcpuFd. The vCPU thread hands its VcpuFd back when it ends
// (it is the thread's return value), so the mapping outlives the thread and
// stays valid until the runner has joined it; the runner drops Kickers only
// after that. Only the one-byte `immediate_exit` field is written through it,
// which KVM reads at KVM_RUN entry.
unsafe impl Send for Kicker {}
// SAFETY: as above; concurrent volatile byte stores of the same value are
// benign.
unsafe impl Sync for Kicker {}

/// The real-time signal used to kick vCPU threads out of KVM_RUN.
pub fn kick_signal() -> i32 {
    SIGRTMIN() + 1
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// Installs the (empty) kick handler once per process: the signal's only job
/// is to interrupt KVM_RUN.
pub fn install_kick_handler() -> Result<(), vmm_sys_util::errno::Error> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = register_signal_handler(kick_signal(), on_kick);
    });
    result
}

impl Kicker {
    /// The kicker of the vCPU whose thread looks at `stop` and whose
    /// `kvm_run` mapping is `run` (it must outlive the kicker: see the Send
    /// impl).
    pub fn new(stop: Arc<AtomicBool>, run: *mut kvm_run) -> Kicker {
        Kicker { stop, run }
    }

    /// Asks the vCPU thread to stop and kicks it out of KVM_RUN.
    pub fn kick<T>(&self, thread: &JoinHandle<T>) {
        self.stop.store(true, Ordering::SeqCst);
        // SAFETY: see the Send impl: the mmap is alive while the thread is
        // (the caller holds its JoinHandle, not yet joined).
        unsafe { std::ptr::addr_of_mut!((*self.run).immediate_exit).write_volatile(1) };
        // A failure means the thread has already exited: nothing to kick.
        let _ = thread.kill(kick_signal());
    }
}
