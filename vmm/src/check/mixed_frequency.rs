//! Check 12, `mixed-frequency`: two vCPUs of one VM at different TSC rates
//! (vCPU 1 set to twice the host's, which KVM takes with or without
//! scaling, before either vCPU first runs), against what KVM_GET_CLOCK's
//! KVM_CLOCK_TSC_STABLE and each page's PVCLOCK_TSC_STABLE_BIT promise: one
//! kvmclock for both. Judged as check 9 ([`super::master_clock::judge`]):
//! the vCPUs measure each other's kvmclock with the forced hand-off test.
//!
//! SKIP where KVM refused the second rate or the vCPUs ended at one rate
//! (nothing mixed), or where KVM makes no promise (as check 9).

use serde_json::json;

use super::evidence::{Check, Context, Evidence};
use super::frequency::Mixed;
use super::report::{Finding, Verdict};
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::units::fmt_int as n;

/// Check 12.
pub struct MixedFrequency;

impl Check for MixedFrequency {
    fn number(&self) -> u32 {
        12
    }
    fn id(&self) -> &'static str {
        "mixed-frequency"
    }
    fn title(&self) -> &'static str {
        "vCPUs of one VM at different TSC rates: KVM_CLOCK_TSC_STABLE and PVCLOCK_TSC_STABLE_BIT \
         agree with the kvmclocks the vCPUs see"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        let Some(f) = &ev.frequency else {
            return Ok(super::judge::missing("TSC-frequency probes"));
        };
        let Some(m) = &f.mixed else {
            return Ok(Finding::skip(format!(
                "the mixed-rate VM could not be measured: {}",
                f.errors.join("; ")
            )));
        };
        let host = &ev.env.host;
        Ok(judge(m, host.clocksource.as_deref(), host.kvm_flavor))
    }
}

/// Check 12 from the mixed-rate VM, the host's clocksource and flavour.
pub fn judge(m: &Mixed, clocksource: Option<&str>, flavor: KvmFlavor) -> Finding {
    let rates = m
        .khz
        .iter()
        .enumerate()
        .map(|(i, k)| format!("vCPU {i} at {} kHz", n(*k)))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some(Err(e)) = m.set.iter().find(|s| s.is_err()) {
        return Finding::skip(format!(
            "KVM refused vCPU 1's rate ({e}): the VM's vCPUs run at one rate"
        ))
        .with("khz", &m.khz);
    }
    if m.khz.windows(2).all(|w| w[0] == w[1]) {
        return Finding::skip(format!("nothing mixed: {rates}")).with("khz", &m.khz);
    }
    let vcpus = m.khz.len() as u32;
    let mut f = super::master_clock::judge_unpredicted(vcpus, &m.view, clocksource, flavor);
    f.value("khz", &m.khz);
    f.value(
        "pages",
        m.view
            .pages
            .iter()
            .map(|p| json!({"mul": p.tsc_to_system_mul, "shift": p.tsc_shift, "flags": p.flags}))
            .collect::<Vec<_>>(),
    );
    let reason = f
        .reason
        .replace(
            "after the guests' TSC writes",
            "with the vCPUs at different rates",
        )
        .replace("no master clock after the rounds", "no master clock");
    f.reason = format!("{rates}: {reason}");
    if let Some(first) = f.details.first_mut() {
        *first = first.replace("Check 9", "Check 12");
    }
    if f.verdict == Verdict::Fail {
        f.reason.push_str(
            "; each page converts its own vCPU's TSC, so the kvmclocks can agree only if every \
             page is fresh",
        );
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::master_clock::tests::{view, STABLE};

    fn agreeing_view() -> crate::check::evidence::ClockView {
        view(0, 5_000, STABLE, [true; 2])
    }

    fn contradicting_view() -> crate::check::evidence::ClockView {
        view(2_000_000, 5_000, STABLE, [true; 2])
    }

    fn mixed(view: crate::check::evidence::ClockView, khz: Vec<u32>) -> Mixed {
        Mixed {
            khz,
            set: vec![Ok(())],
            view,
        }
    }

    #[test]
    fn a_stable_clock_the_mixed_vcpus_agree_with_passes() {
        let f = judge(
            &mixed(agreeing_view(), vec![2_000_000, 4_000_000]),
            Some("tsc"),
            KvmFlavor::Vmx,
        );
        assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
        assert!(
            f.reason
                .starts_with("vCPU 0 at 2,000,000 kHz, vCPU 1 at 4,000,000 kHz: "),
            "{}",
            f.reason
        );
        assert!(
            f.reason.contains("with the vCPUs at different rates"),
            "{}",
            f.reason
        );
    }

    #[test]
    fn a_stable_clock_the_mixed_vcpus_contradict_fails() {
        let f = judge(
            &mixed(contradicting_view(), vec![2_000_000, 4_000_000]),
            Some("tsc"),
            KvmFlavor::Vmx,
        );
        assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
        assert!(
            f.reason.contains("only if every page is fresh"),
            "{}",
            f.reason
        );
        assert!(f.details[0].starts_with("Check 12"), "{:?}", f.details);
    }

    /// Stale pages at two rates: the kvmclocks run apart during the test, so
    /// the exchanges' ends cross (the Bochs/VMX run's pair (0, 1) in the
    /// kernel matrix). Still a FAIL, said as a difference that moved.
    #[test]
    fn kvmclocks_that_run_apart_fail_as_no_constant_difference() {
        let f = judge(
            &mixed(
                view(2_558_000_000, -4_300_000, STABLE, [true; 2]),
                vec![2_419_200, 4_838_400],
            ),
            Some("tsc"),
            KvmFlavor::Vmx,
        );
        assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
        assert!(
            f.reason.contains(
                "2,562,300,000 ns apart beyond the bound, and by no constant difference: vCPU \
                 0's minus vCPU 1's was at least -2,553,700,000 ns at one exchange and at most \
                 -2,562,300,000 ns at another, so it moved by at least 8,600,000 ns"
            ),
            "{}",
            f.reason
        );
        assert!(!f.reason.contains(" in ["), "{}", f.reason);
    }

    #[test]
    fn a_refused_or_equal_rate_is_nothing_mixed() {
        let mut m = mixed(agreeing_view(), vec![2_000_000, 4_000_000]);
        m.set = vec![Err("Invalid argument".into())];
        assert_eq!(judge(&m, None, KvmFlavor::Svm).verdict, Verdict::Skip);
        let m = mixed(agreeing_view(), vec![2_000_000, 2_000_000]);
        let f = judge(&m, None, KvmFlavor::Svm);
        assert_eq!(f.verdict, Verdict::Skip);
        assert!(f.reason.starts_with("nothing mixed"), "{}", f.reason);
    }
}
