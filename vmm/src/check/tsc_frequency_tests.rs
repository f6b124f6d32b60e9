use super::*;
use crate::check::frequency::testdata::*;
use crate::tsc::frequency::SetVia;

#[test]
fn a_kvm_that_scales_passes_with_every_rate_seen() {
    let f = judge(&scaling_kvm(), KvmFlavor::Vmx);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(
        f.reason.contains("0.5x per vCPU") && f.reason.contains("2x per VM"),
        "{}",
        f.reason
    );
    assert!(f.details.len() == 2 + 5, "{:?}", f.details);
}

#[test]
fn without_scaling_half_is_refused_and_twice_is_caught_up() {
    let f = judge(&catch_up_kvm(), KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
    assert!(f.reason.contains("refused, as documented"), "{}", f.reason);
    assert!(f.reason.contains("served by catch-up"), "{}", f.reason);
    assert!(f.reason.contains("per VM not tried"), "{}", f.reason);
}

#[test]
fn an_accepted_rate_the_guest_does_not_run_at_fails() {
    // PVM: twice the host's is accepted and reported, the TSC runs at 1x.
    let mut ev = catch_up_kvm();
    ev.probes[1] = probe(SetVia::Vcpu, 2_000_000, Ok(()), 1.0, PAGE_2GHZ);
    let f = judge(&ev, KvmFlavor::Pvm);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason
            .contains("accepted and reported, but the guest's TSC ran at [0.99"),
        "{}",
        f.reason
    );
    assert!(
        f.reason.contains("not 2.0000") && f.reason.ends_with("(host: PVM)"),
        "{}",
        f.reason
    );
}

#[test]
fn a_rate_refused_that_scaling_should_take_fails() {
    let mut ev = scaling_kvm();
    ev.probes[0].set = Err("Invalid argument".into());
    ev.probes[0].reads.clear();
    let f = judge(&ev, KvmFlavor::Vmx);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason.contains("0.5x per vCPU") && f.reason.contains("KVM refused it"),
        "{}",
        f.reason
    );
}

#[test]
fn a_rate_kvm_reports_wrongly_fails() {
    let mut ev = scaling_kvm();
    ev.probes[1].reported = Some(HOST_KHZ);
    let f = judge(&ev, KvmFlavor::Vmx);
    assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    assert!(
        f.reason
            .contains("KVM_GET_TSC_KHZ then reports 2,000,000 kHz"),
        "{}",
        f.reason
    );
}

#[test]
fn brackets_too_wide_to_tell_are_undecided() {
    let mut ev = scaling_kvm();
    // The two reads 200 us apart with 50 us brackets: 0.5x and 1x both fit.
    ev.probes[0].reads = vec![
        read(1_000_000, 500_000, 0, PAGE_1GHZ),
        read(1_400_000, 700_000, 0, PAGE_1GHZ),
    ];
    ev.probes[0].reads[0].host_after = 1_150_000;
    ev.probes[0].reads[1].host_before = 1_250_000;
    let v = judge_probe(&ev.probes[0], &ev.scaling);
    assert_eq!(v.verdict, Verdict::Undecided, "{}", v.words);
    assert!(
        v.words.contains("holds both 0.5000 and the host's rate"),
        "{}",
        v.words
    );
}

#[test]
fn nothing_but_the_hosts_rate_is_no_control() {
    let mut ev = catch_up_kvm();
    ev.probes.remove(1);
    let f = judge(&ev, KvmFlavor::Svm);
    assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    assert!(
        f.reason.contains("positive control is missing"),
        "{}",
        f.reason
    );
}

#[test]
fn kvm_documents_each_rate_by_scaling_and_tolerance() {
    let (yes, no) = (scaling(true), scaling(false));
    assert_eq!(expect(1_000_000, &yes), Expect::Scaled);
    assert_eq!(expect(1_000_000, &no), Expect::Refused);
    assert_eq!(expect(4_000_000, &no), Expect::CatchUp);
    assert_eq!(expect(2_000_400, &no), Expect::Unscaled);
    assert_eq!(expect(1_999_600, &yes), Expect::Unscaled);
    assert_eq!(Expect::CatchUp.page_khz(4_000_000, HOST_KHZ), HOST_KHZ);
    assert_eq!(Expect::Scaled.page_khz(4_000_000, HOST_KHZ), 4_000_000);
}

#[test]
fn a_scaled_tsc_that_jumped_with_its_offset_kept_is_explained() {
    use crate::tsc::TscState;
    let mut ev = scaling_kvm();
    let state = |tsc: u64, khz: u32, scaled: bool| TscState {
        tsc,
        offset: Some((-5_000_000_000i64) as u64),
        tsc_khz: khz,
        host_khz: HOST_KHZ,
        scaled,
        ..TscState::default()
    };
    // Created at host TSC 5e9 (offset -5e9), halved at host TSC 9e9:
    // 0.5 * 9e9 - 5e9 = -5e8.
    ev.probes[0].before = Some(state(4_000_000_000, HOST_KHZ, false));
    ev.probes[0].after = Some(state((-500_000_000i64) as u64, HOST_KHZ / 2, true));
    let v = judge_probe(&ev.probes[0], &ev.scaling);
    assert_eq!(v.verdict, Verdict::Pass, "{}", v.words);
    assert!(
        v.words.contains("went from 4,000,000,000 to -500,000,000"),
        "{}",
        v.words
    );
    assert!(
        v.words.contains("offset unchanged (-5,000,000,000)"),
        "{}",
        v.words
    );
    // An offset that moved with the set explains nothing.
    ev.probes[0].after.as_mut().expect("after").offset = Some(0);
    assert!(rescaled(&ev.probes[0]).is_empty());
}
