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
/// advance` at raw TSC `1_000 + elapsed + moved` (its TSC moved by `moved`).
fn record(advance: i64, elapsed: u64, moved: u64, version: (u32, u32)) -> ClockRecord {
    ClockRecord {
        magic: CLOCK_MAGIC,
        tag: 3,
        msr: 0x10,
        version_before: version.0,
        version_after: version.1,
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
    // 2,000 ns passed; kvmclock advanced 2,300: a 300 ns jump, far within 5 %.
    let w = writes(2_300, 2_000, D, true, (4, 6));
    let ctl = writes(2_000, 2_000, D, true, (6, 8));
    let f = judge(&w, Some(&ctl), KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(f.reason.contains("largest jump 300 ns"), "{}", f.reason);
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
    assert_eq!(row[7], "4->4", "the version: {}", f.details[2]);
    assert!(f.details[5].contains("TSC_ADJUST"), "{}", f.details[5]);
}

#[test]
fn a_control_that_jumps_too_is_said() {
    let w = writes(2_000 + D as i64, 2_000, D, true, (4, 4));
    let f = judge(&w, Some(&w), KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.contains("the TSC_ADJUST control jumped too"),
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

#[test]
fn a_jump_of_neither_kind_is_undecided() {
    // Half the move: neither continuous nor following the TSC.
    let w = writes(2_000 + (D / 2) as i64, 2_000, D, true, (4, 6));
    let f = judge(&w, None, KHZ, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.starts_with("kvmclock moved neither"),
        "{}",
        f.reason
    );
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
