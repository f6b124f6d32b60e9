//! KVM_GET_CLOCK: the VM's kvmclock, its flags (KVM_CLOCK_TSC_STABLE: the
//! master clock is on; KVM_CLOCK_REALTIME and KVM_CLOCK_HOST_TSC: the sample
//! carries the host's real time and TSC), taken between two host TSC reads.

use kvm_bindings::{kvm_clock_data, KVM_CLOCK_HOST_TSC, KVM_CLOCK_REALTIME, KVM_CLOCK_TSC_STABLE};
use kvm_ioctls::VmFd;
use serde::Serialize;

use super::state::host_rdtsc;

/// One KVM_GET_CLOCK result and the host TSC around the ioctl.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClockSample {
    /// kvmclock, ns (`clock`).
    pub clock_ns: u64,
    /// `flags` (KVM_CLOCK_TSC_STABLE 2, KVM_CLOCK_REALTIME 4, KVM_CLOCK_HOST_TSC 8).
    pub flags: u32,
    /// The host's CLOCK_REALTIME at the same instant, ns (`realtime`; valid
    /// with KVM_CLOCK_REALTIME).
    pub realtime_ns: u64,
    /// The host TSC at the same instant (`host_tsc`; valid with
    /// KVM_CLOCK_HOST_TSC).
    pub host_tsc: u64,
    /// Host TSC just before the ioctl.
    pub host_before: u64,
    /// Host TSC just after it.
    pub host_after: u64,
}

/// The names of the KVM_CLOCK_* bits set in `flags`.
pub fn flag_names(flags: u32) -> Vec<&'static str> {
    [
        (KVM_CLOCK_TSC_STABLE, "KVM_CLOCK_TSC_STABLE"),
        (KVM_CLOCK_REALTIME, "KVM_CLOCK_REALTIME"),
        (KVM_CLOCK_HOST_TSC, "KVM_CLOCK_HOST_TSC"),
    ]
    .into_iter()
    .filter(|(bit, _)| flags & bit != 0)
    .map(|(_, name)| name)
    .collect()
}

impl ClockSample {
    /// A sample from what KVM_GET_CLOCK returned, taken between host TSC
    /// reads `host_before` and `host_after`.
    pub fn from_kvm(d: &kvm_clock_data, host_before: u64, host_after: u64) -> ClockSample {
        ClockSample {
            clock_ns: d.clock,
            flags: d.flags,
            realtime_ns: d.realtime,
            host_tsc: d.host_tsc,
            host_before,
            host_after,
        }
    }

    /// Whether KVM says every vCPU sees one kvmclock (the master clock).
    pub fn tsc_stable(&self) -> bool {
        self.flags & KVM_CLOCK_TSC_STABLE != 0
    }
}

/// KVM_GET_CLOCK between two host TSC reads.
pub fn get_clock(fd: &VmFd) -> Result<ClockSample, String> {
    let before = host_rdtsc();
    let d = fd
        .get_clock()
        .map_err(|e| format!("KVM_GET_CLOCK failed: {e}"))?;
    let after = host_rdtsc();
    Ok(ClockSample::from_kvm(&d, before, after))
}
