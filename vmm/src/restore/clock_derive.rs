//! The guests' kvmclock across a restore, judged per vCPU from its two
//! readings and the host time between them (pure).
//!
//! Each vCPU reads kvmclock just before the snapshot (K_b, the reading
//! right after KVM re-anchored its page) and first thing after the restore
//! (K_a); the host TSC brackets both reading commands, so the host time
//! between the two readings lies in `[E_min, E_max]` (the later command's
//! start minus the earlier's end, its end minus the earlier's start), in ns
//! at the host's TSC rate (not the guest's, which KVM may scale), rounded
//! outwards. The jump is `K_a - K_b - E`: in
//! `[K_a - K_b - E_max, K_a - K_b - E_min]`. A continuous kvmclock jumps by
//! 0 within the allowance:
//! - kvmclock follows the host's boot clock, which NTP may slew against
//!   the TSC by at most 1000 ppm (500 ppm of frequency, 500 ppm of phase),
//!   over the interval and over the age of either page (a page is anchored
//!   at a master-clock snapshot that may be older than the reading);
//! - the documented method's KVM_SET_CLOCK adds the real time that passed
//!   since the source's sample at a moment up to the ioctl's duration after
//!   it took its TSC snapshot: that duration;
//! - rounding: two kvmclock readings truncated to whole ns, two conversions.
//!
//! The outcome: **backwards** when K_a < K_b (whatever the host time);
//! **continuous** when the jump's interval, widened by the allowance, holds
//! 0; **jumped** otherwise (ahead, or behind: kvmclock lost time);
//! **undecided** when a reading is torn or its page was never written, the
//! restored VM did not rewrite the page (the reading is then the saved page
//! extrapolated by the guest's TSC, not KVM's kvmclock), the TSC frequency
//! is unknown, or the host clock was stepped while the method carried it.

use tsc_contract::{ClockRecord, PVCLOCK_TSC_STABLE_BIT};

use super::clock_report::{
    Continuity, Elapsed, HostClocks, PageReport, RestoreClock, VcpuContinuity,
};
use super::keeps;
use super::methods::Trace;
use super::offsets::{self, ntp_allowance, ClockSample};
use super::reads::{ClockAfter, ClockReads};
use crate::units::fmt_int as n;

/// Rounding in the jump, ns: two kvmclock readings truncated to whole ns
/// (1 each) and the two conversions of the host bracket (1 each).
pub const ROUNDING_NS: u64 = 4;

/// `cycles` in ns at `khz`, rounded down (`up`: rounded up).
fn ns(cycles: u64, khz: u32, up: bool) -> u64 {
    let num = u128::from(cycles) * 1_000_000;
    let k = u128::from(khz.max(1));
    let q = if up { num.div_ceil(k) } else { num / k };
    u64::try_from(q).unwrap_or(u64::MAX)
}

/// The rates a clock report converts cycles to time at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    /// The host's TSC rate, kHz: host cycles (the brackets) to ns (0:
    /// unknown).
    pub host_khz: u32,
    /// The rate the guest's TSC runs at between guest entries (the scaled
    /// rate where KVM scales, else the host's), kHz: guest cycles to ns
    /// (0: unknown).
    pub tsc_khz: u32,
}

/// The host time between two reading commands (their host TSC brackets),
/// at the host's rate `host_khz`; `None` without it.
pub fn elapsed(before: &ClockReads, after: &ClockReads, host_khz: u32) -> Option<Elapsed> {
    let khz = host_khz;
    if khz == 0 {
        return None;
    }
    let min_cycles = after.host_before.saturating_sub(before.host_after);
    let max_cycles = after.host_after.saturating_sub(before.host_before);
    Some(Elapsed {
        min_cycles,
        max_cycles,
        min_ns: ns(min_cycles, khz, false),
        max_ns: ns(max_cycles, khz, true),
    })
}

