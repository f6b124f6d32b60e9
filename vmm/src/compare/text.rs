//! The readable `compare` report: per-variant tables, the comparisons and the
//! verdicts.

use std::fmt::Write as _;

use super::{p_text, CompareReport, Metric, VariantStats};
use crate::host::{windows_line, KvmFlavor};
use crate::stats::Summary;

use crate::units::{fmt_num as num, hms};

fn summary_of(v: &VariantStats, m: Metric) -> Option<&Summary> {
    match m {
        Metric::Cpu0ExitLatencyCycles => v.cpu0_exit_latency_cycles.as_ref(),
        Metric::OtherExitLatencyCycles => v.other_exit_latency_cycles.as_ref(),
        Metric::SkewCycles => v.skew_cycles.as_ref(),
        Metric::KvmclockJumpNs => v.kvmclock_jump_ns.as_ref(),
    }
}

/// Renders the report as text.
pub fn render_text(r: &CompareReport) -> String {
    let mut o = String::new();
    header(&mut o, r);
    tables(&mut o, r);
    comparisons(&mut o, r);
    verdicts_and_notes(&mut o, r);
    o
}

/// The title, the order, the host and what the run was asked for.
fn header(o: &mut String, r: &CompareReport) {
    let by_time = r.duration_seconds.map_or_else(String::new, |s| {
        format!(
            " (by time: {})",
            hms(std::time::Duration::from_secs_f64(s.max(0.0)))
        )
    });
    let _ = writeln!(
        *o,
        "tsc-rendezvous {}: compare {} on {} vCPU(s), {} measured rounds per variant{by_time}",
        r.tool_version,
        r.variants.join(" vs "),
        r.vcpus,
        r.rounds_per_variant
    );
    let _ = writeln!(
        *o,
        "Order: {} (seed {}); {} VM(s); {} warm-up round(s) run and excluded.",
        r.interleaving, r.seed, r.vms, r.warmup_rounds_run
    );
    let threads = r
        .host
        .host_threads
        .as_ref()
        .filter(|_| r.host.on_host_threads());
    let flavor = match (threads, r.host.kvm_flavor) {
        (Some(t), _) => format!(
            "no hypervisor (host backend: {} on {}{})",
            t.placement(),
            r.host
                .cpu_model
                .as_deref()
                .unwrap_or("an unknown CPU model"),
            if t.os_under_hypervisor {
                "; this OS itself runs in a VM"
            } else {
                ""
            }
        ),
        (None, KvmFlavor::Pvm) => "PVM (software hypervisor: guest ring-0 code is emulated)".into(),
        (None, KvmFlavor::Vmx) => "VMX (kvm_intel)".into(),
        (None, KvmFlavor::Svm) => "SVM (kvm_amd)".into(),
        (None, KvmFlavor::Unknown) => "unknown".into(),
    };
    let _ = writeln!(
        *o,
        "Host: {flavor}, TSC {} MHz{}. Took {:.2} s ({:.0} rounds/s).",
        r.host.tsc_khz.map_or_else(
            || "unknown".to_string(),
            |k| format!("{:.3}", f64::from(k) / 1000.0)
        ),
        if threads.is_some() { " (measured)" } else { "" },
        r.elapsed_seconds,
        r.rounds_per_second
    );
    if let Some(g) = &r.host.guest_tsc {
        let _ = writeln!(*o, "Guest TSC: --tsc-khz {}.", g.describe());
    }
    if let Some(c) = r.host.initial_skew_cycles {
        let line = crate::output::lines::initial_skew_line(r.vcpus, c);
        let _ = writeln!(*o, "{line}.");
    }
    let linux = tsc_contract::Variant::LinuxTscSync.name();
    if let (Some(w), true) = (&r.host.sync_windows, r.variants.iter().any(|v| v == linux)) {
        let _ = writeln!(*o, "{linux} windows: {}.", windows_line(w));
    }
    if let Some(why) = &r.incomplete {
        let _ = writeln!(
            o,
            "INCOMPLETE: {why}; the statistics cover what was measured."
        );
    }
}

