//! Unit tests of the round analysis: synthetic records and readbacks.
use super::*;
use crate::tsc::TscState;
use tsc_contract::{RoundRecord, RECORD_MAGIC};

#[test]
fn signed_deltas_wrap() {
    assert_eq!(signed_delta(5, 10), -5);
    assert_eq!(signed_delta(2, u64::MAX), 3);
    assert_eq!(signed_delta(u64::MAX, 2), -3);
    assert_eq!(signed_delta(0, 1u64 << 63), i64::MIN);
}

#[test]
fn spread_is_max_minus_min() {
    assert_eq!(spread([0, -5, 7, 3]), 12);
    assert_eq!(spread([i64::MIN, i64::MAX]), u64::MAX);
    assert_eq!(spread(std::iter::empty()), 0);
}

fn state(adjust: u64, offset: Option<u64>, tsc: u64, host: u64) -> TscState {
    TscState {
        adjust,
        tsc,
        host_before: host,
        host_after: host + 100,
        offset,
        tsc_khz: 2_000_000,
        host_khz: 0,
        scaled: false,
    }
}

fn record(id: u32, written: u64, before_write: u64, after_loop: u64) -> RoundRecord {
    RoundRecord {
        magic: RECORD_MAGIC,
        vcpu: id,
        round: 0,
        variant: 2,
        flags: 0,
        reserved: 0,
        tsc_first: written - 10,
        written,
        tsc_before_write: before_write,
        tsc_after_loop: after_loop,
        adjust_before: 0,
        adjust_after: 0,
    }
}

/// An ignoring hypervisor (PVM): the TSC_ADJUST deltas show the writes'
/// would-be skew, the offsets do not move.
#[test]
fn ignored_writes_give_the_would_be_skew_from_tsc_adjust() {
    let v = 1_000_000;
    // vCPU 0's write handled at 1_003_000, vCPU 1's at 1_010_000.
    let samples = [
        VcpuSample {
            record: record(0, v, 1_002_900, 1_020_000),
            before: state(0, Some(0), 900_000, 900_000),
            after: state((v as i64 - 1_003_000) as u64, Some(0), 2_000_000, 2_000_000),
        },
        VcpuSample {
            record: record(1, v, 1_009_800, 1_020_500),
            before: state(0, Some(0), 900_010, 900_000),
            after: state((v as i64 - 1_010_000) as u64, Some(0), 2_000_010, 2_000_000),
        },
    ];
    let r = analyse_round(0, "xen-6ca022a1", &samples, &Base::creation(2), None);
    assert_eq!(r.writes_honoured, Some(false));
    assert_eq!(r.skew_cycles, 7_000);
    assert_eq!(r.skew_cycles_attr, Some(0));
    assert_eq!(r.vcpus[1].rel_offset_adjust, -7_000);
    assert_eq!(r.vcpus[0].tsc_at_write, Some(1_003_000));
    assert_eq!(r.vcpus[0].write_latency_cycles, Some(100));
    assert_eq!(r.cpu0_exit_latency_cycles, Some(17_000));
    assert_eq!(
        r.vcpus[1].rel_offset_attr,
        Some(0),
        "ignored writes leave the offsets alone"
    );
    assert_eq!(r.vcpus[1].decided_by, Some(DecidedBy::Offsets));
    assert!(r.disagreements.is_empty(), "{:?}", r.disagreements);
}

/// vCPU `id` wrote `v` with its TSC at `before_write` just before and
/// `after_loop` after the loop, and KVM moved its exact offset (and its
/// TSC_ADJUST) by `d` from 0 over a round of 1 M host cycles.
fn moved_by(id: u32, v: u64, before_write: u64, after_loop: u64, d: i64) -> VcpuSample {
    VcpuSample {
        record: record(id, v, before_write, after_loop),
        before: state(0, Some(0), 1_000_000, 1_000_000),
        after: state(d as u64, Some(d as u64), (2_000_000 + d) as u64, 2_000_000),
    }
}

