//! Check 9, `master-clock`: does KVM's promise of one kvmclock hold where
//! the guests can see it?
//!
//! KVM_GET_CLOCK's KVM_CLOCK_TSC_STABLE (and each vCPU page's
//! PVCLOCK_TSC_STABLE_BIT) says the master clock is on: every vCPU's kvmclock
//! comes from one snapshot, so all vCPUs see the same kvmclock (api.rst). The
//! vCPUs measure each other's kvmclock with the forced hand-off test over
//! kvmclock readings: each ordered pair's difference is bounded as for the
//! TSC (check 5), in ns. Measured after the rendezvous (the guests' TSC
//! writes), with the fresh VM as the baseline.
//!
//! FAIL: KVM says stable and a pair's kvmclocks differ beyond the bound.
//! PASS: KVM says stable, every page has the bit, every pair of the test
//! was measured and agrees, and that agreement excludes the documented
//! failure: stale pages would put each vCPU's kvmclock at its own TSC
//! offset, and for every vCPU whose exact offset differs from another's
//! some pair's interval excludes that difference (with equal offsets the
//! bound must be within check 5's 100 us floor); see
//! [`crate::session::one_clock`]. SKIP: KVM makes no promise (no flag), with
//! what turned it off where that is measurable. UNDECIDED otherwise, saying
//! why (no pair or no page measured, a bound that does not exclude it, no
//! exact offsets to say what it would be).

use serde::Serialize;
use tsc_contract::PVCLOCK_TSC_STABLE_BIT;

use super::evidence::{Check, ClockView, Context, Evidence};
use super::judge::context;
use super::judge::FLOOR_NS;
use super::report::{Finding, Verdict};
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::session::one_clock;
use crate::session::{both_directions_bound, interval_apart, kvmclocks_apart_words, Handoff};
use crate::units::{cycles_to_ns_at, fmt_int as n};

/// Check 9.
pub struct MasterClock;

impl Check for MasterClock {
    fn number(&self) -> u32 {
        9
    }
    fn id(&self) -> &'static str {
        "master-clock"
    }
    fn title(&self) -> &'static str {
        "KVM_CLOCK_TSC_STABLE and PVCLOCK_TSC_STABLE_BIT agree with the kvmclocks the vCPUs see"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        let c = &ev.clock;
        if !c.kvmclock {
            return Ok(super::judge::no_kvmclock());
        }
        let Some(after) = &c.after_rounds else {
            return Ok(super::judge::missing("kvmclock hand-off test"));
        };
        let host = &ev.env.host;
        Ok(judge(
            ev.options.vcpus,
            after,
            c.fresh.as_ref(),
            host.clocksource.as_deref(),
            host.kvm_flavor,
        ))
    }
}

/// One ordered pair's kvmclocks as the guests saw them, ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ClockPair {
    /// The initiator.
    pub a: u32,
    /// The responder.
    pub b: u32,
    /// The responder's kvmclock minus the initiator's is at least this (at
    /// the exchange that set it).
    pub lower_ns: i64,
    /// And at most this (at the exchange that set it). Below `lower_ns`:
    /// no constant difference fits the exchanges, the difference moved
    /// during the test by at least `lower_ns - upper_ns`.
    pub upper_ns: i64,
    /// The shortest round trip, ns.
    pub shortest_round_trip_ns: u64,
}

impl ClockPair {
    /// Whether the interval excludes 0: the two kvmclocks differ.
    fn differ(&self) -> bool {
        self.apart() > 0
    }

    /// How far 0 lies outside the interval (0: inside).
    fn apart(&self) -> u64 {
        interval_apart(self.lower_ns, self.upper_ns)
    }
}

/// The widest bound over the unordered pairs, each pair's two directions
/// intersected (the same difference seen both ways).
fn worst_bound(p: &[ClockPair]) -> u64 {
    p.iter()
        .map(|x| {
            let reverse = p.iter().find(|r| (r.a, r.b) == (x.b, x.a));
            both_directions_bound(
                (x.lower_ns, x.upper_ns),
                reverse.map(|r| (r.lower_ns, r.upper_ns)),
            )
        })
        .max()
        .unwrap_or(0)
}

