//! One guest read of its TSC and kvmclock with the host's clocks around it
//! ([`GuestRead`]), and the host's CLOCK_MONOTONIC_RAW. A leaf.

/// One guest read of its TSC and kvmclock ([`Session::guest_clock_read`]),
/// with the host's TSC and CLOCK_MONOTONIC_RAW just before the vCPU was
/// resumed and just after it reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GuestRead {
    /// The vCPU that read.
    pub vcpu: u32,
    /// Its TSC, read inside the kvmclock read.
    pub tsc: u64,
    /// Its kvmclock at that TSC, ns.
    pub kvmclock_ns: u64,
    /// The page's version (0: never registered).
    pub version: u32,
    /// The page's flags.
    pub flags: u8,
    /// The page's multiplier.
    pub mul: u32,
    /// The page's shift.
    pub shift: i8,
    /// Host TSC before the vCPU was resumed.
    pub host_before: u64,
    /// Host TSC after it reported.
    pub host_after: u64,
    /// Host CLOCK_MONOTONIC_RAW before, ns.
    pub mono_before_ns: u64,
    /// And after, ns.
    pub mono_after_ns: u64,
}

/// The host's CLOCK_MONOTONIC_RAW, ns.
pub fn monotonic_raw_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the pointer, which points
    // at `ts`, alive for the call; CLOCK_MONOTONIC_RAW exists on every Linux
    // this tool runs on (KVM needs it too).
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
