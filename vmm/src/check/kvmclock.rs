//! Check 8, `kvmclock-continuity`: across a guest write of IA32_TSC, does
//! the vCPU's kvmclock run on, or jump with the TSC?
//!
//! Every vCPU reads kvmclock (the version protocol), writes IA32_TSC = its
//! TSC + D (4 s of cycles), and reads kvmclock again; KVM's exact offsets
//! before and after give the TSC's move Δ. A continuous kvmclock advances by
//! the time that passed between the reads, `(t2 - t1 - Δ)` cycles; a page
//! KVM did not update after the write keeps its old `tsc_timestamp`, and the
//! vCPU's kvmclock jumps by Δ's nanoseconds. The jump is kvmclock's advance
//! minus the time that passed. The same measurement across a guest
//! TSC_ADJUST write of the same size is the control (KVM requests a clock
//! update on that write).
//!
//! The bound: a page KVM re-anchors may legitimately move kvmclock by the
//! host clock's drift against the TSC since the page's last update, at most
//! NTP's 500 ppm over KVM's 300 s sync period (150 ms). The tolerance is 5 %
//! of the write's move (200 ms for 4 s): PASS when every jump is within it of
//! 0, FAIL when one is within it of the move itself (kvmclock followed the
//! TSC), UNDECIDED otherwise or without what it needs.

use super::evidence::{Check, ClockWrites, Context, Evidence};
use super::judge::context;
use super::report::{Finding, Verdict};
use crate::analysis::clock_jump::{across_write, ClockJump};
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::tsc::TscState;
use crate::units::fmt_int as n;

/// Check 8.
pub struct KvmclockContinuity;

impl Check for KvmclockContinuity {
    fn number(&self) -> u32 {
        8
    }
    fn id(&self) -> &'static str {
        "kvmclock-continuity"
    }
    fn title(&self) -> &'static str {
        "kvmclock runs on across a guest IA32_TSC write (control: a TSC_ADJUST write)"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        let c = &ev.clock;
        if !c.kvmclock {
            return Ok(super::judge::no_kvmclock());
        }
        let Some(w) = &c.tsc_write else {
            return Ok(super::judge::missing("kvmclock write test"));
        };
        let khz = ev.initial.first().map_or(0, TscState::running_khz);
        Ok(judge(
            w,
            c.adjust_write.as_ref(),
            khz,
            ev.env.host.kvm_flavor,
        ))
    }
}

/// One vCPU's kvmclock across one write (the analysis' arithmetic, the same
/// as `run --kvmclock`'s per round).
pub type WriteSeen = ClockJump;

/// What each vCPU's kvmclock did across the writes `w`: the move from KVM's
/// exact offsets before and after.
pub fn seen(w: &ClockWrites, khz: u32) -> Vec<WriteSeen> {
    w.records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (before, after) = (w.before.get(i), w.after.get(i));
            let moved = match (after.and_then(|s| s.offset), before.and_then(|s| s.offset)) {
                (Some(a), Some(b)) => Some(a.wrapping_sub(b) as i64),
                _ => None,
            };
            across_write(i as u32, r, moved, khz)
        })
        .collect()
}

/// How a write's kvmclock jump reads against the write's move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Within the tolerance of 0.
    Continuous,
    /// Within the tolerance of the move: kvmclock followed the TSC.
    Followed,
    /// Neither.
    Other,
    /// Nothing to judge (no exact offsets, or the TSC did not move).
    Unknown,
}

/// The tolerance: 5 % of the move.
const TOLERANCE: f64 = 0.05;

fn kind(s: &WriteSeen) -> Kind {
    let (Some(jump), Some(moved)) = (s.jump_ns, s.tsc_moved_ns) else {
        return Kind::Unknown;
    };
    if moved == 0.0 {
        return Kind::Unknown;
    }
    let tol = TOLERANCE * moved.abs();
    if jump.abs() <= tol {
        Kind::Continuous
    } else if (jump - moved).abs() <= tol {
        Kind::Followed
    } else {
        Kind::Other
    }
}

fn words(s: &WriteSeen, what: &str) -> String {
    let version = if s.version.0 == s.version.1 {
        format!("pvclock version unchanged ({})", s.version.0)
    } else {
        format!("pvclock version {} -> {}", s.version.0, s.version.1)
    };
    format!(
        "vCPU {}'s kvmclock jumped by {} ns across a guest {what} write that moved its TSC by \
         {} cycles ({} ns); {version}",
        s.vcpu,
        n(s.jump_ns.unwrap_or(0.0) as i64),
        n(s.tsc_moved_cycles.unwrap_or(0)),
        n(s.tsc_moved_ns.unwrap_or(0.0) as i64)
    )
}

