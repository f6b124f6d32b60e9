//! The `restore` report (schema `tsc-rendezvous/restore/v1`,
//! `vmm/schema/restore-v1.json`): per method and vCPU what was saved, what
//! the method wrote and what KVM made of it, derived once from the
//! measurement ([`MethodRun`]) for the JSON, the readable table and check 7.

use std::collections::BTreeMap;

use serde::Serialize;

use super::measure::{MethodRun, Probe, Reads};
use super::methods::{Support, Trace};
use super::offsets::{self, ClockSample};
use super::{words, Method, MethodOptions};
use crate::analysis::{signed_delta, spread};
use crate::host::HostInfo;
use crate::session::WarpSeen;
use crate::tsc::{OffsetSource, TscState};
use crate::vstate::{PioCompletion, PioState};

/// The schema identifier of `restore --json`.
pub const SCHEMA: &str = "tsc-rendezvous/restore/v1";

/// The whole `restore` report.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The tool's version.
    pub tool_version: &'static str,
    /// The host (from a 1-vCPU probe VM).
    pub host: HostInfo,
    /// The relevant KVM capabilities.
    pub kvm_capabilities: BTreeMap<String, i32>,
    /// What the methods can use on this kernel.
    pub support: Support,
    /// The KVM_CLOCK_* flags KVM_CAP_ADJUST_CLOCK reports, by name.
    pub clock_flags: Vec<&'static str>,
    /// What was asked.
    pub options: OptionsReport,
    /// Every method asked for, in order.
    pub methods: Vec<MethodReport>,
    /// Why the run ended before every method was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

/// The options of a `restore` run.
#[derive(Clone, Debug, Serialize)]
pub struct OptionsReport {
    /// vCPUs.
    pub vcpus: u32,
    /// The rendezvous' variant.
    pub variant: &'static str,
    /// Asked delay between destroying the source and creating the
    /// destination, ms.
    pub delay_ms: u64,
    /// The methods asked for.
    pub methods: Vec<&'static str>,
    /// Warp test iterations per vCPU.
    pub warp_iterations: u64,
    /// Deadline of each VM's session, s.
    pub timeout_secs: f64,
}

impl RestoreReport {
    /// An empty report for `methods`, measured with `opts`, on the host the
    /// probe saw.
    pub fn new(probe: &Probe, opts: &MethodOptions, methods: &[Method]) -> RestoreReport {
        RestoreReport {
            schema: SCHEMA,
            tool_version: env!("CARGO_PKG_VERSION"),
            host: probe.host.clone(),
            kvm_capabilities: probe.capabilities.clone(),
            support: probe.support,
            clock_flags: offsets::flag_names(
                u32::try_from(probe.support.adjust_clock).unwrap_or(0),
            ),
            options: OptionsReport {
                vcpus: opts.vcpus,
                variant: opts.variant.name(),
                delay_ms: u64::try_from(opts.delay.as_millis()).unwrap_or(u64::MAX),
                methods: methods.iter().map(|m| m.name()).collect(),
                warp_iterations: opts.warp_iterations,
                timeout_secs: opts.timeout.as_secs_f64(),
            },
            methods: Vec::new(),
            incomplete: None,
        }
    }
}

/// An interval of host time, cycles and ns.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HostInterval {
    /// At least this many host TSC cycles.
    pub min_cycles: u64,
    /// At most this many.
    pub max_cycles: u64,
    /// `min_cycles` in ns (null without a frequency).
    pub min_ns: Option<f64>,
    /// `max_cycles` in ns.
    pub max_ns: Option<f64>,
}

/// What became of a vCPU's offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OffsetFate {
    /// The offset the method wrote (or, for msr, the one its last IA32_TSC
    /// write asked for).
    AsWritten,
    /// The offset the destination vCPU was created with: the write was
    /// replaced by it.
    KeptCreationOffset,
    /// vCPU 0's offset, not its own.
    Vcpu0Offset,
    /// The offset vCPU 0's first IA32_TSC write asked for (msr-twice: a
    /// later write replaced by the first one).
    Vcpu0FirstWrite,
    /// Something else.
    Other,
    /// Unknown: no exact offsets on this kernel.
    Unknown,
}

