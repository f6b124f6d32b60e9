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
//! The tolerance is derived from what was measured, per write
//! ([`crate::analysis::clock_jump`]): the time that passed is exact (the
//! guest's TSC reads less the exact offsets' move), so a kvmclock that ran
//! on may stray only by the readings' rounding, the page's rate against the
//! TSC frequency, and, where KVM rewrote the page, the re-anchoring: the
//! host clock's rate against the TSC over the page's age, bounded by NTP's
//! 1000 ppm plus how far the host's CLOCK_MONOTONIC_RAW was measured to run
//! off its TSC over the measurement ([`crate::tsc::host_clock`]; an emulated
//! or nested host's clock can run thousands of ppm off): microseconds, so a
//! jump of a millisecond is seen. PASS when every jump is within its allowance of 0;
//! FAIL when one is within its allowance of the move (kvmclock followed the
//! TSC: a stale page), when a reading wrapped (the TSC fell below its page's
//! tsc_timestamp), or when one jumped beyond its allowance either way;
//! UNDECIDED without what it needs (no exact offsets, a write that did not
//! move the TSC, an unknown TSC frequency, a page never written, a move
//! within the allowance), saying which.

use super::evidence::{Check, ClockWrites, Context, Evidence};
use super::judge::context;
use super::report::{Finding, Verdict};
use crate::analysis::clock_jump::{across_write_at, ClockJump};
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::tsc::host_clock::ClockDrift;
use crate::tsc::TscState;
use crate::units::{fmt_int as n, NTP_MAX_PPM};

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
            c.host_clock.as_ref(),
        ))
    }
}

/// One vCPU's kvmclock across one write (the analysis' arithmetic, the same
/// as `run --kvmclock`'s per round).
pub type WriteSeen = ClockJump;

/// The rate a re-anchoring may move kvmclock by, ppm: NTP's, plus the
/// most the host's clock was measured to run off its TSC.
pub fn reanchor_ppm(host: Option<&ClockDrift>) -> f64 {
    NTP_MAX_PPM as f64 + host.map_or(0.0, ClockDrift::worst_ppm)
}

/// What each vCPU's kvmclock did across the writes `w`: the move from KVM's
/// exact offsets before and after, a re-anchoring allowed `reanchor_ppm`.
pub fn seen(w: &ClockWrites, khz: u32, reanchor_ppm: f64) -> Vec<WriteSeen> {
    w.records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (before, after) = (w.before.get(i), w.after.get(i));
            let moved = match (after.and_then(|s| s.offset), before.and_then(|s| s.offset)) {
                (Some(a), Some(b)) => Some(a.wrapping_sub(b) as i64),
                _ => None,
            };
            across_write_at(i as u32, r, moved, khz, reanchor_ppm)
        })
        .collect()
}

/// How a write's kvmclock jump reads against the write's move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Within its allowance of 0.
    Continuous,
    /// Within its allowance of the move: kvmclock followed the TSC.
    Followed,
    /// A reading wrapped: the TSC fell below its page's tsc_timestamp.
    Wrapped,
    /// Beyond its allowance of both, on a page KVM rewrote, within what a
    /// re-anchoring can step kvmclock by (KVM's reads of the host's TSC and
    /// clock up to the pages' ages apart): not told from a fault.
    Stepped,
    /// Beyond its allowance of both, and of what a re-anchoring can do:
    /// kvmclock jumped.
    Jumped,
    /// The move within the allowances: running on and following read
    /// alike.
    Unresolved,
    /// Nothing to judge (no exact offsets, no move, no frequency, a page
    /// never written).
    Unknown,
}

fn kind(s: &WriteSeen) -> Kind {
    if s.kvmclock_wrapped {
        return Kind::Wrapped;
    }
    let (Some(jump), Some(moved), Some(allow), Some(follow)) = (
        s.jump_ns,
        s.tsc_moved_ns,
        s.allowance_ns,
        s.follow_allowance_ns,
    ) else {
        return Kind::Unknown;
    };
    if moved == 0.0 {
        return Kind::Unknown;
    }
    let stepped = s
        .step_window_ns
        .is_some_and(|(lo, hi)| (lo..=hi).contains(&jump));
    let followed = (jump - moved).abs() <= follow;
    if moved.abs() <= allow + follow || (stepped && followed) {
        Kind::Unresolved
    } else if jump.abs() <= allow {
        Kind::Continuous
    } else if followed {
        Kind::Followed
    } else if stepped {
        Kind::Stepped
    } else {
        Kind::Jumped
    }
}

