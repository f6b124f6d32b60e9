//! Rounds made by hand for the judges' unit tests.

use crate::analysis::{RoundResult, VcpuResult};

pub fn vcpu(id: u32, adj: i64, off: Option<i64>, jump: Option<bool>) -> VcpuResult {
    VcpuResult {
        id,
        tsc_adjust_delta: adj,
        guest_adjust_delta: Some(adj),
        offset_delta: off,
        written_value: 5_000,
        tsc_first: 4_000,
        tsc_before_write: 4_500,
        tsc_after_loop: 5_100,
        tsc_at_write: 4_600,
        write_latency_cycles: 100,
        exit_latency_cycles: 100,
        write_honoured: off.map(|o| o == adj),
        guest_saw_jump: jump,
        rel_offset_adjust: 0,
        rel_offset_attr: None,
        rel_offset_bracket: 0,
        rel_offset_bracket_error: 0,
        tsc_khz: 1_000_000,
    }
}

pub fn round(vcpus: Vec<VcpuResult>, honoured: Option<bool>, skew: u64) -> RoundResult {
    RoundResult {
        round: 0,
        variant: "xen-head".into(),
        skew_cycles: skew,
        skew_cycles_attr: None,
        skew_cycles_bracket: 0,
        skew_cycles_bracket_error: 0,
        writes_honoured: honoured,
        cpu0_exit_latency_cycles: 100,
        disagreements: vec![],
        vcpus,
    }
}