/// One vCPU's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VcpuReport {
    /// The vCPU.
    pub id: u32,
    /// How its pending port I/O ended at the snapshot.
    pub pio: Option<PioState>,
    /// RIP around the completing KVM_RUN.
    pub rip: Option<PioCompletion>,
    /// Offset when the source guest first parked.
    pub offset_initial: Option<u64>,
    /// Offset saved (after the rendezvous).
    pub offset_before: Option<u64>,
    /// Offset the destination vCPU was created with.
    pub offset_created: Option<u64>,
    /// Offset the documented method wrote.
    pub offset_written: Option<u64>,
    /// Offset after the restore, before the guest ran.
    pub offset_after: Option<u64>,
    /// Offset after the warp test.
    pub offset_after_warp: Option<u64>,
    /// What became of it.
    pub offset_fate: OffsetFate,
    /// Offset minus vCPU 0's, saved (exact).
    pub relative_offset_before: Option<i64>,
    /// Offset minus vCPU 0's after the restore (exact).
    pub relative_offset_after: Option<i64>,
    /// Offset minus vCPU 0's after the warp test (exact).
    pub relative_offset_after_warp: Option<i64>,
    /// Relative offset after the restore estimated from bracketed IA32_TSC
    /// reads (for kernels without exact offsets).
    pub relative_estimate_after: Option<i64>,
    /// That estimate's error bar, cycles.
    pub estimate_error: Option<u64>,
    /// How far the offset moved from the first park to the snapshot.
    pub offset_moved_before: Option<i64>,
    /// How far TSC_ADJUST moved meanwhile (the rendezvous' write).
    pub adjust_moved_before: Option<i64>,
    /// TSC_ADJUST saved.
    pub tsc_adjust_before: Option<i64>,
    /// TSC_ADJUST after the restore.
    pub tsc_adjust_after: Option<i64>,
    /// TSC_ADJUST minus vCPU 0's, saved: the skew the rendezvous' writes
    /// asked for.
    pub relative_adjust_before: Option<i64>,
    /// The msr methods' IA32_TSC values written, per pass.
    pub tsc_written: Vec<u64>,
    /// The guest's last TSC read before the snapshot.
    pub guest_tsc_last: Option<u64>,
    /// Its first TSC read after the restore.
    pub guest_tsc_first: Option<u64>,
    /// first - last, cycles.
    pub guest_advance_cycles: Option<i64>,
    /// The advance minus the host time that passed between the reads:
    /// (lowest, highest), cycles.
    pub advance_minus_host: Option<(i64, i64)>,
}

/// The clock arithmetic of the documented method.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClockReport {
    /// KVM_GET_CLOCK on the source.
    pub source: ClockSample,
    /// KVM_GET_CLOCK on the destination after KVM_SET_CLOCK.
    pub destination: ClockSample,
    /// KVM_SET_CLOCK's duration, host cycles.
    pub set_clock_cycles: u64,
    /// What the formula added to every offset, cycles.
    pub shift_cycles: i64,
    /// CLOCK_REALTIME's drift against the TSC between the two samples,
    /// cycles.
    pub realtime_drift_cycles: i64,
    /// The bound on |shift - drift| (see offsets::shift_bound).
    pub shift_bound_cycles: u64,
    /// The bound on |drift| for a clock slewed by NTP and never stepped.
    pub drift_bound_cycles: u64,
}

/// The warp test after the restore, summed over the vCPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WarpReport {
    /// Largest backwards step, cycles.
    pub max_warp_cycles: u64,
    /// Backwards steps.
    pub warps: u64,
    /// Lock hand-offs between vCPUs.
    pub handoffs: u64,
    /// Shortest forward step across a hand-off, cycles.
    pub shortest_handoff_cycles: Option<u64>,
    /// Iterations per vCPU.
    pub iterations_per_vcpu: u64,
}

