//! Check 8's judge on synthetic writes at 1 GHz (1 cycle = 1 ns): a
//! kvmclock that runs on, one that follows the TSC (a stale page), a write
//! the hypervisor ignored, no exact offsets, and the control.

use tsc_contract::{ClockRecord, CLOCK_MAGIC};

use super::*;
use crate::check::evidence::ClockWrites;
use crate::tsc::TscState;

const KHZ: u32 = 1_000_000;
const D: u64 = 4_000_000_000;

/// A vCPU that read kvmclock `k1` at TSC 1,000, wrote, and read `k1 +
/// advance` at raw TSC `1_000 + elapsed + moved` (its TSC moved by `moved`),
/// on a page at 1 GHz (multiplier 2^31, shift 1) 50 us old (a page whose
/// version changed counts as rewritten).
fn record(advance: i64, elapsed: u64, moved: u64, version: (u32, u32)) -> ClockRecord {
    ClockRecord {
        magic: CLOCK_MAGIC,
        tag: 3,
        msr: 0x10,
        version_before: version.0,
        version_after: version.1,
        mul_before: 1 << 31,
        mul_after: 1 << 31,
        shifts: 1 | (1 << 8),
        tsc_before: 1_000,
        tsc_after: 1_000 + elapsed + moved,
        kvmclock_before: 50_000,
        kvmclock_after: 50_000u64.wrapping_add(advance as u64),
        ..ClockRecord::default()
    }
}

fn state(offset: Option<u64>) -> TscState {
    TscState {
        offset,
        tsc_khz: KHZ,
        ..TscState::default()
    }
}

/// Writes on two vCPUs whose TSCs moved by `moved` (exact offsets unless
/// `exact` is false), kvmclock advancing by `advance` over `elapsed`.
fn writes(advance: i64, elapsed: u64, moved: u64, exact: bool, version: (u32, u32)) -> ClockWrites {
    let off = |o: u64| exact.then_some(o);
    ClockWrites {
        msr: 0x10,
        delta: D,
        records: vec![record(advance, elapsed, moved, version); 2],
        before: vec![state(off(7)), state(off(7))],
        after: vec![state(off(7 + moved)), state(off(7 + moved))],
    }
}

