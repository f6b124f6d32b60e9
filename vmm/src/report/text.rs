//! The readable report.

use std::fmt::Write as _;

use crate::analysis::Decision;
use crate::host::{windows_line, HostInfo, HostThreads, KvmFlavor};
use crate::stats::Summary;
use crate::units::{cycles_to_ns, fmt_num, hms};
use crate::vstate::sync_area::SyncRound;

use super::model::{Report, VariantReport};
use crate::output::lines::{initial_skew_line, precision_line};

fn flavor_line(h: &HostInfo) -> String {
    match h.kvm_flavor {
        KvmFlavor::Pvm => "PVM (kvm_pvm, a software hypervisor: it cannot offset the TSC and \
                           emulates guest ring-0 code)"
            .into(),
        KvmFlavor::Vmx => "VMX (kvm_intel)".into(),
        KvmFlavor::Svm => "SVM (kvm_amd)".into(),
        KvmFlavor::Unknown => "unknown (no kvm_intel, kvm_amd or kvm_pvm module found)".into(),
    }
}

fn honoured_text(h: Option<bool>, flavor: KvmFlavor) -> String {
    match h {
        Some(true) => "Yes. The writes took effect: each moved its vCPU's TSC offset by its \
                       TSC_ADJUST delta (by the exact offsets, the bracketed reads, or, where \
                       those could not tell, the guest's own TSC jump). The skews below are \
                       real: they are what the algorithms left behind."
            .into(),
        Some(false) => {
            let who = if flavor == KvmFlavor::Pvm {
                "This host's hypervisor (PVM)"
            } else {
                "This hypervisor"
            };
            format!(
                "No. {who} recorded every write in TSC_ADJUST but did not change the TSC \
                 offsets: the guest's TSCs were not moved. The skews below are the ones the \
                 writes would have produced on a hypervisor that honours them."
            )
        }
        None => "Undetermined: no write was decided (variants without writes, or evidence \
                 within its error bars), or the evidence differs between runs (see the \
                 cross-checks below)."
            .into(),
    }
}

/// The host backend's verdict: its writes are simulated, so they take
/// effect by construction; the data say whether they did.
fn host_threads_honoured_text(h: Option<bool>) -> String {
    let data = match h {
        Some(true) => {
            "The data agree: every decided write moved its thread's offset by its \
                       TSC_ADJUST delta."
        }
        Some(false) => "Yet the data say they did not: this is a bug of the host backend.",
        None => {
            "No write was decided (variants without writes), or the evidence differs \
                 between runs (see the cross-checks below)."
        }
    };
    format!(
        "No hypervisor was involved: each thread's TSC write set that thread's offset (its CPU's \
         TSC was never written), so writes take effect by construction. {data} The skews below \
         are what the algorithms left behind on this CPU."
    )
}

fn stat_row(out: &mut String, label: &str, s: &Option<Summary>) {
    if let Some(s) = s {
        let _ = writeln!(
            out,
            "    {label:<28} {:>14} {:>14} {:>14}",
            fmt_num(s.median),
            fmt_num(s.p90),
            fmt_num(s.max)
        );
    }
}

/// Linux's sync in one round: every AP's runs and compensations.
fn sync_table(out: &mut String, s: &SyncRound) {
    let _ = writeln!(
        out,
        "    {:>4} {:<13} {:<44} TSC_ADJUST compensations",
        "AP", "state", "warps per run (source/target max, count)"
    );
    for a in &s.aps {
        let runs: Vec<String> = a
            .runs
            .iter()
            .map(|r| {
                format!(
                    "{}/{} x{}",
                    fmt_num(r.source_max_warp as f64),
                    fmt_num(r.target_max_warp as f64),
                    r.warps
                )
            })
            .collect();
        let comps: Vec<String> = a.compensations.iter().map(|c| fmt_num(*c as f64)).collect();
        let _ = writeln!(
            out,
            "    {:>4} {:<13} {:<44} {}",
            a.ap,
            if a.synchronised {
                "synchronised"
            } else {
                "unstable"
            },
            runs.join("; "),
            if comps.is_empty() {
                "none".into()
            } else {
                comps.join(", ")
            }
        );
    }
}

/// The typical round's kvmclock column (`--kvmclock`): the heading for
/// `None`, vCPU `id`'s jump in ns otherwise; empty without kvmclock.
fn kvmclock_cell(r: &crate::analysis::RoundResult, id: Option<u32>) -> String {
    let Some(k) = &r.kvmclock else {
        return String::new();
    };
    let cell = match id {
        None => "kvmclock jump ns".to_string(),
        Some(id) => k
            .vcpus
            .iter()
            .find(|j| j.vcpu == id)
            .and_then(|j| j.jump_ns)
            .map_or("n/a".into(), fmt_num),
    };
    format!(" {cell:>16}")
}