/// One method's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MethodReport {
    /// Its name.
    pub method: &'static str,
    /// What it does.
    pub description: &'static str,
    /// Whether it ran (false: this kernel cannot do it).
    pub ran: bool,
    /// Why it did not run.
    pub not_run_reason: Option<String>,
    /// Whether every step completed.
    pub completed: bool,
    /// The step it failed in.
    pub failed_step: Option<&'static str>,
    /// Why it failed.
    pub error: Option<String>,
    /// Where exact offsets came from.
    pub offset_source: Option<OffsetSource>,
    /// The guest TSC frequency, kHz.
    pub tsc_khz: Option<u32>,
    /// From destroying the source to creating the destination, ms.
    pub delay_ms: Option<f64>,
    /// Host time between the last read before and the first read after.
    pub host_time_passed: Option<HostInterval>,
    /// Spread of the saved relative offsets, cycles (exact).
    pub skew_before_cycles: Option<u64>,
    /// Spread after the restore (exact).
    pub skew_after_cycles: Option<u64>,
    /// Spread of the saved relative TSC_ADJUST values.
    pub adjust_skew_before_cycles: Option<u64>,
    /// The documented method's clock arithmetic.
    pub clock: Option<ClockReport>,
    /// The warp test.
    pub warp: Option<WarpReport>,
    /// Per vCPU.
    pub vcpus: Vec<VcpuReport>,
    /// What the method did to the relative offsets, in words.
    pub offsets_outcome: Option<String>,
    /// What happened to the guests' TSCs, in words.
    pub time_outcome: Option<String>,
    /// What the raw trace of the method wrote.
    pub trace: Option<Trace>,
    /// The raw warp results per vCPU.
    pub warp_seen: Option<Vec<WarpSeen>>,
}

fn adjust(v: u64) -> i64 {
    v as i64
}

fn rel(values: &[Option<u64>]) -> Vec<Option<i64>> {
    let base = values.first().copied().flatten();
    values
        .iter()
        .map(|v| Some(signed_delta((*v)?, base?)))
        .collect()
}

fn offsets_of(states: Option<&Vec<TscState>>, n: usize) -> Vec<Option<u64>> {
    (0..n)
        .map(|i| states.and_then(|s| s.get(i)).and_then(|s| s.offset))
        .collect()
}

fn spread_of(values: &[Option<i64>]) -> Option<u64> {
    let all: Option<Vec<i64>> = values.iter().copied().collect();
    all.filter(|v| !v.is_empty()).map(spread)
}

fn host_interval(last: &Reads, first: &Reads, khz: Option<u32>) -> HostInterval {
    let min_cycles = first.host_before.saturating_sub(last.host_after);
    let max_cycles = first.host_after.saturating_sub(last.host_before);
    let ns = |c: u64| khz.and_then(|k| crate::units::cycles_to_ns_at(i128::from(c), k));
    HostInterval {
        min_cycles,
        max_cycles,
        min_ns: ns(min_cycles),
        max_ns: ns(max_cycles),
    }
}

impl MethodReport {
    /// A method this kernel cannot do.
    pub fn not_run(method: Method, why: String) -> MethodReport {
        MethodReport {
            method: method.name(),
            description: method.describe(),
            ran: false,
            not_run_reason: Some(why),
            completed: false,
            failed_step: None,
            error: None,
            offset_source: None,
            tsc_khz: None,
            delay_ms: None,
            host_time_passed: None,
            skew_before_cycles: None,
            skew_after_cycles: None,
            adjust_skew_before_cycles: None,
            clock: None,
            warp: None,
            vcpus: Vec::new(),
            offsets_outcome: None,
            time_outcome: None,
            trace: None,
            warp_seen: None,
        }
    }