/// Every pair of a view.
pub fn pairs(v: &ClockView) -> Vec<ClockPair> {
    pairs_of(&v.handoff)
}

/// Every pair of a test.
fn pairs_of(h: &Handoff) -> Vec<ClockPair> {
    h.pairs
        .iter()
        .map(|p| ClockPair {
            a: p.a,
            b: p.b,
            lower_ns: p.lower,
            upper_ns: p.upper,
            shortest_round_trip_ns: p.min_rtt,
        })
        .collect()
}

/// What a view says, as values.
fn view_values(v: &ClockView) -> serde_json::Value {
    serde_json::json!({
        "kvm_get_clock": v.clock.as_ref().ok(),
        "kvm_get_clock_error": v.clock.as_ref().err(),
        "tsc_stable": v.clock.as_ref().ok().map(|c| c.tsc_stable()),
        "pvclock_stable_bits": v.pages.iter().map(|p| p.flags & PVCLOCK_TSC_STABLE_BIT != 0).collect::<Vec<_>>(),
        "pvclock_versions": v.pages.iter().map(|p| p.version).collect::<Vec<_>>(),
        "exact_offsets": v.states.iter().map(|s| s.offset).collect::<Vec<_>>(),
        "pairs": pairs(v),
    })
}

/// The views as lines: KVM_GET_CLOCK's flags, each page's stable bit, and
/// every ordered pair's interval.
fn details(after: &ClockView, fresh: Option<&ClockView>) -> Vec<String> {
    let mut out = vec![
        "Check 9, each ordered pair's kvmclocks (ns; the responder's minus the initiator's)"
            .to_string(),
    ];
    for (name, v) in [("after the rounds", Some(after)), ("fresh VM", fresh)] {
        let Some(v) = v else { continue };
        let flags = match &v.clock {
            Ok(c) if c.tsc_stable() => "KVM_CLOCK_TSC_STABLE".to_string(),
            Ok(_) => "not stable".to_string(),
            Err(e) => format!("KVM_GET_CLOCK failed: {e}"),
        };
        let bits: Vec<&str> = v
            .pages
            .iter()
            .map(|p| {
                if p.flags & PVCLOCK_TSC_STABLE_BIT != 0 {
                    "1"
                } else {
                    "0"
                }
            })
            .collect();
        out.push(format!(
            "  {name}: {flags}; PVCLOCK_TSC_STABLE_BIT per vCPU {}",
            bits.join(" ")
        ));
        for p in pairs(v) {
            out.push(format!(
                "    {:>6}  [{}, {}]  shortest RTT {}",
                format!("{},{}", p.a, p.b),
                n(p.lower_ns),
                n(p.upper_ns),
                n(p.shortest_round_trip_ns)
            ));
        }
    }
    out
}

/// In words: how the pairs of test `h` on `vcpus` vCPUs agree.
fn agreement(h: &Handoff, vcpus: u32) -> String {
    let p = &pairs_of(h);
    if p.is_empty() {
        return "no pair's kvmclocks were measured".into();
    }
    match p.iter().max_by_key(|x| x.apart()) {
        Some(w) if w.differ() => kvmclocks_apart_words(w.a, w.b, w.apart(), w.lower_ns, w.upper_ns),
        _ if h.all_pairs => format!(
            "every pair's kvmclocks agree within ±{} ns",
            n(worst_bound(p))
        ),
        _ => format!(
            "vCPU 0's kvmclock agrees with each other vCPU's within ±{} ns ({})",
            n(worst_bound(p)),
            one_clock::scope(h, vcpus)
        ),
    }
}

