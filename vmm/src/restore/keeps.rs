//! What a restore keeps (pure): the master clock once the restored guest
//! ran again ([`master_clock`]: KVM_CLOCK_TSC_STABLE, every page's
//! PVCLOCK_TSC_STABLE_BIT, and the kvmclocks the vCPUs see of each other,
//! through the forced hand-off test's [`Agreement`]), the exact relative
//! skew ([`skew_kept`]: every offset minus vCPU 0's bit-exact as in the
//! first snapshot), and which of the two a method keeps after one and after
//! two restores ([`kept_after`]).
//!
//! The master clock is **kept** when KVM says stable, every page carries
//! the bit and every pair of the hand-off test was measured and agrees
//! within a bound that could have seen a disagreement that matters
//! ([`crate::session::one_clock`]: what stale pages would show by the exact
//! offsets, or with equal or unknown offsets the 100 us floor); **off**
//! without KVM_CLOCK_TSC_STABLE (KVM makes no promise); **broken** when KVM
//! says stable and a pair differs beyond its bound; **undecided** otherwise
//! (KVM_GET_CLOCK failed, no kvmclock pages to look at, a page without the
//! bit, the hand-off test missing or without a pair, a bound too wide).

use tsc_contract::{PvclockTimeInfo, PVCLOCK_TSC_STABLE_BIT};

use super::clock_report::{
    ClockAfterReport, ClockPairReport, Kept, KeptAfter, MasterClock, PageReport, SkewKept,
};
use super::offsets::{flag_names, ClockSample};
use super::reads::ClockAfter;
use crate::session::{kvmclocks_apart_words, one_clock, Agreement, Handoff};
use crate::units::{cycles_to_ns_at, fmt_int as n, WATCHDOG_MAX_SKEW_NS};

/// A page as the report shows it.
pub fn page(id: u32, p: &PvclockTimeInfo) -> PageReport {
    PageReport {
        id,
        version: p.version,
        flags: p.flags,
        tsc_stable_bit: p.flags & PVCLOCK_TSC_STABLE_BIT != 0,
        tsc_timestamp: p.tsc_timestamp,
        system_time: p.system_time,
        tsc_to_system_mul: p.tsc_to_system_mul,
        tsc_shift: p.tsc_shift,
    }
}

/// How the pairs agree, in words.
pub fn agreement_words(a: &Agreement) -> String {
    if a.pairs == 0 {
        return "no pair's kvmclocks were measured".into();
    }
    match (a.worst_pair, a.worst_interval) {
        (Some((x, y)), Some((lo, hi))) if a.differ() => {
            kvmclocks_apart_words(x, y, a.apart, lo, hi)
        }
        _ => format!(
            "every pair's kvmclocks agree within ±{} ns ({} ordered pairs)",
            n(a.bound),
            a.pairs
        ),
    }
}

