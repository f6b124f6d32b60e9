//! Check 7's clock part (pure): what the documented restore did to the
//! clock the guests tell time by, judged from the `restore` report's clock
//! part (`crate::restore::clock_report`).
//!
//! Evidence of failure, each a FAIL of check 7:
//! - a vCPU's kvmclock went backwards across the restore or across the
//!   chained second one (its first reading after is below its last before);
//! - a vCPU's kvmclock jumped across one, beyond the sound bound of the
//!   host time that passed (the bracket of both readings plus NTP's slew,
//!   the KVM_SET_CLOCK call, rounding; see `restore::clock_derive`), with
//!   the host clock not stepped;
//! - KVM_GET_CLOCK says KVM_CLOCK_TSC_STABLE (one kvmclock for every vCPU)
//!   after a restore while two vCPUs' kvmclocks differ beyond the bound of
//!   the forced hand-off test;
//! - the chained restore changed a relative offset of the first snapshot.
//!
//! Anything else is informative: the reason says what kvmclock did, what
//! the master clock was after each restore and which property the method
//! kept (the exact skew, the master clock, both, neither), or why that
//! could not be decided.

use crate::restore::clock_derive::ms;
use crate::restore::clock_report::{
    ChainReport, Continuity, Keeps, MasterClock, RestoreClock, SkewKept,
};
use crate::units::fmt_int as n;

/// What the clock part adds to check 7.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClockPart {
    /// Evidence of failure, in words.
    pub fails: Vec<String>,
    /// What it says otherwise, to append to the reason (starts with "; ").
    pub note: String,
}

/// What one restore's kvmclock says: failures into `fails`, a summary.
fn one(c: &RestoreClock, label: &str, fails: &mut Vec<String>) -> String {
    for v in &c.continuity {
        match &v.outcome {
            Continuity::Backwards { by_ns } => fails.push(format!(
                "vCPU {}'s kvmclock went backwards {label} by {} ({} ns -> {} ns)",
                v.id,
                ms(i128::from(*by_ns)),
                n(v.kvmclock_before_ns),
                n(v.kvmclock_after_ns)
            )),
            Continuity::Jumped { .. } => fails.push(format!(
                "vCPU {}'s kvmclock {label} {} beyond the bound of the host time that passed",
                v.id, v.words
            )),
            _ => {}
        }
    }
    if let Some(a) = &c.after {
        if a.master_clock == MasterClock::Broken {
            fails.push(format!("after the restore {label}: {}", a.words));
        }
    }
    let continuity = if let Some(why) = &c.guest_reads_why_not {
        format!("not read ({why})")
    } else if let Some(u) = c.continuity.iter().find_map(|v| match &v.outcome {
        Continuity::Undecided { why } => Some(why),
        _ => None,
    }) {
        format!("undecided ({u})")
    } else if !c.continuity.is_empty()
        && c.continuity
            .iter()
            .all(|v| v.outcome == Continuity::Continuous)
    {
        let worst = c.continuity.iter().map(|v| v.allowance_ns).max();
        format!(
            "continuous on every vCPU (± {})",
            ms(i128::from(worst.unwrap_or(0)))
        )
    } else if c.continuity.is_empty() {
        "not measured".into()
    } else {
        "not continuous".into()
    };
    let master = match c.after.as_ref().map(|a| &a.master_clock) {
        Some(MasterClock::Kept) => "on".to_string(),
        Some(MasterClock::Off) => "off (no KVM_CLOCK_TSC_STABLE)".to_string(),
        Some(MasterClock::Broken) => "broken".to_string(),
        Some(MasterClock::Undecided { why }) => format!("undecided ({why})"),
        None => "not measured".to_string(),
    };
    format!("kvmclock {label} {continuity}, the master clock after it {master}")
}

