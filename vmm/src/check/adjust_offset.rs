//! Check 3, `adjust-equals-offset`: after a rendezvous on N vCPUs, per vCPU
//! and round, the TSC_ADJUST delta equals the KVM_VCPU_TSC_OFFSET delta,
//! exactly (KVM adds the delta of every guest TSC write to both).

use serde_json::json;

use super::evidence::{Check, Context, Evidence};
use super::judge::{self, context};
use super::report::{Finding, Verdict};
use super::tally::RoundTally;
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
            &ev.tally,
            ev.env.host.offset_source.exact(),
            ev.env.host.kvm_flavor,
        ))
    }
}

/// Check 3 from the rounds' tally: every vCPU's TSC_ADJUST delta equals its
/// offset delta, exactly. `exact` says whether exact offsets were read at all.
/// A mismatch is evidence wherever it is (an offset that moved without a
/// write fails too); a PASS needs at least one vCPU-round with a write, since
/// deltas of 0 and 0 are equal whether KVM applies writes or ignores them
/// (`xen-std` writes nothing: SKIP, saying so).
pub fn judge(t: &RoundTally, exact: bool, flavor: KvmFlavor) -> Finding {
    if !exact {
        return Finding::skip(
            "no exact offsets: KVM_VCPU_TSC_OFFSET is absent (Linux < 5.16) and KVM's debugfs \
             tsc-offset files could not be read (mount debugfs and run as root to read them)",
        );
    }
    let total = t.vcpu_rounds.saturating_sub(t.offsets_unread);
    let mut f = judge::missing("first round")
        .with("comparisons", total)
        .with("mismatches", t.mismatches)
        .with("offsets_unmoved", t.offsets_unmoved)
        .with("offsets_unread", t.offsets_unread)
        .with("vcpu_rounds_with_a_write", t.wrote);
    if t.vcpu_rounds == 0 {
        return f;
    }
    let Some(first) = t.first_mismatch else {
        if t.offsets_unread > 0 {
            // An offset not read is no evidence of a delta that differs,
            // nor of one that matches.
            f.set(
                Verdict::Undecided,
                format!(
                    "the offset of {} of {} vCPU-rounds could not be read ({}), so their deltas                      were not compared; the {total} compared are equal",
                    t.offsets_unread,
                    t.vcpu_rounds,
                    unread_example(t)
                ),
            );
            return f;
        }
        if t.wrote == 0 {
            // Unmoved offsets and an unmoved TSC_ADJUST are equal whatever
            // KVM does with a write: without one there is nothing to judge.
            f.set(
                Verdict::Skip,
                format!(
                    "no vCPU wrote its TSC or TSC_ADJUST in any of the {} rounds: the {total} \
                     equal deltas say nothing about how writes are applied",
                    t.rounds
                ),
            );
            return f;
        }
        f.set(
            Verdict::Pass,
            format!(
                "all {total} deltas equal, {} of them after a write",
                t.wrote
            ),
        );
        return f;
    };
    f.value(
        "first_mismatch",
        json!({"round": first.round, "vcpu": first.vcpu, "tsc_adjust_delta": first.tsc_adjust_delta,
               "offset_delta": first.offset_delta}),
    );
    let unread = if t.offsets_unread > 0 {
        format!(
            "; {} more vCPU-rounds not compared (offset not read)",
            t.offsets_unread
        )
    } else {
        String::new()
    };
    let what = if t.offsets_unmoved == t.mismatches {
        "the offsets did not move although TSC_ADJUST recorded every write: the writes were ignored"
    } else if t.offsets_unmoved == 0 {
        "the offsets moved by other amounts than the writes' deltas"
    } else {
        "some offsets did not move, others moved by other amounts than the writes' deltas"
    };
    f.set(
        Verdict::Fail,
        format!(
            "{} of {total} deltas differ: {what}, e.g. round {} vCPU {}: offset moved by {}, \
             TSC_ADJUST by {}{unread}{}",
            t.mismatches,
            first.round,
            first.vcpu,
            first
                .offset_delta
                .map_or_else(|| "?".to_string(), |d| d.to_string()),
            first.tsc_adjust_delta,
            context(flavor)
        ),
    );
    f
}

/// The first vCPU-round whose offset was not read, in words.
fn unread_example(t: &RoundTally) -> String {
    t.first_unread.map_or_else(
        || "which is not recorded".into(),
        |(round, vcpu)| format!("first round {round} vCPU {vcpu}"),
    )
}

#[cfg(test)]
mod tests {
    use super::super::testdata::{round, vcpu};
    use super::*;

