//! Check 4's judge on rounds made by hand and on later reads built to move
//! the guest's TSC by a chosen amount; the recorded reads of a real ignored
//! and a real honoured write are in `super::super::testdata`.

use super::super::testdata::{round, vcpu};
use super::*;
use crate::analysis::VcpuResult;

/// A read before the first round and a later one 40 M host cycles on,
/// each bracketed by ±5,000 host cycles, between which the guest's TSC
/// moved by `moved` against the host's: the brackets allow `moved` ±
/// 10,000.
fn pair(moved: i64) -> (Read, Read) {
    let first = Read {
        tsc: 10_000_000,
        host_before: 9_995_000,
        host_after: 10_005_000,
        ratio: crate::tsc::frequency::Ratio::ONE,
    };
    let later = Read {
        tsc: 50_005_000u64.wrapping_add(moved as u64),
        host_before: 50_000_000,
        host_after: 50_010_000,
        ratio: crate::tsc::frequency::Ratio::ONE,
    };
    (first, later)
}

#[test]
fn the_brackets_bound_the_move_and_decide_only_outside_each_other() {
    let f = read_says(pair(-400_000).0, pair(-400_000).1, -400_000);
    assert_eq!(f.moved, (-410_000, -390_000));
    assert_eq!(f.says, ReadSays::Honoured);
    let (a, b) = pair(0);
    assert_eq!(read_says(a, b, -400_000).says, ReadSays::Ignored);
    assert_eq!(read_says(a, b, 9_999).says, ReadSays::CannotTell);
    assert_eq!(read_says(a, b, 10_000).says, ReadSays::CannotTell);
    assert_eq!(read_says(a, b, 10_001).says, ReadSays::Ignored);
    let (a, b) = pair(-200_000);
    assert_eq!(read_says(a, b, -400_000).says, ReadSays::Neither);
    // Offsets and TSCs wrap modulo 2^64: a move across the wrap is small.
    let (mut a, mut b) = pair(-400_000);
    a.tsc = a.tsc.wrapping_sub(20_000_000);
    b.tsc = b.tsc.wrapping_sub(20_000_000);
    assert_eq!(read_says(a, b, -400_000).says, ReadSays::Honoured);
}

