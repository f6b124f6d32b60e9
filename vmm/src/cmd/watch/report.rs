//! `kvmclock-watch`'s report: what was measured, each vCPU's analysis
//! ([`super::analysis`]) and the findings in words, as JSON (schema
//! [`SCHEMA`], vmm/schema/kvmclock-watch-v1.json) or as a short text.

use serde::Serialize;

use super::analysis::{analyse, Input, Interval, Outcome, Sample, State, Watched};
use super::measure::{Measured, Plan, Write, WRITER, WRITE_SECONDS};
use crate::tsc::clock::flag_names;
use crate::units::fmt_int as n;

/// The JSON document's schema.
pub const SCHEMA: &str = "tsc-rendezvous/kvmclock-watch/v1";

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The tool's version.
    pub tool_version: &'static str,
    /// What was asked.
    pub options: Plan,
    /// The findings in words, one per line (the text report's body).
    pub findings: Vec<String>,
    /// Each vCPU's watch, analysed.
    pub vcpus: Vec<Watched>,
    /// Everything measured, raw.
    pub measured: Measured,
    /// Why the watch ended early, if it did.
    pub incomplete: Option<String>,
}

/// vCPU `v`'s samples after the write.
fn series(m: &Measured, v: usize) -> Vec<Sample> {
    m.ticks
        .iter()
        .filter_map(|t| t.vcpus.get(v).copied())
        .collect()
}

/// The report of `m`, measured as `plan` asked; `incomplete`: why it ended
/// early.
pub fn build(plan: Plan, m: Measured, incomplete: Option<String>) -> Report {
    let mut vcpus = Vec::new();
    if let (Some(base), Some(w)) = (&m.baseline, &m.write) {
        for (v, b) in base.vcpus.iter().enumerate() {
            let samples = series(&m, v);
            let settling: Vec<Sample> = m
                .settling
                .iter()
                .filter_map(|t| t.vcpus.get(v).copied())
                .collect();
            let moved = match (samples.first().and_then(|s| s.tsc_offset), b.tsc_offset) {
                (Some(a), Some(b)) => Some(a.wrapping_sub(b) as i64),
                _ => None,
            };
            vcpus.push(analyse(&Input {
                vcpu: v as u32,
                wrote: v as u32 == WRITER,
                vm_created: m.vm_created,
                write: w.host,
                moved_cycles: moved,
                khz: m.khz,
                settling: &settling,
                baseline: b,
                samples: &samples,
            }));
        }
    }
    let findings = findings(&plan, &m, &vcpus, incomplete.as_deref());
    Report {
        schema: SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        options: plan,
        findings,
        vcpus,
        measured: m,
        incomplete,
    }
}

