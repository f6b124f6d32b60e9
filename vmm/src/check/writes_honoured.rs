//! Check 4, `writes-honoured`: after the rendezvous the guest's TSCs read the
//! written value plus elapsed time (KVM's evidence, the guest's own, and a
//! later guest read).

use super::evidence::{Check, Context, Evidence};
use super::judge::context;
use super::report::{Finding, Verdict};
use super::tally::RoundTally;
use crate::error::RunError;
use crate::host::KvmFlavor;

/// Check 4.
pub struct WritesHonoured;

impl Check for WritesHonoured {
    fn number(&self) -> u32 {
        4
    }
    fn id(&self) -> &'static str {
        "writes-honoured"
    }
    fn title(&self) -> &'static str {
        "after the rendezvous the guest's TSCs read the written value plus elapsed time"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        let Some(later) = &ev.later_read else {
            return Ok(super::judge::missing("later guest TSC read"));
        };
        Ok(judge(
            &ev.tally,
            &later.tsc,
            later.host_elapsed,
            ev.env.host.kvm_flavor,
        ))
    }
}

/// Check 4 from the rounds' tally and a guest TSC read taken `host_elapsed`
/// host cycles after the last round started. Every vCPU-round's verdict comes
/// from the analysis (KVM's evidence when conclusive, else the guest's). FAIL
/// needs evidence that a write did not take effect, or a later read that is
/// not the written value plus elapsed time; vCPU-rounds neither side could
/// decide make the check UNDECIDED; PASS needs every one decided honoured.
/// Only vCPU-rounds with a write count (the std rendezvous writes nothing,
/// Linux's sync only when it compensates).
pub fn judge(t: &RoundTally, tsc_after: &[u64], host_elapsed: u64, flavor: KvmFlavor) -> Finding {
    let total = t.wrote;
    let ignored = t.not_honoured();
    let by_host = t.honoured + ignored - t.decided_by_guest;
    let last_written = t.last_written.unwrap_or(0);
    // Scaled TSCs may run faster than the host's: allow a factor of 4.
    let bound = host_elapsed.saturating_mul(4).max(1);
    let read_ok = t.last_written.is_none()
        || tsc_after
            .iter()
            .all(|&x| x.wrapping_sub(last_written) <= bound);
    let none = if t.rounds == 0 {
        "no rounds ran"
    } else {
        "no vCPU wrote its TSC or TSC_ADJUST in any round: nothing to honour"
    };
    let mut f = Finding::skip(none)
        .with("vcpu_rounds", total)
        .with("honoured", t.honoured)
        .with("not_honoured", ignored)
        .with("undecided", t.undecided)
        .with("decided_by_host", by_host)
        .with("decided_by_guest", t.decided_by_guest)
        .with("contradictory", t.contradictory)
        .with("vcpu_rounds_without_jump", t.no_jump)
        .with("last_written_value", last_written)
        .with("guest_tsc_after", tsc_after)
        .with("host_cycles_since_last_round", host_elapsed);
    if total == 0 {
        return f;
    }
    if ignored > 0 || !read_ok {
        let mut what = Vec::new();
        if ignored > 0 {
            let mut evidence = Vec::new();
            for (k, words) in [
                (t.not_honoured_by[0], "the exact offsets did not move"),
                (
                    t.not_honoured_by[1],
                    "the bracketed reads show the offsets did not move",
                ),
                (t.not_honoured_by[2], "the guests' TSCs did not jump"),
            ] {
                if k == ignored {
                    evidence.push(words.to_string());
                } else if k > 0 {
                    evidence.push(format!("{words} ({k})"));
                }
            }
            if t.no_jump == ignored && t.not_honoured_by[2] == 0 {
                evidence.push("the guests' TSCs did not jump either".into());
            }
            what.push(format!(
                "{ignored} of {total} vCPU-rounds' writes did not take effect: {}",
                evidence.join(", ")
            ));
        }
        if !read_ok {
            what.push(
                "a later guest read is not the last written value plus the elapsed time".into(),
            );
        }
        f.set(
            Verdict::Fail,
            format!("{}{}", what.join("; "), context(flavor)),
        );
    } else if t.undecided > 0 {
        let why = if t.contradictory > 0 {
            format!(
                ", {} of them because KVM's and the guest's evidence contradict each other",
                t.contradictory
            )
        } else {
            String::new()
        };
        f.set(
            Verdict::Undecided,
            format!(
                "{} of {total} vCPU-rounds could not be decided (the offset change was \
                 within the bracketed reads' error and the guest's TSC could not tell){why}; the \
                 other {} took effect",
                t.undecided, t.honoured
            ),
        );
    } else {
        f.set(
            Verdict::Pass,
            format!(
                "in all {} rounds every vCPU's write took effect ({by_host} decided by KVM's \
                 evidence, {} by the guest's) and its TSC ran on from the written value",
                t.rounds, t.decided_by_guest
            ),
        );
    }
    f
}

