//! Check 11, `kvmclock-frequency`: kvmclock under a guest TSC rate that is
//! not the host's, from check 10's probes: each vCPU's pvclock page
//! converts its TSC at the rate the TSC runs at between guest entries (the
//! set rate where KVM scales, the host's where it does not: catch-up
//! re-anchors the page at every entry), kvmclock advances at the host's
//! real time (CLOCK_MONOTONIC_RAW, within NTP's slew) whatever the TSC's
//! rate, and runs on across a running vCPU's KVM_SET_TSC_KHZ (the guest
//! read its kvmclock just before the change and just after).
//!
//! FAIL: a page for another rate, kvmclock off real time, or a jump across
//! the change. UNDECIDED: no kvmclock, or no probe whose TSC ran off the
//! host's rate (the positive control: kvmclock keeping real time while the
//! TSC does not). PASS otherwise.

use serde_json::json;

use super::evidence::{Check, Context, Evidence};
use super::frequency::rate::{page_khz, page_khz_error, RateBound};
use super::frequency::{expect, FrequencyEvidence, Probe};
use super::judge::context;
use super::report::{Finding, Verdict};
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::session::GuestRead;
use crate::units::fmt_int as n;
use crate::units::NTP_MAX_PPM;

/// Check 11.
pub struct KvmclockFrequency;

impl Check for KvmclockFrequency {
    fn number(&self) -> u32 {
        11
    }
    fn id(&self) -> &'static str {
        "kvmclock-frequency"
    }
    fn title(&self) -> &'static str {
        "under a TSC rate that is not the host's, each pvclock page converts at the TSC's rate, \
         kvmclock keeps the host's real time, and runs on across a vCPU's KVM_SET_TSC_KHZ"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        Ok(match &ev.frequency {
            Some(f) => judge(f, ev.env.host.kvm_flavor),
            None => super::judge::missing("TSC-frequency probes"),
        })
    }
}

/// kvmclock across the change of rate: how far it jumped beyond the real
/// time that passed, ns (an interval, from the brackets), and the page's
/// versions before and after.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Across {
    /// The jump is at least this.
    pub lo_ns: i128,
    /// And at most this.
    pub hi_ns: i128,
    /// What may pass for no jump: NTP's slew of the real time that passed, and rounding.
    pub allowance_ns: i128,
    /// The page's version before the change.
    pub version_before: u32,
    /// And after.
    pub version_after: u32,
}

impl Across {
    /// From the read before the change and the first after it.
    pub fn of(pre: GuestRead, post: GuestRead) -> Across {
        let advance = i128::from(post.kvmclock_ns) - i128::from(pre.kvmclock_ns);
        let longest = i128::from(post.mono_after_ns) - i128::from(pre.mono_before_ns);
        let shortest = i128::from(post.mono_before_ns) - i128::from(pre.mono_after_ns);
        Across {
            lo_ns: advance - longest,
            hi_ns: advance - shortest,
            allowance_ns: longest.max(0) * i128::from(NTP_MAX_PPM) / 1_000_000 + 2,
            version_before: pre.version,
            version_after: post.version,
        }
    }

    /// Whether kvmclock jumped: no jump within the allowance fits.
    pub fn jumped(&self) -> bool {
        self.lo_ns > self.allowance_ns || self.hi_ns < -self.allowance_ns
    }

    /// The jump's middle, ns.
    pub fn mid_ns(&self) -> i128 {
        (self.lo_ns + self.hi_ns) / 2
    }
}

/// One probe's kvmclock, judged.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockVerdict {
    /// Its verdict.
    pub verdict: Verdict,
    /// Why, in words.
    pub words: String,
    /// The rate the last page converts at, kHz.
    pub page_khz: Option<f64>,
    /// The rate it must convert at, kHz.
    pub want_khz: u32,
    /// kvmclock against CLOCK_MONOTONIC_RAW.
    pub rate: Option<RateBound>,
    /// Across the change of rate (per-vCPU probes).
    pub across: Option<Across>,
    /// The TSC ran off the host's rate while kvmclock kept real time.
    pub control: bool,
}