/// An honouring hypervisor: offsets move by exactly the TSC_ADJUST deltas,
/// the guest's TSC jumps, and the exit time is measured from the value written.
#[test]
fn honoured_writes_move_the_offsets_by_the_adjust_deltas() {
    let v = 1_000_000u64;
    let samples = [
        moved_by(0, v, 1_002_900, v + 500, v as i64 - 1_003_000),
        moved_by(1, v, 1_009_800, v + 300, v as i64 - 1_010_000),
    ];
    let r = analyse_round(0, "xen-head", &samples, &Base::creation(2), None);
    assert_eq!(r.writes_honoured, Some(true));
    assert_eq!(r.skew_cycles, 7_000);
    assert_eq!(r.skew_cycles_attr, Some(7_000));
    assert_eq!(r.cpu0_exit_latency_cycles, Some(500));
    assert_eq!(r.vcpus[0].guest_saw_jump, Some(true));
    assert_eq!(r.vcpus[1].rel_offset_attr, Some(-7_000));
    assert!(r.disagreements.is_empty(), "{:?}", r.disagreements);
}

/// A write of the value the TSC already held (KVM's TSC_ADJUST delta 0, the
/// exact offset unmoved), beside one that moved: the first moved nothing, so
/// it is neither honoured, nor ignored, nor counted undecided; the round is
/// decided by the other.
#[test]
fn a_write_of_the_tscs_own_value_moved_nothing() {
    let v = 1_000_000u64;
    let samples = [
        moved_by(0, v, v - 100, v + 500, 0),
        moved_by(1, v, 1_009_800, v + 300, v as i64 - 1_010_000),
    ];
    let r = analyse_round(0, "xen-rfc-v3", &samples, &Base::creation(2), None);
    let (c0, c1) = (&r.vcpus[0], &r.vcpus[1]);
    assert!(c0.wrote && c0.moved_nothing(), "{c0:?}");
    assert_eq!((c0.write_honoured, c0.guest_saw_jump), (None, None));
    assert!(!c1.moved_nothing());
    assert_eq!(c1.write_honoured, Some(true));
    assert_eq!((r.writes_honoured, r.undecided_vcpus), (Some(true), 0));
    assert!(r.disagreements.is_empty(), "{:?}", r.disagreements);

    // The same record but a guest read after the loop below the value
    // written: a TSC that held the value at the write cannot read below it
    // later, so the write did not move nothing; it stays undecided.
    let mut late = samples;
    late[0].record.tsc_after_loop = v - 1;
    let r = analyse_round(0, "xen-rfc-v3", &late, &Base::creation(2), None);
    assert!(!r.vcpus[0].moved_nothing());
    assert_eq!(r.undecided_vcpus, 1);
}

#[test]
fn a_mismatch_between_methods_is_reported() {
    let v = 1_000_000u64;
    let samples = [
        VcpuSample {
            record: record(0, v, 1_002_900, v + 500),
            before: state(0, Some(0), 1_000_000, 1_000_000),
            after: state(
                (-3000i64) as u64,
                Some((-3000i64) as u64),
                1_997_000,
                2_000_000,
            ),
        },
        VcpuSample {
            record: record(1, v, 1_009_800, v + 300),
            before: state(0, Some(0), 1_000_000, 1_000_000),
            // The offset moved by less than TSC_ADJUST says.
            after: state(
                (-10_000i64) as u64,
                Some((-9_000i64) as u64),
                1_991_000,
                2_000_000,
            ),
        },
    ];
    let r = analyse_round(0, "xen-head", &samples, &Base::creation(2), None);
    // KVM's evidence for vCPU 1 is inconsistent, so the guest's jump
    // decides that the write took effect; the mismatch is reported.
    assert_eq!(r.vcpus[1].host_saw_write, None);
    assert_eq!(r.vcpus[1].decided_by, Some(DecidedBy::Guest));
    assert!(r
        .disagreements
        .iter()
        .any(|d| d.contains("vCPU 1: offset moved by -9000 cycles but TSC_ADJUST by -10000")));
}

