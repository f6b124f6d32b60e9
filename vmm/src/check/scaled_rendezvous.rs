//! Check 13, `scaled-rendezvous`: the rendezvous on two vCPUs whose TSCs KVM
//! scales to half the host's rate (`--tsc-khz 0.5x`): every guest write
//! moves the offset by exactly its TSC_ADJUST delta, the writes take
//! effect, and the bracketed reads agree with the exact offsets once the
//! host interval between them is scaled. The offset arithmetic runs in
//! scaled units; the control is the same estimate with the host interval
//! left unscaled, which must miss by more than its error bar (so the
//! ratio was seen, not assumed).
//!
//! SKIP where KVM cannot scale (KVM_CAP_TSC_CONTROL = 0: catch-up is not a
//! linear TSC). FAIL on a disagreement or a write that did not take
//! effect. UNDECIDED without exact offsets or when the control missed by
//! less than the error bar.

use super::evidence::{Check, Context, Evidence};
use super::frequency::ScaledRounds;
use super::judge::context;
use super::report::{Finding, Verdict};
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::units::fmt_int as n;

/// Check 13.
pub struct ScaledRendezvous;

impl Check for ScaledRendezvous {
    fn number(&self) -> u32 {
        13
    }
    fn id(&self) -> &'static str {
        "scaled-rendezvous"
    }
    fn title(&self) -> &'static str {
        "the rendezvous on a TSC KVM scales to half the host's rate: offsets, TSC_ADJUST and the \
         bracketed reads agree in scaled units, and the writes take effect"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        let Some(f) = &ev.frequency else {
            return Ok(super::judge::missing("TSC-frequency probes"));
        };
        Ok(match &f.scaled {
            None if !f.scaling.tsc_control => Finding::skip(
                "KVM cannot scale the TSC here (KVM_CAP_TSC_CONTROL = 0): there is no scaled TSC \
                 to run the rendezvous on (a higher rate could only be served by catch-up, which \
                 is not a linear TSC: check 10 says whether it is served at all)",
            ),
            None => Finding::skip(format!(
                "the scaled VM could not be measured: {}",
                f.errors.join("; ")
            )),
            Some(s) => judge(s, ev.env.host.kvm_flavor),
        })
    }
}

/// Check 13 from the scaled rounds.
pub fn judge(s: &ScaledRounds, flavor: KvmFlavor) -> Finding {
    let t = s;
    let mut f = Finding::skip("no round ran");
    f.value("setting", s.setting);
    f.value("rounds", s.rounds);
    f.value("vcpu_rounds", t.vcpu_rounds);
    f.value("mismatches", t.mismatches);
    f.value("wrote", t.wrote);
    f.value("honoured", t.honoured);
    f.value(
        "control",
        s.control.map(|(unscaled, scaled, err)| {
            serde_json::json!({"unscaled_miss_cycles": unscaled, "scaled_miss_cycles": scaled, "error_cycles": err})
        }),
    );
    let Some(setting) = s.setting.filter(|g| g.scaled) else {
        f.reason = "KVM did not scale the VM's TSC (the rate fell within its tolerance or KVM \
                    cannot scale): nothing scaled to judge"
            .into();
        return f;
    };
    if s.rounds == 0 {
        return f;
    }
    let head = format!("{} rounds at {}", s.rounds, setting.describe());
    if let Some(d) = s.disagreements.first() {
        f.set(
            Verdict::Fail,
            format!("{head}: the methods disagree: {d}{}", context(flavor)),
        );
        return f;
    }
    if t.mismatches > 0 || t.honoured < t.wrote {
        f.set(
            Verdict::Fail,
            format!(
                "{head}: {} of {} vCPU-rounds' offsets did not move by their TSC_ADJUST delta, {} \
                 of {} writes took effect{}",
                t.mismatches,
                t.vcpu_rounds,
                t.honoured,
                t.wrote,
                context(flavor)
            ),
        );
        return f;
    }
    let Some((unscaled, scaled, err)) = s.control else {
        f.set(
            Verdict::Undecided,
            format!("{head}: no exact offsets, so the scaled arithmetic is not checked"),
        );
        return f;
    };
    let agreed = format!(
        "every offset moved by its TSC_ADJUST delta and all {} writes took effect; the bracketed \
         estimate agrees with the exact offsets in scaled units (worst miss {} ± {} cycles)",
        t.wrote,
        n(scaled),
        n(err)
    );
    if unscaled.unsigned_abs() > err {
        f.set(
            Verdict::Pass,
            format!(
                "{head}: {agreed}, and with the host interval left unscaled it would miss by {} \
                 cycles",
                n(unscaled)
            ),
        );
    } else {
        f.set(
            Verdict::Undecided,
            format!(
                "{head}: {agreed}, but unscaled it would miss by only {} cycles, within the error \
                 bar: the ratio was not seen",
                n(unscaled)
            ),
        );
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tsc::frequency::{FrequencySetting, SetVia, TscRequest};

    fn rounds(control: Option<(i64, i64, u64)>) -> ScaledRounds {
        ScaledRounds {
            setting: Some(FrequencySetting {
                asked: TscRequest::RatioPpm(500_000),
                khz: 1_000_000,
                host_khz: 2_000_000,
                via: SetVia::Vm,
                resynced: false,
                scaled: true,
            }),
            rounds: 20,
            vcpu_rounds: 40,
            mismatches: 0,
            wrote: 40,
            honoured: 40,
            disagreements: Vec::new(),
            control,
        }
    }

    #[test]
    fn agreement_in_scaled_units_with_the_ratio_seen_passes() {
        let f = judge(&rounds(Some((-1_300_000, 12, 9_000))), KvmFlavor::Vmx);
        assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
        assert!(
            f.reason.contains("unscaled it would miss by -1,300,000"),
            "{}",
            f.reason
        );
        assert!(
            f.reason.contains("KVM_SET_TSC_KHZ on the VM"),
            "{}",
            f.reason
        );
    }

    #[test]
    fn a_disagreement_or_a_lost_write_fails() {
        let mut s = rounds(Some((-1_300_000, 12, 9_000)));
        s.disagreements
            .push("round 3: vCPU 1: offsets moved by 5, TSC_ADJUST by 7".into());
        let f = judge(&s, KvmFlavor::Vmx);
        assert_eq!(f.verdict, Verdict::Fail);
        assert!(f.reason.contains("round 3: vCPU 1"), "{}", f.reason);
        let mut s = rounds(Some((-1_300_000, 12, 9_000)));
        s.honoured = 39;
        assert_eq!(judge(&s, KvmFlavor::Vmx).verdict, Verdict::Fail);
    }

    #[test]
    fn a_ratio_too_small_to_see_or_no_offsets_is_undecided() {
        assert_eq!(
            judge(&rounds(Some((500, 12, 9_000))), KvmFlavor::Vmx).verdict,
            Verdict::Undecided
        );
        assert_eq!(
            judge(&rounds(None), KvmFlavor::Vmx).verdict,
            Verdict::Undecided
        );
    }

    #[test]
    fn an_unscaled_vm_is_nothing_to_judge() {
        let mut s = rounds(None);
        if let Some(g) = s.setting.as_mut() {
            g.scaled = false;
        }
        assert_eq!(judge(&s, KvmFlavor::Vmx).verdict, Verdict::Skip);
    }
}
