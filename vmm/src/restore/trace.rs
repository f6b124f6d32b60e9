//! What a method wrote into the restored vCPUs, as it wrote it: the
//! documented method's clock and offsets ([`Documented`]), the msr methods'
//! IA32_TSC writes ([`MsrWrites`]), so the report can say what KVM made of
//! each value; with the ratio KVM runs the destination's TSC at, which
//! every host TSC interval the methods turned into guest cycles was
//! multiplied by.

use serde::Serialize;

use super::offsets::{shifted, ClockSample};
use crate::tsc::frequency::Ratio;

/// What the documented method did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Documented {
    /// The TSC frequency used, kHz (KVM_GET_TSC_KHZ, the same on every vCPU).
    pub tsc_khz: u32,
    /// The host's TSC rate as KVM knows it, kHz.
    pub host_khz: u32,
    /// The ratio KVM runs the destination's TSC at (from its vCPUs'
    /// KVM_GET_TSC_KHZ): the host TSC difference entered the shift
    /// multiplied by it. 1:1 (`0/0`) where KVM does not scale.
    pub ratio: Ratio,
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
    /// What vcpu.rst's formula taken literally (the host TSC difference
    /// added unscaled) would have added instead, cycles; equal to the
    /// shift at 1:1.
    pub literal_shift_cycles: Option<i64>,
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
    /// host TSC when KVM handled it (somewhere in the bracket) at `ratio`,
    /// KVM's fixed-point scaling of that TSC within [`Ratio::scale_error`]
    /// of it: `(lowest, width)`, modulo 2^64.
    pub fn asked_offset(&self, ratio: Ratio) -> (u64, u64) {
        let err = i128::from(ratio.scale_error(self.host_after));
        let at = |h: u64| ratio.scale(i128::from(h));
        let low = shifted(self.value, -at(self.host_after) - err);
        let width = at(self.host_after) - at(self.host_before) + 2 * err;
        (low, u64::try_from(width).unwrap_or(0))
    }

    /// Whether `offset` is the one the write asked for at `ratio`.
    pub fn asked_for(&self, offset: u64, ratio: Ratio) -> bool {
        let (low, width) = self.asked_offset(ratio);
        offset.wrapping_sub(low) <= width
    }
}

/// What the msr methods did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MsrWrites {
    /// The ratio KVM runs the destination's TSC at: the host time since
    /// each saved read entered the value written multiplied by it, and KVM
    /// subtracts the host TSC multiplied by it.
    pub ratio: Ratio,
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