/// The master clock from KVM_GET_CLOCK, the pages and the hand-off test
/// over kvmclock readings (`None`: it did not run), with its words;
/// `rel_ns` is every vCPU's exact offset relative to vCPU 0 in ns, what
/// stale pages would set its kvmclock apart by (`None`: not all known, and
/// the 100 us floor decides).
pub fn master_clock(
    clock: &Result<ClockSample, String>,
    pages: &[PageReport],
    handoff: Option<&Handoff>,
    rel_ns: Option<&[Option<f64>]>,
    vcpus: u32,
) -> (MasterClock, String) {
    let agreement = handoff.map(Handoff::agreement);
    let agreement = agreement.as_ref();
    let bits: Vec<&str> = pages
        .iter()
        .map(|p| if p.tsc_stable_bit { "1" } else { "0" })
        .collect();
    let bits = if bits.is_empty() {
        "no kvmclock pages".to_string()
    } else {
        format!("PVCLOCK_TSC_STABLE_BIT per vCPU {}", bits.join(" "))
    };
    let agree = agreement.map_or_else(
        || "the kvmclock hand-off test did not run".to_string(),
        agreement_words,
    );
    let c = match clock {
        Ok(c) => c,
        Err(e) => {
            let why = format!("KVM_GET_CLOCK failed: {e}");
            return (MasterClock::Undecided { why: why.clone() }, why);
        }
    };
    if !c.tsc_stable() {
        return (
            MasterClock::Off,
            format!("no master clock: KVM_GET_CLOCK without KVM_CLOCK_TSC_STABLE; {bits}; {agree}"),
        );
    }
    if let Some(a) = agreement.filter(|a| a.differ()) {
        return (
            MasterClock::Broken,
            format!(
                "KVM_CLOCK_TSC_STABLE promises one kvmclock, but {}; {bits}",
                agreement_words(a)
            ),
        );
    }
    let lacking: Vec<String> = pages
        .iter()
        .filter(|p| !p.tsc_stable_bit)
        .map(|p| p.id.to_string())
        .collect();
    let why = if pages.is_empty() {
        Some("KVM_CLOCK_TSC_STABLE, but the guest has no kvmclock pages to confirm it".into())
    } else if !lacking.is_empty() {
        Some(format!(
            "KVM_CLOCK_TSC_STABLE, but vCPU(s) {}'s pages lack PVCLOCK_TSC_STABLE_BIT",
            lacking.join(", ")
        ))
    } else if vcpus >= 2 {
        match handoff {
            None => Some("KVM_CLOCK_TSC_STABLE, but the kvmclock hand-off test did not run".into()),
            Some(h) => one_clock::resolves(h, vcpus, rel_ns, WATCHDOG_MAX_SKEW_NS)
                .err()
                .map(|why| format!("KVM_CLOCK_TSC_STABLE and no pair contradicts it, but {why}")),
        }
    } else {
        None
    };
    match why {
        Some(why) => (
            MasterClock::Undecided { why: why.clone() },
            format!("{why}; {agree}"),
        ),
        None => (
            MasterClock::Kept,
            format!("master clock on: KVM_CLOCK_TSC_STABLE, {bits}; {agree}"),
        ),
    }
}

/// Every vCPU's exact offset relative to vCPU 0 in ns at its TSC's rate,
/// `None` where unknown.
fn offsets_ns(states: &[crate::tsc::TscState]) -> Vec<Option<f64>> {
    let base = states.first().and_then(|s| s.offset);
    states
        .iter()
        .map(|s| {
            let rel = s.offset?.wrapping_sub(base?) as i64;
            cycles_to_ns_at(i128::from(rel), s.tsc_khz)
        })
        .collect()
}

/// Offsets minus vCPU 0's (signed), `None` where one is missing.
pub fn relative(offsets: &[Option<u64>]) -> Vec<Option<i64>> {
    let base = offsets.first().copied().flatten();
    offsets
        .iter()
        .map(|o| Some(o.as_ref()?.wrapping_sub(base?) as i64))
        .collect()
}

/// The clock once the restored guest ran again, as the report shows it.
pub fn clock_after(v: &ClockAfter, vcpus: u32) -> ClockAfterReport {
    let pages: Vec<PageReport> = v
        .pages
        .iter()
        .enumerate()
        .map(|(i, p)| page(i as u32, p))
        .collect();
    let agreement = v.handoff.as_ref().map(|h| h.agreement());
    let rel = offsets_ns(&v.states);
    let known = rel.iter().all(Option::is_some);
    let (master, words) = master_clock(
        &v.clock,
        &pages,
        v.handoff.as_ref(),
        known.then_some(rel.as_slice()),
        vcpus,
    );
    let sample = v.clock.as_ref().ok().copied();
    ClockAfterReport {
        kvm_get_clock: sample,
        kvm_get_clock_error: v.clock.as_ref().err().cloned(),
        flags: sample.map(|c| flag_names(c.flags)).unwrap_or_default(),
        tsc_stable: sample.map(|c| c.tsc_stable()),
        pages,
        pairs: v
            .handoff
            .iter()
            .flat_map(|h| &h.pairs)
            .map(|p| ClockPairReport {
                a: p.a,
                b: p.b,
                lower_ns: p.lower,
                upper_ns: p.upper,
                shortest_round_trip_ns: p.min_rtt,
            })
            .collect(),
        agreement,
        relative_offsets: relative(&v.states.iter().map(|s| s.offset).collect::<Vec<_>>()),
        master_clock: master,
        words,
    }
}

