//! What kvmclock looked like at one moment ([`ClockView`]): measured by
//! checks 9 and 12, kept apart from the rest of the evidence so that the
//! frequency family can hold one without depending on it.

use tsc_contract::PvclockTimeInfo;

use crate::session::Handoff;
use crate::tsc::clock::ClockSample;
use crate::tsc::TscState;

/// What kvmclock looked like at one moment: KVM_GET_CLOCK, every vCPU's
/// page, every vCPU's TSC state, and what the vCPUs saw of each other's
/// kvmclock (the forced hand-off test over kvmclock readings, ns).
#[derive(Clone, Debug, PartialEq)]
pub struct ClockView {
    /// KVM_GET_CLOCK, or why it failed.
    pub clock: Result<ClockSample, String>,
    /// Every vCPU's kvmclock page.
    pub pages: Vec<PvclockTimeInfo>,
    /// Every vCPU's TSC state.
    pub states: Vec<TscState>,
    /// Every ordered pair's kvmclock as the guests saw it.
    pub handoff: Handoff,
}