/// Bracketed reads only (no exact offsets), a write whose delta is inside
/// the bracket's error: KVM's evidence is undecided, the guest's jump
/// decides, and nothing is reported as "not honoured".
#[test]
fn an_undecided_host_with_a_decisive_guest_is_honoured_by_the_guest() {
    let v = 1_000_000u64;
    let d: i64 = -3_000; // handled at 1_003_000
    let sample = VcpuSample {
        record: record(0, v, 1_002_900, v + 500),
        // Brackets 10,000 wide: the estimate's error (10,000) exceeds |d|.
        before: TscState {
            host_after: 1_010_000,
            ..state(0, None, 1_005_000, 1_000_000)
        },
        after: TscState {
            host_after: 2_010_000,
            ..state(d as u64, None, (2_005_000 + d) as u64, 2_000_000)
        },
    };
    let r = analyse_round(0, "xen-head", &[sample], &Base::creation(1), None);
    let c = &r.vcpus[0];
    assert_eq!(c.host_saw_write, None, "the bracket cannot tell");
    assert_eq!(c.guest_saw_jump, Some(true));
    assert_eq!(c.write_honoured, Some(true));
    assert_eq!(c.decided_by, Some(DecidedBy::Guest));
    assert_eq!((r.writes_honoured, r.undecided_vcpus), (Some(true), 0));
    assert!(r.disagreements.is_empty(), "{:?}", r.disagreements);
}

/// One vCPU decided, the other not: the round is honoured as far as the
/// evidence goes, not "some took effect and others did not".
#[test]
fn an_undecided_vcpu_is_not_a_mixed_round() {
    let v = 1_000_000u64;
    let mk = |id, d: i64, after_loop| VcpuSample {
        record: record(id, v, (v as i64 - d - 100) as u64, after_loop),
        before: TscState {
            host_after: 1_010_000,
            ..state(0, None, 1_005_000, 1_000_000)
        },
        after: TscState {
            host_after: 2_010_000,
            ..state(d as u64, None, (2_005_000 + d) as u64, 2_000_000)
        },
    };
    // vCPU 0: |delta| 3,000 < error and an exit longer than the jump:
    // neither side can tell. vCPU 1: a big jump both sides see.
    let samples = [mk(0, -3_000, v + 5_000), mk(1, -900_000, v + 500)];
    let r = analyse_round(0, "xen-head", &samples, &Base::creation(2), None);
    assert_eq!(r.vcpus[0].write_honoured, None);
    assert_eq!(r.vcpus[1].write_honoured, Some(true));
    assert_eq!((r.writes_honoured, r.undecided_vcpus), (Some(true), 1));
    assert!(
        !r.disagreements
            .iter()
            .any(|d| d.contains("others' did not")),
        "{:?}",
        r.disagreements
    );
}

/// KVM's exact offsets say the write was ignored, the guest says its TSC
/// jumped: contradictory, so undecided, and said.
#[test]
fn contradictory_evidence_is_undecided_and_reported() {
    let v = 1_000_000u64;
    let d: i64 = -900_000;
    let sample = VcpuSample {
        record: record(0, v, 1_899_900, v + 500),
        before: state(0, Some(0), 1_000_000, 1_000_000),
        after: state(d as u64, Some(0), 2_000_000, 2_000_000),
    };
    let r = analyse_round(0, "xen-head", &[sample], &Base::creation(1), None);
    assert_eq!(r.vcpus[0].host_saw_write, Some(false));
    assert_eq!(r.vcpus[0].guest_saw_jump, Some(true));
    assert_eq!(r.vcpus[0].write_honoured, None);
    assert_eq!(r.writes_honoured, None);
    assert!(
        r.disagreements
            .iter()
            .any(|d| d.contains("KVM says the write was ignored but the guest's TSC jumped")),
        "{:?}",
        r.disagreements
    );
}

