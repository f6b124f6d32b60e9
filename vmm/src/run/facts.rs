//! What a run says about itself apart from its rounds ([`RunFacts`]), and a
//! whole run kept in memory ([`RunOutput`]).

use serde::Serialize;

use crate::analysis::RoundResult;
use crate::host::HostInfo;
use crate::tsc::clock_points::ClockPoints;
use crate::tsc::TscState;

/// What a run says about itself, apart from its rounds.
#[derive(Clone, Debug, Serialize)]
pub struct RunFacts {
    /// Host facts.
    pub host: HostInfo,
    /// vCPU count.
    pub vcpus: u32,
    /// The backend's view of every vCPU before the first round.
    pub initial: Vec<TscState>,
    /// Observations about the run as a whole, in words.
    pub notes: Vec<String>,
    /// Whether the vCPUs outnumbered the host's cores, so that guest
    /// spin-waits were broken up from the host (see
    /// [`crate::vstate::spin`]).
    pub spin_breaker: bool,
    /// `--kvmclock` (KVM): KVM_GET_CLOCK on the fresh VM, after the first
    /// round and after the last; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm_clock: Option<ClockPoints>,
}

/// A whole run: its facts and every round, in order.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutput {
    /// What the run says about itself.
    pub facts: RunFacts,
    /// Every round, in order.
    pub rounds: Vec<RoundResult>,
}