/// Judges one accepted probe's kvmclock; `None` for a probe without
/// kvmclock reads (refused, or no page).
pub fn judge_probe(p: &Probe, f: &FrequencyEvidence) -> Option<ClockVerdict> {
    let last = *p.reads.last()?;
    if p.set.is_err() || last.version == 0 {
        return None;
    }
    let host = f.scaling.host_khz;
    let exp = expect(p.khz, &f.scaling);
    let want_khz = exp.page_khz(p.khz, host);
    let head = format!("{} {}", p.ratio_words(), p.scope_words());
    let mut fails = Vec::new();
    let page = page_khz(last.mul, last.shift);
    match page {
        Some(k)
            if (k - f64::from(want_khz)).abs() / f64::from(want_khz.max(1))
                <= page_khz_error(last.mul) + 2.0 / f64::from(want_khz.max(1)) => {}
        Some(k) => fails.push(format!(
            "its pvclock page converts at {} kHz, not the {} kHz its TSC runs at between entries \
             ({})",
            n(k.round() as i64),
            n(want_khz),
            exp.words()
        )),
        None => fails.push("its pvclock page has no multiplier".into()),
    }
    let rate = p.kvmclock_rate().map(|r| r.widen_ppm(NTP_MAX_PPM));
    if let Some(r) = rate.filter(|r| !r.contains(1.0)) {
        fails.push(format!("kvmclock ran at {} of real time", r.describe(4)));
    }
    let across = p
        .pre
        .zip(p.reads.first().copied())
        .map(|(a, b)| Across::of(a, b));
    if let Some(a) = across.filter(Across::jumped) {
        let wrapped = p.after.is_some_and(|s| (s.tsc as i64) < 0);
        fails.push(format!(
            "kvmclock jumped by {} ns across KVM_SET_TSC_KHZ (page version {} -> {}{}{})",
            n(a.mid_ns()),
            a.version_before,
            a.version_after,
            if a.version_before == a.version_after {
                ": the page was not updated"
            } else {
                ""
            },
            if wrapped {
                "; the TSC itself went below zero with the change: see check 10"
            } else {
                ""
            }
        ));
    }
    let tsc_off = p.tsc_rate(exp).is_some_and(|t| !t.contains(1.0));
    let control = tsc_off && rate.is_some_and(|r| r.contains(1.0));
    let (verdict, words) = if fails.is_empty() {
        let tsc = p.tsc_rate(exp).map_or(String::new(), |t| {
            format!(" while its TSC ran at {}", t.describe(4))
        });
        (
            Verdict::Pass,
            format!(
                "{head}: the page converts at {} kHz, kvmclock kept real time{tsc}{}",
                n(want_khz),
                if across.is_some() {
                    ", and ran on across the change"
                } else {
                    ""
                }
            ),
        )
    } else {
        (Verdict::Fail, format!("{head}: {}", fails.join(", ")))
    };
    Some(ClockVerdict {
        verdict,
        words,
        page_khz: page,
        want_khz,
        rate,
        across,
        control,
    })
}

fn details(judged: &[(&Probe, ClockVerdict)]) -> Vec<String> {
    let mut out = vec![
        "Check 11, each accepted rate's kvmclock (page rate from its mul/shift; kvmclock's rate \
         against CLOCK_MONOTONIC_RAW; the jump across the change, ns)"
            .to_string(),
        format!(
            "  {:<8} {:>9} {:>11} {:>11} {:<20} {:>16} {:>9} {}",
            "scope", "asked", "page kHz", "want kHz", "kvmclock rate", "jump", "version", "verdict"
        ),
    ];
    for (p, v) in judged {
        out.push(format!(
            "  {:<8} {:>9} {:>11} {:>11} {:<20} {:>16} {:>9} {}",
            p.scope_words(),
            p.ratio_words(),
            v.page_khz.map_or("-".into(), |k| n(k.round() as i64)),
            n(v.want_khz),
            v.rate.map_or("-".into(), |r| r.describe(4)),
            v.across.map_or("-".into(), |a| n(a.mid_ns())),
            v.across.map_or("-".into(), |a| format!(
                "{}->{}",
                a.version_before, a.version_after
            )),
            v.verdict.label()
        ));
    }
    out
}

/// Check 11 from check 10's probes.
pub fn judge(f: &FrequencyEvidence, flavor: KvmFlavor) -> Finding {
    let judged: Vec<(&Probe, ClockVerdict)> = f
        .probes
        .iter()
        .filter_map(|p| Some((p, judge_probe(p, f)?)))
        .collect();
    if judged.is_empty() {
        return if f.probes.iter().any(|p| p.set.is_ok()) {
            super::judge::no_kvmclock()
        } else {
            Finding::skip("no rate was accepted: no kvmclock to judge under one")
        };
    }
    let mut finding = Finding::pass("").with(
        "probes",
        judged
            .iter()
            .map(|(p, v)| {
                json!({
                    "scope": p.scope, "ratio_ppm": p.ratio_ppm, "page_khz": v.page_khz,
                    "want_khz": v.want_khz, "kvmclock_rate": v.rate, "across": v.across,
                    "control": v.control, "verdict": v.verdict,
                })
            })
            .collect::<Vec<_>>(),
    );
    finding.details = details(&judged);
    let of = |v: Verdict| -> Vec<&str> {
        judged
            .iter()
            .filter(|(_, j)| j.verdict == v)
            .map(|(_, j)| j.words.as_str())
            .collect()
    };
    if !of(Verdict::Fail).is_empty() {
        finding.set(
            Verdict::Fail,
            format!("{}{}", of(Verdict::Fail).join("; "), context(flavor)),
        );
    } else if !judged.iter().any(|(_, j)| j.control) {
        finding.set(
            Verdict::Undecided,
            format!(
                "no accepted rate made the TSC run off the host's rate, so kvmclock's keeping \
                 real time under one is not shown (the positive control); {}",
                of(Verdict::Pass).join("; ")
            ),
        );
    } else {
        finding.set(Verdict::Pass, of(Verdict::Pass).join("; "));
    }
    finding
}

#[cfg(test)]
#[path = "kvmclock_frequency_tests.rs"]
mod tests;
