//! Whether one write took effect, from each side's evidence: KVM's (the
//! offsets, exact or estimated by bracketed reads) and the guest's own (did
//! its TSC jump to the value written?), and how verdicts of many vCPUs,
//! rounds or runs combine. Inconclusive evidence stays undecided; it is never
//! counted for either side.

use serde::Serialize;

use super::arith::signed_delta;

/// Which evidence decided whether a write took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// The exact offsets (KVM_VCPU_TSC_OFFSET or debugfs).
    Offsets,
    /// IA32_TSC read through KVM between two host TSC reads.
    BracketedReads,
    /// The guest's own TSC readings (the host evidence was inconclusive).
    Guest,
    /// KVM's record of the write (its TSC_ADJUST delta, exact) against the
    /// guest's own TSC read just before it: the move KVM made puts the moment
    /// it handled the write before the guest issued it, so no handling moment
    /// gives that move and the write did not set the value written (e.g. it
    /// was snapped to another vCPU's offset, as KVM did before Linux 5.10).
    WriteMoment,
}

/// KVM's evidence of one write: with exact offsets the answer is exact (an
/// honoured write moves the offset by exactly the TSC_ADJUST delta, an
/// ignored one leaves it alone); without them the bracketed estimate decides
/// only when exactly one of the two outcomes lies within its error bar.
/// Returns (honoured, disagreement text).
pub fn write_honoured(
    adjust_delta: i64,
    offset_delta: Option<i64>,
    estimate_delta: i64,
    estimate_error: u64,
) -> (Option<bool>, Option<String>) {
    if let Some(od) = offset_delta {
        if od == adjust_delta && adjust_delta != 0 {
            return (Some(true), None);
        }
        if od == 0 && adjust_delta != 0 {
            return (Some(false), None);
        }
        if od == 0 && adjust_delta == 0 {
            return (None, None);
        }
        return (
            None,
            Some(format!(
                "offset moved by {od} cycles but TSC_ADJUST by {adjust_delta}"
            )),
        );
    }
    let err = i128::from(estimate_error);
    let near = |x: i64, y: i64| (i128::from(x) - i128::from(y)).abs() <= err;
    match (near(estimate_delta, adjust_delta), near(estimate_delta, 0)) {
        (true, false) => (Some(true), None),
        (false, true) => (Some(false), None),
        (true, true) => (None, None),
        (false, false) => (
            None,
            Some(format!(
                "bracketed offset estimate moved by {estimate_delta} ± {estimate_error} cycles, \
                 neither 0 nor the TSC_ADJUST delta {adjust_delta}"
            )),
        ),
    }
}

/// The guest's own evidence of a jump. Written value `v`, TSC at the write
/// (pre-write timeline) `at`, TSC after the loop `after`: an honoured write
/// puts `after` at `v + elapsed`, an ignored one at `at + elapsed`, elapsed >= 0.
/// Decisive only when one of the two timelines is impossible.
pub fn guest_saw_jump(v: u64, at: u64, after: u64) -> Option<bool> {
    let if_honoured = signed_delta(after, v);
    let if_ignored = signed_delta(after, at);
    match (if_honoured >= 0, if_ignored >= 0) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    }
}

/// One write's verdict from both sides. The host's evidence decides when it
/// is conclusive, the guest's when the host's is not; when both are
/// conclusive and contradict each other the write is undecided, with a
/// disagreement saying so.
pub fn combine(
    host: Option<bool>,
    host_by: DecidedBy,
    guest: Option<bool>,
) -> (Option<bool>, Option<DecidedBy>, Option<String>) {
    match (host, guest) {
        (Some(h), Some(g)) if h != g => (
            None,
            None,
            Some(format!(
                "KVM says the write {} but the guest's TSC {}",
                if h { "took effect" } else { "was ignored" },
                if g { "jumped" } else { "did not jump" }
            )),
        ),
        (Some(h), _) => (Some(h), Some(host_by), None),
        (None, Some(g)) => (Some(g), Some(DecidedBy::Guest), None),
        (None, None) => (None, None, None),
    }
}

