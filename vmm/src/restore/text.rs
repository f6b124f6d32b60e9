//! The readable `restore` report (its clock part in [`super::clock_text`]).

use std::fmt::Write as _;

use super::clock_text;
use super::report::{ClockReport, MethodReport, RateReport, RestoreReport};
use crate::tsc::frequency::fmt_ppm;
use crate::units::fmt_num;
use crate::vstate::PioState;

fn opt(x: Option<impl Into<i128>>) -> String {
    x.map_or_else(|| "-".into(), |v| fmt_num(v.into() as f64))
}

/// Renders the report for a terminal.
pub fn render_text(r: &RestoreReport) -> String {
    let mut out = String::new();
    let o = &r.options;
    let rate = o.tsc.map_or_else(String::new, |t| {
        format!(
            ", the guest's TSC at {} (restored at the rate saved)",
            t.describe()
        )
    });
    let _ = writeln!(
        out,
        "tsc-rendezvous {} restore: a {} rendezvous on {} vCPU(s){rate}, snapshot, destroy, {} ms, restore, by method",
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

/// The guest's TSC rate across the restore, where it was set or scaled.
fn rate(out: &mut String, x: &RateReport) {
    let restored: Vec<String> = x.restored_khz.iter().map(|&k| fmt_num(k.into())).collect();
    let how = if x.scaled {
        format!(
            "KVM scales it by {} from the host's {} kHz",
            fmt_ppm(x.ratio_ppm),
            fmt_num(x.host_khz.into())
        )
    } else if x.catch_up {
        format!(
            "not scaled (no TSC scaling): the TSC runs at the host's {} kHz between guest \
             entries, KVM serves the rate by catch-up",
            fmt_num(x.host_khz.into())
        )
    } else {
        format!(
            "not scaled: the TSC runs at the host's {} kHz",
            fmt_num(x.host_khz.into())
        )
    };
    let _ = writeln!(
        out,
        "  TSC rate: saved {} kHz, restored {} kHz ({}); {how}",
        opt(x.saved_khz),
        if restored.is_empty() {
            "-".to_string()
        } else {
            restored.join(", ")
        },
        match x.kept {
            Some(true) => "the saved rate",
            Some(false) => "NOT the saved rate",
            None => "not measured",
        }
    );
}

/// The documented method's clock arithmetic: the shift, the drift, the
/// rate gap where there is one and, where KVM scales, what vcpu.rst's
/// formula taken literally would have missed by.
fn clock(out: &mut String, c: &ClockReport) {
    let _ = writeln!(
        out,
        "  clock: every offset shifted by {} cycles; CLOCK_REALTIME drifted {} cycles against the \
         TSC between the samples (|shift - drift| bound {}, |drift| bound {})",
        fmt_num(c.shift_cycles as f64),
        fmt_num(c.realtime_drift_cycles as f64),
        fmt_num(c.shift_bound_cycles as f64),
        fmt_num(c.drift_bound_cycles as f64)
    );
    if c.rate_gap_cycles != 0 {
        let _ = writeln!(
            out,
            "  clock: the rate gap (the host TSC interval at the reported rate minus at the \
             one KVM runs) is {} cycles: the shift must be the drift plus it",
            fmt_num(c.rate_gap_cycles as f64)
        );
    }
    if !c.ratio.is_one() {
        let _ = writeln!(
            out,
            "  clock: vcpu.rst's formula taken literally (the host TSC difference unscaled) \
             would have shifted by {} cycles, every guest TSC off by {} cycles ({})",
            fmt_num(c.literal_shift_cycles as f64),
            fmt_num(c.literal_miss_cycles as f64),
            c.literal_miss_ns
                .map_or_else(|| "?".into(), |ns| format!("{:.3} ms", ns / 1e6))
        );
    }
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
    if let Some(x) = m.rate.as_ref().filter(|x| x.source.is_some() || x.scaled) {
        rate(out, x);
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
        clock(out, c);
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

#[cfg(test)]
mod tests {
    use super::super::testdata::{honoured, honoured_at, report, KHZ};
    use super::*;

    /// At 0.5 the method's section says the rate saved and restored, how
    /// KVM scales it, and what the literal formula would have missed by; at
    /// the host's rate, unset, it says neither.
    #[test]
    fn a_scaled_restore_shows_its_rate_and_the_literal_miss() {
        let mut out = String::new();
        method(&mut out, &report(&honoured_at(4_000, KHZ / 2)));
        for words in [
            "TSC rate: saved 1,000,000 kHz, restored 1,000,000, 1,000,000 kHz (the saved rate); \
             KVM scales it by 0.5 from the host's 2,000,000 kHz",
            "would have shifted by -74,496,000 cycles, every guest TSC off by -74,500,000 cycles \
             (-74.500 ms)",
        ] {
            assert!(out.contains(words), "'{words}' missing:\n{out}");
        }
        let mut out = String::new();
        method(&mut out, &report(&honoured(4_000)));
        assert!(
            !out.contains("TSC rate:") && !out.contains("taken literally"),
            "{out}"
        );
    }
}