/// Whether every relative offset of each of `now` equals the first
/// snapshot's `saved`, bit-exact.
pub fn skew_kept(saved: &[Option<i64>], now: &[&[Option<i64>]]) -> SkewKept {
    let complete = |v: &[Option<i64>]| v.len() == saved.len() && v.iter().all(Option::is_some);
    if saved.is_empty() || !complete(saved) || !now.iter().all(|v| complete(v)) {
        return SkewKept::Unknown {
            why: "no exact offsets (KVM_VCPU_TSC_OFFSET or KVM's debugfs) to compare".into(),
        };
    }
    for v in now {
        for (i, (s, x)) in saved.iter().zip(v.iter()).enumerate() {
            if let (Some(s), Some(x)) = (s, x) {
                if s != x {
                    return SkewKept::Lost {
                        vcpu: i as u32,
                        saved: *s,
                        now: *x,
                    };
                }
            }
        }
    }
    SkewKept::Kept
}

/// Which property a method kept after `restores` restores.
pub fn kept_after(
    restores: u32,
    skew: SkewKept,
    saved_skew: Option<u64>,
    vcpus: u32,
    master: MasterClock,
) -> KeptAfter {
    let trivial = saved_skew == Some(0) || vcpus < 2;
    let skew_ok = match &skew {
        SkewKept::Kept => Some(true),
        SkewKept::Lost { .. } => Some(false),
        SkewKept::Unknown { .. } => None,
    };
    let master_ok = match &master {
        MasterClock::Kept => Some(true),
        MasterClock::Off | MasterClock::Broken => Some(false),
        MasterClock::Undecided { .. } => None,
    };
    let keeps = match (skew_ok, master_ok) {
        (Some(true), Some(true)) => Kept::Both,
        (Some(true), Some(false)) => Kept::ExactSkew,
        (Some(false), Some(true)) => Kept::MasterClock,
        (Some(false), Some(false)) => Kept::Neither,
        _ => Kept::Undecided,
    };
    let skew_words = match &skew {
        SkewKept::Kept if trivial => format!(
            "kept the exact skew (trivially: {}, so keeping it and snapping every vCPU to one \
             offset look the same)",
            if vcpus < 2 {
                "one vCPU".to_string()
            } else {
                "the saved skew was 0".to_string()
            }
        ),
        SkewKept::Kept => format!(
            "kept the exact skew ({} cycles, every relative offset bit-exact)",
            saved_skew.map_or_else(|| "?".into(), n)
        ),
        SkewKept::Lost { vcpu, saved, now } => format!(
            "lost the exact skew (vCPU {vcpu}'s offset minus vCPU 0's: {} saved, {} now)",
            n(*saved),
            n(*now)
        ),
        SkewKept::Unknown { why } => format!("the exact skew unknown: {why}"),
    };
    let master_words = match &master {
        MasterClock::Kept => "kept the master clock".to_string(),
        MasterClock::Off => "lost the master clock (no KVM_CLOCK_TSC_STABLE)".to_string(),
        MasterClock::Broken => {
            "broke the master clock's promise (KVM_CLOCK_TSC_STABLE while the vCPUs' \
             kvmclocks differ)"
                .to_string()
        }
        MasterClock::Undecided { why } => format!("the master clock undecided: {why}"),
    };
    let times = if restores == 1 {
        "one restore"
    } else {
        "two restores"
    };
    KeptAfter {
        restores,
        exact_skew: skew,
        saved_skew_cycles: saved_skew,
        skew_trivial: trivial,
        master_clock: master,
        keeps,
        words: format!("after {times}: {skew_words}; {master_words}"),
    }
}

#[cfg(test)]
#[path = "keeps_tests.rs"]
mod tests;
