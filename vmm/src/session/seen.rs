//! What the guest reports of the commands that measure across vCPUs, decoded
//! from guest memory: what each vCPU saw in the lock-ordered warp test, and
//! what every pair saw in the forced hand-off test.

use tsc_contract::HandoffResult;

/// What one vCPU saw in the warp test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WarpSeen {
    /// The largest backwards step, cycles (0: none).
    pub max_warp: u64,
    /// How many backwards steps.
    pub warps: u64,
    /// How many times it took the lock right after another vCPU.
    pub handoffs: u64,
    /// The shortest forward step across such a hand-off, cycles (`None`:
    /// none).
    pub shortest_handoff: Option<u64>,
}

/// What one forced hand-off test saw: every pair's result, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    /// Exchanges per ordered pair.
    pub exchanges: u32,
    /// Whether every ordered pair ran (else vCPU 0's pairs only: more
    /// vCPUs than the layout holds pairs for).
    pub all_pairs: bool,
    /// Every pair's result, in the test's pair order.
    pub pairs: Vec<HandoffResult>,
}
