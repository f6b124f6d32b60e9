//! The clock part of a method's `restore` report: the guests' kvmclock
//! across each restore ([`RestoreClock`], per vCPU [`VcpuContinuity`]),
//! KVM's and the guests' view of the clock once the restored guest ran
//! again ([`ClockAfterReport`]), the chained restore ([`ChainReport`]) and
//! which property the method keeps after one and after two restores
//! ([`Keeps`]). Derived in [`super::clock_derive`]; judged by check 7.

use serde::Serialize;

use crate::session::Agreement;
use crate::tsc::clock::ClockSample;

/// One vCPU's pvclock page, as read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PageReport {
    /// The vCPU.
    pub id: u32,
    /// The version (odd while KVM writes the page).
    pub version: u32,
    /// The flags byte.
    pub flags: u8,
    /// PVCLOCK_TSC_STABLE_BIT.
    pub tsc_stable_bit: bool,
    /// The guest TSC at which `system_time` was true.
    pub tsc_timestamp: u64,
    /// kvmclock at `tsc_timestamp`, ns.
    pub system_time: u64,
    /// The TSC-to-ns multiplier.
    pub tsc_to_system_mul: u32,
    /// The shift.
    pub tsc_shift: i8,
}

/// What one vCPU's kvmclock did across a restore.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Continuity {
    /// It advanced by the host time that passed, within the allowance.
    Continuous,
    /// It advanced by the host time plus a jump in `[min_ns, max_ns]`
    /// (allowance included), an interval that excludes 0: positive ahead,
    /// negative behind (it lost time).
    Jumped {
        /// The jump is at least this, ns.
        min_ns: i64,
        /// And at most this.
        max_ns: i64,
    },
    /// The first reading after the restore is below the last before it.
    Backwards {
        /// By this much, ns.
        by_ns: u64,
    },
    /// The readings cannot decide it.
    Undecided {
        /// Why.
        why: String,
    },
}

/// One vCPU's kvmclock across a restore: the guest's last reading before
/// the snapshot (just after KVM re-anchored its page) and its first after
/// the restore, against the host time between them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VcpuContinuity {
    /// The vCPU.
    pub id: u32,
    /// kvmclock before the snapshot, ns.
    pub kvmclock_before_ns: u64,
    /// kvmclock first thing after the restore, ns.
    pub kvmclock_after_ns: u64,
    /// after - before, ns.
    pub advance_ns: i64,
    /// The advance minus the most host time that can have passed, ns.
    pub jump_min_ns: i64,
    /// The advance minus the least.
    pub jump_max_ns: i64,
    /// How far a continuous kvmclock may stray from the host time: NTP's
    /// 1000 ppm over the interval and over both pages' ages, the
    /// documented method's KVM_SET_CLOCK duration, rounding; ns.
    pub allowance_ns: u64,
    /// What KVM's re-anchoring before the snapshot moved this kvmclock by
    /// (the second reading minus the first minus the TSC's advance), ns: a
    /// page left stale by a guest IA32_TSC write shows here.
    pub reanchor_before_ns: i64,
    /// The page the last reading before the snapshot used.
    pub page_before: PageReport,
    /// The page the first reading after the restore used.
    pub page_after: PageReport,
    /// Whether the restored VM rewrote the page (else it is the saved one).
    pub page_rewritten: bool,
    /// The outcome.
    pub outcome: Continuity,
    /// The outcome in words.
    pub words: String,
}

/// An interval of host time between two guest readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Elapsed {
    /// At least this many host TSC cycles.
    pub min_cycles: u64,
    /// At most this many.
    pub max_cycles: u64,
    /// `min_cycles` in ns, rounded down.
    pub min_ns: u64,
    /// `max_cycles` in ns, rounded up.
    pub max_ns: u64,
}

/// The host's clocks around a restore, from KVM_GET_CLOCK right after the
/// guests' readings on either side.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostClocks {
    /// From destroying the source VM to creating the destination, ms.
    pub delay_ms: Option<f64>,
    /// Host time between the guests' readings (their host TSC bracket).
    pub elapsed: Option<Elapsed>,
    /// KVM_GET_CLOCK on the source right after its last readings.
    pub kvm_clock_before: Option<ClockSample>,
    /// KVM_GET_CLOCK on the destination right after its first.
    pub kvm_clock_after: Option<ClockSample>,
    /// KVM's kvmclock after minus before, ns.
    pub kvmclock_advance_ns: Option<i64>,
    /// CLOCK_REALTIME after minus before, ns (both with KVM_CLOCK_REALTIME).
    pub realtime_advance_ns: Option<i64>,
    /// The host TSC after minus before (both with KVM_CLOCK_HOST_TSC).
    pub host_tsc_advance_cycles: Option<i64>,
    /// Why the host's clock cannot vouch for the method (CLOCK_REALTIME
    /// stepped while the documented method carried it), if so.
    pub realtime_stepped: Option<String>,
}

/// The guests' kvmclock across one restore and the clock once the
/// restored guest ran again.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RestoreClock {
    /// Why the guests could not read their kvmclock (then `continuity` is
    /// empty).
    pub guest_reads_why_not: Option<String>,
    /// The host's clocks around the restore.
    pub host: HostClocks,
    /// Per vCPU.
    pub continuity: Vec<VcpuContinuity>,
    /// What every vCPU's kvmclock did, in words.
    pub continuity_outcome: Option<String>,
    /// The clock once the restored guest ran again.
    pub after: Option<ClockAfterReport>,
}

