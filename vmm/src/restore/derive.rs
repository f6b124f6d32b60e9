//! From one method's measurement ([`MethodRun`]) to its report
//! ([`MethodReport`]): per vCPU what was saved, written and found after the
//! restore, the clock, the warp test, and what it all means in words
//! ([`super::words`]).

use super::chain_derive::{self, offsets as offsets_of, spread_of};
use super::clock_derive::Rates;
use super::clock_derive::{restore_clock, ClockInputs};
use super::keeps::relative as rel;
use super::measure::{MethodRun, Probe, Reads};
use super::methods::Trace;
use super::offsets;
use super::options::{Method, MethodOptions};
use super::report::{
    ClockReport, HostInterval, MethodReport, OffsetFate, OptionsReport, RateReport, RestoreReport,
    VcpuReport, WarpReport, SCHEMA,
};
use super::words;
use crate::analysis::signed_delta;
use crate::tsc::frequency::Ratio;
use crate::tsc::TscState;

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
                chain: opts.chain,
                tsc: opts.tsc,
            },
            methods: Vec::new(),
            incomplete: None,
        }
    }
}

fn adjust(v: u64) -> i64 {
    v as i64
}

/// The host time between the guests' last reads and their first: host
/// cycles, in ns at the host's rate `host_khz` (`None`: unknown).
fn host_interval(last: &Reads, first: &Reads, host_khz: Option<u32>) -> HostInterval {
    let min_cycles = first.host_before.saturating_sub(last.host_after);
    let max_cycles = first.host_after.saturating_sub(last.host_before);
    let ns = |c: u64| host_khz.and_then(|k| crate::units::cycles_to_ns_at(i128::from(c), k));
    HostInterval {
        min_cycles,
        max_cycles,
        min_ns: ns(min_cycles),
        max_ns: ns(max_cycles),
    }
}

/// The rate across the restore, from the source's scaling, the saved rate
/// and the restored vCPUs' (`None` before the source VM ran).
fn rate_report(run: &MethodRun, saved_khz: Option<u32>) -> Option<RateReport> {
    let scaling = run.scaling?;
    let restored: Vec<u32> = run.after.iter().flatten().map(|s| s.tsc_khz).collect();
    let khz = restored
        .first()
        .copied()
        .or(saved_khz)
        .unwrap_or(scaling.host_khz);
    let ratio = scaling.ratio(khz);
    Some(RateReport {
        host_khz: scaling.host_khz,
        saved_khz,
        kept: saved_khz
            .filter(|_| !restored.is_empty())
            .map(|k| restored.iter().all(|&r| r == k)),
        restored_khz: restored,
        ratio,
        ratio_ppm: ratio.ppm(),
        scaled: !ratio.is_one(),
        catch_up: scaling.catches_up(khz),
        running_khz: scaling.running_khz(khz),
        source: run.source_frequency,
        destination: run.destination_frequency,
    })
}

/// The rates host and guest cycles convert to time at (`tsc_khz`, the
/// saved rate, for both where the host's is unknown).
fn rates(rate: Option<&RateReport>, tsc_khz: Option<u32>) -> Rates {
    let khz = tsc_khz.unwrap_or(0);
    let known = |k: u32| if k == 0 { khz } else { k };
    Rates {
        host_khz: known(rate.map_or(0, |r| r.host_khz)),
        tsc_khz: known(rate.map_or(0, |r| r.running_khz)),
    }
}

impl MethodReport {
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
        r.rate = rate_report(run, r.tsc_khz);
        let units = rates(r.rate.as_ref(), r.tsc_khz);
        let ratio = r.rate.as_ref().map_or(Ratio::ONE, |x| x.ratio);
        if let (Some(last), Some(first)) = (&run.last, &run.first) {
            let host = Some(units.host_khz).filter(|&k| k != 0);
            r.host_time_passed = Some(host_interval(last, first, host));
        }
        r.clock = clock_report(run, r.tsc_khz, units.tsc_khz);
        r.warp = run.warp.as_ref().map(|seen| WarpReport {
            max_warp_cycles: seen.iter().map(|w| w.max_warp).max().unwrap_or(0),
            warps: seen.iter().map(|w| w.warps).sum(),
            handoffs: seen.iter().map(|w| w.handoffs).sum(),
            shortest_handoff_cycles: seen.iter().filter_map(|w| w.shortest_handoff).min(),
            iterations_per_vcpu: opts.warp_iterations,
        });
        r.vcpus = vcpu_rows(run, saved.as_ref(), n, r.host_time_passed, ratio);
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
        clock_parts(run, &mut r, n, units);
        r
    }
}

