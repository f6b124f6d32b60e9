//! One guest read of its TSC and kvmclock with the host's clocks around it
//! ([`GuestRead`]), and the host's CLOCK_MONOTONIC_RAW.

use crate::tsc::host_clock::clock_ns;

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

/// The host's CLOCK_MONOTONIC_RAW, ns (0 when it cannot be read: it exists
/// on every Linux this tool runs on, KVM needs it too).
pub fn monotonic_raw_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_RAW).unwrap_or(0)
}
