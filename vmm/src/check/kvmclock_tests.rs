//! Check 8's judge on synthetic writes at 1 GHz (1 cycle = 1 ns): a
//! kvmclock that runs on, one that follows the TSC (a stale page), a write
//! the hypervisor ignored, no exact offsets, and the control.

use tsc_contract::{ClockRecord, CLOCK_MAGIC};

use super::*;
use crate::check::evidence::ClockWrites;
use crate::tsc::host_clock::{ClockDrift, ClockPoint};
use crate::tsc::TscState;

const KHZ: u32 = 1_000_000;
const D: u64 = 4_000_000_000;

/// A vCPU that read kvmclock `k1` at TSC 1,000, wrote, and read `k1 +
/// advance` at raw TSC `1_000 + elapsed + moved` (its TSC moved by `moved`),
/// on a page at 1 GHz (multiplier 2^31, shift 1) 50 us old (a page whose
/// version changed counts as rewritten, and is 1 us old at the second
/// reading).
fn record(advance: i64, elapsed: u64, moved: u64, version: (u32, u32)) -> ClockRecord {
    let kvmclock_after = 50_000u64.wrapping_add(advance as u64);
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
        kvmclock_after,
        system_time_after: if version.0 == version.1 {
            0
        } else {
            kvmclock_after.wrapping_sub(1_000)
        },
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
    let f = judge(&w, Some(&ctl), KHZ, KvmFlavor::Svm, None);
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
    let f = judge(&w, Some(&ctl), KHZ, KvmFlavor::Svm, None);
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
    assert_eq!(f.details.len(), 2 + 2 + 2 + 1, "{:#?}", f.details);
    assert!(
        f.details[6].contains("not measured") && f.details[6].contains("1,000 ppm"),
        "the host line: {}",
        f.details[6]
    );
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
    let f = judge(&w, Some(&w), KHZ, KvmFlavor::Svm, None);
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
    let f = judge(&w, None, KHZ, KvmFlavor::Pvm, None);
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
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, None);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.starts_with("no exact offsets"), "{}", f.reason);
}

/// A jump of neither kind is beyond a sound allowance: kvmclock did not
/// run on, whatever it did instead.
#[test]
fn a_jump_of_neither_kind_fails_beyond_its_allowance() {
    // Half the move: neither continuous nor following the TSC.
    let w = writes(2_000 + (D / 2) as i64, 2_000, D, true, (4, 6));
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, None);
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
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, None);
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
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, None);
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
    assert_eq!(
        judge(&w, None, KHZ, KvmFlavor::Svm, None).verdict,
        Verdict::Pass
    );
}

/// With the TSC frequency unknown the move is known in cycles but not in
/// ns: the old reason said "the write did not move the TSC", which is
/// false.
#[test]
fn an_unknown_frequency_is_said_as_such() {
    let w = writes(2_000, 2_000, D, true, (4, 6));
    let f = judge(&w, None, 0, KvmFlavor::Svm, None);
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
    let s = seen(&w, KHZ, reanchor_ppm(None));
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
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, None);
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
    let f = judge(&w, Some(&ctl), KHZ, KvmFlavor::Svm, None);
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
    let f = judge(&fine, Some(&ctl), KHZ, KvmFlavor::Svm, None);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    // A control that ran on leaves the verdict to the IA32_TSC writes.
    let good_ctl = writes(2_000, 2_000, D, true, (4, 6));
    let f = judge(&fine, Some(&good_ctl), KHZ, KvmFlavor::Svm, None);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    // So does a control re-anchored with a step (20 us back, beyond its
    // allowance, within what a re-anchoring of its 50 us old page can do):
    // reported, not judged.
    let reanchored = writes(2_000 - 20_000, 2_000, D, true, (4, 6));
    let f = judge(&fine, Some(&reanchored), KHZ, KvmFlavor::Svm, None);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(f.reason.contains("re-anchored and stepped"), "{}", f.reason);
    // And a control that jumped beyond any re-anchoring (200 us back from a
    // 50 us old page).
    let jumped = writes(2_000 - 200_000, 2_000, D, true, (4, 6));
    let f = judge(&fine, Some(&jumped), KHZ, KvmFlavor::Svm, None);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(f.reason.contains("did not run on either"), "{}", f.reason);
}

/// A host whose clock ran `ppm` off its 1 GHz TSC over one second, read
/// through brackets of 10 cycles.
fn drift(ppm: i64) -> ClockDrift {
    let point = |raw_ns: u64, tsc: u64| ClockPoint {
        raw_ns,
        tsc_before: tsc,
        tsc_after: tsc + 10,
    };
    let ns = (1_000_000_000 + ppm * 1_000) as u64;
    ClockDrift::between(point(0, 0), point(ns, 1_000_000_000), KHZ).expect("a drift")
}