/// A relative offset's bracket error is the sum of both vCPUs' half
/// brackets: reads at opposite edges of their brackets are still inside.
#[test]
fn the_bracket_error_bar_covers_reads_anywhere_in_both_brackets() {
    // vCPU 0's bracket [0, 1000], vCPU 1's [0, 3000]; both offsets are 0
    // in truth. vCPU 0 was read at the start of its bracket (tsc 0),
    // vCPU 1 at the end (tsc 3000): estimates -500 and +1500.
    let s0 = TscState {
        tsc: 0,
        host_before: 0,
        host_after: 1_000,
        ..state(0, None, 0, 0)
    };
    let s1 = TscState {
        tsc: 3_000,
        host_before: 0,
        host_after: 3_000,
        ..state(0, None, 0, 0)
    };
    assert_eq!(
        (s0.estimated_offset() as i64, s0.estimate_error()),
        (-500, 500)
    );
    assert_eq!(
        (s1.estimated_offset() as i64, s1.estimate_error()),
        (1_500, 1_500)
    );
    let samples = [
        VcpuSample {
            record: record(0, 5_000, 4_000, 6_000),
            before: s0,
            after: s0,
        },
        VcpuSample {
            record: record(1, 5_000, 4_000, 6_000),
            before: s1,
            after: s1,
        },
    ];
    let r = analyse_round(0, "xen-head", &samples, &Base::creation(2), None);
    // The estimate is off by 2,000 from the truth (0): exactly the bound.
    assert_eq!(r.vcpus[1].rel_offset_bracket, 2_000);
    assert_eq!(r.vcpus[1].rel_offset_bracket_error, 2_000);
}

/// Writes snapped to one offset (KVM before Linux 5.10, or the kernel
/// variant `mutant-guest-tsc-write-synchronized`): neither the offset nor
/// TSC_ADJUST moves, or both move by the generation's delta, while the guest
/// wrote a value below the TSC it had just read. No handling moment gives
/// such a move, so KVM's own record says the value written was not set.
#[test]
fn a_write_snapped_to_another_offset_did_not_take_effect() {
    let v = 1_000_000;
    // vCPU 0: nothing moved (0/0) although it wrote 2,900 cycles below its last read.
    // vCPU 1: snapped to vCPU 0's timeline: both moved by -1,000, but its last read
    // before the write was 1,009,800, so an honoured write would have moved them by
    // at most v - 1,009,800 = -9,800.
    let samples = [
        VcpuSample {
            record: record(0, v, 1_002_900, 1_020_000),
            before: state(0, Some(0), 900_000, 900_000),
            after: state(0, Some(0), 2_000_000, 2_000_000),
        },
        VcpuSample {
            record: record(1, v, 1_009_800, 1_020_500),
            before: state(0, Some(0), 900_010, 900_000),
            after: state(
                -1_000i64 as u64,
                Some(-1_000i64 as u64),
                2_000_010,
                2_000_000,
            ),
        },
    ];
    let r = analyse_round(0, "xen-6ca022a1", &samples, &Base::creation(2), None);
    for c in &r.vcpus {
        assert_eq!(c.write_honoured, Some(false), "vCPU {}", c.id);
        assert_eq!(c.decided_by, Some(DecidedBy::WriteMoment), "vCPU {}", c.id);
    }
    assert_eq!(r.writes_honoured, Some(false));
    // The same round with the offsets moved by what the writes asked is honoured.
    let honest = [
        VcpuSample {
            after: state(
                (v as i64 - 1_003_000) as u64,
                Some((v as i64 - 1_003_000) as u64),
                2_000_000,
                2_000_000,
            ),
            ..samples[0]
        },
        VcpuSample {
            after: state(
                (v as i64 - 1_010_000) as u64,
                Some((v as i64 - 1_010_000) as u64),
                2_000_010,
                2_000_000,
            ),
            ..samples[1]
        },
    ];
    let r = analyse_round(0, "xen-6ca022a1", &honest, &Base::creation(2), None);
    assert_eq!(r.writes_honoured, Some(true));
}