fn variant_section(out: &mut String, v: &VariantReport, host: &HostInfo) {
    let _ = writeln!(out, "\nVariant {} ({} rounds)", v.variant, v.summary.rounds);
    if let (Some(w), true) = (&host.sync_windows, v.variant == LINUX) {
        let _ = writeln!(out, "  Windows: {}", windows_line(w));
    }
    if let Some(r) = &v.typical {
        let what = match (&r.sync, r.vcpus.first()) {
            (Some(s), _) => format!(
                "{} of {} AP(s) synchronised with vCPU 0, largest warp {} cycles",
                s.synchronised,
                s.aps.len(),
                fmt_num(s.max_warp as f64)
            ),
            (None, Some(x)) if x.wrote && x.tsc_at_write.is_some() => {
                format!("value written {}", x.written_value)
            }
            _ => "no TSC write (the skew is whatever was there)".to_string(),
        };
        let _ = writeln!(
            out,
            "  Typical round (#{}, skew nearest the median): {what}",
            r.round
        );
        // Method (d), the guest's own view, where the run measured it.
        let guest = r.vcpus.iter().any(|c| c.rel_offset_guest.is_some());
        let _ = writeln!(
            out,
            "    {:>4} {:>16} {:>14} {:>14} {:>12} {:>20} {:>12}{}{}",
            "vCPU",
            "TSC_ADJUST delta",
            "offset delta",
            "rel. (a)",
            "rel. (b)",
            "rel. (c) ± err",
            "exit cycles",
            if guest {
                format!(" {:>20}", "rel. (d) ± err")
            } else {
                String::new()
            },
            kvmclock_cell(r, None)
        );
        for c in &r.vcpus {
            let d = match (guest, c.rel_offset_guest, c.rel_offset_guest_error) {
                (false, _, _) => String::new(),
                (true, Some(o), Some(e)) => {
                    format!(
                        " {:>20}",
                        format!("{} ± {}", fmt_num(o as f64), fmt_num(e as f64))
                    )
                }
                (true, _, _) => format!(" {:>20}", "n/a"),
            };
            let k = kvmclock_cell(r, Some(c.id));
            let _ = writeln!(
                out,
                "    {:>4} {:>16} {:>14} {:>14} {:>12} {:>20} {:>12}{d}{k}",
                c.id,
                fmt_num(c.tsc_adjust_delta as f64),
                c.offset_delta.map_or("n/a".into(), |d| fmt_num(d as f64)),
                fmt_num(c.rel_offset_adjust as f64),
                c.rel_offset_attr
                    .map_or("n/a".into(), |d| fmt_num(d as f64)),
                format!(
                    "{} ± {}",
                    fmt_num(c.rel_offset_bracket as f64),
                    fmt_num(c.rel_offset_bracket_error as f64)
                ),
                c.exit_latency_cycles
                    .map_or("n/a".into(), |d| fmt_num(d as f64))
            );
        }
        if let Some(s) = &r.sync {
            sync_table(out, s);
        }
    }
    let _ = writeln!(
        out,
        "  Over all rounds                {:>14} {:>14} {:>14}",
        "median", "p90", "max"
    );
    stat_row(out, "skew (cycles)", &v.summary.skew_cycles);
    stat_row(out, "skew (ns)", &v.summary.skew_ns);
    stat_row(
        out,
        "CPU 0 exit time (cycles)",
        &v.summary.cpu0_exit_latency_cycles,
    );
    stat_row(
        out,
        "other exit times (cycles)",
        &v.summary.other_exit_latency_cycles,
    );
    if v.summary.kvmclock_jump_ns.is_some() {
        stat_row(out, "|kvmclock jump| (ns)", &v.summary.kvmclock_jump_ns);
    }
    if v.summary.kvmclock_wrapped_writes > 0 {
        let _ = writeln!(
            out,
            "  kvmclock wrapped in {} write(s): the TSC fell below the page's tsc_timestamp (a \
             backwards move larger than the page's age, the page not re-anchored) and the \
             reading leapt by ~10^18 ns; not in the jump statistics",
            v.summary.kvmclock_wrapped_writes
        );
    }
    variant_tail(out, v);
}

