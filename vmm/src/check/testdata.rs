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
        running_khz: 1_000_000,
    }
}

pub fn round(vcpus: Vec<VcpuResult>, honoured: Option<bool>, skew: u64) -> RoundResult {
    RoundResult {
        cpu0_exit_latency_cycles: Some(100),
        vcpus,
        ..crate::analysis::synthetic_round(0, skew, honoured)
    }
}

/// A later read, as check 4 records it in `later_reads`: the read before
/// the first round, the later one, and what the writes asked (the
/// TSC_ADJUST deltas summed).
pub type Recorded = (
    super::writes_honoured::Read,
    super::writes_honoured::Read,
    i64,
);

const fn read(tsc: u64, host_before: u64, host_after: u64) -> super::writes_honoured::Read {
    super::writes_honoured::Read {
        tsc,
        host_before,
        host_after,
        ratio: crate::tsc::frequency::Ratio::ONE,
    }
}

/// Ignored writes, recorded: `check --json` (2 vCPUs, 200 rounds of
/// xen-head) on this project's development host, PVM on Linux
/// 6.18.44-fc-v1045, whose KVM ignores guest TSC writes (the offsets stay
/// 0; only TSC_ADJUST records them). Check 4's `later_reads`, per vCPU. The
/// old criterion ("later read - last written value <= 4 x host cycles since
/// the last round") held for them: 13,072,518,603,085 - 13,072,511,348,077
/// = 7,255,008 <= 4 x 8,241,433.
pub const PVM_IGNORED: [Recorded; 2] = PVM_READS;
/// The value vCPU 0 wrote in the last round of that run.
pub const PVM_LAST_WRITTEN: u64 = 13_072_511_348_077;
/// Host cycles from the start of its last round to after the later read.
pub const PVM_SINCE_LAST_ROUND: u64 = 8_241_433;
const PVM_READS: [Recorded; 2] = [
    (
        read(13_070_103_362_782, 13_070_103_340_193, 13_070_103_364_963),
        read(13_072_518_603_085, 13_072_518_250_486, 13_072_518_944_596),
        -318_418_095,
    ),
    (
        read(13_070_103_367_880, 13_070_103_343_135, 13_070_103_370_844),
        read(13_072_518_543_874, 13_072_518_250_486, 13_072_518_944_596),
        -320_171_358,
    ),
];

/// Honoured writes, built from a real run on the same host and day: `run
/// --backend host --vcpus 2 --variant xen-head --rounds 200 --json`, whose
/// threads start at offset 0 and whose every write moves the thread's
/// offset by its delta (`writes_honoured: true` in every round). Per vCPU
/// (tsc_first of round 0, tsc_after_loop of round 199, the tsc_adjust_delta
/// of the 200 rounds summed): vCPU 0 (13,115,009,870,313,
/// 13,115,395,630,827, -31,357,058), vCPU 1 (13,115,009,872,286,
/// 13,115,395,630,753, -31,357,463). The first read happened at host time
/// = its value (offset 0), the later one at its value minus the summed
/// deltas (the offset the writes left). The brackets around them are the
/// widths recorded on PVM above (a KVM_GET_MSRS: 22,589 before and 2,181
/// after vCPU 0's first read; a guest command on every vCPU: 352,599 before
/// and 341,511 after its later one); vCPU 0 wrote 13,115,395,629,357 in
/// the last round ([`HOST_LAST_WRITTEN`]). `ignored` builds the same reads as if
/// the writes had not taken effect (the later read at host time = its
/// value).
pub fn host_backend(ignored: bool) -> [Recorded; 2] {
    let pair = |first: u64, later: u64, asked: i64| {
        let host = if ignored {
            later
        } else {
            later.wrapping_sub(asked as u64)
        };
        (
            read(first, first - 22_589, first + 2_181),
            read(later, host - 352_599, host + 341_511),
            asked,
        )
    };
    [
        pair(13_115_009_870_313, 13_115_395_630_827, -31_357_058),
        pair(13_115_009_872_286, 13_115_395_630_753, -31_357_463),
    ]
}

/// The value vCPU 0 wrote in the last round of the host-backend run.
pub const HOST_LAST_WRITTEN: u64 = 13_115_395_629_357;