/// The clock part: the guests' kvmclock across the restore, the clock
/// after it, the chained restore and what the method kept.
fn clock_parts(run: &MethodRun, r: &mut MethodReport, n: usize, rates: Rates) {
    let measured = run.clock_why_not.is_some() || run.clock_last.is_some();
    if measured {
        r.kvmclock = Some(restore_clock(&ClockInputs {
            why_not: run.clock_why_not.as_deref(),
            last: run.clock_last.as_ref(),
            first: run.clock_first.as_ref(),
            delay_ms: r.delay_ms,
            rates,
            trace: run.trace.as_ref(),
            snapshot_clock: run.snapshot.as_ref().and_then(|s| s.clock.as_ref()),
            after: run.clock_after.as_ref(),
            vcpus: n as u32,
        }));
    }
    r.chain = run
        .chain
        .as_ref()
        .map(|c| chain_derive::chain(c, rates, n, run.clock_why_not.as_deref()));
    if run.after.is_some() {
        let col = |f: fn(&VcpuReport) -> Option<i64>| -> Vec<Option<i64>> {
            r.vcpus.iter().map(f).collect()
        };
        let saved = col(|v| v.relative_offset_before);
        let (after, warp) = (
            col(|v| v.relative_offset_after),
            col(|v| v.relative_offset_after_warp),
        );
        r.keeps = Some(chain_derive::keeps(
            &saved,
            [&after, &warp],
            r.skew_before_cycles,
            n as u32,
            r.kvmclock.as_ref(),
            r.chain.as_ref(),
        ));
    }
}

/// The documented method's clock arithmetic; `running_khz` the rate guest
/// cycles convert to time at.
fn clock_report(run: &MethodRun, khz: Option<u32>, running_khz: u32) -> Option<ClockReport> {
    let Some(Trace::Documented(d)) = &run.trace else {
        return None;
    };
    let source = run.snapshot.as_ref()?.clock?;
    let destination = d.destination?;
    let khz = khz?;
    let shift = d.shift_cycles?;
    let literal = d.literal_shift_cycles?;
    let drift = offsets::realtime_drift(&source, &destination, khz, d.host_khz).ok()?;
    let gap = offsets::rate_gap(&source, &destination, khz, d.host_khz, d.ratio);
    let set_clock_cycles = d.set_host_after.saturating_sub(d.set_host_before);
    let sat = |x: i128| i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX });
    let miss = i128::from(literal) - i128::from(shift);
    Some(ClockReport {
        source,
        destination,
        set_clock_cycles,
        shift_cycles: shift,
        ratio: d.ratio,
        literal_shift_cycles: literal,
        literal_miss_cycles: sat(miss),
        literal_miss_ns: crate::units::cycles_to_ns_at(miss, running_khz),
        realtime_drift_cycles: sat(drift),
        rate_gap_cycles: sat(gap),
        shift_bound_cycles: offsets::shift_bound(
            set_clock_cycles,
            destination.host_tsc.saturating_sub(d.set_host_before),
            khz,
            d.host_khz,
        ),
        drift_bound_cycles: offsets::drift_bound(
            destination.host_tsc.saturating_sub(source.host_tsc),
            khz,
            d.host_khz,
        ),
    })
}

/// Every vCPU's row; `ratio` the one the restored TSCs run at, which the
/// host time that passed enters the guests' advance multiplied by.
fn vcpu_rows(
    run: &MethodRun,
    saved: Option<&Vec<TscState>>,
    n: usize,
    passed: Option<HostInterval>,
    ratio: Ratio,
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
                kvmclock_msr: info.and_then(|v| v.kvmclock_msr),
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
                advance_minus_host: advance
                    .zip(passed)
                    .map(|(a, p)| advance_minus_host(a, p, ratio)),
            }
        })
        .collect()
}

/// A guest's advance `a` minus the host time `p` that passed in guest
/// cycles at `ratio`, widened by KVM's fixed-point error over it: (lowest,
/// highest).
fn advance_minus_host(a: i64, p: HostInterval, ratio: Ratio) -> (i64, i64) {
    let e = i128::from(ratio.scale_error(p.max_cycles));
    let sub = |x: i128| i64::try_from(i128::from(a) - x).unwrap_or(i64::MIN);
    (
        sub(ratio.scale(i128::from(p.max_cycles)) + e),
        sub(ratio.scale(i128::from(p.min_cycles)) - e),
    )
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
            .map(|w| w.asked_for(now, m.ratio)),
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
        if m.passes.len() > 1 && first.is_some_and(|w| w.asked_for(now, m.ratio)) {
            return OffsetFate::Vcpu0FirstWrite;
        }
    }
    OffsetFate::Other
}

#[cfg(test)]
#[path = "derive_tests.rs"]
mod tests;