/// Per metric, every variant's statistics.
fn tables(o: &mut String, r: &CompareReport) {
    for m in Metric::ALL {
        if r.per_variant.iter().all(|v| summary_of(v, m).is_none()) {
            continue;
        }
        let _ = writeln!(*o, "\n{}", capitalise(m.title()));
        let _ = writeln!(
            o,
            "  {:<14} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11} {:>12} {:>11}",
            "variant", "n", "median", "mean", "p10", "p90", "p99", "max", "std dev"
        );
        for v in &r.per_variant {
            if let Some(s) = summary_of(v, m) {
                let _ = writeln!(
                    *o,
                    "  {:<14} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11} {:>12} {:>11}",
                    v.variant,
                    s.n,
                    num(s.median),
                    num(s.mean),
                    num(s.p10),
                    num(s.p90),
                    num(s.p99),
                    num(s.max),
                    num(s.std_dev)
                );
            }
        }
    }
    if let Some(d) = r.per_variant.iter().find_map(|v| v.precision_digits) {
        let _ = writeln!(
            o,
            "  {} The comparisons below use the histograms too.",
            crate::output::lines::precision_line(d)
        );
    }
}

/// Every variant against the first: the shift of medians and the test.
fn comparisons(o: &mut String, r: &CompareReport) {
    let _ = writeln!(
        *o,
        "\nAgainst {} (difference of medians with a bootstrap 95% CI, {} replicates; \
         Mann-Whitney U, two-sided)",
        r.variants.first().map_or("", String::as_str),
        r.bootstrap_iterations
    );
    let _ = writeln!(
        *o,
        "  {:<14} {:<8} {:>10} {:>23} {:>8} {:>19} {:>10}",
        "variant", "metric", "diff", "95% CI", "rel", "95% CI", "p"
    );
    for c in &r.comparisons {
        let (Some(s), Some(t)) = (&c.shift, &c.mann_whitney) else {
            continue;
        };
        let metric = match c.metric {
            Metric::Cpu0ExitLatencyCycles => "cpu0",
            Metric::OtherExitLatencyCycles => "others",
            Metric::SkewCycles => "skew",
            Metric::KvmclockJumpNs => "kvmclock",
        };
        let _ = writeln!(
            *o,
            "  {:<14} {:<8} {:>10} {:>23} {:>7.1}% {:>19} {:>10}",
            c.variant,
            metric,
            num(s.diff),
            format!("{}..{}", num(s.diff_lo), num(s.diff_hi)),
            s.rel * 100.0,
            format!("{:+.1}..{:+.1}%", s.rel_lo * 100.0, s.rel_hi * 100.0),
            p_text(t.p_two_sided).trim_start_matches("p ").to_string(),
        );
    }
}

/// The verdicts, disagreements, notes and what the host's nature means.
fn verdicts_and_notes(o: &mut String, r: &CompareReport) {
    let threads = r
        .host
        .host_threads
        .as_ref()
        .filter(|_| r.host.on_host_threads());
    let honoured: Vec<Option<bool>> = r.per_variant.iter().map(|v| v.writes_honoured).collect();
    let disagreements: usize = r
        .per_variant
        .iter()
        .map(|v| v.rounds_with_disagreements)
        .sum();
    let _ = writeln!(*o, "\nVerdict (CPU 0 loop-exit time, the seed's metric):");
    for v in &r.verdicts {
        let _ = writeln!(*o, "  {v}");
    }
    if disagreements > 0 {
        let _ = writeln!(
            *o,
            "\n{disagreements} round(s) had disagreeing readback methods; they are kept (see --csv)."
        );
    }
    for n in &r.notes {
        let _ = writeln!(*o, "note: {n}");
    }
    if threads.is_none() && honoured.iter().all(|h| *h == Some(false)) {
        let _ = writeln!(
            *o,
            "\nThe hypervisor ignored the guest's TSC writes: exit times are measured from the \
             moment each write was handled."
        );
    }
    if r.host.kvm_flavor == KvmFlavor::Pvm {
        let _ = writeln!(
            *o,
            "On PVM the guest's ring-0 code is emulated (~100x slower than hardware): these are \
             the emulator's timings, not a real CPU's."
        );
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