/// One row of the details.
fn line(s: &WriteSeen, what: &str) -> String {
    let opt = |v: Option<f64>| v.map_or_else(|| "n/a".into(), |v| n(v.round() as i64));
    format!(
        "  {:>4} {:>10} {:>16} {:>14} {:>14} {:>14} {:>12} {:>9}",
        s.vcpu,
        what,
        s.tsc_moved_cycles.map_or_else(|| "n/a".into(), n),
        opt(s.tsc_moved_ns),
        n(s.kvmclock_advance_ns),
        opt(s.elapsed_ns),
        opt(s.jump_ns),
        format!("{}->{}", s.version.0, s.version.1)
    )
}

/// The control's result in a few words.
fn control_words(control: Option<&[WriteSeen]>) -> String {
    let Some(c) = control else {
        return "no TSC_ADJUST control (the guest has no IA32_TSC_ADJUST)".into();
    };
    let kinds: Vec<Kind> = c.iter().map(kind).collect();
    if kinds.iter().all(|k| *k == Kind::Continuous) {
        let worst = c
            .iter()
            .filter_map(|s| s.jump_ns)
            .map(f64::abs)
            .fold(0.0, f64::max);
        format!(
            "the TSC_ADJUST control ran on (largest jump {} ns)",
            n(worst as i64)
        )
    } else if let Some(s) = c.iter().find(|s| kind(s) == Kind::Followed) {
        format!(
            "the TSC_ADJUST control jumped too: {}",
            words(s, "TSC_ADJUST")
        )
    } else {
        "the TSC_ADJUST control was not conclusive".into()
    }
}

/// Check 8 from the IA32_TSC writes `w`, the TSC_ADJUST control `control`,
/// at `khz`.
pub fn judge(
    w: &ClockWrites,
    control: Option<&ClockWrites>,
    khz: u32,
    flavor: KvmFlavor,
) -> Finding {
    let tsc = seen(w, khz);
    let ctl = control.map(|c| seen(c, khz));
    let ctl_text = control_words(ctl.as_deref());
    let mut f = Finding::skip("nothing measured")
        .with("tsc_write", &tsc)
        .with("adjust_write", &ctl)
        .with("delta_cycles", w.delta)
        .with("tolerance_fraction", TOLERANCE);
    let mut lines = vec![
        "Check 8, each vCPU's kvmclock across its write (ns unless cycles; jump = kvmclock's \
         advance minus the time that passed)"
            .to_string(),
        format!(
            "  {:>4} {:>10} {:>16} {:>14} {:>14} {:>14} {:>12} {:>9}",
            "vCPU",
            "write",
            "TSC moved cyc",
            "TSC moved",
            "kvmclock adv",
            "elapsed",
            "jump",
            "version"
        ),
    ];
    lines.extend(tsc.iter().map(|s| line(s, "IA32_TSC")));
    lines.extend(ctl.iter().flatten().map(|s| line(s, "TSC_ADJUST")));
    f.details = lines;
    let kinds: Vec<Kind> = tsc.iter().map(kind).collect();
    if let Some(s) = tsc.iter().find(|s| kind(s) == Kind::Followed) {
        f.set(
            Verdict::Fail,
            format!(
                "{} (a stale pvclock page: kvmclock followed the TSC); {ctl_text}{}",
                words(s, "IA32_TSC"),
                context(flavor)
            ),
        );
    } else if tsc.is_empty() || kinds.contains(&Kind::Unknown) {
        let why = match tsc.iter().find(|s| kind(s) == Kind::Unknown) {
            Some(s) if s.tsc_moved_cycles.is_none() => {
                "no exact offsets tell how far the TSC moved"
            }
            Some(_) => {
                "the write did not move the TSC (exact offsets unchanged): nothing to follow"
            }
            None => "no vCPU wrote",
        };
        f.set(Verdict::Undecided, format!("{why}; {ctl_text}"));
    } else if kinds.iter().all(|k| *k == Kind::Continuous) {
        let worst = tsc
            .iter()
            .filter_map(|s| s.jump_ns)
            .map(f64::abs)
            .fold(0.0, f64::max);
        f.set(
            Verdict::Pass,
            format!(
                "every vCPU's kvmclock ran on across a guest IA32_TSC write of {} cycles (largest \
                 jump {} ns, within 5 % of the move); {ctl_text}",
                n(w.delta),
                n(worst as i64)
            ),
        );
    } else {
        let s = tsc.iter().find(|s| kind(s) == Kind::Other);
        f.set(
            Verdict::Undecided,
            format!(
                "kvmclock moved neither with the time nor with the TSC: {}; {ctl_text}",
                s.map_or_else(String::new, |s| words(s, "IA32_TSC"))
            ),
        );
    }
    f
}

#[cfg(test)]
#[path = "kvmclock_tests.rs"]
mod tests;
