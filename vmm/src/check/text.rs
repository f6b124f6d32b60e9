//! The readable `check` report.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use serde_json::Value;

use super::report::{CheckReport, Verdict};
use crate::units::fmt_int;

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
    if let Some(k) = e.tsc_khz {
        let _ = writeln!(out, "  TSC           {k} kHz");
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
    if let Some(c) = r.checks.iter().find(|c| c.id == "warp") {
        pairs_table(&mut out, &c.values);
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
    if r.checks.iter().any(|c| c.verdict == Verdict::Fail)
        && e.kvm_flavor == crate::host::KvmFlavor::Pvm
    {
        let _ = writeln!(
            out,
            "On PVM these failures are a true finding about the hypervisor, not an error of the tool."
        );
    }
    out
}

/// Check 5's evidence per ordered pair, and its control, when measured.
fn pairs_table(out: &mut String, values: &BTreeMap<String, Value>) {
    let Some(pairs) = values.get("pairs").and_then(Value::as_array) else {
        return;
    };
    if pairs.is_empty() {
        return;
    }
    let num = |v: &Value| v.as_i64().map_or_else(|| "n/a".into(), fmt_int);
    let _ = writeln!(
        out,
        "\nCheck 5, what the guest saw per ordered pair (cycles; the responder's TSC minus the \
         initiator's)"
    );
    let _ = writeln!(
        out,
        "  {:>6} {:>9} {:>12} {:>26} {:>14} {:>12} {:>12}",
        "pair",
        "exchanges",
        "shortest RTT",
        "guest-seen offset ± bound",
        "exact",
        "back a->b",
        "back b->a"
    );
    for p in pairs {
        let seen = match p["guest_bound_cycles"].as_u64() {
            Some(b) => format!("{} ± {}", num(&p["guest_offset_cycles"]), fmt_int(b)),
            None => "none fits".into(),
        };
        let _ = writeln!(
            out,
            "  {:>6} {:>9} {:>12} {:>26} {:>14} {:>12} {:>12}",
            format!("{},{}", p["a"], p["b"]),
            num(&p["exchanges"]),
            num(&p["shortest_round_trip_cycles"]),
            seen,
            num(&p["exact_offset_cycles"]),
            num(&p["backwards_a_to_b_cycles"]),
            num(&p["backwards_b_to_a_cycles"])
        );
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
        let _ = writeln!(out, "  control: {outcome}: {detail}");
    }
}
