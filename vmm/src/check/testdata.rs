//! Rounds made by hand for the judges' unit tests.

use crate::analysis::honoured::combine;
use crate::analysis::{DecidedBy, RoundResult, VcpuResult};

/// A vCPU's result: TSC_ADJUST moved by `adj`, the exact offset by `off`
/// (`None`: no exact offsets, and then KVM's evidence is undecided), the
/// guest saw its TSC jump (`jump`); the verdict combines both as the analysis
/// does.
pub fn vcpu(id: u32, adj: i64, off: Option<i64>, jump: Option<bool>) -> VcpuResult {
    let host = off.and_then(|o| match (o == adj, o == 0) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    });
    let (honoured, decided_by, _) = combine(host, DecidedBy::Offsets, jump);
    VcpuResult {
        id,
        tsc_adjust_delta: adj,
        guest_adjust_delta: Some(adj),
        offset_delta: off,
        written_value: 5_000,
        tsc_first: 4_000,
        tsc_before_write: 4_500,
        tsc_after_loop: 5_100,
        wrote: true,
        tsc_at_write: Some(4_600),
        write_latency_cycles: Some(100),
        exit_latency_cycles: Some(100),
        write_honoured: honoured,
        decided_by,
        host_saw_write: host,
        guest_saw_jump: jump,
        rel_offset_adjust: 0,
        rel_offset_attr: None,
        rel_offset_bracket: 0,
        rel_offset_bracket_error: 0,
        rel_offset_guest: None,
        rel_offset_guest_error: None,
        tsc_khz: 1_000_000,
    }
}

pub fn round(vcpus: Vec<VcpuResult>, honoured: Option<bool>, skew: u64) -> RoundResult {
    RoundResult {
        cpu0_exit_latency_cycles: Some(100),
        vcpus,
        ..crate::analysis::synthetic_round(0, skew, honoured)
    }
}
