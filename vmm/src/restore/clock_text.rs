//! The clock part of the readable `restore` report: per method the guests'
//! kvmclock across each restore, KVM_GET_CLOCK's flags and every page's
//! PVCLOCK_TSC_STABLE_BIT once the guest ran again, the chained restore,
//! and what the method kept.

use std::fmt::Write as _;

use super::clock_report::{ChainReport, ClockAfterReport, Keeps, RestoreClock};
use crate::units::fmt_int as n;

fn after(out: &mut String, a: &ClockAfterReport) {
    let flags = match (&a.kvm_get_clock, &a.kvm_get_clock_error) {
        (Some(c), _) => format!(
            "KVM_GET_CLOCK flags {:#x} ({})",
            c.flags,
            if a.flags.is_empty() {
                "none".to_string()
            } else {
                a.flags.join(" ")
            }
        ),
        (None, Some(e)) => format!("KVM_GET_CLOCK failed: {e}"),
        (None, None) => "no KVM_GET_CLOCK".to_string(),
    };
    let _ = writeln!(out, "    after the guest ran again: {flags}");
    if !a.pages.is_empty() {
        let _ = writeln!(
            out,
            "      {:>4} {:>7} {:>6} {:>22} {:>20}",
            "vCPU", "version", "stable", "tsc_timestamp", "system_time ns"
        );
    }
    for p in &a.pages {
        let _ = writeln!(
            out,
            "      {:>4} {:>7} {:>6} {:>22} {:>20}",
            p.id,
            p.version,
            if p.tsc_stable_bit { "1" } else { "0" },
            n(p.tsc_timestamp),
            n(p.system_time)
        );
    }
    let _ = writeln!(out, "    => {}", a.words);
}

/// One restore's kvmclock, indented under `title`.
pub fn restore_clock(out: &mut String, title: &str, c: &RestoreClock) {
    let _ = writeln!(out, "  kvmclock {title}:");
    if let Some(why) = &c.guest_reads_why_not {
        let _ = writeln!(out, "    the guests did not read kvmclock: {why}");
    }
    let h = &c.host;
    if let Some(e) = h.elapsed {
        let kvm = h.kvmclock_advance_ns.map_or_else(String::new, |k| {
            format!("; KVM_GET_CLOCK's kvmclock advanced {} ns", n(k))
        });
        let real = h
            .realtime_advance_ns
            .map_or_else(String::new, |r| format!(", CLOCK_REALTIME {} ns", n(r)));
        let _ = writeln!(
            out,
            "    host time between the readings {}..{} ns{kvm}{real}",
            n(e.min_ns),
            n(e.max_ns)
        );
    }
    for v in &c.continuity {
        let _ = writeln!(
            out,
            "    vCPU {}: {} -> {} ns: {}",
            v.id,
            n(v.kvmclock_before_ns),
            n(v.kvmclock_after_ns),
            v.words
        );
    }
    if let Some(w) = &c.continuity_outcome {
        let _ = writeln!(out, "    => {w}");
    }
    if let Some(a) = &c.after {
        after(out, a);
    }
}

/// The chained restore.
pub fn chain(out: &mut String, c: &ChainReport) {
    if let Some(why) = &c.not_possible {
        let _ = writeln!(out, "  chained restore: not possible: {why}");
        return;
    }
    let opt = |x: Option<u64>| x.map_or_else(|| "-".into(), n);
    let _ = writeln!(
        out,
        "  chained restore (run, snapshot, restore again{}): skew {} -> {} cycles{}",
        c.delay_ms
            .map_or_else(String::new, |d| format!(", {d:.1} ms between")),
        opt(c.skew_saved_cycles),
        opt(c.skew_after_cycles),
        if c.completed { "" } else { " (not completed)" }
    );
    restore_clock(out, "across the second restore", &c.kvmclock);
}

/// What the method kept.
pub fn keeps(out: &mut String, k: &Keeps) {
    for a in std::iter::once(&k.after_one).chain(&k.after_two) {
        let _ = writeln!(out, "  => keeps {}: {}", a.keeps.name(), a.words);
    }
    if let Some(why) = &k.after_two_why_not {
        let _ = writeln!(out, "  => after two restores: nothing to say: {why}");
    }
}

/// In one line: what the method kept after one and after two restores.
pub fn keeps_summary(k: &Keeps) -> String {
    match &k.after_two {
        Some(two) => format!(
            "keeps {} after one restore, {} after two",
            k.after_one.keeps.name(),
            two.keeps.name()
        ),
        None if k.after_two_why_not.is_some() => format!(
            "keeps {} after one restore; no second restore",
            k.after_one.keeps.name()
        ),
        None => format!("keeps {} after one restore", k.after_one.keeps.name()),
    }
}