/// Why a write of kind Unknown or Unresolved decides nothing, in words.
fn why_unknown(s: &WriteSeen) -> String {
    match (s.tsc_moved_cycles, s.tsc_moved_ns) {
        (None, _) => "no exact offsets tell how far the TSC moved".into(),
        (Some(0), _) => {
            "the write did not move the TSC (exact offsets unchanged): nothing to follow".into()
        }
        (Some(_), None) => format!(
            "vCPU {}'s TSC frequency is unknown (KVM_GET_TSC_KHZ gave none): its move and the \
             time between its readings cannot be put in ns",
            s.vcpu
        ),
        (Some(_), Some(m)) if s.allowance_ns.is_none() => format!(
            "vCPU {}'s pvclock page was never written (multiplier 0): its kvmclock is no clock \
             to follow the {} ns move",
            s.vcpu,
            n(m.round() as i64)
        ),
        (Some(_), Some(m)) if s.step_window_ns.is_some() && m.abs() > allowances(s) => format!(
            "vCPU {}'s page was re-anchored {} ns after its last anchoring, no sooner than its \
             TSC's move of {} ns: a re-anchoring (KVM's reads of the host's TSC and clock that \
             far apart) and a stale page read alike",
            s.vcpu,
            n(s.page_age_ns.max(s.page_age_after_ns) as i64),
            n(m.round() as i64)
        ),
        (Some(_), Some(m)) => format!(
            "vCPU {}'s move of {} ns is within the allowances ({} ns): a kvmclock that ran on \
             and one that followed read alike",
            s.vcpu,
            n(m.round() as i64),
            n(allowances(s).ceil() as i64)
        ),
    }
}

/// A write's two allowances together, ns.
fn allowances(s: &WriteSeen) -> f64 {
    s.allowance_ns.unwrap_or(0.0) + s.follow_allowance_ns.unwrap_or(0.0)
}

/// Why a re-anchored page's step decides nothing, in words.
fn why_stepped(s: &WriteSeen, what: &str) -> String {
    let (lo, hi) = s.step_window_ns.unwrap_or((0.0, 0.0));
    format!(
        "{}: beyond its allowance but within the {} to +{} ns a re-anchoring can step kvmclock \
         by (KVM reads the host's TSC, then its clock; a page leads the clock by the time \
         between, up to its age when read): far from the move, so no stale page, but not told \
         from a fault either",
        words(s, what),
        n(lo.floor() as i64),
        n(hi.ceil() as i64)
    )
}

fn words(s: &WriteSeen, what: &str) -> String {
    let version = if s.version.0 == s.version.1 {
        format!("pvclock version unchanged ({})", s.version.0)
    } else {
        format!("pvclock version {} -> {}", s.version.0, s.version.1)
    };
    let jump = if s.kvmclock_wrapped {
        format!(
            "wrapped (it advanced by {} ns: its TSC fell below its page's tsc_timestamp)",
            n(s.kvmclock_advance_ns)
        )
    } else {
        format!("jumped by {} ns", n(s.jump_ns.unwrap_or(0.0) as i64))
    };
    let allowance = s.allowance_ns.map_or_else(String::new, |a| {
        format!(
            ", beyond its allowance of {} ns ({})",
            n(a.ceil() as i64),
            allowance_words(s)
        )
    });
    format!(
        "vCPU {}'s kvmclock {jump} across a guest {what} write that moved its TSC by {} cycles \
         ({} ns){allowance}; {version}",
        s.vcpu,
        n(s.tsc_moved_cycles.unwrap_or(0)),
        n(s.tsc_moved_ns.unwrap_or(0.0) as i64)
    )
}

/// What a write's allowance is made of, in words.
fn allowance_words(s: &WriteSeen) -> String {
    if s.page_rewritten {
        let measured = (s.reanchor_ppm - NTP_MAX_PPM as f64).max(0.0).ceil() as i64;
        format!(
            "rounding, the page's rate, and its re-anchoring: {} ppm (NTP's 1000 and the host \
             clock's measured {} off its TSC) over its age of {} ns",
            n(s.reanchor_ppm.ceil() as i64),
            n(measured),
            n(s.page_age_ns)
        )
    } else {
        "rounding and the page's rate; the page was not rewritten".into()
    }
}