/// Every vCPU's exact offset relative to vCPU 0 in ns at its TSC's rate
/// (`None` where unknown): what stale pages would put its kvmclock at.
fn offsets_ns(v: &ClockView) -> Vec<Option<f64>> {
    let base = v.states.first().and_then(|s| s.offset);
    v.states
        .iter()
        .map(|s| {
            let rel = s.offset?.wrapping_sub(base?) as i64;
            cycles_to_ns_at(i128::from(rel), s.tsc_khz)
        })
        .collect()
}

/// Whether the worst pair's kvmclock difference is the vCPUs' exact TSC
/// offsets' difference in ns (within the pair's bound and a ns of
/// rounding): then each vCPU's kvmclock follows its own TSC. Empty when it is
/// not, or the offsets are unknown.
fn follows_offsets(p: &[ClockPair], v: &ClockView) -> String {
    let Some(w) = p.iter().max_by_key(|x| x.apart()) else {
        return String::new();
    };
    let (Some(a), Some(b)) = (v.states.get(w.a as usize), v.states.get(w.b as usize)) else {
        return String::new();
    };
    let (Some(oa), Some(ob)) = (a.offset, b.offset) else {
        return String::new();
    };
    let rel = ob.wrapping_sub(oa) as i64;
    let Some(rel_ns) = crate::units::cycles_to_ns_at(i128::from(rel), b.tsc_khz) else {
        return String::new();
    };
    let mid = (w.lower_ns as f64 + w.upper_ns as f64) / 2.0;
    let half = (w.upper_ns as f64 - w.lower_ns as f64) / 2.0;
    if (mid - rel_ns).abs() <= half + 1.0 {
        format!(
            ": that is their exact TSC offsets' difference (vCPU {}'s minus vCPU {}'s: {} \
             cycles, {} ns), so each vCPU's kvmclock follows its own TSC",
            w.b,
            w.a,
            n(rel),
            n(rel_ns.round() as i64)
        )
    } else {
        String::new()
    }
}

/// What measurably goes with a master clock that is off: the host's
/// clocksource not being the TSC (KVM needs it), the vCPUs' exact TSC
/// offsets differing (KVM matches TSCs before it trusts one snapshot).
fn off_because(v: &ClockView, clocksource: Option<&str>) -> String {
    let mut why = Vec::new();
    if let Some(c) = clocksource.filter(|c| *c != "tsc") {
        why.push(format!("the host clocksource is {c}, not tsc"));
    }
    let offsets: Vec<u64> = v.states.iter().filter_map(|s| s.offset).collect();
    if offsets.len() == v.states.len() && offsets.len() > 1 {
        // Offsets are two's complement: relative to vCPU 0's they are signed.
        let rel: Vec<i128> = offsets
            .iter()
            .map(|o| i128::from(o.wrapping_sub(offsets[0]) as i64))
            .collect();
        let spread = rel.iter().max().unwrap_or(&0) - rel.iter().min().unwrap_or(&0);
        if spread != 0 {
            why.push(format!(
                "the vCPUs' exact TSC offsets differ by up to {} cycles",
                n(u64::try_from(spread).unwrap_or(u64::MAX))
            ));
        }
    }
    if why.is_empty() {
        "what turned it off is not measurable here (clocksource tsc, equal offsets or none \
         read)"
            .into()
    } else {
        format!("measured with it: {}", why.join("; "))
    }
}

/// Check 9 from the view after the rounds (and the fresh VM's), the host's
/// clocksource and flavour: a PASS must exclude what stale pages would
/// show by the exact offsets.
pub fn judge(
    vcpus: u32,
    after: &ClockView,
    fresh: Option<&ClockView>,
    clocksource: Option<&str>,
    flavor: KvmFlavor,
) -> Finding {
    judge_with(vcpus, after, fresh, (clocksource, flavor), true)
}

/// Check 9's judge for vCPUs whose offsets predict nothing of their
/// kvmclocks (check 12: vCPUs at different rates, no guest write): a PASS
/// needs the bound within the 100 us floor.
pub fn judge_unpredicted(
    vcpus: u32,
    view: &ClockView,
    clocksource: Option<&str>,
    flavor: KvmFlavor,
) -> Finding {
    judge_with(vcpus, view, None, (clocksource, flavor), false)
}

