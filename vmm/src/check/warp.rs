//! Check 5, `warp`: what the guest sees of the vCPUs' TSCs against what
//! KVM says. Every ordered pair of vCPUs hands TSC readings back and forth
//! (the forced hand-off test), which bounds each pair's relative offset as
//! the guest sees it; that view must agree with KVM's exact offsets of the
//! same moment, tightly enough to matter, and must see a known move of one
//! vCPU's TSC (the control). The lock-ordered warp test (Linux's
//! `check_tsc_warp` pattern) runs before it: a backwards step it saw beyond
//! the exact skew is a failure too. The judges are [`super::handoff`] and
//! [`super::lock_order`].

use super::evidence::{Check, Context, Evidence};
use super::handoff::{self, FLOOR_NS};
use super::lock_order;
use super::report::{Finding, Verdict};
use crate::error::RunError;

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
        "what the guest sees: every ordered pair's TSC offset by forced hand-offs agrees with \
         KVM's exact offsets, and a known move is seen"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        let Some(w) = &ev.warp else {
            return Ok(super::judge::missing("warp test"));
        };
        let source = ev.env.host.offset_source;
        let lock = lock_order::judge(
            ev.options.vcpus,
            ev.options.warp_iterations,
            &w.seen,
            lock_order::actual_skew(&w.after, source),
        );
        let Some(h) = &ev.handoff else {
            if ev.options.vcpus < 2 {
                return Ok(lock);
            }
            return Ok(super::judge::missing("forced hand-off test"));
        };
        let floor = ev
            .env
            .host
            .tsc_khz
            .map_or(0, |k| FLOOR_NS.saturating_mul(u64::from(k)) / 1_000_000);
        let mut f = handoff::judge(ev.options.vcpus, h, source, floor);
        // The lock-ordered test's evidence of failure fails the check too.
        if lock.verdict == Verdict::Fail && f.verdict != Verdict::Fail {
            let reason = format!("lock-ordered warp test: {}", lock.reason);
            f.set(Verdict::Fail, reason);
        }
        Ok(f.with("lock_ordered", lock_values(&lock)))
    }
}

/// The lock-ordered test's verdict, reason and values, as one value.
fn lock_values(lock: &Finding) -> serde_json::Value {
    serde_json::json!({
        "verdict": lock.verdict,
        "reason": lock.reason,
        "values": lock.values,
    })
}