/// Check 7's clock part from the report's `kvmclock`, `chain` and `keeps`.
pub fn judge(
    kvmclock: Option<&RestoreClock>,
    chain: Option<&ChainReport>,
    keeps: Option<&Keeps>,
) -> ClockPart {
    let mut part = ClockPart::default();
    let mut notes = Vec::new();
    if let Some(c) = kvmclock {
        notes.push(one(c, "across the restore", &mut part.fails));
    }
    if let Some(c) = chain.filter(|c| c.not_possible.is_none()) {
        notes.push(one(
            &c.kvmclock,
            "across the chained second restore",
            &mut part.fails,
        ));
    }
    if let Some(k) = keeps {
        if let Some(SkewKept::Lost { vcpu, saved, now }) =
            k.after_two.as_ref().map(|t| &t.exact_skew)
        {
            part.fails.push(format!(
                "the chained second restore changed vCPU {vcpu}'s offset relative to vCPU 0 \
                 ({} in the first snapshot, {} after it)",
                n(*saved),
                n(*now)
            ));
        }
        notes.push(match &k.after_two {
            Some(two) => format!(
                "the method keeps {} after one restore and {} after two",
                k.after_one.keeps.name(),
                two.keeps.name()
            ),
            None => format!(
                "the method keeps {} after one restore{}",
                k.after_one.keeps.name(),
                k.after_two_why_not
                    .as_ref()
                    .map_or_else(String::new, |w| format!(", and a second restore: {w}"))
            ),
        });
    }
    if !notes.is_empty() {
        part.note = format!("; {}", notes.join("; "));
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restore::clock_report::{Kept, KeptAfter, VcpuContinuity};
    use crate::restore::testdata::{honoured, report};

    fn judged(r: &crate::restore::MethodReport) -> ClockPart {
        judge(r.kvmclock.as_ref(), r.chain.as_ref(), r.keeps.as_ref())
    }

    fn set_outcome(c: &mut VcpuContinuity, o: Continuity) {
        c.outcome = o;
    }

    #[test]
    fn a_continuous_kvmclock_and_a_kept_skew_are_informative() {
        let r = report(&honoured(0));
        let p = judged(&r);
        assert!(p.fails.is_empty(), "{p:?}");
        assert!(
            p.note
                .contains("kvmclock across the restore continuous on every vCPU"),
            "{}",
            p.note
        );
        assert!(
            p.note.contains("the master clock after it off"),
            "{}",
            p.note
        );
        assert!(
            p.note
                .contains("the method keeps exact-skew after one restore and exact-skew after two"),
            "{}",
            p.note
        );
    }

    #[test]
    fn backwards_jumped_and_a_broken_promise_fail() {
        let mut r = report(&honoured(0));
        let c = r.kvmclock.as_mut().expect("kvmclock measured");
        set_outcome(
            &mut c.continuity[0],
            Continuity::Backwards { by_ns: 2_000_000 },
        );
        set_outcome(
            &mut c.continuity[1],
            Continuity::Jumped {
                min_ns: 5_000_000,
                max_ns: 6_000_000,
            },
        );
        if let Some(a) = c.after.as_mut() {
            a.master_clock = MasterClock::Broken;
        }
        let p = judged(&r);
        assert_eq!(p.fails.len(), 3, "{p:?}");
        assert!(
            p.fails[0]
                .starts_with("vCPU 0's kvmclock went backwards across the restore by 2.000 ms"),
            "{}",
            p.fails[0]
        );
        assert!(p.fails[1].starts_with("vCPU 1's kvmclock across the restore"));
        assert!(p.fails[2].starts_with("after the restore across the restore"));
    }

    #[test]
    fn an_undecided_kvmclock_is_not_a_failure_and_a_lost_chain_skew_is() {
        let mut r = report(&honoured(0));
        if let Some(c) = r.kvmclock.as_mut() {
            set_outcome(
                &mut c.continuity[0],
                Continuity::Undecided { why: "torn".into() },
            );
        }
        if let Some(k) = r.keeps.as_mut() {
            k.after_two = Some(KeptAfter {
                restores: 2,
                exact_skew: SkewKept::Lost {
                    vcpu: 1,
                    saved: -300,
                    now: 0,
                },
                saved_skew_cycles: Some(300),
                skew_trivial: false,
                master_clock: MasterClock::Kept,
                keeps: Kept::MasterClock,
                words: String::new(),
            });
        }
        let p = judged(&r);
        assert_eq!(p.fails.len(), 1, "{p:?}");
        assert!(
            p.fails[0].contains("changed vCPU 1's offset relative to vCPU 0 (-300 in the first"),
            "{}",
            p.fails[0]
        );
        assert!(p.note.contains("undecided (torn)"), "{}", p.note);
        assert!(p.note.contains("master-clock after two"), "{}", p.note);
        assert_eq!(judge(None, None, None), ClockPart::default());
    }

    #[test]
    fn a_second_restore_the_method_cannot_do_is_said_not_failed() {
        let mut r = report(&honoured(0));
        if let Some(c) = r.chain.as_mut() {
            c.not_possible = Some("KVM_GET_CLOCK on the restored VM returned flags 0x0".into());
        }
        if let Some(k) = r.keeps.as_mut() {
            k.after_two = None;
            k.after_two_why_not = Some("no master clock".into());
        }
        let p = judged(&r);
        assert!(p.fails.is_empty(), "{p:?}");
        assert!(
            p.note
                .ends_with("the method keeps exact-skew after one restore, and a second restore: no master clock"),
            "{}",
            p.note
        );
        assert!(!p.note.contains("chained second restore"), "{}", p.note);
    }
}