/// The page one of a record's two readings used (`second`: the one after
/// the write).
pub fn page_of(id: u32, r: &ClockRecord, second: bool) -> PageReport {
    let byte = |v: u32| if second { (v >> 8) as u8 } else { v as u8 };
    let flags = byte(r.flags);
    PageReport {
        id,
        version: if second {
            r.version_after
        } else {
            r.version_before
        },
        flags,
        tsc_stable_bit: flags & PVCLOCK_TSC_STABLE_BIT != 0,
        tsc_timestamp: if second {
            r.tsc_timestamp_after
        } else {
            r.tsc_timestamp_before
        },
        system_time: if second {
            r.system_time_after
        } else {
            r.system_time_before
        },
        tsc_to_system_mul: if second { r.mul_after } else { r.mul_before },
        tsc_shift: byte(r.shifts) as i8,
    }
}

fn sat(x: i128) -> i64 {
    i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })
}

/// ns as ms with three decimals.
pub fn ms(ns: i128) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// Why a pair of readings cannot decide continuity, if it cannot.
fn unusable(id: u32, b: &PageReport, a: &PageReport, tsc: (u64, u64)) -> Option<String> {
    if b.version & 1 == 1 || a.version & 1 == 1 {
        return Some(format!(
            "vCPU {id}'s kvmclock reading was torn (page version {} / {}, odd)",
            b.version, a.version
        ));
    }
    if b.tsc_to_system_mul == 0 || a.tsc_to_system_mul == 0 {
        return Some(format!(
            "vCPU {id}'s kvmclock page was never written (multiplier 0)"
        ));
    }
    if (a.version, a.tsc_timestamp, a.system_time) == (b.version, b.tsc_timestamp, b.system_time) {
        return Some(format!(
            "the restored VM did not rewrite vCPU {id}'s kvmclock page (version, timestamp and \
             system time as saved): the reading after the restore is the saved page \
             extrapolated by the guest's TSC, not KVM's kvmclock"
        ));
    }
    let behind = |t: u64, p: &PageReport| t.wrapping_sub(p.tsc_timestamp) > u64::MAX / 2;
    if behind(tsc.0, b) || behind(tsc.1, a) {
        return Some(format!(
            "vCPU {id}'s TSC read below its page's tsc_timestamp: the page does not describe \
             this TSC"
        ));
    }
    None
}

/// What the host allows a continuous kvmclock (see the module's
/// documentation): `extra_ns` is the documented method's KVM_SET_CLOCK
/// duration (0 for the others).
pub fn allowance(max_ns: u64, ages: (u64, u64), extra_ns: u64) -> u64 {
    ntp_allowance(max_ns.saturating_add(ages.0).saturating_add(ages.1))
        .saturating_add(extra_ns)
        .saturating_add(ROUNDING_NS)
}

