//! What the guests read and KVM said around a restore, as measured: the
//! guests' TSC reads ([`Reads`]), their kvmclock reads ([`ClockReads`]) and
//! the clock once a restored guest ran again ([`ClockAfter`]).
//!
//! A guest reads kvmclock with the version protocol through
//! [`Op::ClockWrite`](tsc_contract::Op::ClockWrite) of IA32_TSC_ADJUST
//! moved by 0: kvmclock, a TSC_ADJUST write that changes nothing, kvmclock
//! again. The write does not move the TSC; KVM answers it with a clock
//! update, so the second read sees a page KVM has just re-anchored (a page
//! left stale by the rendezvous' IA32_TSC writes, check 8's finding, is
//! refreshed before the snapshot), and the first read after a restore sees
//! the page exactly as the destination wrote it.

use tsc_contract::{ClockRecord, PvclockTimeInfo};

use crate::session::Handoff;
use crate::tsc::clock::ClockSample;
use crate::tsc::TscState;

/// Every guest's TSC read once (Op::Rdtsc), between two host TSC reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reads {
    /// What each vCPU read, index = vCPU.
    pub tsc: Vec<u64>,
    /// Host TSC just before the vCPUs were resumed for the read.
    pub host_before: u64,
    /// Host TSC just after every vCPU had reported it.
    pub host_after: u64,
}

/// Exchanges per ordered pair of the kvmclock hand-off test after a
/// restore (fewer than check 9's 200: it runs once per restore).
pub const CLOCK_EXCHANGES: u32 = 100;

/// Every guest's kvmclock read once (a TSC_ADJUST write of +0 between two
/// reads), between two host TSC reads, and KVM_GET_CLOCK right after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockReads {
    /// Every vCPU's record, index = vCPU.
    pub records: Vec<ClockRecord>,
    /// Host TSC just before the vCPUs were resumed for the reads.
    pub host_before: u64,
    /// Host TSC just after every vCPU had reported them.
    pub host_after: u64,
    /// KVM_GET_CLOCK right after, or why it failed.
    pub kvm: Result<ClockSample, String>,
}

/// The clock once the restored guest ran again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockAfter {
    /// KVM_GET_CLOCK, or why it failed.
    pub clock: Result<ClockSample, String>,
    /// Every vCPU's pvclock page (empty without kvmclock).
    pub pages: Vec<PvclockTimeInfo>,
    /// The forced hand-off test over kvmclock readings (`None` with one
    /// vCPU or without kvmclock).
    pub handoff: Option<Handoff>,
    /// Every vCPU's TSC state right after.
    pub states: Vec<TscState>,
}