    /// The report of a measurement (complete or not).
    pub fn from_run(run: &MethodRun, opts: &MethodOptions) -> MethodReport {
        let mut r = MethodReport::not_run(run.method, String::new());
        r.ran = true;
        r.not_run_reason = None;
        r.completed = run.failed.is_none();
        r.failed_step = run.failed.as_ref().map(|f| f.step.name());
        r.error = run.failed.as_ref().map(|f| f.error.clone());
        r.offset_source = run.offset_source;
        r.delay_ms = run.delay.map(|d| d.as_secs_f64() * 1e3);
        r.trace = run.trace.clone();
        r.warp_seen = run.warp.clone();
        let n = opts.vcpus as usize;
        let saved: Option<Vec<TscState>> = run
            .snapshot
            .as_ref()
            .map(|s| s.vcpus.iter().map(|v| v.tsc).collect());
        r.tsc_khz = saved
            .as_ref()
            .and_then(|s| s.first())
            .map(|s| s.tsc_khz)
            .filter(|&k| k != 0);
        if let (Some(last), Some(first)) = (&run.last, &run.first) {
            r.host_time_passed = Some(host_interval(last, first, r.tsc_khz));
        }
        r.clock = clock_report(run, r.tsc_khz);
        r.warp = run.warp.as_ref().map(|seen| WarpReport {
            max_warp_cycles: seen.iter().map(|w| w.max_warp).max().unwrap_or(0),
            warps: seen.iter().map(|w| w.warps).sum(),
            handoffs: seen.iter().map(|w| w.handoffs).sum(),
            shortest_handoff_cycles: seen.iter().filter_map(|w| w.shortest_handoff).min(),
            iterations_per_vcpu: opts.warp_iterations,
        });
        r.vcpus = vcpu_rows(run, saved.as_ref(), n, r.host_time_passed);
        let col = |f: fn(&VcpuReport) -> Option<i64>| -> Vec<Option<i64>> {
            r.vcpus.iter().map(f).collect()
        };
        r.skew_before_cycles = spread_of(&col(|v| v.relative_offset_before));
        r.skew_after_cycles = spread_of(&col(|v| v.relative_offset_after));
        r.adjust_skew_before_cycles = spread_of(&col(|v| v.relative_adjust_before));
        if run.after.is_some() {
            r.offsets_outcome = Some(words::offsets(&r));
        }
        if run.first.is_some() {
            r.time_outcome = Some(words::time(&r));
        }
        r
    }
}

fn clock_report(run: &MethodRun, khz: Option<u32>) -> Option<ClockReport> {
    let Some(Trace::Documented(d)) = &run.trace else {
        return None;
    };
    let source = run.snapshot.as_ref()?.clock?;
    let destination = d.destination?;
    let khz = khz?;
    let shift = d.shift_cycles?;
    let drift = offsets::realtime_drift(&source, &destination, khz).ok()?;
    let set_clock_cycles = d.set_host_after.saturating_sub(d.set_host_before);
    Some(ClockReport {
        source,
        destination,
        set_clock_cycles,
        shift_cycles: shift,
        realtime_drift_cycles: i64::try_from(drift).unwrap_or(i64::MAX),
        shift_bound_cycles: offsets::shift_bound(
            set_clock_cycles,
            destination.host_tsc.saturating_sub(d.set_host_before),
            khz,
        ),
        drift_bound_cycles: offsets::drift_bound(
            destination.host_tsc.saturating_sub(source.host_tsc),
            khz,
        ),
    })
}