#[test]
fn a_kvmclock_that_runs_on_passes_with_its_largest_jump() {
    // 2,000 ns passed; kvmclock advanced 2,001: a 1 ns jump, within the
    // 4 ns of rounding and the page's re-anchoring (1000 ppm of its 52 us).
    let w = writes(2_001, 2_000, D, true, (4, 6));
    let ctl = writes(2_000, 2_000, D, true, (6, 8));
    let f = judge(&w, Some(&ctl), KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(f.reason.contains("largest jump 1 ns"), "{}", f.reason);
    assert!(f.reason.contains("the largest 56 ns"), "{}", f.reason);
    assert!(
        f.reason.contains("TSC_ADJUST control ran on"),
        "{}",
        f.reason
    );
}

#[test]
fn a_kvmclock_that_follows_the_tsc_fails_naming_the_jump_and_the_version() {
    // The page was not updated: kvmclock advanced by the time plus the move.
    let w = writes(2_000 + D as i64, 2_000, D, true, (4, 4));
    let ctl = writes(2_000, 2_000, D, true, (4, 6));
    let f = judge(&w, Some(&ctl), KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.contains("jumped by 4,000,000,000 ns"),
        "{}",
        f.reason
    );
    assert!(
        f.reason.contains("pvclock version unchanged (4)"),
        "{}",
        f.reason
    );
    assert!(f.reason.contains("control ran on"), "{}", f.reason);
    assert!(f.reason.ends_with("(host: SVM)"), "{}", f.reason);
    // The details: a heading, the columns, then a row per vCPU and write.
    assert_eq!(f.details.len(), 2 + 2 + 2, "{:#?}", f.details);
    let row: Vec<&str> = f.details[2].split_whitespace().collect();
    assert_eq!(row[..2], ["0", "IA32_TSC"], "{}", f.details[2]);
    assert_eq!(row[6], "4,000,000,000", "the jump: {}", f.details[2]);
    assert_eq!(row[7], "4", "the allowance: {}", f.details[2]);
    assert_eq!(row[8], "4->4", "the version: {}", f.details[2]);
    assert!(f.details[5].contains("TSC_ADJUST"), "{}", f.details[5]);
}

#[test]
fn a_control_that_jumps_too_is_said() {
    // Both kinds of write left the page stale: the control, measured first, is named.
    let w = writes(2_000 + D as i64, 2_000, D, true, (4, 4));
    let f = judge(&w, Some(&w), KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason
            .contains("across a guest TSC_ADJUST write that moved its TSC"),
        "{}",
        f.reason
    );
    assert!(
        f.reason.contains("IA32_TSC jumps vCPU 0 4,000,000,000 ns"),
        "{}",
        f.reason
    );
}

#[test]
fn a_write_the_hypervisor_ignored_has_nothing_to_follow() {
    let w = writes(2_000, 2_000, 0, true, (4, 4));
    let f = judge(&w, None, KHZ, KvmFlavor::Pvm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.starts_with("the write did not move the TSC"),
        "{}",
        f.reason
    );
    assert!(f.reason.contains("no TSC_ADJUST control"), "{}", f.reason);
}

#[test]
fn without_exact_offsets_the_move_is_unknown() {
    let w = writes(2_000, 2_000, D, false, (4, 6));
    let f = judge(&w, None, KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.starts_with("no exact offsets"), "{}", f.reason);
}

/// A jump of neither kind is beyond a sound allowance: kvmclock did not
/// run on, whatever it did instead.
#[test]
fn a_jump_of_neither_kind_fails_beyond_its_allowance() {
    // Half the move: neither continuous nor following the TSC.
    let w = writes(2_000 + (D / 2) as i64, 2_000, D, true, (4, 6));
    let f = judge(&w, None, KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.contains("(kvmclock did not run on)"),
        "{}",
        f.reason
    );
}

/// The old tolerance, 5 % of the 4 s move (200 ms), counted a jump of
/// milliseconds as continuous. The allowance comes from the record: a page
/// KVM rewrote 50 us after its anchor may move kvmclock by NTP's 1000 ppm
/// of that (and rounding), so a 2 ms jump is seen; so is 100 us on a page
/// that was not rewritten at all.
#[test]
fn a_millisecond_jump_is_seen() {
    let w = writes(2_000 + 2_000_000, 2_000, D, true, (4, 6));
    let f = judge(&w, None, KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason
            .contains("jumped by 2,000,000 ns across a guest IA32_TSC write"),
        "{}",
        f.reason
    );
    assert!(
        f.reason.contains("beyond its allowance of 56 ns"),
        "{}",
        f.reason
    );
    let w = writes(2_000 + 100_000, 2_000, D, true, (6, 6));
    let f = judge(&w, None, KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.contains("the page was not rewritten"),
        "{}",
        f.reason
    );
    // An old page legitimately re-anchored: 1000 ppm of 10 s is 10 ms,
    // so the same 2 ms is within it.
    let mut w = writes(2_000 + 2_000_000, 2_000, D, true, (4, 6));
    for r in &mut w.records {
        r.kvmclock_before = 10_000_000_000;
        r.kvmclock_after = 10_000_000_000 + 2_002_000;
    }
    assert_eq!(judge(&w, None, KHZ, KvmFlavor::Svm).verdict, Verdict::Pass);
}

/// With the TSC frequency unknown the move is known in cycles but not in
/// ns: the old reason said "the write did not move the TSC", which is
/// false.
#[test]
fn an_unknown_frequency_is_said_as_such() {
    let w = writes(2_000, 2_000, D, true, (4, 6));
    let f = judge(&w, None, 0, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.starts_with("vCPU 0's TSC frequency is unknown"),
        "{}",
        f.reason
    );
    assert!(!f.reason.contains("did not move"), "{}", f.reason);
}

#[test]
fn the_jump_is_the_advance_minus_the_time_that_passed() {
    let w = writes(2_300, 2_000, D, true, (1, 2));
    let s = seen(&w, KHZ);
    assert_eq!(s[0].tsc_moved_cycles, Some(D as i64));
    assert_eq!(s[0].elapsed_ns, Some(2_000.0));
    assert_eq!(s[0].jump_ns, Some(300.0));
    assert_eq!(s[0].version, (1, 2));
}

/// A reading taken with the TSC below its page's tsc_timestamp wrapped:
/// kvmclock leapt, the page was not re-anchored for the TSC the write left,
/// and that is evidence whatever the offsets say.
#[test]
fn a_reading_that_wrapped_fails() {
    let mut w = writes(2_000, 2_000, D, false, (4, 4));
    for r in &mut w.records {
        r.tsc_timestamp_after = r.tsc_after + 1_000_000;
        r.kvmclock_after = u64::MAX / 3;
    }
    let f = judge(&w, None, KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason
            .contains("vCPU 0's kvmclock wrapped (it advanced by"),
        "{}",
        f.reason
    );
    assert!(f.details[2].contains("wrapped"), "{}", f.details[2]);
}

#[test]
fn a_control_that_left_its_page_stale_fails_whatever_the_writes_after_it_show() {
    // A guest TSC_ADJUST write without its clock update (d9130a2dfdd4 reverted):
    // the control's kvmclock follows the TSC; the IA32_TSC write after it is
    // re-anchored and jumps back by the control's move. The failure is the
    // control's, and the IA32_TSC writes are not judged from that page.
    let ctl = writes(2_000 + D as i64, 2_000, D, true, (4, 4));
    let w = writes(2_000 - D as i64, 2_000, D, true, (4, 6));
    let f = judge(&w, Some(&ctl), KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(f.reason.contains("guest TSC_ADJUST write"), "{}", f.reason);
    assert!(
        f.reason.contains("kvmclock followed the TSC"),
        "{}",
        f.reason
    );
    assert!(f.reason.contains("not judged"), "{}", f.reason);
    // The same control beside IA32_TSC writes that ran on: still a FAIL.
    let fine = writes(2_000, 2_000, D, true, (6, 8));
    let f = judge(&fine, Some(&ctl), KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    // A control that ran on leaves the verdict to the IA32_TSC writes.
    let good_ctl = writes(2_000, 2_000, D, true, (4, 6));
    let f = judge(&fine, Some(&good_ctl), KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    // So does a control re-anchored by a jump of neither kind (20 us back, beyond
    // its allowance but nowhere near its move): reported, not judged.
    let reanchored = writes(2_000 - 20_000, 2_000, D, true, (4, 6));
    let f = judge(&fine, Some(&reanchored), KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(f.reason.contains("did not run on either"), "{}", f.reason);
}
