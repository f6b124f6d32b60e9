//! The readable `check` report.

use std::fmt::Write as _;

use super::report::CheckReport;

/// Renders the report for a terminal.
pub fn render_text(r: &CheckReport) -> String {
    let e = &r.environment.host;
    let mut out = String::new();
    let _ = writeln!(out, "tsc-rendezvous {} check", r.tool_version);
    let _ = writeln!(out, "\nEnvironment");
    let _ = writeln!(out, "  kernel        {}", e.kernel_release);
    let _ = writeln!(out, "  KVM flavour   {}", e.kvm_flavor.name());
    if let Some(m) = &e.cpu_model {
        let _ = writeln!(out, "  CPU           {m}");
    }
    let _ = writeln!(out, "  TSC flags     {}", e.cpu_tsc_flags.join(" "));
    if let Some(c) = &e.clocksource {
        let _ = writeln!(out, "  clocksource   {c}");
    }
    if let Some(t) = e.tsc_words() {
        let _ = writeln!(out, "  TSC           {t}");
    }
    let caps = r
        .environment
        .kvm_capabilities
        .iter()
        .map(|(k, v)| format!("{}={v}", k.trim_start_matches("KVM_CAP_")))
        .collect::<Vec<_>>()
        .join(" ");
    let _ = writeln!(out, "  capabilities  {caps}");
    let _ = writeln!(
        out,
        "  offset attr   {}   guest TSC_ADJUST {}",
        if e.tsc_offset_attr {
            "yes"
        } else {
            "no (Linux < 5.16)"
        },
        if e.guest_tsc_adjust { "yes" } else { "no" }
    );
    let _ = writeln!(out, "  offsets from  {}", e.offset_source.describe());
    let o = &r.options;
    let _ = writeln!(
        out,
        "\nChecks ({} vCPUs, {} rounds of {}, warp test {} iterations per vCPU, hand-off test {} \
         exchanges per pair)",
        o.vcpus,
        o.rounds,
        o.variant.name(),
        o.warp_iterations,
        o.exchanges
    );
    if let Some(why) = &r.incomplete {
        let _ = writeln!(
            out,
            "  INCOMPLETE: {why}; checks without evidence are skipped as not measured"
        );
    }
    for c in &r.checks {
        let _ = writeln!(
            out,
            "  {:<9} {}. {:<22} {}",
            c.verdict.label(),
            c.number,
            c.id,
            c.reason
        );
        if let Some(b) = &c.baseline {
            let tag = if b.regressed { "REGRESSED" } else { "baseline" };
            let _ = writeln!(out, "         {tag}: {}", b.reason);
        }
    }
    for c in r.checks.iter().filter(|c| !c.details.is_empty()) {
        let _ = writeln!(out);
        for line in &c.details {
            let _ = writeln!(out, "{line}");
        }
    }
    let n = &r.counts;
    let _ = writeln!(
        out,
        "\n{} passed, {} failed, {} skipped, {} undecided{}: {}",
        n.passed,
        n.failed,
        n.skipped,
        n.undecided,
        if n.regressed > 0 {
            format!(", {} regressed", n.regressed)
        } else {
            String::new()
        },
        if r.ok { "OK" } else { "FAILED" }
    );
    if let Some(line) = r.ignored_writes_note() {
        let _ = writeln!(out, "{line}");
    }
    out
}
