use super::*;
use crate::check::frequency::testdata::*;
use crate::tsc::frequency::SetVia;

#[test]
fn pages_at_the_tscs_rate_and_kvmclock_at_real_time_pass() {
    let f = judge(&scaling_kvm(), KvmFlavor::Vmx);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(
        f.reason
            .contains("0.5x per VM: the page converts at 1,000,000 kHz"),
        "{}",
        f.reason
    );
    assert!(
        f.reason.contains("ran on across the change"),
        "{}",
        f.reason
    );
}

#[test]
fn under_catch_up_the_page_keeps_the_hosts_rate() {
    let f = judge(&catch_up_kvm(), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(
        f.reason
            .contains("2x per vCPU: the page converts at 2,000,000 kHz"),
        "{}",
        f.reason
    );
    assert!(
        f.reason.contains("while its TSC ran at [1.99"),
        "{}",
        f.reason
    );
}

#[test]
fn a_page_left_at_the_old_rate_fails() {
    let mut ev = scaling_kvm();
    ev.probes[0] = probe(SetVia::Vcpu, 500_000, Ok(()), 0.5, PAGE_2GHZ);
    let f = judge(&ev, KvmFlavor::Vmx);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason
            .contains("converts at 2,000,000 kHz, not the 1,000,000 kHz"),
        "{}",
        f.reason
    );
}

#[test]
fn a_kvmclock_that_follows_the_tsc_fails() {
    let mut ev = scaling_kvm();
    for r in &mut ev.probes[0].reads {
        r.kvmclock_ns /= 2; // kvmclock at half real time
    }
    let f = judge(&ev, KvmFlavor::Vmx);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(f.reason.contains("kvmclock ran at [0.49"), "{}", f.reason);
}

#[test]
fn a_jump_across_the_change_fails_naming_the_unchanged_version() {
    let mut ev = scaling_kvm();
    // Every read after the change 0.7 s ahead of the one before it.
    for r in &mut ev.probes[0].reads {
        r.kvmclock_ns += 700_000_000;
    }
    let f = judge(&ev, KvmFlavor::Vmx);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.contains("kvmclock jumped by 700,0"),
        "{}",
        f.reason
    );
    assert!(
        f.reason
            .contains("page version 4 -> 4: the page was not updated"),
        "{}",
        f.reason
    );
}

#[test]
fn continuity_allows_ntps_slew_and_nothing_more() {
    let pre = read(1_000_000, 0, 500_000, PAGE_2GHZ);
    let mut post = read(2_000_001_000, 0, 1_000_000_500, PAGE_2GHZ);
    assert!(!Across::of(pre, post).jumped());
    post.kvmclock_ns += 900_000; // 900 us over 1 s: within 1,000 ppm
    assert!(!Across::of(pre, post).jumped());
    post.kvmclock_ns += 200_000;
    assert!(Across::of(pre, post).jumped());
}

#[test]
fn without_a_tsc_off_the_hosts_rate_there_is_no_control() {
    let mut ev = catch_up_kvm();
    ev.probes.remove(1);
    let f = judge(&ev, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(f.reason.contains("positive control"), "{}", f.reason);
}

#[test]
fn no_page_is_no_kvmclock() {
    let mut ev = scaling_kvm();
    for p in &mut ev.probes {
        for r in &mut p.reads {
            r.version = 0;
        }
    }
    assert_eq!(judge(&ev, KvmFlavor::Vmx).verdict, Verdict::Undecided);
}
