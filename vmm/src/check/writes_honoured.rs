//! Check 4, `writes-honoured`: after the rendezvous the guest's TSCs read the
//! written value plus elapsed time (KVM's evidence, the guest's own, and a
//! later guest read).

use super::{pvm_prefix, Check, Context, Evidence, Finding, Verdict};
use crate::analysis::RoundResult;
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
            return Ok(super::missing("later guest TSC read"));
        };
        Ok(judge(
            &ev.rounds,
            &later.tsc,
            later.host_elapsed,
            ev.env.host.kvm_flavor,
        ))
    }
}

/// Check 4 from the rounds and a guest TSC read taken `host_elapsed` host
/// cycles after the last round started: every write took effect, no guest
/// saw its TSC not jump, and the later reads are the last written value plus
/// (at most a few times) the elapsed time.
pub fn judge(
    rounds: &[RoundResult],
    tsc_after: &[u64],
    host_elapsed: u64,
    flavor: KvmFlavor,
) -> Finding {
    let mut c = Finding::skip("");
    if rounds.is_empty() {
        c.set(Verdict::Skip, "no rounds ran");
        return c;
    }
    let last_written = rounds
        .last()
        .and_then(|r| r.vcpus.first())
        .map_or(0, |v| v.written_value);
    let not_honoured = rounds
        .iter()
        .filter(|r| r.writes_honoured != Some(true))
        .count();
    let no_jump = rounds
        .iter()
        .flat_map(|r| &r.vcpus)
        .filter(|v| v.guest_saw_jump == Some(false))
        .count();
    // Scaled TSCs may run faster than the host's: allow a factor of 4.
    let bound = host_elapsed.saturating_mul(4).max(1);
    let read_ok = tsc_after
        .iter()
        .all(|&t| t.wrapping_sub(last_written) <= bound);
    c.value("rounds_not_honoured", not_honoured);
    c.value("vcpu_rounds_without_jump", no_jump);
    c.value("last_written_value", last_written);
    c.value("guest_tsc_after", tsc_after);
    c.value("host_cycles_since_last_round", host_elapsed);
    if not_honoured == 0 && no_jump == 0 && read_ok {
        c.set(
            Verdict::Pass,
            format!(
                "in all {} rounds every vCPU's TSC jumped to the written value and ran on from it",
                rounds.len()
            ),
        );
    } else {
        c.set(
            Verdict::Fail,
            format!(
                "{}{not_honoured} of {} rounds not honoured, {no_jump} vCPU-rounds without a TSC jump{}",
                pvm_prefix(flavor),
                rounds.len(),
                if read_ok {
                    ""
                } else {
                    ", a later guest read is not the written value plus elapsed time"
                }
            ),
        );
    }
    c
}

#[cfg(test)]
mod tests {
    use super::super::testdata::{round, vcpu};
    use super::super::PVM_REASON;
    use super::*;

    #[test]
    fn check_4_needs_honoured_writes_jumps_and_a_plausible_later_read() {
        let r = [round(
            vec![vcpu(0, -400, Some(-400), Some(true))],
            Some(true),
            0,
        )];
        assert_eq!(
            judge(&r, &[5_500], 1_000, KvmFlavor::Svm).verdict,
            Verdict::Pass
        );
        // The later read is below the value written: the TSC did not move.
        assert_eq!(
            judge(&r, &[4_000], 1_000, KvmFlavor::Svm).verdict,
            Verdict::Fail
        );
        // Far beyond the elapsed time: not "written value plus elapsed time".
        assert_eq!(
            judge(&r, &[5_000 + 10_000], 1_000, KvmFlavor::Svm).verdict,
            Verdict::Fail
        );
        let no_jump = [round(
            vec![vcpu(0, -400, Some(-400), Some(false))],
            Some(true),
            0,
        )];
        assert_eq!(
            judge(&no_jump, &[5_500], 1_000, KvmFlavor::Svm).verdict,
            Verdict::Fail
        );
        let pvm = [round(vec![vcpu(0, -400, Some(0), None)], Some(false), 0)];
        let c = judge(&pvm, &[5_500], 1_000, KvmFlavor::Pvm);
        assert!(c.verdict == Verdict::Fail && c.reason.starts_with(PVM_REASON));
    }
}