fn vcpu_rows(
    run: &MethodRun,
    saved: Option<&Vec<TscState>>,
    n: usize,
    passed: Option<HostInterval>,
) -> Vec<VcpuReport> {
    let initial = offsets_of(run.initial.as_ref(), n);
    let before = offsets_of(saved, n);
    let after = offsets_of(run.after.as_ref(), n);
    let after_warp = offsets_of(run.after_warp.as_ref(), n);
    let (rel_before, rel_after, rel_warp) = (rel(&before), rel(&after), rel(&after_warp));
    let adj_before: Vec<Option<u64>> = (0..n)
        .map(|i| saved.and_then(|s| s.get(i)).map(|s| s.adjust))
        .collect();
    let rel_adj = rel(&adj_before);
    let estimates: Option<Vec<u64>> = run
        .after
        .as_ref()
        .map(|a| a.iter().map(TscState::estimated_offset).collect());
    let written: Vec<Option<u64>> = match &run.trace {
        Some(Trace::Documented(d)) => (0..n).map(|i| d.offsets_written.get(i).copied()).collect(),
        _ => vec![None; n],
    };
    (0..n)
        .map(|i| {
            let state = |s: Option<&Vec<TscState>>| s.and_then(|s| s.get(i)).copied();
            let (init, bef, aft) = (
                state(run.initial.as_ref()),
                state(saved),
                state(run.after.as_ref()),
            );
            let last = run.last.as_ref().and_then(|r| r.tsc.get(i)).copied();
            let first = run.first.as_ref().and_then(|r| r.tsc.get(i)).copied();
            let advance = last.zip(first).map(|(l, f)| signed_delta(f, l));
            let info = run.snapshot.as_ref().and_then(|s| s.vcpus.get(i));
            let tsc_written: Vec<u64> = match &run.trace {
                Some(Trace::Msr(m)) => m
                    .passes
                    .iter()
                    .filter_map(|p| p.get(i))
                    .map(|w| w.value)
                    .collect(),
                _ => Vec::new(),
            };
            VcpuReport {
                id: i as u32,
                pio: info.map(|v| v.pio_state),
                rip: info.map(|v| v.pio),
                offset_initial: initial[i],
                offset_before: before[i],
                offset_created: run
                    .created
                    .as_ref()
                    .and_then(|c| c.get(i))
                    .copied()
                    .flatten(),
                offset_written: written[i],
                offset_after: after[i],
                offset_after_warp: after_warp[i],
                offset_fate: fate(run, i, &after, written[i]),
                relative_offset_before: rel_before[i],
                relative_offset_after: rel_after[i],
                relative_offset_after_warp: rel_warp[i],
                relative_estimate_after: estimates
                    .as_ref()
                    .and_then(|e| Some(signed_delta(*e.get(i)?, *e.first()?))),
                estimate_error: run.after.as_ref().map(|a| {
                    a.get(i).map_or(0, TscState::estimate_error)
                        + a.first().map_or(0, TscState::estimate_error)
                }),
                offset_moved_before: before[i].zip(initial[i]).map(|(b, a)| signed_delta(b, a)),
                adjust_moved_before: bef.zip(init).map(|(b, a)| signed_delta(b.adjust, a.adjust)),
                tsc_adjust_before: bef.map(|s| adjust(s.adjust)),
                tsc_adjust_after: aft.map(|s| adjust(s.adjust)),
                relative_adjust_before: rel_adj[i],
                tsc_written,
                guest_tsc_last: last,
                guest_tsc_first: first,
                guest_advance_cycles: advance,
                advance_minus_host: advance.zip(passed).map(|(a, p)| {
                    let sub =
                        |x: u64| i64::try_from(i128::from(a) - i128::from(x)).unwrap_or(i64::MIN);
                    (sub(p.max_cycles), sub(p.min_cycles))
                }),
            }
        })
        .collect()
}

/// What became of vCPU `i`'s offset after the restore.
fn fate(run: &MethodRun, i: usize, after: &[Option<u64>], written: Option<u64>) -> OffsetFate {
    let Some(now) = after.get(i).copied().flatten() else {
        return OffsetFate::Unknown;
    };
    let asked = match &run.trace {
        Some(Trace::Documented(_)) => written.map(|w| w == now),
        Some(Trace::Msr(m)) => m
            .passes
            .last()
            .and_then(|p| p.get(i))
            .map(|w| w.asked_for(now)),
        None => None,
    };
    if asked == Some(true) {
        return OffsetFate::AsWritten;
    }
    let created = run
        .created
        .as_ref()
        .and_then(|c| c.get(i))
        .copied()
        .flatten();
    if created == Some(now) {
        return OffsetFate::KeptCreationOffset;
    }
    if i > 0 && after.first().copied().flatten() == Some(now) {
        return OffsetFate::Vcpu0Offset;
    }
    if let Some(Trace::Msr(m)) = &run.trace {
        let first = m.passes.first().and_then(|p| p.first());
        if m.passes.len() > 1 && first.is_some_and(|w| w.asked_for(now)) {
            return OffsetFate::Vcpu0FirstWrite;
        }
    }
    OffsetFate::Other
}
