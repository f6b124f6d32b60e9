//! Check 5, `warp`: what the guest sees of the vCPUs' TSCs against what
//! KVM says. Every ordered pair of vCPUs hands TSC readings back and forth
//! (the forced hand-off test), which bounds each pair's relative offset as
//! the guest sees it; that view must agree with KVM's exact offsets of the
//! same moment, tightly enough to matter, and must see a known move of one
//! vCPU's TSC (the control). The lock-ordered warp test (Linux's
//! `check_tsc_warp` pattern) runs before it: a backwards step it saw beyond
//! the exact skew is a failure too. The judges are [`super::handoff`] and
//! [`super::lock_order`].

use std::collections::BTreeMap;

use serde_json::Value;

use super::evidence::{Check, Context, Evidence};
use super::handoff::{self, FLOOR_NS};
use super::lock_order;
use super::report::{Finding, Verdict};
use crate::error::RunError;
use crate::units::fmt_int;

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
        let floor = ev
            .env
            .host
            .tsc_khz
            .map_or(0, |k| FLOOR_NS.saturating_mul(u64::from(k)) / 1_000_000);
        let handoff = ev
            .handoff
            .as_ref()
            .map(|h| handoff::judge(ev.options.vcpus, h, source, floor));
        Ok(combine(ev.options.vcpus, lock, handoff))
    }
}

/// Check 5 from the lock-ordered test's finding and the forced hand-off
/// test's (`None`: not measured). A lock-ordered FAIL is evidence and fails
/// the check whatever the hand-off test says, or when it is missing.
pub fn combine(vcpus: u32, lock: Finding, handoff: Option<Finding>) -> Finding {
    let Some(mut f) = handoff else {
        if vcpus < 2 {
            return lock;
        }
        let values = lock_values(&lock);
        if lock.verdict == Verdict::Fail {
            let reason = format!(
                "lock-ordered warp test: {} (the forced hand-off test was not measured)",
                lock.reason
            );
            let mut f = lock;
            f.set(Verdict::Fail, reason);
            return f.with("lock_ordered", values);
        }
        return super::judge::missing("forced hand-off test").with("lock_ordered", values);
    };
    if lock.verdict == Verdict::Fail && f.verdict != Verdict::Fail {
        let reason = format!("lock-ordered warp test: {}", lock.reason);
        f.set(Verdict::Fail, reason);
    }
    let f = f.with("lock_ordered", lock_values(&lock));
    let lines = details(&f.values);
    f.with_details(lines)
}

/// The lock-ordered test's verdict, reason and values, as one value.
fn lock_values(lock: &Finding) -> serde_json::Value {
    serde_json::json!({
        "verdict": lock.verdict,
        "reason": lock.reason,
        "values": lock.values,
    })
}

/// Check 5's evidence per ordered pair, and its control, as lines (none
/// when no pair was measured).
fn details(values: &BTreeMap<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    let Some(pairs) = values.get("pairs").and_then(Value::as_array) else {
        return out;
    };
    if pairs.is_empty() {
        return out;
    }
    let num = |v: &Value| v.as_i64().map_or_else(|| "n/a".into(), fmt_int);
    out.push(
        "Check 5, what the guest saw per ordered pair (cycles; the responder's TSC minus the \
         initiator's)"
            .into(),
    );
    out.push(format!(
        "  {:>6} {:>9} {:>12} {:>26} {:>14} {:>12} {:>12}",
        "pair",
        "exchanges",
        "shortest RTT",
        "guest-seen offset ± bound",
        "exact",
        "back a->b",
        "back b->a"
    ));
    for p in pairs {
        let seen = match p["guest_bound_cycles"].as_u64() {
            Some(b) => format!("{} ± {}", num(&p["guest_offset_cycles"]), fmt_int(b)),
            None => "none fits".into(),
        };
        out.push(format!(
            "  {:>6} {:>9} {:>12} {:>26} {:>14} {:>12} {:>12}",
            format!("{},{}", p["a"], p["b"]),
            num(&p["exchanges"]),
            num(&p["shortest_round_trip_cycles"]),
            seen,
            num(&p["exact_offset_cycles"]),
            num(&p["backwards_a_to_b_cycles"]),
            num(&p["backwards_b_to_a_cycles"])
        ));
    }
    if let Some(c) = values.get("control") {
        let outcome = c["outcome"].as_str().unwrap_or("?");
        let detail = match c["why"].as_str() {
            Some(why) => why.to_string(),
            None => format!(
                "vCPU {} moved by {} cycles through {}; exact change {}; the guest saw {}..{}",
                c["vcpu"],
                num(&c["delta_cycles"]),
                c["method"].as_str().unwrap_or("?"),
                num(&c["exact_change_cycles"]),
                num(&c["guest_change_lower_cycles"]),
                num(&c["guest_change_upper_cycles"])
            ),
        };
        out.push(format!("  control: {outcome}: {detail}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(verdict: Verdict) -> Finding {
        let mut f = Finding::skip("").with("max_warp_cycles", 5_000u64);
        f.set(verdict, "the guest saw its TSC go back by 5000 cycles");
        f
    }

    /// A lock-ordered FAIL is evidence of a warp: it fails check 5 when the
    /// forced hand-off test was not measured (the old judge said SKIP, "not
    /// measured") as when it passed.
    #[test]
    fn a_lock_ordered_fail_is_kept_without_the_hand_off_test() {
        let f = combine(2, lock(Verdict::Fail), None);
        assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
        assert!(
            f.reason
                .starts_with("lock-ordered warp test: the guest saw its TSC go back"),
            "{}",
            f.reason
        );
        assert!(f
            .reason
            .ends_with("(the forced hand-off test was not measured)"));
        assert_eq!(f.values["lock_ordered"]["verdict"], "FAIL");
        // Without a failure the missing test is a SKIP, as before.
        let f = combine(2, lock(Verdict::Pass), None);
        assert_eq!(f.verdict, Verdict::Skip, "{}", f.reason);
        assert!(f.reason.starts_with("not measured"), "{}", f.reason);
        // And it overrides a hand-off PASS.
        let mut pass = Finding::skip("");
        pass.set(Verdict::Pass, "every ordered pair sees the exact offsets");
        let f = combine(2, lock(Verdict::Fail), Some(pass));
        assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
        // One vCPU: the lock-ordered test's own finding.
        assert_eq!(combine(1, lock(Verdict::Skip), None).verdict, Verdict::Skip);
    }
}
