//! What a method wrote into the restored vCPUs, as it wrote it: the
//! documented method's clock and offsets ([`Documented`]), the msr methods'
//! IA32_TSC writes ([`MsrWrites`]), so the report can say what KVM made of
//! each value.

use serde::Serialize;

use super::offsets::ClockSample;

/// What the documented method did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Documented {
    /// The TSC frequency used, kHz (KVM_GET_TSC_KHZ, the same on every vCPU).
    pub tsc_khz: u32,
    /// KVM_SET_CLOCK's argument: the source's kvmclock, ns.
    pub set_clock_ns: u64,
    /// Its real time, ns.
    pub set_realtime_ns: u64,
    /// Its flags (KVM_CLOCK_REALTIME).
    pub set_flags: u32,
    /// Host TSC just before KVM_SET_CLOCK.
    pub set_host_before: u64,
    /// Host TSC just after it.
    pub set_host_after: u64,
    /// KVM_GET_CLOCK on the destination right after.
    pub destination: Option<ClockSample>,
    /// What the formula added to every offset, cycles.
    pub shift_cycles: Option<i64>,
    /// The offsets written (KVM_SET_DEVICE_ATTR), index = vCPU.
    pub offsets_written: Vec<u64>,
    /// The TSC_ADJUST values written (KVM_SET_MSRS), index = vCPU.
    pub adjust_written: Vec<u64>,
}

/// One host write of IA32_TSC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TscWrite {
    /// The value written.
    pub value: u64,
    /// Host TSC just before KVM_SET_MSRS.
    pub host_before: u64,
    /// Host TSC just after it.
    pub host_after: u64,
}

impl TscWrite {
    /// The offset the write asks for, as an interval: the value minus the
    /// host TSC when KVM handled it, somewhere in the bracket: `(lowest,
    /// width)`, modulo 2^64.
    pub fn asked_offset(&self) -> (u64, u64) {
        (
            self.value.wrapping_sub(self.host_after),
            self.host_after.wrapping_sub(self.host_before),
        )
    }

    /// Whether `offset` is the one the write asked for.
    pub fn asked_for(&self, offset: u64) -> bool {
        let (low, width) = self.asked_offset();
        offset.wrapping_sub(low) <= width
    }
}

/// What the msr methods did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MsrWrites {
    /// The TSC_ADJUST values written, index = vCPU.
    pub adjust_written: Vec<u64>,
    /// IA32_TSC writes: one pass over every vCPU (two for msr-twice), each
    /// index = vCPU.
    pub passes: Vec<Vec<TscWrite>>,
}

/// What a method did to the vCPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Trace {
    /// The documented method.
    Documented(Documented),
    /// `msr` and `msr-twice`.
    Msr(MsrWrites),
}