/// The host's clock against its TSC, and the re-anchoring rate it gives,
/// in a line of the details.
fn host_words(host: Option<&ClockDrift>, ppm: f64) -> String {
    match host {
        Some(d) => format!(
            "  host: CLOCK_MONOTONIC_RAW ran {:+.1} to {:+.1} ppm off the TSC at {} kHz over {} \
             ms; a re-anchoring may move kvmclock by {} ppm of the page's age",
            d.lo_ppm,
            d.hi_ppm,
            n(i64::from(d.khz)),
            n((d.span_ns() / 1_000_000) as i64),
            n(ppm.ceil() as i64)
        ),
        None => format!(
            "  host: its clock against its TSC was not measured; a re-anchoring may move \
             kvmclock by NTP's {} ppm of the page's age",
            n(ppm.ceil() as i64)
        ),
    }
}

/// One row of the details.
fn line(s: &WriteSeen, what: &str) -> String {
    let opt = |v: Option<f64>| v.map_or_else(|| "n/a".into(), |v| n(v.round() as i64));
    format!(
        "  {:>4} {:>10} {:>16} {:>14} {:>14} {:>14} {:>12} {:>10} {:>9}",
        s.vcpu,
        what,
        s.tsc_moved_cycles.map_or_else(|| "n/a".into(), n),
        opt(s.tsc_moved_ns),
        n(s.kvmclock_advance_ns),
        opt(s.elapsed_ns),
        if s.kvmclock_wrapped {
            "wrapped".to_string()
        } else {
            opt(s.jump_ns)
        },
        opt(s.allowance_ns.map(f64::ceil)),
        format!("{}->{}", s.version.0, s.version.1)
    )
}

/// The largest |jump| of continuous writes and the largest allowance.
fn largest(seen: &[WriteSeen]) -> (f64, f64) {
    let jump = seen
        .iter()
        .filter_map(|s| s.jump_ns)
        .map(f64::abs)
        .fold(0.0, f64::max);
    let allow = seen
        .iter()
        .filter_map(|s| s.allowance_ns)
        .fold(0.0, f64::max);
    (jump, allow)
}

/// The first write whose kvmclock did not run on, and what it shows.
fn failed_write(seen: &[WriteSeen]) -> Option<(&WriteSeen, &'static str)> {
    seen.iter()
        .find(|s| kind(s) == Kind::Followed)
        .map(|s| (s, "a stale pvclock page: kvmclock followed the TSC"))
        .or_else(|| {
            seen.iter()
                .find(|s| kind(s) == Kind::Wrapped)
                .map(|s| (s, "a stale pvclock page: kvmclock wrapped below it"))
        })
        .or_else(|| {
            seen.iter()
                .find(|s| kind(s) == Kind::Jumped)
                .map(|s| (s, "kvmclock did not run on"))
        })
}

/// The first write that left its page stale (kvmclock followed the TSC, or
/// wrapped below the page), and what it shows.
fn stale_write(seen: &[WriteSeen]) -> Option<(&WriteSeen, &'static str)> {
    failed_write(seen).filter(|(s, _)| matches!(kind(s), Kind::Followed | Kind::Wrapped))
}

/// The IA32_TSC writes' jumps in a few words (when the control failed first).
fn tsc_summary(seen: &[WriteSeen]) -> String {
    if seen.is_empty() {
        return "no vCPU wrote IA32_TSC".into();
    }
    let jumps: Vec<String> = seen
        .iter()
        .map(|s| match s.jump_ns {
            Some(j) => format!("vCPU {} {} ns", s.vcpu, n(j as i64)),
            None => format!("vCPU {} unknown", s.vcpu),
        })
        .collect();
    format!("IA32_TSC jumps {}", jumps.join(", "))
}