/// What many verdicts (of vCPUs, rounds or runs) say together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Every decided one is yes, at least one is decided.
    Yes,
    /// Every decided one is no, at least one is decided.
    No,
    /// Some yes and some no.
    Mixed,
    /// None is decided.
    Undecided,
}

impl Decision {
    /// Combines verdicts; undecided ones count for neither side.
    pub fn of(items: impl IntoIterator<Item = Option<bool>>) -> Decision {
        let (mut yes, mut no) = (false, false);
        for v in items.into_iter().flatten() {
            yes |= v;
            no |= !v;
        }
        match (yes, no) {
            (true, false) => Decision::Yes,
            (false, true) => Decision::No,
            (true, true) => Decision::Mixed,
            (false, false) => Decision::Undecided,
        }
    }

    /// As an optional verdict: `None` when mixed or undecided.
    pub fn verdict(self) -> Option<bool> {
        match self {
            Decision::Yes => Some(true),
            Decision::No => Some(false),
            Decision::Mixed | Decision::Undecided => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn honoured_writes_are_decided_exactly_with_the_offsets() {
        assert_eq!(write_honoured(-500, Some(-500), 0, 0), (Some(true), None));
        assert_eq!(write_honoured(-500, Some(0), 0, 0), (Some(false), None));
        let (h, why) = write_honoured(-500, Some(-400), 0, 0);
        assert_eq!(h, None);
        assert!(why.expect("a disagreement").contains("-400"));
    }

    #[test]
    fn honoured_writes_from_the_bracket_need_a_delta_above_the_error() {
        assert_eq!(
            write_honoured(-10_000, None, -9_000, 2_000),
            (Some(true), None)
        );
        assert_eq!(
            write_honoured(-10_000, None, 500, 2_000),
            (Some(false), None)
        );
        // A delta within the error bar: both outcomes possible, undecided.
        assert_eq!(write_honoured(-1_000, None, -500, 2_000), (None, None));
        assert!(write_honoured(-10_000, None, 50_000, 2_000).1.is_some());
    }

    #[test]
    fn the_guest_sees_a_jump_only_when_one_timeline_is_impossible() {
        // Written 1000, handled at 5000: honoured -> after ~1000+e.
        assert_eq!(guest_saw_jump(1_000, 5_000, 1_200), Some(true));
        assert_eq!(guest_saw_jump(1_000, 5_000, 5_200), None);
        // Written above the TSC (moved forward): ignored -> after < written.
        assert_eq!(guest_saw_jump(9_000, 5_000, 5_200), Some(false));
    }

    #[test]
    fn undecided_host_evidence_leaves_the_verdict_to_a_decisive_guest() {
        assert_eq!(
            combine(None, DecidedBy::BracketedReads, Some(true)),
            (Some(true), Some(DecidedBy::Guest), None)
        );
        assert_eq!(
            combine(None, DecidedBy::BracketedReads, None),
            (None, None, None)
        );
        assert_eq!(
            combine(Some(false), DecidedBy::Offsets, None),
            (Some(false), Some(DecidedBy::Offsets), None)
        );
        assert_eq!(
            combine(Some(true), DecidedBy::Offsets, Some(true)),
            (Some(true), Some(DecidedBy::Offsets), None)
        );
    }

    #[test]
    fn contradictory_evidence_is_undecided_and_said() {
        let (v, by, why) = combine(Some(false), DecidedBy::BracketedReads, Some(true));
        assert_eq!((v, by), (None, None));
        assert_eq!(
            why.as_deref(),
            Some("KVM says the write was ignored but the guest's TSC jumped")
        );
    }

    #[test]
    fn undecided_verdicts_count_for_neither_side() {
        assert_eq!(Decision::of([Some(true), None, Some(true)]), Decision::Yes);
        assert_eq!(Decision::of([None, Some(false)]), Decision::No);
        assert_eq!(Decision::of([Some(true), Some(false)]), Decision::Mixed);
        assert_eq!(Decision::of([None, None]), Decision::Undecided);
        assert_eq!(Decision::of([]), Decision::Undecided);
        assert_eq!(Decision::Yes.verdict(), Some(true));
        assert_eq!(Decision::Mixed.verdict(), None);
    }
}