/// The end of a variant's section: KVM_GET_CLOCK at the run's fixed points
/// (`--kvmclock`), the precision, the cross-checks and the notes.
fn variant_tail(out: &mut String, v: &VariantReport) {
    if let Some(p) = &v.kvm_clock {
        let _ = writeln!(out, "  {}", super::kvm_clock::line(p));
    }
    if let Some(d) = v.summary.precision_digits {
        let _ = writeln!(out, "  {}", precision_line(d));
    }
    if v.summary.rounds_with_disagreements == 0 {
        let _ = writeln!(
            out,
            "  Cross-checks: every available method agreed in every round."
        );
    } else {
        let _ = writeln!(
            out,
            "  Cross-checks: methods disagreed in {} of {} rounds, e.g.:",
            v.summary.rounds_with_disagreements, v.summary.rounds
        );
        for d in &v.summary.first_disagreements {
            let _ = writeln!(out, "    - {d}");
        }
    }
    for n in &v.notes {
        let _ = writeln!(out, "  Note: {n}");
    }
}

/// The name of Linux's sync, the variant the windows are for.
const LINUX: &str = tsc_contract::Variant::LinuxTscSync.name();

/// The host section of a host-backend run: no hypervisor, the CPU model, the
/// threads and CPUs, the measured TSC frequency.
fn host_threads_section(out: &mut String, h: &HostInfo, t: &HostThreads) {
    let _ = writeln!(
        out,
        "  Backend          host threads: no hypervisor was involved; {}",
        t.placement()
    );
    let _ = writeln!(
        out,
        "  CPU              {}",
        h.cpu_model.as_deref().unwrap_or("unknown model")
    );
    let _ = writeln!(out, "  Kernel           {}", h.kernel_release);
    if let Some(k) = h.tsc_khz {
        let _ = writeln!(
            out,
            "  TSC frequency    {:.3} MHz ({})",
            f64::from(k) / 1000.0,
            t.tsc_khz_source
        );
    }
    if let Some(c) = &h.clocksource {
        let _ = writeln!(out, "  Clocksource      {c}");
    }
    let _ = writeln!(
        out,
        "  Offset readback  exact per-thread offsets (a TSC write sets the thread's offset, a \
         TSC_ADJUST write moves it, as KVM does)"
    );
    let _ = writeln!(out, "  KVM flavour      not used (host backend)");
    if t.os_under_hypervisor {
        let _ = writeln!(
            out,
            "  Below this OS    a hypervisor: the CPU reports the `hypervisor` flag, so this OS \
             is itself a virtual machine whose CPUs that hypervisor schedules"
        );
    }
}

/// Renders the report for a terminal.
pub fn render_text(r: &Report) -> String {
    let h = &r.host;
    let mut out = String::new();
    let per_variant = match r.duration_per_variant {
        Some(d) => format!("{} per variant (by time)", hms(d)),
        None => format!("{} round(s) per variant", r.rounds_per_variant),
    };
    let _ = writeln!(
        out,
        "tsc-rendezvous {}: TSC synchronisation on {} vCPU(s), {per_variant}",
        r.tool_version, r.vcpus
    );
    if let Some(c) = h.initial_skew_cycles {
        let _ = writeln!(out, "{}", initial_skew_line(r.vcpus, c));
    }
    let _ = writeln!(out, "\nHost");
    if let Some(t) = h.host_threads.as_ref().filter(|_| h.on_host_threads()) {
        host_threads_section(&mut out, h, t);
        return render_rest(out, r, true);
    }
    let _ = writeln!(out, "  KVM flavour      {}", flavor_line(h));
    let _ = writeln!(out, "  Kernel           {}", h.kernel_release);
    match h.tsc_khz {
        Some(k) => {
            let _ = writeln!(
                out,
                "  TSC frequency    {:.3} MHz (KVM_GET_TSC_KHZ)",
                f64::from(k) / 1000.0
            );
        }
        None => {
            let _ = writeln!(out, "  TSC frequency    unknown");
        }
    }
    if let Some(g) = &h.guest_tsc {
        let _ = writeln!(out, "  --tsc-khz        {}", g.describe());
    }
    if let Some(m) = &h.cpu_model {
        let _ = writeln!(out, "  CPU              {m}");
    }
    if let Some(c) = &h.clocksource {
        let _ = writeln!(out, "  Clocksource      {c}");
    }
    let _ = writeln!(out, "  Offset readback  {}", h.offset_source.describe());
    render_rest(out, r, false)
}