#[cfg(test)]
mod tests {
    use super::super::testdata::{round, vcpu};
    use super::*;

    #[test]
    fn honoured_writes_and_a_plausible_later_read_pass() {
        let r = [round(
            vec![vcpu(0, -400, Some(-400), Some(true))],
            Some(true),
            0,
        )];
        let f = judge(&RoundTally::of(&r), &[5_500], 1_000, KvmFlavor::Svm);
        assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
        // The later read is below the value written: the TSC did not move.
        assert_eq!(
            judge(&RoundTally::of(&r), &[4_000], 1_000, KvmFlavor::Svm).verdict,
            Verdict::Fail
        );
        // Far beyond the elapsed time: not "written value plus elapsed time".
        assert_eq!(
            judge(
                &RoundTally::of(&r),
                &[5_000 + 10_000],
                1_000,
                KvmFlavor::Svm
            )
            .verdict,
            Verdict::Fail
        );
    }

    /// A true ignored write: the offsets did not move, the guest's TSC did
    /// not jump: FAIL, with the reason taken from that evidence.
    #[test]
    fn a_truly_ignored_write_fails_with_its_evidence() {
        let r = [round(
            vec![vcpu(0, -400, Some(0), Some(false))],
            Some(false),
            0,
        )];
        let f = judge(&RoundTally::of(&r), &[5_500], 1_000, KvmFlavor::Pvm);
        assert_eq!(f.verdict, Verdict::Fail);
        assert!(
            f.reason.starts_with(
                "1 of 1 vCPU-rounds' writes did not take effect: the exact offsets did not move, the guests' TSCs did not jump either"
            ),
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
                vcpu(0, -400, None, Some(true)),
                vcpu(1, -900, None, Some(true)),
            ],
            Some(true),
            0,
        )];
        let f = judge(&RoundTally::of(&r), &[5_500, 5_600], 1_000, KvmFlavor::Svm);
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
            round(vec![vcpu(0, -400, Some(-400), Some(true))], Some(true), 0),
            round(vec![vcpu(0, -300, None, None)], None, 0),
        ];
        let f = judge(&RoundTally::of(&r), &[5_500], 1_000, KvmFlavor::Svm);
        assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
        assert!(
            f.reason
                .starts_with("1 of 2 vCPU-rounds could not be decided"),
            "{}",
            f.reason
        );
        assert_eq!(f.values["not_honoured"], 0);
    }

    /// The offsets say ignored, the guest's TSC jumped: contradictory, so
    /// undecided; the check never says "not honoured" while the guest saw the
    /// jump.
    #[test]
    fn contradictory_evidence_is_undecided_and_said() {
        let r = [round(vec![vcpu(0, -400, Some(0), Some(true))], None, 0)];
        let f = judge(&RoundTally::of(&r), &[5_500], 1_000, KvmFlavor::Svm);
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
            &[5_500],
            1_000,
            KvmFlavor::Svm,
        );
        assert_eq!(f.verdict, Verdict::Skip);
        assert!(f.reason.contains("nothing to honour"), "{}", f.reason);
    }
}