/// Seconds with three decimals from ns.
fn s3(ns: i64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

/// An interval of time as `lo..hi s`.
fn when(i: &Interval) -> String {
    format!("{}..{} s", s3(i.lo_ns), s3(i.hi_ns))
}

/// An offset as `mid ns ±half`.
fn off(i: &Interval) -> String {
    format!("{} ns (±{})", n(i.mid()), n(i.half()))
}

fn findings(plan: &Plan, m: &Measured, vcpus: &[Watched], incomplete: Option<&str>) -> Vec<String> {
    let h = &m.host;
    let mut out = vec![format!(
        "kvmclock-watch: one guest IA32_TSC write on vCPU {WRITER} of {}, {} ms after the VM's \
         creation, every vCPU's kvmclock against the host's CLOCK_MONOTONIC_RAW every {} ms for \
         {} s after it; {} KVM, kernel {}, TSC {} kHz, host clocksource {}",
        plan.vcpus,
        plan.settle_ms,
        plan.interval_ms,
        plan.seconds,
        h.kvm_flavor.name(),
        h.kernel_release,
        n(m.khz),
        h.clocksource.as_deref().unwrap_or("unknown")
    )];
    match &m.write {
        Some(w) => out.push(write_words(w, m.khz)),
        None => out.push("the write was not made".into()),
    }
    for w in vcpus {
        if !w.before_write.is_empty() {
            let changes: Vec<String> = w
                .before_write
                .iter()
                .map(|c| {
                    format!(
                        "{} -> {} at {} after the VM's creation",
                        c.from,
                        c.to,
                        when(&c.since_vm)
                    )
                })
                .collect();
            out.push(format!(
                "vCPU {} before the write: pvclock version {}",
                w.vcpu,
                changes.join(", ")
            ));
        }
        out.push(vcpu_words(w));
        for c in &w.version_changes {
            out.push(format!(
                "  pvclock version {} -> {} between {} after the write ({} after the VM's \
                 creation); kvmclock off real time by {} before, {} after",
                c.from,
                c.to,
                when(&c.since_write),
                when(&c.since_vm),
                off(&c.offset_before),
                off(&c.offset_after)
            ));
        }
    }
    out.push(master_clock_words(m));
    if let Some(why) = incomplete {
        out.push(format!("incomplete: {why}"));
    }
    out
}

fn write_words(w: &Write, khz: u32) -> String {
    let moved = match w.offset {
        (Some(b), Some(a)) => {
            let c = a.wrapping_sub(b) as i64;
            format!(
                "its exact TSC offset moved by {} cycles{}",
                n(c),
                crate::units::cycles_to_ns_at(i128::from(c), khz)
                    .map_or_else(String::new, |ns| format!(" ({} ns)", n(ns.round() as i64)))
            )
        }
        _ => "no exact TSC offsets on this kernel".into(),
    };
    let j = &w.across;
    format!(
        "the write: IA32_TSC = TSC + {} cycles ({WRITE_SECONDS} s) on vCPU {}; {moved}; its \
         IA32_TSC_ADJUST moved by {} cycles; across the write the guest saw kvmclock advance \
         {} ns (jump {}), pvclock version {} -> {}",
        n(w.delta_cycles),
        w.vcpu,
        n(w.adjust.1.wrapping_sub(w.adjust.0) as i64),
        n(j.kvmclock_advance_ns),
        j.jump_ns.map_or_else(
            || "unknown".into(),
            |x| format!("{} ns", n(x.round() as i64))
        ),
        j.version.0,
        j.version.1
    )
}

/// The largest offset from real time over `w`'s samples, with its error.
fn largest(w: &Watched) -> Option<Interval> {
    w.points
        .iter()
        .map(|p| p.offset)
        .max_by_key(|o| o.mid().unsigned_abs())
}

pub(super) fn vcpu_words(w: &Watched) -> String {
    let who = if w.wrote {
        format!("vCPU {} (wrote)", w.vcpu)
    } else {
        format!("vCPU {} (did not write)", w.vcpu)
    };
    let jump = w.at_write.as_ref().map_or_else(|| "n/a".into(), off);
    let moved = w
        .tsc_moved_ns
        .map_or_else(|| "an unknown".into(), |m| format!("{} ns", n(m)));
    let watched = w.watched_for.as_ref().map_or_else(|| "n/a".into(), when);
    let biggest = largest(w).as_ref().map_or_else(|| "n/a".into(), off);
    let version =
        |f: fn(&Watched) -> Option<u32>| f(w).map_or_else(|| "?".into(), |v| v.to_string());
    let first_version = version(|w| w.points.first().map(|p| p.version));
    match w.outcome {
        Outcome::NothingSampled => format!("{who}: no sample after the write"),
        Outcome::MoveUnknown => format!(
            "{who}: no exact TSC offsets, so how far the write moved the TSC is unknown; kvmclock \
             was off real time by {jump} at the first sample, by at most {biggest} over \
             {watched} after the write"
        ),
        Outcome::NotMoved => format!(
            "{who}: the write did not move the TSC (its exact TSC offset is unchanged: the \
             hypervisor ignored it, as PVM does), so no pvclock page can go stale and there is \
             no jump to time; kvmclock's largest offset from real time was {biggest}, over \
             {watched} after the write"
        ),
        Outcome::RanOn if w.wrote => format!(
            "{who}: kvmclock stayed on real time across the write's {moved} move and after it \
             (largest offset {biggest}, over {watched} after the write): the page was updated \
             at the write"
        ),
        Outcome::RanOn => format!(
            "{who}: kvmclock on real time at every sample (largest offset {biggest}, over \
             {watched} after the write)"
        ),
        Outcome::StaleThenRefreshed => match &w.refresh {
            Some(r) => format!(
                "{who}: kvmclock jumped by {jump} at the write (the TSC moved {moved}; pvclock \
                 version {first_version}: the page stale) and stayed off real time by the move \
                 until the page was refreshed between {} after the write ({} after the VM's \
                 creation; version {} -> {}), when kvmclock stepped by {} back to real time",
                when(&r.since_write),
                when(&r.since_vm),
                r.version.0,
                r.version.1,
                off(&r.step)
            ),
            None => format!("{who}: kvmclock jumped by {jump} and came back to real time"),
        },
        Outcome::StaleThroughout => format!(
            "{who}: kvmclock jumped by {jump} at the write (the TSC moved {moved}; pvclock \
             version {first_version}: the page stale) and was still off real time by the move \
             at the last sample, {watched} after the write: no refresh within the watch"
        ),
        Outcome::Other => {
            let states: Vec<&str> = w
                .points
                .iter()
                .map(|p| match p.state {
                    State::RealTime => "R",
                    State::OffByTheWrite => "W",
                    State::Other => "?",
                })
                .collect();
            format!(
                "{who}: kvmclock moved neither with real time nor with the TSC's {moved} move \
                 throughout: off by {jump} at the first sample, by at most {biggest} over \
                 {watched} after the write (per sample, R real time, W off by the move, ?: {})",
                states.concat()
            )
        }
    }
}

fn master_clock_words(m: &Measured) -> String {
    let all: Vec<Option<u32>> = m
        .baseline
        .iter()
        .chain(&m.ticks)
        .map(|t| t.clock_flags)
        .collect();
    let names = |f: Option<u32>| match f {
        Some(f) if flag_names(f).is_empty() => "no flags".to_string(),
        Some(f) => flag_names(f).join("|"),
        None => "KVM_GET_CLOCK failed".into(),
    };
    match all.first() {
        None => "KVM_GET_CLOCK: not read".into(),
        Some(first) if all.iter().all(|f| f == first) => {
            format!("KVM_GET_CLOCK at every sample: {}", names(*first))
        }
        Some(first) => {
            let at = all.iter().position(|f| f != first).unwrap_or(0);
            format!(
                "KVM_GET_CLOCK: {} at the baseline, {} first at sample {at} of {} (the \
                 baseline is sample 0)",
                names(*first),
                names(all.get(at).copied().flatten()),
                all.len() - 1
            )
        }
    }
}

/// The text report: the findings, one per line.
pub fn render_text(r: &Report) -> String {
    let mut out = r.findings.join("\n");
    out.push_str("\nEvery sample, with its error bars: --json.\n");
    out
}