/// One ordered pair's kvmclocks as the guests saw them, ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ClockPairReport {
    /// The initiator.
    pub a: u32,
    /// The responder.
    pub b: u32,
    /// The responder's kvmclock minus the initiator's is at least this.
    pub lower_ns: i64,
    /// And at most this.
    pub upper_ns: i64,
    /// The shortest round trip, ns.
    pub shortest_round_trip_ns: u64,
}

/// The master clock after a restore.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum MasterClock {
    /// KVM_CLOCK_TSC_STABLE, every page's PVCLOCK_TSC_STABLE_BIT, and no
    /// pair's kvmclocks differ beyond the bound.
    Kept,
    /// No KVM_CLOCK_TSC_STABLE: KVM makes no promise.
    Off,
    /// KVM_CLOCK_TSC_STABLE, but two vCPUs' kvmclocks differ beyond the
    /// bound: the promise is broken.
    Broken,
    /// The evidence cannot decide it.
    Undecided {
        /// Why.
        why: String,
    },
}

/// KVM's and the guests' view of the clock once the restored guest ran
/// again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClockAfterReport {
    /// KVM_GET_CLOCK.
    pub kvm_get_clock: Option<ClockSample>,
    /// Why it failed.
    pub kvm_get_clock_error: Option<String>,
    /// Its flags by name.
    pub flags: Vec<&'static str>,
    /// KVM_CLOCK_TSC_STABLE.
    pub tsc_stable: Option<bool>,
    /// Every vCPU's page.
    pub pages: Vec<PageReport>,
    /// Every ordered pair of the kvmclock hand-off test.
    pub pairs: Vec<ClockPairReport>,
    /// What the pairs say together (`None`: the test did not run).
    pub agreement: Option<Agreement>,
    /// Every vCPU's exact offset minus vCPU 0's then.
    pub relative_offsets: Vec<Option<i64>>,
    /// The master clock.
    pub master_clock: MasterClock,
    /// In words.
    pub words: String,
}

/// One vCPU across the chained restore.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChainVcpu {
    /// The vCPU.
    pub id: u32,
    /// Offset in the second snapshot.
    pub offset_saved: Option<u64>,
    /// Offset after the second restore, before the guest ran.
    pub offset_after: Option<u64>,
    /// Offset after the guest ran again.
    pub offset_after_run: Option<u64>,
    /// Offset minus vCPU 0's in the second snapshot.
    pub relative_offset_saved: Option<i64>,
    /// After the second restore.
    pub relative_offset_after: Option<i64>,
    /// After the guest ran again.
    pub relative_offset_after_run: Option<i64>,
    /// TSC_ADJUST in the second snapshot.
    pub tsc_adjust_saved: Option<i64>,
    /// After the second restore.
    pub tsc_adjust_after: Option<i64>,
}

/// The chained restore: the restored guest ran, was snapshotted and
/// restored again by the same method.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChainReport {
    /// Whether every step of it completed.
    pub completed: bool,
    /// Why the method could not restore the restored VM again (the second
    /// restore did not run).
    pub not_possible: Option<String>,
    /// From destroying the first destination to creating the second, ms.
    pub delay_ms: Option<f64>,
    /// Spread of the relative offsets in the second snapshot, cycles.
    pub skew_saved_cycles: Option<u64>,
    /// Spread after the second restore.
    pub skew_after_cycles: Option<u64>,
    /// Per vCPU.
    pub vcpus: Vec<ChainVcpu>,
    /// The guests' kvmclock across the second restore and the clock after.
    pub kvmclock: RestoreClock,
}

/// Whether a restore kept the exact relative skew (every offset minus
/// vCPU 0's bit-exact as in the first snapshot).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SkewKept {
    /// Every relative offset as saved.
    Kept,
    /// One differs.
    Lost {
        /// The first vCPU whose relative offset differs.
        vcpu: u32,
        /// Its relative offset in the first snapshot.
        saved: i64,
        /// And now.
        now: i64,
    },
    /// No exact offsets to compare.
    Unknown {
        /// Why.
        why: String,
    },
}

/// Which property a method keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kept {
    /// The exact skew and the master clock.
    Both,
    /// The exact skew, not the master clock.
    ExactSkew,
    /// The master clock, not the exact skew.
    MasterClock,
    /// Neither.
    Neither,
    /// The evidence cannot tell for one of them.
    Undecided,
}

impl Kept {
    /// Its name, as in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kept::Both => "both",
            Kept::ExactSkew => "exact-skew",
            Kept::MasterClock => "master-clock",
            Kept::Neither => "neither",
            Kept::Undecided => "undecided",
        }
    }
}

/// What a method kept after a number of restores.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeptAfter {
    /// After how many restores (1 or 2).
    pub restores: u32,
    /// The exact skew.
    pub exact_skew: SkewKept,
    /// The skew of the first snapshot, cycles.
    pub saved_skew_cycles: Option<u64>,
    /// The saved skew was 0 (or one vCPU): keeping it and snapping every
    /// vCPU to one offset cannot be told apart.
    pub skew_trivial: bool,
    /// The master clock.
    pub master_clock: MasterClock,
    /// Which property the method kept.
    pub keeps: Kept,
    /// In words.
    pub words: String,
}

/// Which property a method keeps after one and after two restores.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Keeps {
    /// After the first restore.
    pub after_one: KeptAfter,
    /// After the chained second one (`None`: not measured).
    pub after_two: Option<KeptAfter>,
    /// Why there is nothing to say after two restores, when a chain was
    /// asked for.
    pub after_two_why_not: Option<String>,
}
