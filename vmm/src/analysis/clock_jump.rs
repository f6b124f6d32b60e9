//! kvmclock across a TSC write, the arithmetic: from the guest's
//! [`ClockRecord`] (two kvmclock readings with their TSCs, one before and one
//! after the write) and how far the write moved the TSC (KVM's exact
//! offsets), the *jump*: kvmclock's advance minus the time that passed. A
//! vCPU whose pvclock page KVM re-anchored after the write jumps by about 0;
//! one whose page kept the old `tsc_timestamp` jumps by the move's
//! nanoseconds (its kvmclock followed the TSC). `run --kvmclock` keeps it per
//! round ([`super::kvmclock`]); check 8 judges the same arithmetic.
//!
//! How far a kvmclock that ran on may stray (the *allowance*), from what
//! the record holds: the time that passed is exact (the guest's own TSC
//! reads less the exact offsets' move), so only three things remain: the
//! readings' rounding (two truncated readings and the conversion, 4 ns),
//! the page's rate against the TSC frequency the time is converted at
//! (from the page's multiplier and shift), and, where KVM rewrote the page
//! between the readings, the re-anchoring, which may move kvmclock by the
//! host clock's drift against the TSC since the page's last update: a rate
//! (the caller's `reanchor_ppm`: NTP's 1000 ppm, plus what the host's clock
//! was measured to run off its TSC where that was measured,
//! [`crate::tsc::host_clock`]) over the page's age plus the interval. A kvmclock that
//! followed the TSC jumps by the move within the same allowance plus the
//! page's rate over the move.
//!
//! A re-anchoring can also step kvmclock by how far apart KVM's two reads
//! of the host fell: it reads the host's TSC (the page's `tsc_timestamp`)
//! and then its clock (the page's `system_time`), so a page is ahead of the
//! host's clock by the time between the two, which is at least 0 and at
//! most the page's age when the guest read it (the clock was read before
//! the page was written, and the guest read the page after). Across a
//! rewrite, kvmclock steps by the new page's lead less the old one's: within
//! `[-(the old page's age), +(the new page's age)]`, widened by the
//! allowance (the *step window*, a sound bound however slow the host was
//! between its two reads: microseconds on an emulated or nested host,
//! nanoseconds on bare metal). A step within it is what a re-anchoring can
//! do; one beyond it, none can.
//!
//! A reading taken with the TSC below its page's `tsc_timestamp` (a
//! backwards move larger than the page's age, the page not re-anchored)
//! wraps, as the kernel's unsigned arithmetic does: kvmclock leaps by about
//! 10^18 ns. Such a jump is flagged (`kvmclock_wrapped`) and kept out of
//! the round's largest jump, which the run's statistics summarise.

use serde::Serialize;
use tsc_contract::ClockRecord;

use crate::units::{cycles_to_ns_at, NTP_MAX_PPM};

/// Rounding in a jump, ns: two kvmclock readings truncated to whole ns and
/// the conversions of the time that passed and of the move.
pub const ROUNDING_NS: f64 = 4.0;

/// One vCPU's kvmclock across one write.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ClockJump {
    /// The vCPU.
    pub vcpu: u32,
    /// How far the write moved the vCPU's TSC, cycles (KVM's exact offsets;
    /// `None` without them).
    pub tsc_moved_cycles: Option<i64>,
    /// That in ns.
    pub tsc_moved_ns: Option<f64>,
    /// kvmclock's advance between the two readings, ns.
    pub kvmclock_advance_ns: i64,
    /// The time that passed between the readings, ns: their TSC difference
    /// less the move, at the vCPU's TSC frequency (`None` without the move).
    pub elapsed_ns: Option<f64>,
    /// kvmclock's advance minus the time that passed, ns.
    pub jump_ns: Option<f64>,
    /// The page's version at the two readings.
    pub version: (u32, u32),
    /// The page's flags at the two readings.
    pub flags: (u8, u8),
    /// Whether KVM rewrote the page between the readings (its version,
    /// timestamp, system time or scale changed).
    pub page_rewritten: bool,
    /// How old the page was at the first reading (kvmclock minus the page's
    /// system time), ns.
    pub page_age_ns: u64,
    /// How old the page was at the second reading, ns.
    pub page_age_after_ns: u64,
    /// How far a kvmclock that ran on may stray across this write, ns (see
    /// the module's documentation); `None` without the TSC frequency, the
    /// move, or a page that was ever written.
    pub allowance_ns: Option<f64>,
    /// How far from the move a kvmclock that followed the TSC may be, ns.
    pub follow_allowance_ns: Option<f64>,
    /// Where KVM rewrote the page: the least and the most a re-anchoring can
    /// step kvmclock by, ns (see the module's documentation); `None` when
    /// the page was not rewritten or there is no allowance.
    pub step_window_ns: Option<(f64, f64)>,
    /// A reading was taken with the TSC below its page's `tsc_timestamp`:
    /// it wrapped, and the jump (about 10^18 ns) is no time at all.
    pub kvmclock_wrapped: bool,
    /// The host clock's rate against the TSC the re-anchoring term allows,
    /// ppm.
    pub reanchor_ppm: f64,
}

