//! What the guest reports of the commands that measure across vCPUs, decoded
//! from its command slots: what each vCPU saw in the warp test.

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
