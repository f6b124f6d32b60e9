//! A short scheduler slice for a vCPU thread that has a core of its own
//! (the coordinator keeps the default: with it too, idle runs got slower):
//! `sched_setattr`'s `sched_runtime` on a `SCHED_OTHER`/`SCHED_BATCH`
//! thread, which Linux 6.12 and later take as the thread's slice (clamped
//! to 0.1-100 ms) and which lets the thread, when woken, preempt a task
//! with a longer slice at once (EEVDF's `PREEMPT_SHORT`) instead of waiting
//! for that task's slice to end. It asks for no priority: the thread's share of the CPU is what its
//! nice value gives, so it needs no privilege. Older kernels ignore the
//! field; a thread under another policy (real-time, `SCHED_IDLE`, deadline)
//! is left as it is.

use std::io;

/// The slice asked for, ns: the shortest Linux takes, about one round trip
/// of a hand-off under KVM.
pub const SHORT_SLICE_NS: u64 = 100_000;

/// `sched_attr` as Linux 5.3+ knows it (the first 56 bytes: without the
/// utilisation clamps).
const ATTR_SIZE: u32 = std::mem::size_of::<libc::sched_attr>() as u32;

/// Thread `tid`'s scheduling attributes (0: the calling thread).
fn get(tid: libc::pid_t) -> io::Result<libc::sched_attr> {
    // SAFETY: sched_attr is plain integers; all-zero is a valid value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most ATTR_SIZE bytes into `attr`, which is
    // that large and writable; `tid` is only looked up (0: the calling
    // thread); flags must be 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut attr as *mut libc::sched_attr,
            ATTR_SIZE,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

/// Asks for a slice of `ns` for the calling thread, keeping its policy and
/// nice value; `Ok(false)` when its policy has no slice to set.
pub fn request(ns: u64) -> io::Result<bool> {
    let mut attr = get(0)?;
    if !matches!(
        attr.sched_policy as i32,
        libc::SCHED_OTHER | libc::SCHED_BATCH
    ) {
        return Ok(false);
    }
    attr.size = ATTR_SIZE;
    attr.sched_runtime = ns;
    // Keep reset-on-fork as it was; ask for nothing else.
    attr.sched_flags &= libc::SCHED_FLAG_RESET_ON_FORK as u64;
    // SAFETY: `attr` is a valid, initialised sched_attr of ATTR_SIZE bytes
    // that the kernel only reads; pid 0 is the calling thread.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0,
            &attr as *const libc::sched_attr,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

/// Thread `tid`'s slice, ns, as the kernel reports it (0: the calling
/// thread): its own where it asked for one, else the scheduler's base
/// slice; 0 under a policy without slices or on a kernel before 6.12.
pub fn of(tid: libc::pid_t) -> io::Result<u64> {
    Ok(get(tid)?.sched_runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_gets_the_slice_it_asks_for_and_keeps_its_nice_value() {
        std::thread::spawn(|| {
            let before = get(0).expect("sched_getattr of this thread");
            assert!(request(SHORT_SLICE_NS).expect("sched_setattr of this thread"));
            let after = get(0).expect("sched_getattr of this thread");
            assert_eq!(after.sched_policy, before.sched_policy);
            assert_eq!(after.sched_nice, before.sched_nice);
            // Kernels before 6.12 report 0: they have no slice to set; later
            // ones report the base slice until a thread asks for its own.
            if before.sched_runtime != 0 {
                assert_eq!(after.sched_runtime, SHORT_SLICE_NS);
            }
            assert_eq!(of(0).ok(), Some(after.sched_runtime));
        })
        .join()
        .expect("the test thread");
    }
}