/// One vCPU's kvmclock across a restore: `before` its record just before
/// the snapshot, `after` its first after the restore, `elapsed` the host
/// time between them, `khz` the rate the guest's TSC runs at (its cycles to
/// ns), `extra_ns` the method's extra allowance, `stepped` why the host
/// clock cannot vouch for it.
pub fn continuity(
    id: u32,
    before: &ClockRecord,
    after: &ClockRecord,
    elapsed: Option<Elapsed>,
    khz: u32,
    extra_ns: u64,
    stepped: Option<&str>,
) -> VcpuContinuity {
    let (k_b, k_a) = (before.kvmclock_after, after.kvmclock_before);
    let (page_b, page_a) = (page_of(id, before, true), page_of(id, after, false));
    let advance = i128::from(k_a) - i128::from(k_b);
    let e = elapsed.unwrap_or_default();
    let ages = (
        k_b.saturating_sub(page_b.system_time),
        k_a.saturating_sub(page_a.system_time),
    );
    let allow = allowance(e.max_ns, ages, extra_ns);
    let (jump_min, jump_max) = (
        advance - i128::from(e.max_ns),
        advance - i128::from(e.min_ns),
    );
    let tsc_ns = i128::from(ns(
        before.tsc_after.wrapping_sub(before.tsc_before),
        khz,
        false,
    ));
    let reanchor = i128::from(before.kvmclock_after) - i128::from(before.kvmclock_before) - tsc_ns;
    let why = unusable(id, &page_b, &page_a, (before.tsc_after, after.tsc_before));
    let a = i128::from(allow);
    let outcome = if let Some(why) = why {
        Continuity::Undecided { why }
    } else if advance < 0 {
        Continuity::Backwards {
            by_ns: u64::try_from(-advance).unwrap_or(u64::MAX),
        }
    } else if khz == 0 || elapsed.is_none() {
        Continuity::Undecided {
            why: "no TSC frequency: the host time between the readings is unknown".into(),
        }
    } else if let Some(s) = stepped {
        Continuity::Undecided { why: s.to_string() }
    } else if jump_min - a <= 0 && 0 <= jump_max + a {
        Continuity::Continuous
    } else {
        Continuity::Jumped {
            min_ns: sat(jump_min - a),
            max_ns: sat(jump_max + a),
        }
    };
    let words = match &outcome {
        Continuity::Continuous => format!(
            "continuous: advanced {}, the host time {}..{} (± {})",
            ms(advance),
            ms(e.min_ns.into()),
            ms(e.max_ns.into()),
            ms(allow.into())
        ),
        Continuity::Jumped { min_ns, max_ns } if *min_ns > 0 => format!(
            "jumped ahead by {}..{} (advanced {}, the host time {}..{})",
            ms((*min_ns).into()),
            ms((*max_ns).into()),
            ms(advance),
            ms(e.min_ns.into()),
            ms(e.max_ns.into())
        ),
        Continuity::Jumped { min_ns, max_ns } => format!(
            "fell behind by {}..{}: it lost time (advanced {}, the host time {}..{})",
            ms(-i128::from(*max_ns)),
            ms(-i128::from(*min_ns)),
            ms(advance),
            ms(e.min_ns.into()),
            ms(e.max_ns.into())
        ),
        Continuity::Backwards { by_ns } => format!(
            "went backwards by {} ({} ns -> {} ns)",
            ms((*by_ns).into()),
            n(k_b),
            n(k_a)
        ),
        Continuity::Undecided { why } => format!("undecided: {why}"),
    };
    VcpuContinuity {
        id,
        kvmclock_before_ns: k_b,
        kvmclock_after_ns: k_a,
        advance_ns: sat(advance),
        jump_min_ns: sat(jump_min),
        jump_max_ns: sat(jump_max),
        allowance_ns: allow,
        reanchor_before_ns: sat(reanchor),
        page_before: page_b,
        page_after: page_a,
        page_rewritten: (page_a.version, page_a.tsc_timestamp, page_a.system_time)
            != (page_b.version, page_b.tsc_timestamp, page_b.system_time),
        outcome,
        words,
    }
}

/// What every vCPU's kvmclock did, in one line.
pub fn outcome_words(v: &[VcpuContinuity]) -> Option<String> {
    if v.is_empty() {
        return None;
    }
    if v.iter().all(|c| c.outcome == Continuity::Continuous) {
        let worst = v.iter().map(|c| c.allowance_ns).max().unwrap_or(0);
        return Some(format!(
            "every vCPU's kvmclock ran on across the restore by the host time that passed \
             (within ± {})",
            ms(worst.into())
        ));
    }
    let parts: Vec<String> = v
        .iter()
        .map(|c| format!("vCPU {}: {}", c.id, c.words))
        .collect();
    Some(parts.join("; "))
}

/// The documented method's extra allowance (its KVM_SET_CLOCK's duration,
/// ns at the host's rate `host_khz`) and, when CLOCK_REALTIME moved against
/// the TSC between the source's sample and the destination's by more than
/// NTP can slew, why the host clock cannot vouch for the restored kvmclock.
/// Nothing for the others.
pub fn documented_clock(
    trace: Option<&Trace>,
    source: Option<&ClockSample>,
    host_khz: u32,
) -> (u64, Option<String>) {
    let Some(Trace::Documented(d)) = trace else {
        return (0, None);
    };
    let extra = ns(
        d.set_host_after.saturating_sub(d.set_host_before),
        host_khz,
        true,
    );
    let (Some(src), Some(dst)) = (source, d.destination.as_ref()) else {
        return (extra, None);
    };
    let Ok(drift) = offsets::realtime_drift(src, dst, d.tsc_khz, d.host_khz) else {
        return (extra, None);
    };
    let bound = offsets::drift_bound(
        dst.host_tsc.saturating_sub(src.host_tsc),
        d.tsc_khz,
        d.host_khz,
    );
    let stepped = (drift.unsigned_abs() > u128::from(bound)).then(|| {
        format!(
            "CLOCK_REALTIME moved {} cycles against the host TSC during the restore, more \
             than NTP can slew ({}): the host clock was stepped, and KVM_SET_CLOCK carried \
             the step into kvmclock",
            n(drift),
            n(bound)
        )
    });
    (extra, stepped)
}

