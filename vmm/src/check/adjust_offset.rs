//! Check 3, `adjust-equals-offset`: after a rendezvous on N vCPUs, per vCPU
//! and round, the TSC_ADJUST delta equals the KVM_VCPU_TSC_OFFSET delta,
//! exactly (KVM adds the delta of every guest TSC write to both).

use serde_json::{json, Value};

use super::{pvm_prefix, Check, Context, Evidence, Finding, Verdict};
use crate::analysis::RoundResult;
use crate::error::RunError;
use crate::host::KvmFlavor;

/// Check 3.
pub struct AdjustEqualsOffset;

impl Check for AdjustEqualsOffset {
    fn number(&self) -> u32 {
        3
    }
    fn id(&self) -> &'static str {
        "adjust-equals-offset"
    }
    fn title(&self) -> &'static str {
        "after the rendezvous, per vCPU: TSC_ADJUST delta == offset delta, exactly"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        Ok(judge(
            &ev.rounds,
            ev.env.host.tsc_offset_attr,
            ev.env.host.kvm_flavor,
        ))
    }
}

/// Check 3 from the rounds: every vCPU's TSC_ADJUST delta equals its offset
/// delta, exactly.
pub fn judge(rounds: &[RoundResult], offset_attr: bool, flavor: KvmFlavor) -> Finding {
    let mut c = Finding::skip("");
    if !offset_attr {
        c.set(
            Verdict::Skip,
            "KVM_VCPU_TSC_OFFSET is absent (Linux < 5.16): offset deltas cannot be read exactly",
        );
        return c;
    }
    let total: usize = rounds.iter().map(|r| r.vcpus.len()).sum();
    let mismatches: Vec<Value> = rounds
        .iter()
        .flat_map(|r| r.vcpus.iter().map(move |v| (r.round, v)))
        .filter(|(_, v)| v.offset_delta != Some(v.tsc_adjust_delta))
        .map(|(round, v)| {
            json!({"round": round, "vcpu": v.id, "tsc_adjust_delta": v.tsc_adjust_delta,
                   "offset_delta": v.offset_delta})
        })
        .collect();
    c.value("comparisons", total);
    c.value("mismatches", mismatches.len());
    match mismatches.first() {
        _ if total == 0 => c.set(Verdict::Skip, "no rounds ran"),
        Some(first) => {
            c.value("first_mismatch", first);
            c.set(
                Verdict::Fail,
                format!(
                    "{}{} of {total} deltas differ, e.g. round {} vCPU {}: offset moved by {}, \
                     TSC_ADJUST by {}",
                    pvm_prefix(flavor),
                    mismatches.len(),
                    first["round"],
                    first["vcpu"],
                    first["offset_delta"],
                    first["tsc_adjust_delta"]
                ),
            );
        }
        None => c.set(Verdict::Pass, format!("all {total} deltas equal")),
    }
    c
}

#[cfg(test)]
mod tests {
    use super::super::testdata::{round, vcpu};
    use super::super::PVM_REASON;
    use super::*;

    #[test]
    fn check_3_passes_only_on_exact_equality_and_names_pvm() {
        let good = [round(
            vec![
                vcpu(0, -400, Some(-400), None),
                vcpu(1, -300, Some(-300), None),
            ],
            Some(true),
            100,
        )];
        assert_eq!(judge(&good, true, KvmFlavor::Vmx).verdict, Verdict::Pass);
        let off_by_one = [round(vec![vcpu(0, -400, Some(-399), None)], None, 0)];
        assert_eq!(
            judge(&off_by_one, true, KvmFlavor::Vmx).verdict,
            Verdict::Fail
        );
        let ignored = [round(vec![vcpu(0, -400, Some(0), None)], Some(false), 0)];
        let c = judge(&ignored, true, KvmFlavor::Pvm);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(c.reason.starts_with(PVM_REASON), "{}", c.reason);
        assert_eq!(judge(&good, false, KvmFlavor::Vmx).verdict, Verdict::Skip);
    }
}
