//! Check 5, `warp`: a guest-visible, lock-ordered warp test (Linux's
//! `check_tsc_warp` pattern) on every vCPU after the rendezvous; the largest
//! backwards step must not exceed the measured skew plus its error.

use super::{Check, Context, Evidence, Finding, Verdict};
use crate::analysis;
use crate::error::RunError;
use crate::tsc::TscState;

/// Check 5.
pub struct Warp;

impl Check for Warp {
    fn number(&self) -> u32 {
        5
    }
    fn id(&self) -> &'static str {
        "warp"
    }
    fn title(&self) -> &'static str {
        "guest-visible lock-ordered warp test: largest backwards step <= measured skew"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        let Some(w) = &ev.warp else {
            return Ok(super::missing("warp test"));
        };
        let seen: Vec<(u64, u64)> = w.seen.iter().map(|s| (s.max_warp, s.warps)).collect();
        Ok(judge(
            ev.options.vcpus,
            ev.options.warp_iterations,
            &seen,
            actual_skew(&w.after),
        ))
    }
}

/// Check 5 from the warp test's per-vCPU (largest step, steps) and the
/// actual skew (skew, error, method) measured after it.
pub fn judge(
    vcpus: u32,
    iterations: u64,
    warp: &[(u64, u64)],
    (skew, err, how): (u64, u64, &'static str),
) -> Finding {
    let mut c = Finding::skip("");
    let max_warp = warp.iter().map(|w| w.0).max().unwrap_or(0);
    let warps: u64 = warp.iter().map(|w| w.1).sum();
    c.value("max_warp_cycles", max_warp);
    c.value("warps", warps);
    c.value("iterations_per_vcpu", iterations);
    c.value("skew_cycles", skew);
    c.value("skew_error_cycles", err);
    c.value("skew_method", how);
    if vcpus < 2 {
        c.set(Verdict::Skip, "one vCPU: nothing to warp against");
    } else if max_warp <= skew.saturating_add(err) {
        c.set(
            Verdict::Pass,
            format!(
                "largest backwards step {max_warp} cycles ({warps} steps) <= skew {skew} ± {err} ({how})"
            ),
        );
    } else {
        c.set(
            Verdict::Fail,
            format!(
                "the guest saw its TSC go back by {max_warp} cycles, more than the measured skew \
                 {skew} ± {err} ({how})"
            ),
        );
    }
    c
}

/// The actual skew now: from the offsets (exact) when available, else the
/// bracketed reads. Returns (skew, error, method).
fn actual_skew(states: &[TscState]) -> (u64, u64, &'static str) {
    let offsets: Option<Vec<u64>> = states.iter().map(|s| s.offset).collect();
    if let Some(o) = offsets {
        let base = o.first().copied().unwrap_or(0);
        let rel = o.iter().map(|&x| analysis::signed_delta(x, base));
        return (analysis::spread(rel), 0, "KVM_VCPU_TSC_OFFSET");
    }
    let base = states.first().map_or(0, |s| s.estimated_offset());
    let rel = states
        .iter()
        .map(|s| analysis::signed_delta(s.estimated_offset(), base));
    let err = states.iter().map(|s| s.estimate_error()).max().unwrap_or(0) * 2;
    (analysis::spread(rel), err, "bracketed IA32_TSC reads")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_5_compares_the_warp_with_the_skew_and_its_error() {
        let skew = (1_000, 50, "test");
        assert_eq!(
            judge(2, 10, &[(1_050, 3), (0, 0)], skew).verdict,
            Verdict::Pass
        );
        assert_eq!(
            judge(2, 10, &[(1_051, 1), (0, 0)], skew).verdict,
            Verdict::Fail
        );
        assert_eq!(judge(1, 10, &[(0, 0)], skew).verdict, Verdict::Skip);
    }

    fn state(offset: Option<u64>, tsc: u64, host: u64) -> TscState {
        TscState {
            adjust: 0,
            tsc,
            host_before: host,
            host_after: host + 10,
            offset,
            tsc_khz: 1,
        }
    }

    #[test]
    fn actual_skew_prefers_the_exact_offsets() {
        let s = [
            state(Some(100), 0, 0),
            state(Some(40), 0, 0),
            state(Some(130), 0, 0),
        ];
        assert_eq!(actual_skew(&s), (90, 0, "KVM_VCPU_TSC_OFFSET"));
        let s = [state(None, 1_000, 0), state(None, 1_500, 0)];
        let (skew, err, _) = actual_skew(&s);
        assert_eq!((skew, err), (500, 10));
    }
}