/// The host's clocks from the KVM_GET_CLOCK samples right after the
/// readings on either side (`host_khz`: the host's TSC rate).
fn host_clocks(
    last: Option<&ClockReads>,
    first: Option<&ClockReads>,
    delay_ms: Option<f64>,
    host_khz: u32,
) -> HostClocks {
    let before = last.and_then(|r| r.kvm.as_ref().ok()).copied();
    let after = first.and_then(|r| r.kvm.as_ref().ok()).copied();
    let both = |flag: u32| {
        before
            .zip(after)
            .filter(|(b, a)| b.flags & a.flags & flag != 0)
    };
    HostClocks {
        delay_ms,
        elapsed: last.zip(first).and_then(|(l, f)| elapsed(l, f, host_khz)),
        kvm_clock_before: before,
        kvm_clock_after: after,
        kvmclock_advance_ns: before
            .zip(after)
            .map(|(b, a)| sat(i128::from(a.clock_ns) - i128::from(b.clock_ns))),
        realtime_advance_ns: both(kvm_bindings::KVM_CLOCK_REALTIME)
            .map(|(b, a)| sat(i128::from(a.realtime_ns) - i128::from(b.realtime_ns))),
        host_tsc_advance_cycles: both(kvm_bindings::KVM_CLOCK_HOST_TSC)
            .map(|(b, a)| sat(i128::from(a.host_tsc) - i128::from(b.host_tsc))),
        realtime_stepped: None,
    }
}

/// Everything measured of the clock around one restore.
pub struct ClockInputs<'a> {
    /// Why the guests could not read kvmclock.
    pub why_not: Option<&'a str>,
    /// Their readings before the snapshot.
    pub last: Option<&'a ClockReads>,
    /// Their readings after the restore.
    pub first: Option<&'a ClockReads>,
    /// The measured delay, ms.
    pub delay_ms: Option<f64>,
    /// The rates cycles convert to time at.
    pub rates: Rates,
    /// What the method wrote.
    pub trace: Option<&'a Trace>,
    /// KVM_GET_CLOCK in the snapshot.
    pub snapshot_clock: Option<&'a ClockSample>,
    /// The clock once the restored guest ran again.
    pub after: Option<&'a ClockAfter>,
    /// vCPUs.
    pub vcpus: u32,
}

/// The clock part of one restore's report.
pub fn restore_clock(i: &ClockInputs<'_>) -> RestoreClock {
    let (extra, stepped) = documented_clock(i.trace, i.snapshot_clock, i.rates.host_khz);
    let mut host = host_clocks(i.last, i.first, i.delay_ms, i.rates.host_khz);
    host.realtime_stepped = stepped.clone();
    let continuity: Vec<VcpuContinuity> = match (i.last, i.first) {
        (Some(l), Some(f)) => l
            .records
            .iter()
            .zip(&f.records)
            .enumerate()
            .map(|(id, (b, a))| {
                continuity(
                    id as u32,
                    b,
                    a,
                    host.elapsed,
                    i.rates.tsc_khz,
                    extra,
                    stepped.as_deref(),
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    RestoreClock {
        guest_reads_why_not: i.why_not.map(str::to_string),
        host,
        continuity_outcome: outcome_words(&continuity),
        continuity,
        after: i.after.map(|a| keeps::clock_after(a, i.vcpus)),
    }
}

#[cfg(test)]
#[path = "clock_derive_tests.rs"]
mod tests;