#[test]
fn honoured_writes_and_a_later_read_where_they_put_the_tsc_pass() {
    let r = [round(
        vec![vcpu(0, -400_000, Some(-400_000), Some(true))],
        Some(true),
        0,
    )];
    let t = RoundTally::of(&r);
    let f = judge(&t, &[pair(-400_000)], 1_000, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert_eq!(f.values["later_reads"][0]["says"], "honoured");
    // The same rounds, but the guest's TSC ran on as if nothing had been
    // written: the later read is evidence that the writes did not hold.
    let f = judge(&t, &[pair(0)], 1_000, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.starts_with(
            "a later guest read shows vCPU 0's TSC moved by -10,000..10,000 cycles against the \
             host's since before the first round, not by the -400,000 its writes asked"
        ),
        "{}",
        f.reason
    );
    // Neither 0 nor what was asked: not "written value plus elapsed time".
    let f = judge(&t, &[pair(-200_000)], 1_000, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(f.reason.contains("neither the -400,000"), "{}", f.reason);
}

/// Writes that asked for less than the brackets' width: the later read
/// cannot tell them from none, and says so.
#[test]
fn a_later_read_too_coarse_for_the_writes_is_undecided() {
    let r = [round(
        vec![vcpu(0, -400, Some(-400), Some(true))],
        Some(true),
        0,
    )];
    let f = judge(&RoundTally::of(&r), &[pair(-400)], 1_000, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason
            .starts_with("the later read cannot tell vCPU 0's writes from none"),
        "{}",
        f.reason
    );
}

/// A true ignored write: the offsets did not move, the guest's TSC did
/// not jump: FAIL, with the reason taken from that evidence.
#[test]
fn a_truly_ignored_write_fails_with_its_evidence() {
    let r = [round(
        vec![vcpu(0, -400_000, Some(0), Some(false))],
        Some(false),
        0,
    )];
    let f = judge(&RoundTally::of(&r), &[pair(0)], 1_000, KvmFlavor::Pvm);
    assert_eq!(f.verdict, Verdict::Fail);
    assert!(
        f.reason.starts_with(
            "1 of 1 vCPU-rounds' writes did not take effect: the exact offsets did not move, the guests' TSCs did not jump either"
        ),
        "{}",
        f.reason
    );
    assert!(
        f.reason.contains("a later guest read shows"),
        "{}",
        f.reason
    );
    assert!(f.reason.ends_with(" (host: PVM)"), "{}", f.reason);
}

/// KVM's evidence undecided (no exact offsets, tiny delta), the guest saw
/// its TSC jump: decided by the guest, and the check passes.
#[test]
fn undecided_host_evidence_with_a_decisive_guest_passes() {
    let r = [round(
        vec![
            vcpu(0, -400_000, None, Some(true)),
            vcpu(1, -900_000, None, Some(true)),
        ],
        Some(true),
        0,
    )];
    let reads = [pair(-400_000), pair(-900_000)];
    let f = judge(&RoundTally::of(&r), &reads, 1_000, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert_eq!(f.values["decided_by_guest"], 2);
    assert!(
        f.reason
            .contains("0 decided by KVM's evidence, 2 by the guest's"),
        "{}",
        f.reason
    );
}

/// Neither side decided one vCPU-round: UNDECIDED, never "not honoured",
/// never FAIL.
#[test]
fn a_vcpu_round_neither_side_decides_is_undecided_not_a_failure() {
    let r = [
        round(
            vec![vcpu(0, -400_000, Some(-400_000), Some(true))],
            Some(true),
            0,
        ),
        round(vec![vcpu(0, -300_000, None, None)], None, 0),
    ];
    let f = judge(
        &RoundTally::of(&r),
        &[pair(-700_000)],
        1_000,
        KvmFlavor::Svm,
    );
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason
            .starts_with("1 of 2 vCPU-rounds could not be decided"),
        "{}",
        f.reason
    );
    assert_eq!(f.values["not_honoured"], 0);
}

/// A write of the value the TSC already held (TSC_ADJUST delta 0, the
/// exact offset unmoved) is no gap in the evidence: beside decided writes
/// the check passes and says so; writes that all moved nothing show
/// nothing, so the check is UNDECIDED, never PASS.
#[test]
fn a_write_that_moved_nothing_is_neither_evidence_nor_a_gap() {
    // KVM handled the write when the TSC held the value written (5,000),
    // between the guest's reads before it (4,500) and after the loop (5,100).
    let still = |off| VcpuResult {
        tsc_at_write: Some(5_000),
        ..vcpu(0, 0, off, None)
    };
    let r = [
        round(
            vec![vcpu(0, -400_000, Some(-400_000), Some(true))],
            Some(true),
            0,
        ),
        round(vec![still(Some(0))], None, 0),
    ];
    let t = RoundTally::of(&r);
    assert_eq!(
        (t.wrote, t.honoured, t.undecided, t.moved_nothing),
        (2, 1, 0, 1)
    );
    let f = judge(&t, &[pair(-400_000)], 1_000, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(
        f.reason
            .contains("1 wrote the value their TSC already held and moved nothing"),
        "{}",
        f.reason
    );
    assert_eq!(f.values["moved_nothing"], 1);

    let r = [round(vec![still(Some(0))], None, 0)];
    let f = judge(&RoundTally::of(&r), &[pair(0)], 1_000, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.starts_with("all 1 vCPU-rounds wrote the value"),
        "{}",
        f.reason
    );

    // Without exact offsets a delta of 0 is undecided as before: the
    // bracketed reads cannot show that the offset did not move.
    let r = [
        round(
            vec![vcpu(0, -400_000, Some(-400_000), Some(true))],
            Some(true),
            0,
        ),
        round(vec![vcpu(0, 0, None, None)], None, 0),
    ];
    let f = judge(
        &RoundTally::of(&r),
        &[pair(-400_000)],
        1_000,
        KvmFlavor::Svm,
    );
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
}

/// The offsets say ignored, the guest's TSC jumped: contradictory, so
/// undecided; the check never says "not honoured" while the guest saw the
/// jump.
#[test]
fn contradictory_evidence_is_undecided_and_said() {
    let r = [round(vec![vcpu(0, -400, Some(0), Some(true))], None, 0)];
    let f = judge(&RoundTally::of(&r), &[pair(-400)], 1_000, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.contains("contradict"), "{}", f.reason);
    assert!(!f.reason.contains("did not take effect"), "{}", f.reason);
}

#[test]
fn no_rounds_or_no_writes_is_a_skip() {
    assert_eq!(
        judge(&RoundTally::default(), &[], 0, KvmFlavor::Svm).verdict,
        Verdict::Skip
    );
    let mut quiet = vcpu(0, 0, Some(0), None);
    quiet.wrote = false;
    let f = judge(
        &RoundTally::of(&[round(vec![quiet], None, 0)]),
        &[pair(0)],
        1_000,
        KvmFlavor::Svm,
    );
    assert_eq!(f.verdict, Verdict::Skip);
    assert!(f.reason.contains("nothing to honour"), "{}", f.reason);
}

/// The finding: the later read must tell an ignored write from an
/// honoured one. Recorded reads of ignored writes (PVM) and reads built
/// from a real run whose writes were honoured (the host backend), see
/// `testdata`: each is read as what it is, and the honoured run's numbers
/// with the write taken away read as ignored.
#[test]
fn recorded_reads_tell_an_ignored_write_from_an_honoured_one() {
    use super::super::testdata::{host_backend, PVM_IGNORED};
    for (first, later, asked) in PVM_IGNORED {
        assert_eq!(read_says(first, later, asked).says, ReadSays::Ignored);
    }
    for (first, later, asked) in host_backend(false) {
        assert_eq!(read_says(first, later, asked).says, ReadSays::Honoured);
    }
    for (first, later, asked) in host_backend(true) {
        assert_eq!(read_says(first, later, asked).says, ReadSays::Ignored);
    }
}

/// Where the rounds' own evidence could not decide (no exact offsets, a
/// guest that could not tell), the later read alone shows that PVM's writes
/// did not take effect: FAIL, not UNDECIDED; the honoured run's reads leave
/// it UNDECIDED (the rounds are), and with decided rounds it passes.
#[test]
fn the_later_read_alone_catches_recorded_ignored_writes() {
    use super::super::testdata::{host_backend, Recorded, HOST_LAST_WRITTEN};
    use super::super::testdata::{PVM_IGNORED, PVM_LAST_WRITTEN, PVM_SINCE_LAST_ROUND};
    let judged = |reads: [Recorded; 2], written: u64, decided: bool| {
        // Decided: the exact offsets moved by the deltas and the guest saw
        // the jump; undecided: no exact offsets, the guest could not tell.
        let v: Vec<_> = reads
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut v = match decided {
                    true => vcpu(i as u32, r.2, Some(r.2), Some(true)),
                    false => vcpu(i as u32, r.2, None, None),
                };
                v.written_value = written;
                v
            })
            .collect();
        let t = RoundTally::of(&[round(v, decided.then_some(true), 0)]);
        let pairs: Vec<(Read, Read)> = reads.iter().map(|r| (r.0, r.1)).collect();
        judge(&t, &pairs, PVM_SINCE_LAST_ROUND, KvmFlavor::Pvm)
    };
    let f = judged(PVM_IGNORED, PVM_LAST_WRITTEN, false);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.starts_with(
            "a later guest read shows vCPU 0's TSC moved by -364,100..354,780 cycles against \
             the host's since before the first round, not by the -318,418,095 its writes asked"
        ),
        "{}",
        f.reason
    );
    let f = judged(host_backend(false), HOST_LAST_WRITTEN, false);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    let f = judged(host_backend(false), HOST_LAST_WRITTEN, true);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
}

#[test]
fn writes_snapped_to_one_offset_fail_naming_the_moment_of_the_write() {
    // KVM moved neither the offset nor TSC_ADJUST, but the guest wrote below the
    // TSC it had just read: the analysis decided "not taken effect" by the
    // write's moment (analysis/tests.rs), and check 4 says so.
    let mut v = vcpu(0, 0, Some(0), None);
    v.write_honoured = Some(false);
    v.decided_by = Some(crate::analysis::DecidedBy::WriteMoment);
    let r = [round(vec![v], Some(false), 0)];
    let t = RoundTally::of(&r);
    let f = judge(&t, &[pair(0)], 1_000, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.contains("before the guest issued it"),
        "{}",
        f.reason
    );
    assert_eq!(f.values["not_honoured"], 1);
}