/// The page's rate (ns per TSC cycle by its multiplier and shift) against
/// `khz`'s, as a fraction; `None` for a page never written (multiplier 0)
/// or an unknown frequency.
fn rate_error(mul: u32, shift: i8, khz: u32) -> Option<f64> {
    if mul == 0 || khz == 0 {
        return None;
    }
    let page = f64::from(mul) * 2f64.powi(i32::from(shift)) / 2f64.powi(32);
    let nominal = 1e6 / f64::from(khz);
    Some((page - nominal).abs() / nominal)
}

/// Whether `tsc` lies below `timestamp` (their unsigned distance is more
/// than half the range): a kvmclock read at it wraps.
fn below(tsc: u64, timestamp: u64) -> bool {
    tsc.wrapping_sub(timestamp) > u64::MAX / 2
}

/// vCPU `vcpu`'s kvmclock across the write record `r` describes, the write
/// having moved its TSC by `moved` cycles, at `khz`, a re-anchoring allowed
/// to move kvmclock by [`NTP_MAX_PPM`] of the page's age.
pub fn across_write(vcpu: u32, r: &ClockRecord, moved: Option<i64>, khz: u32) -> ClockJump {
    across_write_at(vcpu, r, moved, khz, NTP_MAX_PPM as f64)
}

/// [`across_write`] with a re-anchoring allowed to move kvmclock by
/// `reanchor_ppm` of the page's age (at least NTP's).
pub fn across_write_at(
    vcpu: u32,
    r: &ClockRecord,
    moved: Option<i64>,
    khz: u32,
    reanchor_ppm: f64,
) -> ClockJump {
    let reanchor_ppm = reanchor_ppm.max(NTP_MAX_PPM as f64);
    let raw = i128::from(r.tsc_after.wrapping_sub(r.tsc_before) as i64);
    let elapsed = moved.and_then(|m| cycles_to_ns_at(raw - i128::from(m), khz));
    let advance = r.kvmclock_after.wrapping_sub(r.kvmclock_before) as i64;
    let moved_ns = moved.and_then(|m| cycles_to_ns_at(i128::from(m), khz));
    let rewritten = (
        r.version_before,
        r.tsc_timestamp_before,
        r.system_time_before,
        r.mul_before,
        r.shifts_before_after().0,
    ) != (
        r.version_after,
        r.tsc_timestamp_after,
        r.system_time_after,
        r.mul_after,
        r.shifts_before_after().1,
    );
    let age = r.kvmclock_before.saturating_sub(r.system_time_before);
    let age_after = r.kvmclock_after.saturating_sub(r.system_time_after);
    let rate = rate_error(r.mul_before, r.shifts_before_after().0, khz);
    let allowances = match (rate, elapsed, moved_ns) {
        (Some(rate), Some(e), Some(m)) => {
            let e = e.max(0.0);
            let reanchor = if rewritten {
                (age as f64 + e) * reanchor_ppm / 1e6
            } else {
                0.0
            };
            let allow = ROUNDING_NS + rate * e + reanchor;
            Some((allow, allow + rate * m.abs()))
        }
        _ => None,
    };
    ClockJump {
        vcpu,
        tsc_moved_cycles: moved,
        tsc_moved_ns: moved_ns,
        kvmclock_advance_ns: advance,
        elapsed_ns: elapsed,
        jump_ns: elapsed.map(|e| advance as f64 - e),
        version: (r.version_before, r.version_after),
        flags: r.flags_before_after(),
        page_rewritten: rewritten,
        page_age_ns: age,
        page_age_after_ns: age_after,
        allowance_ns: allowances.map(|a| a.0),
        follow_allowance_ns: allowances.map(|a| a.1),
        step_window_ns: allowances
            .filter(|_| rewritten)
            .map(|(allow, _)| (-(age as f64) - allow, age_after as f64 + allow)),
        kvmclock_wrapped: below(r.tsc_before, r.tsc_timestamp_before)
            || below(r.tsc_after, r.tsc_timestamp_after),
        reanchor_ppm,
    }
}

/// A round's kvmclock findings (`run --kvmclock`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvmclockRound {
    /// The jump of the largest magnitude over the writing vCPUs whose
    /// readings did not wrap, signed, ns (`None` when no such jump could be
    /// worked out).
    pub jump_ns: Option<f64>,
    /// Every writing vCPU's kvmclock across its IA32_TSC write.
    pub vcpus: Vec<ClockJump>,
    /// The vCPUs whose kvmclock reading wrapped (kept out of `jump_ns`).
    pub wrapped: Vec<u32>,
}

impl KvmclockRound {
    /// The round's findings from every writing vCPU's jump.
    pub fn of(vcpus: Vec<ClockJump>) -> KvmclockRound {
        let jump_ns = vcpus
            .iter()
            .filter(|j| !j.kvmclock_wrapped)
            .filter_map(|j| j.jump_ns)
            .max_by(|a, b| a.abs().total_cmp(&b.abs()));
        let wrapped = vcpus
            .iter()
            .filter(|j| j.kvmclock_wrapped)
            .map(|j| j.vcpu)
            .collect();
        KvmclockRound {
            jump_ns,
            vcpus,
            wrapped,
        }
    }
}