/// The control's result in a few words.
fn control_words(control: Option<&[WriteSeen]>) -> String {
    let Some(c) = control else {
        return "no TSC_ADJUST control (the guest has no IA32_TSC_ADJUST)".into();
    };
    let kinds: Vec<Kind> = c.iter().map(kind).collect();
    if !kinds.is_empty() && kinds.iter().all(|k| *k == Kind::Continuous) {
        let (jump, allow) = largest(c);
        format!(
            "the TSC_ADJUST control ran on (largest jump {} ns, allowances up to {} ns)",
            n(jump as i64),
            n(allow.ceil() as i64)
        )
    } else if let Some(s) = c
        .iter()
        .find(|s| matches!(kind(s), Kind::Followed | Kind::Wrapped))
    {
        format!(
            "the TSC_ADJUST control jumped too: {}",
            words(s, "TSC_ADJUST")
        )
    } else if let Some(s) = c.iter().find(|s| kind(s) == Kind::Stepped) {
        format!(
            "the TSC_ADJUST control's page was re-anchored and stepped as well: {}",
            why_stepped(s, "TSC_ADJUST")
        )
    } else if let Some(s) = c.iter().find(|s| kind(s) == Kind::Jumped) {
        format!(
            "the TSC_ADJUST control's kvmclock did not run on either: {}",
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
    host: Option<&ClockDrift>,
) -> Finding {
    let ppm = reanchor_ppm(host);
    let tsc = seen(w, khz, ppm);
    let ctl = control.map(|c| seen(c, khz, ppm));
    let ctl_text = control_words(ctl.as_deref());
    let mut f = Finding::skip("nothing measured")
        .with("tsc_write", &tsc)
        .with("adjust_write", &ctl)
        .with("delta_cycles", w.delta)
        .with("host_clock", host);
    let mut lines = vec![
        "Check 8, each vCPU's kvmclock across its write (ns unless cycles; jump = kvmclock's \
         advance minus the time that passed)"
            .to_string(),
        format!(
            "  {:>4} {:>10} {:>16} {:>14} {:>14} {:>14} {:>12} {:>10} {:>9}",
            "vCPU",
            "write",
            "TSC moved cyc",
            "TSC moved",
            "kvmclock adv",
            "elapsed",
            "jump",
            "allowance",
            "version"
        ),
    ];
    lines.extend(tsc.iter().map(|s| line(s, "IA32_TSC")));
    lines.extend(ctl.iter().flatten().map(|s| line(s, "TSC_ADJUST")));
    lines.push(host_words(host, ppm));
    f.details = lines;
    // The control runs first: a TSC_ADJUST write that left its page stale
    // (kvmclock followed the TSC, or wrapped below the page) is a failure of
    // its own (KVM requests a clock update on that write since d9130a2dfdd4),
    // and the IA32_TSC writes after it start from the page it left. A control
    // that jumped by neither the move nor 0 (a re-anchoring beyond its
    // allowance) is reported, not judged: the control is there for the stale
    // page.
    if let Some((s, what)) = ctl.as_deref().and_then(stale_write) {
        f.set(
            Verdict::Fail,
            format!(
                "{} ({what}); the IA32_TSC writes after it started from the page it left, so their \
                 own result is not judged: {}{}",
                words(s, "TSC_ADJUST"),
                tsc_summary(&tsc),
                context(flavor)
            ),
        );
        return f;
    }
    let failed = failed_write(&tsc);
    if let Some((s, what)) = failed {
        f.set(
            Verdict::Fail,
            format!(
                "{} ({what}); {ctl_text}{}",
                words(s, "IA32_TSC"),
                context(flavor)
            ),
        );
    } else if tsc.is_empty() {
        f.set(Verdict::Undecided, format!("no vCPU wrote; {ctl_text}"));
    } else if let Some(s) = tsc
        .iter()
        .find(|s| matches!(kind(s), Kind::Unknown | Kind::Unresolved))
    {
        f.set(
            Verdict::Undecided,
            format!("{}; {ctl_text}", why_unknown(s)),
        );
    } else if let Some(s) = tsc.iter().find(|s| kind(s) == Kind::Stepped) {
        f.set(
            Verdict::Undecided,
            format!("{}; {ctl_text}", why_stepped(s, "IA32_TSC")),
        );
    } else {
        let (jump, allow) = largest(&tsc);
        f.set(
            Verdict::Pass,
            format!(
                "every vCPU's kvmclock ran on across a guest IA32_TSC write of {} cycles (largest \
                 jump {} ns, each within its allowance, the largest {} ns: rounding, the page's \
                 rate and any re-anchoring); {ctl_text}",
                n(w.delta),
                n(jump as i64),
                n(allow.ceil() as i64)
            ),
        );
    }
    f
}

#[cfg(test)]
#[path = "kvmclock_tests.rs"]
mod tests;