    #[test]
    fn equal_deltas_pass_and_one_cycle_off_fails() {
        let good = [round(
            vec![
                vcpu(0, -400, Some(-400), None),
                vcpu(1, -300, Some(-300), None),
            ],
            Some(true),
            100,
        )];
        let f = judge(&RoundTally::of(&good), true, KvmFlavor::Vmx);
        assert_eq!(
            (f.verdict, f.reason.as_str()),
            (Verdict::Pass, "all 2 deltas equal, 2 of them after a write")
        );
        let off_by_one = [round(vec![vcpu(0, -400, Some(-399), None)], None, 0)];
        let f = judge(&RoundTally::of(&off_by_one), true, KvmFlavor::Vmx);
        assert_eq!(f.verdict, Verdict::Fail);
        assert!(
            f.reason
                .contains("moved by other amounts than the writes' deltas"),
            "{}",
            f.reason
        );
    }

    /// Offsets that never move while TSC_ADJUST records every write: the
    /// reason says so from the data; the hypervisor's name is context only.
    #[test]
    fn unmoved_offsets_are_named_from_the_data() {
        let ignored = [round(
            vec![vcpu(0, -400, Some(0), None), vcpu(1, -500, Some(0), None)],
            Some(false),
            0,
        )];
        let f = judge(&RoundTally::of(&ignored), true, KvmFlavor::Pvm);
        assert_eq!(f.verdict, Verdict::Fail);
        assert!(
            f.reason.starts_with(
                "2 of 2 deltas differ: the offsets did not move although TSC_ADJUST recorded every write"
            ),
            "{}",
            f.reason
        );
        assert!(f.reason.ends_with("(host: PVM)"), "{}", f.reason);
        // The same data on another hypervisor gives the same reason.
        let g = judge(&RoundTally::of(&ignored), true, KvmFlavor::Vmx);
        assert_eq!(
            f.reason.trim_end_matches(" (host: PVM)"),
            g.reason.trim_end_matches(" (host: VMX)")
        );
    }

    /// `check --variant xen-std`: no vCPU writes, offsets and TSC_ADJUST
    /// stay, the deltas are 0 == 0 on any hypervisor, also on one that
    /// ignores writes: not a PASS. An offset that moved without a write is
    /// still evidence of a failure.
    #[test]
    fn nothing_written_is_nothing_judged() {
        let quiet = |id| {
            let mut v = vcpu(id, 0, Some(0), None);
            v.wrote = false;
            v
        };
        let rounds: Vec<_> = (0..3)
            .map(|_| round(vec![quiet(0), quiet(1)], None, 0))
            .collect();
        for flavor in [KvmFlavor::Pvm, KvmFlavor::Vmx] {
            let f = judge(&RoundTally::of(&rounds), true, flavor);
            assert_eq!(f.verdict, Verdict::Skip, "{}", f.reason);
            assert!(
                f.reason
                    .starts_with("no vCPU wrote its TSC or TSC_ADJUST in any of the 3 rounds"),
                "{}",
                f.reason
            );
            assert_eq!(f.values["comparisons"], 6);
            assert_eq!(f.values["vcpu_rounds_with_a_write"], 0);
        }
        let mut drifted = quiet(1);
        drifted.offset_delta = Some(500);
        let f = judge(
            &RoundTally::of(&[round(vec![quiet(0), drifted], None, 0)]),
            true,
            KvmFlavor::Vmx,
        );
        assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
    }

    /// An offset read that failed leaves its delta unknown: not a
    /// mismatch, so no FAIL from it; a real mismatch beside it still fails.
    #[test]
    fn an_offset_not_read_is_no_evidence() {
        let rounds = [
            round(
                vec![vcpu(0, -400, Some(-400), None), vcpu(1, -300, None, None)],
                Some(true),
                100,
            ),
            round(
                vec![
                    vcpu(0, -200, Some(-200), None),
                    vcpu(1, -100, Some(-100), None),
                ],
                Some(true),
                100,
            ),
        ];
        let f = judge(&RoundTally::of(&rounds), true, KvmFlavor::Vmx);
        assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
        assert!(
            f.reason.starts_with(
                "the offset of 1 of 4 vCPU-rounds could not be read (first round 0 vCPU 1)"
            ),
            "{}",
            f.reason
        );
        assert_eq!(f.values["comparisons"], 3);
        assert_eq!(f.values["mismatches"], 0);
        assert_eq!(f.values["offsets_unread"], 1);
        let mut with_mismatch = rounds.clone();
        with_mismatch[1].vcpus[1].offset_delta = Some(-99);
        let f = judge(&RoundTally::of(&with_mismatch), true, KvmFlavor::Vmx);
        assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
        assert!(f.reason.starts_with("1 of 3 deltas differ"), "{}", f.reason);
        assert!(
            f.reason.contains("1 more vCPU-rounds not compared"),
            "{}",
            f.reason
        );
    }

    #[test]
    fn without_exact_offsets_there_is_nothing_to_compare() {
        let r = [round(vec![vcpu(0, -400, None, None)], None, 0)];
        let f = judge(&RoundTally::of(&r), false, KvmFlavor::Svm);
        assert_eq!(f.verdict, Verdict::Skip);
        assert!(f.reason.contains("debugfs"), "{}", f.reason);
        assert_eq!(
            judge(&RoundTally::default(), true, KvmFlavor::Svm).verdict,
            Verdict::Skip
        );
    }
}
