//! The readable `restore` report (its clock part in [`super::clock_text`]).

use std::fmt::Write as _;

use super::clock_text;
use super::report::{MethodReport, RestoreReport};
use crate::units::fmt_num;
use crate::vstate::PioState;

fn opt(x: Option<impl Into<i128>>) -> String {
    x.map_or_else(|| "-".into(), |v| fmt_num(v.into() as f64))
}

/// Renders the report for a terminal.
pub fn render_text(r: &RestoreReport) -> String {
    let mut out = String::new();
    let o = &r.options;
    let _ = writeln!(
        out,
        "tsc-rendezvous {} restore: a {} rendezvous on {} vCPU(s), snapshot, destroy, {} ms, restore, by method",
        r.tool_version, o.variant, o.vcpus, o.delay_ms
    );
    let h = &r.host;
    let _ = writeln!(out, "\nHost");
    let _ = writeln!(out, "  KVM flavour   {}", h.kvm_flavor.name());
    let _ = writeln!(out, "  kernel        {}", h.kernel_release);
    if let Some(t) = h.tsc_words() {
        let _ = writeln!(out, "  TSC           {t}");
    }
    if let Some(c) = &h.clocksource {
        let _ = writeln!(out, "  clocksource   {c}");
    }
    let _ = writeln!(out, "  offsets from  {}", h.offset_source.describe());
    let _ = writeln!(
        out,
        "  clock flags   KVM_CAP_ADJUST_CLOCK={} ({})",
        r.support.adjust_clock,
        if r.clock_flags.is_empty() {
            "none".to_string()
        } else {
            r.clock_flags.join(" ")
        }
    );
    for m in &r.methods {
        method(&mut out, m);
    }
    let _ = writeln!(out, "\nSummary");
    for m in &r.methods {
        let what = match (&m.not_run_reason, &m.offsets_outcome, &m.error) {
            (Some(why), _, _) => format!("not run: {why}"),
            (None, Some(words), None) => first_clause(words),
            (None, Some(words), Some(e)) => format!("{} (then failed: {e})", first_clause(words)),
            (None, None, Some(e)) => format!("failed: {e}"),
            (None, None, None) => "not measured".into(),
        };
        let keeps = m.keeps.as_ref().map_or_else(String::new, |k| {
            format!(" [{}]", clock_text::keeps_summary(k))
        });
        let _ = writeln!(out, "  {:<11} {what}{keeps}", m.method);
    }
    if let Some(why) = &r.incomplete {
        let _ = writeln!(out, "\nINCOMPLETE: {why}");
    }
    out
}

/// The main statement of an outcome (before the first `; `).
fn first_clause(words: &str) -> String {
    words.split("; ").next().unwrap_or(words).to_string()
}

fn method(out: &mut String, m: &MethodReport) {
    let _ = writeln!(out, "\nMethod {}: {}", m.method, m.description);
    if let Some(why) = &m.not_run_reason {
        let _ = writeln!(out, "  not run: {why}");
        return;
    }
    let states: Vec<PioState> = m.vcpus.iter().filter_map(|v| v.pio).collect();
    if let Some(v0) = m.vcpus.first().and_then(|v| v.rip) {
        let how = if states.iter().all(|&s| s == PioState::Completed) {
            "completed by KVM_RUN with immediate_exit on every vCPU"
        } else if states.iter().all(|&s| s == PioState::AlreadyPast) {
            "already past (RIP advanced before the exit) on every vCPU"
        } else if states.iter().all(|&s| s != PioState::NotCompleted) {
            "completed by KVM_RUN with immediate_exit on some vCPUs, already past on the others"
        } else {
            "NOT completed on some vCPUs"
        };
        let _ = writeln!(
            out,
            "  snapshot: the pending `out` to COMMAND_DONE was {how} (vCPU 0: RIP {:#x} -> {:#x})",
            v0.rip_at_exit, v0.rip_after
        );
    }
    if let Some(d) = m.delay_ms {
        let passed = m.host_time_passed.map_or_else(String::new, |p| {
            format!(
                "; host time between the guests' last and first TSC reads {:.1}..{:.1} ms",
                p.min_ns.unwrap_or(0.0) / 1e6,
                p.max_ns.unwrap_or(0.0) / 1e6
            )
        });
        let _ = writeln!(out, "  destroyed -> recreated after {d:.1} ms{passed}");
    }
    if let Some(c) = &m.clock {
        let _ = writeln!(
            out,
            "  clock: every offset shifted by {} cycles; CLOCK_REALTIME drifted {} cycles against the \
             TSC between the samples (|shift - drift| bound {}, |drift| bound {})",
            fmt_num(c.shift_cycles as f64),
            fmt_num(c.realtime_drift_cycles as f64),
            fmt_num(c.shift_bound_cycles as f64),
            fmt_num(c.drift_bound_cycles as f64)
        );
    }
    if !m.vcpus.is_empty() {
        let _ = writeln!(
            out,
            "  {:>4} {:>14} {:>14} {:>14} {:>14} {:>17} {:>17} {:>15} {:>22}",
            "vCPU",
            "rel.ofs before",
            "rel.ofs after",
            "ADJUST before",
            "ADJUST after",
            "last TSC before",
            "first TSC after",
            "advance",
            "advance - host time"
        );
    }
    for v in &m.vcpus {
        let dev = v.advance_minus_host.map_or_else(
            || "-".into(),
            |(lo, hi)| format!("{}..{}", fmt_num(lo as f64), fmt_num(hi as f64)),
        );
        let _ = writeln!(
            out,
            "  {:>4} {:>14} {:>14} {:>14} {:>14} {:>17} {:>17} {:>15} {:>22}",
            v.id,
            opt(v.relative_offset_before),
            opt(v.relative_offset_after),
            opt(v.tsc_adjust_before),
            opt(v.tsc_adjust_after),
            opt(v.guest_tsc_last),
            opt(v.guest_tsc_first),
            opt(v.guest_advance_cycles),
            dev
        );
    }
    if let Some(w) = &m.offsets_outcome {
        let _ = writeln!(out, "  => {w}");
    }
    if let Some(w) = &m.time_outcome {
        let _ = writeln!(out, "  => {w}");
    }
    if let Some(w) = &m.warp {
        let _ = writeln!(
            out,
            "  warp test: largest backwards step {} cycles ({} steps, {} hand-offs, shortest {} cycles; {} iterations per vCPU)",
            fmt_num(w.max_warp_cycles as f64),
            w.warps,
            w.handoffs,
            opt(w.shortest_handoff_cycles),
            w.iterations_per_vcpu
        );
    }
    if let Some(c) = &m.kvmclock {
        clock_text::restore_clock(out, "across the restore", c);
    }
    if let Some(c) = &m.chain {
        clock_text::chain(out, c);
    }
    if let Some(k) = &m.keeps {
        clock_text::keeps(out, k);
    }
    if let (Some(step), Some(e)) = (m.failed_step, &m.error) {
        let _ = writeln!(out, "  FAILED in step '{step}': {e}");
    }
}