/// Everything after the host section; `threads`: the host backend.
fn render_rest(mut out: String, r: &Report, threads: bool) -> String {
    let h = &r.host;
    // Variants that wrote nothing (the std rendezvous) have no say.
    let overall = Decision::of(r.runs.iter().map(|v| v.writes_honoured)).verdict();
    if threads {
        let _ = writeln!(out, "\nDid the TSC writes take effect?");
        let _ = writeln!(out, "  {}", host_threads_honoured_text(overall));
        let _ = writeln!(
            out,
            "\nRelative offsets are each thread's TSC offset minus thread 0's after the round, \
             in cycles (the \"vCPUs\"\nbelow are the threads): (a) from the TSC_ADJUST deltas, \
             (b) from the exact per-thread offsets, (c) from\neach thread's TSC read on its own \
             CPU between two TSC reads of the coordinating thread. The skew\nis the spread of \
             (a); the exit time runs from the final TSC write to after the loop (the seed's\n\
             metric, here natively; n/a for variants without a common write)."
        );
    } else {
        let _ = writeln!(out, "\nDid the hypervisor honour the guest's TSC writes?");
        let _ = writeln!(out, "  {}", honoured_text(overall, h.kvm_flavor));
        let _ = writeln!(
            out,
            "\nRelative offsets are each vCPU's TSC offset minus vCPU 0's after the round, in \
             cycles:\n(a) from the TSC_ADJUST deltas, (b) from KVM_VCPU_TSC_OFFSET, (c) from \
             IA32_TSC read through KVM\nbetween two host TSC reads. The skew is the spread of \
             (a); the exit time runs from the\nfinal TSC write to after the loop (the seed's \
             metric; n/a for variants without a common write)."
        );
        let guest = r.runs.iter().any(|v| {
            v.typical
                .as_ref()
                .is_some_and(|t| t.vcpus.iter().any(|c| c.rel_offset_guest.is_some()))
        });
        if guest {
            let _ = writeln!(
                out,
                "(d) is what the guest saw (--guest-view): the offset bounded by forced \
                 hand-offs with vCPU 0\nright after the round, ± half its interval."
            );
        }
    }
    for v in &r.runs {
        variant_section(&mut out, v, h);
    }
    if r.runs.len() > 1 {
        let _ = writeln!(out, "\nSummary (medians)");
        let _ = writeln!(
            out,
            "  {:<14} {:>14} {:>12} {:>18}",
            "variant", "skew cycles", "skew ns", "CPU 0 exit cycles"
        );
        for v in &r.runs {
            let med = |s: &Option<Summary>| s.as_ref().map_or(f64::NAN, |s| s.median);
            let ns = h
                .tsc_khz
                .map_or(f64::NAN, |k| cycles_to_ns(med(&v.summary.skew_cycles), k));
            let _ = writeln!(
                out,
                "  {:<14} {:>14} {:>12} {:>18}",
                v.variant,
                fmt_num(med(&v.summary.skew_cycles)),
                fmt_num(ns),
                v.summary
                    .cpu0_exit_latency_cycles
                    .as_ref()
                    .map_or("n/a".into(), |s| fmt_num(s.median))
            );
        }
    }
    if !threads && h.kvm_flavor == KvmFlavor::Pvm {
        let _ = writeln!(
            out,
            "\nOn PVM the guest's ring-0 code is emulated instruction by instruction (~100x \
             slower than hardware):\nthe skews and exit times are those of this emulation, not \
             of a real CPU."
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(fmt_num(1234567.0), "1,234,567");
        assert_eq!(fmt_num(-1000.0), "-1,000");
        assert_eq!(fmt_num(999.4), "999");
        assert_eq!(fmt_num(f64::NAN), "-");
    }

    #[test]
    fn the_host_backend_says_no_hypervisor_and_where_the_threads_ran() {
        let t = HostThreads {
            threads: 2,
            host_cpus: vec![0, 1, 2],
            pinned: vec![Some(0), Some(2)],
            overcommitted: false,
            tsc_khz_source: "measured".into(),
            os_under_hypervisor: false,
        };
        assert!(t
            .placement()
            .contains("pinned to host CPUs 0, 2 (one each)"));
        let t = HostThreads {
            threads: 4,
            pinned: vec![None; 4],
            ..t
        };
        assert!(t
            .placement()
            .contains("not pinned (4 threads for 3 host CPU(s)"));
        assert!(host_threads_honoured_text(Some(true)).starts_with("No hypervisor"));
        let w = crate::options::Windows::at(1_000_000, (20, 2));
        assert!(windows_line(&w).contains("2 ms (2,000,000 cycles)"));
    }

    #[test]
    fn the_verdict_says_what_the_data_says() {
        assert!(honoured_text(Some(false), KvmFlavor::Pvm).contains("PVM"));
        assert!(honoured_text(Some(true), KvmFlavor::Vmx).starts_with("Yes"));
        assert!(honoured_text(None, KvmFlavor::Svm).starts_with("Undetermined"));
    }
}