/// An emulated host's clock can run thousands of ppm off its TSC (QEMU's
/// TCG: 1,800 ppm, seen as a 1,768 ns step over a 973 us old page): a page
/// KVM re-anchored moves kvmclock by that rate over its age. Measured, the
/// rate widens the re-anchoring's allowance, and the details say so; not
/// measured, the same step is beyond NTP's 1000 ppm.
#[test]
fn a_host_clock_measured_off_its_tsc_widens_a_reanchoring() {
    // A page 1 ms old at the first reading, rewritten: kvmclock stepped back
    // 1,800 ns, as a clock 1,800 ppm slow re-anchors it.
    let mut w = writes(2_000 - 1_800, 2_000, D, true, (4, 6));
    for r in &mut w.records {
        r.kvmclock_before = 1_000_000;
        r.kvmclock_after = 1_000_000 + 200;
    }
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, None);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.contains("1,000 ppm"), "{}", f.reason);
    let host = drift(-1_800);
    assert!(host.lo_ppm < -1_799.0 && host.hi_ppm > -1_801.0, "{host:?}");
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, Some(&host));
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    let line = f.details.last().expect("the host line");
    assert!(
        line.contains("CLOCK_MONOTONIC_RAW ran -1800") && line.contains("2,801 ppm"),
        "{line}"
    );
    // A host clock measured on time leaves NTP's allowance as it was.
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, Some(&drift(0)));
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
}

/// The measured drift only widens a re-anchoring: a page KVM did not
/// rewrite converts the TSC exactly, so a stale page still fails by its
/// 4 s, and a 100 us step on an unwritten page still fails, whatever the
/// host's clock did.
#[test]
fn a_host_drift_excuses_no_page_that_was_not_rewritten() {
    let host = drift(5_000);
    let stale = writes(2_000 + D as i64, 2_000, D, true, (4, 4));
    let f = judge(&stale, None, KHZ, KvmFlavor::Svm, Some(&host));
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(f.reason.contains("followed the TSC"), "{}", f.reason);
    let stepped = writes(2_000 + 100_000, 2_000, D, true, (6, 6));
    let f = judge(&stepped, None, KHZ, KvmFlavor::Svm, Some(&host));
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
}

/// A re-anchoring steps kvmclock by the time between KVM's reads of the
/// host's TSC and clock, which only the pages' ages bound: a step within
/// them is UNDECIDED (no stale page, no fault shown), one beyond them FAILs
/// (no re-anchoring steps that far), on either side.
#[test]
fn a_reanchoring_step_is_undecided_within_the_pages_ages_and_fails_beyond() {
    // The old page 50 us old: a step back of 40 us is within it.
    let w = writes(2_000 - 40_000, 2_000, D, true, (4, 6));
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, None);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason
            .contains("within the -50,056 to +1,056 ns a re-anchoring can step"),
        "{}",
        f.reason
    );
    assert!(f.reason.contains("no stale page"), "{}", f.reason);
    // 60 us back: beyond the old page's age.
    let w = writes(2_000 - 60_000, 2_000, D, true, (4, 6));
    assert_eq!(
        judge(&w, None, KHZ, KvmFlavor::Svm, None).verdict,
        Verdict::Fail
    );
    // Forward, the new page's age (1 us at the second reading) bounds it.
    let w = writes(2_000 + 1_000, 2_000, D, true, (4, 6));
    assert_eq!(
        judge(&w, None, KHZ, KvmFlavor::Svm, None).verdict,
        Verdict::Undecided
    );
    let w = writes(2_000 + 2_000, 2_000, D, true, (4, 6));
    assert_eq!(
        judge(&w, None, KHZ, KvmFlavor::Svm, None).verdict,
        Verdict::Fail
    );
    // The same step on a page KVM did not rewrite: nothing re-anchored it.
    let w = writes(2_000 - 40_000, 2_000, D, true, (6, 6));
    assert_eq!(
        judge(&w, None, KHZ, KvmFlavor::Svm, None).verdict,
        Verdict::Fail
    );
}

/// A re-anchored page older than a backward move: a re-anchoring (the old
/// page leading the clock by up to its age) and a stale page read alike, and
/// the check says so instead of failing.
#[test]
fn a_page_as_old_as_the_move_is_undecided() {
    let back = D.wrapping_neg();
    let mut w = writes(2_000 - D as i64, 2_000, back, true, (4, 6));
    for r in &mut w.records {
        r.kvmclock_before = 5 * D;
        r.kvmclock_after = 4 * D + 2_000;
        r.system_time_after = r.kvmclock_after - 1_000;
        r.tsc_timestamp_after = r.tsc_after.wrapping_sub(1_000);
    }
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, None);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.contains("read alike"), "{}", f.reason);
    // A young page: the same backward jump is the stale page's.
    let w = writes(2_000 - D as i64, 2_000, back, true, (4, 6));
    let f = judge(&w, None, KHZ, KvmFlavor::Svm, None);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
}
