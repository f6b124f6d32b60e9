//! The lock-ordered warp test's judge (Linux's `check_tsc_warp` pattern):
//! the largest backwards step must not exceed the measured skew plus its
//! error, and the test must have had the resolution to see one. Check 5
//! reports it beside the forced hand-off test, check 7 judges the restored
//! guest with it.

use super::report::{Finding, Verdict};
use crate::analysis;
use crate::session::WarpSeen;
use crate::tsc::{OffsetSource, TscState};

/// The lock-ordered test from what each vCPU saw and the actual skew
/// (skew, error, method) measured after it. A warp can only show when the
/// lock passes between vCPUs faster than the skew between them: so FAIL needs
/// a backwards step beyond the skew and its error, PASS needs the test to
/// have had that resolution (warps within the skew, or a hand-off at least
/// as short as the skew), and otherwise the check is UNDECIDED, saying why.
pub fn judge(
    vcpus: u32,
    iterations: u64,
    seen: &[WarpSeen],
    (skew, err, how): (u64, u64, &'static str),
) -> Finding {
    let max_warp = seen.iter().map(|w| w.max_warp).max().unwrap_or(0);
    let warps: u64 = seen.iter().map(|w| w.warps).sum();
    let handoffs: u64 = seen.iter().map(|w| w.handoffs).sum();
    let shortest = seen.iter().filter_map(|w| w.shortest_handoff).min();
    let limit = skew.saturating_add(err);
    let mut f = Finding::skip("one vCPU: nothing to warp against")
        .with("max_warp_cycles", max_warp)
        .with("warps", warps)
        .with("handoffs", handoffs)
        .with("shortest_handoff_cycles", shortest)
        .with("iterations_per_vcpu", iterations)
        .with("skew_cycles", skew)
        .with("skew_error_cycles", err)
        .with("skew_method", how);
    if vcpus < 2 {
        return f;
    }
    let skew_text = format!("skew {skew} ± {err} ({how})");
    if max_warp > limit {
        f.set(
            Verdict::Fail,
            format!(
                "the guest saw its TSC go back by {max_warp} cycles, more than the measured {skew_text}"
            ),
        );
    } else if handoffs == 0 {
        f.set(
            Verdict::Undecided,
            format!(
                "the lock never passed between vCPUs in {iterations} iterations each: the test \
                 could not have seen a warp ({skew_text})"
            ),
        );
    } else if warps > 0 {
        f.set(
            Verdict::Pass,
            format!(
                "largest backwards step {max_warp} cycles ({warps} steps in {handoffs} hand-offs) \
                 <= {skew_text}"
            ),
        );
    } else {
        match shortest {
            Some(d) if d <= limit => f.set(
                Verdict::Pass,
                format!(
                    "no backwards step in {handoffs} hand-offs, the shortest {d} cycles <= {skew_text}"
                ),
            ),
            _ => f.set(
                Verdict::Undecided,
                format!(
                    "no backwards step, but the shortest of {handoffs} hand-offs took {} cycles, \
                     more than the {skew_text}: a warp the skew could cause would not have shown",
                    shortest.map_or_else(|| "?".into(), |d| d.to_string())
                ),
            ),
        }
    }
    f
}

/// The actual skew now: from the offsets (exact) when available, else the
/// bracketed reads. Returns (skew, error, method).
pub fn actual_skew(states: &[TscState], source: OffsetSource) -> (u64, u64, &'static str) {
    let offsets: Option<Vec<u64>> = states.iter().map(|s| s.offset).collect();
    if let Some(o) = offsets {
        let base = o.first().copied().unwrap_or(0);
        let rel = o.iter().map(|&x| analysis::signed_delta(x, base));
        return (analysis::spread(rel), 0, source.short());
    }
    let Some(base) = states.first() else {
        return (0, 0, "bracketed IA32_TSC reads");
    };
    let rel: Vec<(i64, u64)> = states.iter().map(|s| s.offset_minus(base)).collect();
    let err = rel.iter().map(|r| r.1).max().unwrap_or(0);
    (
        analysis::spread(rel.iter().map(|r| r.0)),
        err,
        "bracketed IA32_TSC reads",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(max_warp: u64, warps: u64, handoffs: u64, shortest: Option<u64>) -> WarpSeen {
        WarpSeen {
            max_warp,
            warps,
            handoffs,
            shortest_handoff: shortest,
        }
    }

    #[test]
    fn warps_within_the_skew_pass_and_beyond_it_fail() {
        let skew = (1_000, 50, "test");
        let quiet = seen(0, 0, 10, Some(2_000));
        let f = judge(2, 10, &[seen(1_050, 3, 5, None), quiet], skew);
        assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
        let f = judge(2, 10, &[seen(1_051, 1, 5, None), quiet], skew);
        assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
        assert_eq!(
            judge(1, 10, &[seen(0, 0, 0, None)], skew).verdict,
            Verdict::Skip
        );
    }

    /// No hand-off at all (each vCPU ran its iterations alone): the test
    /// could not have seen anything. Not a PASS.
    #[test]
    fn no_hand_off_is_undecided() {
        let f = judge(
            2,
            10,
            &[seen(0, 0, 0, None), seen(0, 0, 0, None)],
            (954_986, 0, "t"),
        );
        assert_eq!(f.verdict, Verdict::Undecided);
        assert!(
            f.reason.starts_with("the lock never passed between vCPUs"),
            "{}",
            f.reason
        );
    }

    /// Hand-offs, no warp: a PASS only when a hand-off was at least as short
    /// as the skew (a warp of that size would have shown), else undecided.
    #[test]
    fn the_shortest_hand_off_decides_whether_no_warp_means_anything() {
        let skew = (1_000, 0, "t");
        let fine = [seen(0, 0, 4, Some(900)), seen(0, 0, 3, Some(5_000))];
        assert_eq!(judge(2, 10, &fine, skew).verdict, Verdict::Pass);
        let coarse = [seen(0, 0, 4, Some(1_001)), seen(0, 0, 3, Some(5_000))];
        let f = judge(2, 10, &coarse, skew);
        assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
        assert!(
            f.reason
                .contains("the shortest of 7 hand-offs took 1001 cycles"),
            "{}",
            f.reason
        );
        // With no skew at all, any hand-off is longer than the skew.
        let f = judge(2, 10, &fine, (0, 0, "t"));
        assert_eq!(f.verdict, Verdict::Undecided, "{}", f.reason);
    }

    fn state(offset: Option<u64>, tsc: u64, host: u64) -> TscState {
        TscState {
            adjust: 0,
            tsc,
            host_before: host,
            host_after: host + 10,
            offset,
            tsc_khz: 1,
            host_khz: 0,
            scaled: false,
        }
    }

    #[test]
    fn actual_skew_prefers_the_exact_offsets() {
        let s = [
            state(Some(100), 0, 0),
            state(Some(40), 0, 0),
            state(Some(130), 0, 0),
        ];
        assert_eq!(
            actual_skew(&s, OffsetSource::Debugfs),
            (90, 0, "KVM debugfs")
        );
        let s = [state(None, 1_000, 0), state(None, 1_500, 0)];
        let (skew, err, _) = actual_skew(&s, OffsetSource::None);
        assert_eq!((skew, err), (500, 10));
    }
}