fn judge_with(
    vcpus: u32,
    after: &ClockView,
    fresh: Option<&ClockView>,
    (clocksource, flavor): (Option<&str>, KvmFlavor),
    predict: bool,
) -> Finding {
    let p = pairs(after);
    let mut f = Finding::skip("one vCPU: no kvmclocks to compare")
        .with("after_rounds", view_values(after))
        .with("fresh", fresh.map(view_values));
    if vcpus < 2 {
        return f;
    }
    f.details = details(after, fresh);
    let fresh_text = fresh.map_or_else(String::new, |v| {
        let stable = v.clock.as_ref().is_ok_and(|c| c.tsc_stable());
        format!(
            "; the fresh VM: {}, {}",
            if stable {
                "KVM_CLOCK_TSC_STABLE"
            } else {
                "not stable"
            },
            agreement(&v.handoff, vcpus)
        )
    });
    let clock = match &after.clock {
        Ok(c) => c,
        Err(e) => {
            f.set(Verdict::Undecided, format!("KVM_GET_CLOCK failed: {e}"));
            return f;
        }
    };
    let bits: Vec<bool> = after
        .pages
        .iter()
        .map(|pg| pg.flags & PVCLOCK_TSC_STABLE_BIT != 0)
        .collect();
    let words = agreement(&after.handoff, vcpus);
    if !clock.tsc_stable() {
        let why = off_because(after, clocksource);
        f.set(
            Verdict::Skip,
            format!(
                "no master clock after the rounds (KVM_GET_CLOCK without KVM_CLOCK_TSC_STABLE: \
                 KVM makes no promise): {why}; {words}{fresh_text}"
            ),
        );
        return f;
    }
    let unstable_pages: Vec<String> = bits
        .iter()
        .enumerate()
        .filter(|(_, b)| !**b)
        .map(|(i, _)| i.to_string())
        .collect();
    if p.iter().any(ClockPair::differ) {
        f.set(
            Verdict::Fail,
            format!(
                "KVM reports KVM_CLOCK_TSC_STABLE (one kvmclock for every vCPU) after the \
                 guests' TSC writes, but {words}{}{fresh_text}{}",
                follows_offsets(&p, after),
                context(flavor)
            ),
        );
        return f;
    }
    if bits.len() < vcpus as usize {
        f.set(
            Verdict::Undecided,
            format!(
                "KVM reports KVM_CLOCK_TSC_STABLE, but {} of the {vcpus} vCPUs' kvmclock pages \
                 were read: the stable bit is not confirmed; {words}{fresh_text}",
                bits.len()
            ),
        );
        return f;
    }
    if !unstable_pages.is_empty() {
        f.set(
            Verdict::Undecided,
            format!(
                "KVM reports KVM_CLOCK_TSC_STABLE but vCPU(s) {}'s pages lack \
                 PVCLOCK_TSC_STABLE_BIT; {words}{fresh_text}",
                unstable_pages.join(", ")
            ),
        );
        return f;
    }
    let rel = offsets_ns(after);
    let predicted = predict.then_some(rel.as_slice());
    match one_clock::resolves(&after.handoff, vcpus, predicted, FLOOR_NS) {
        Ok(how) => f.set(
            Verdict::Pass,
            format!(
                "KVM_CLOCK_TSC_STABLE and every page's PVCLOCK_TSC_STABLE_BIT after the guests' \
                 TSC writes, and {words}{how}{fresh_text}"
            ),
        ),
        Err(why) => f.set(
            Verdict::Undecided,
            format!(
                "KVM reports a master clock and no pair contradicts it ({words}), but \
                 {why}{fresh_text}"
            ),
        ),
    }
    f
}

#[cfg(test)]
#[path = "master_clock_tests.rs"]
pub(crate) mod tests;
