//! kvmclock across a TSC write, the arithmetic: from the guest's
//! [`ClockRecord`] (two kvmclock readings with their TSCs, one before and one
//! after the write) and how far the write moved the TSC (KVM's exact
//! offsets), the *jump*: kvmclock's advance minus the time that passed. A
//! vCPU whose pvclock page KVM re-anchored after the write jumps by about 0;
//! one whose page kept the old `tsc_timestamp` jumps by the move's
//! nanoseconds (its kvmclock followed the TSC). `run --kvmclock` keeps it per
//! round ([`super::kvmclock`]); check 8 judges the same arithmetic.

use serde::Serialize;
use tsc_contract::ClockRecord;

use crate::units::cycles_to_ns_at;

/// One vCPU's kvmclock across one write.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ClockJump {
    /// The vCPU.
    pub vcpu: u32,
    /// How far the write moved the vCPU's TSC, cycles (KVM's exact offsets;
    /// `None` without them).
    pub tsc_moved_cycles: Option<i64>,
    /// That in ns.
    pub tsc_moved_ns: Option<f64>,
    /// kvmclock's advance between the two readings, ns.
    pub kvmclock_advance_ns: i64,
    /// The time that passed between the readings, ns: their TSC difference
    /// less the move, at the vCPU's TSC frequency (`None` without the move).
    pub elapsed_ns: Option<f64>,
    /// kvmclock's advance minus the time that passed, ns.
    pub jump_ns: Option<f64>,
    /// The page's version at the two readings.
    pub version: (u32, u32),
    /// The page's flags at the two readings.
    pub flags: (u8, u8),
}

/// vCPU `vcpu`'s kvmclock across the write record `r` describes, the write
/// having moved its TSC by `moved` cycles, at `khz`.
pub fn across_write(vcpu: u32, r: &ClockRecord, moved: Option<i64>, khz: u32) -> ClockJump {
    let raw = i128::from(r.tsc_after.wrapping_sub(r.tsc_before) as i64);
    let elapsed = moved.and_then(|m| cycles_to_ns_at(raw - i128::from(m), khz));
    let advance = r.kvmclock_after.wrapping_sub(r.kvmclock_before) as i64;
    ClockJump {
        vcpu,
        tsc_moved_cycles: moved,
        tsc_moved_ns: moved.and_then(|m| cycles_to_ns_at(i128::from(m), khz)),
        kvmclock_advance_ns: advance,
        elapsed_ns: elapsed,
        jump_ns: elapsed.map(|e| advance as f64 - e),
        version: (r.version_before, r.version_after),
        flags: r.flags_before_after(),
    }
}

/// A round's kvmclock findings (`run --kvmclock`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvmclockRound {
    /// The jump of the largest magnitude over the writing vCPUs, signed, ns
    /// (`None` when no jump could be worked out).
    pub jump_ns: Option<f64>,
    /// Every writing vCPU's kvmclock across its IA32_TSC write.
    pub vcpus: Vec<ClockJump>,
}
