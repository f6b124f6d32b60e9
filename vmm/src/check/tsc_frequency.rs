//! Check 10, `tsc-frequency`: KVM_SET_TSC_KHZ at half and twice the host's
//! rate and within KVM's tolerance, on a fresh vCPU and (where KVM has
//! KVM_CAP_VM_TSC_CONTROL) on a fresh VM: every rate is accepted or refused
//! as KVM documents for this host ([`expect`]), KVM_GET_TSC_KHZ reports the
//! rate taken, and the guest's TSC runs at it, measured by the guest
//! against host brackets ([`Probe::tsc_rate`]; KVM's own numbers decide
//! nothing).
//!
//! FAIL: a rate refused that KVM documents taking, or accepted and then not
//! the guest's rate (or not what KVM_GET_TSC_KHZ says). UNDECIDED: a bound
//! too wide to tell the asked rate from the host's, or no rate other than
//! the host's seen at all (the positive control). PASS otherwise.

use serde_json::json;

use super::evidence::{Check, Context, Evidence};
use super::frequency::rate::RateBound;
use super::frequency::{expect, Expect, FrequencyEvidence, Probe};
use super::judge::context;
use super::report::{Finding, Verdict};
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::tsc::frequency::Scaling;
use crate::units::fmt_int as n;

/// Check 10.
pub struct TscFrequency;

impl Check for TscFrequency {
    fn number(&self) -> u32 {
        10
    }
    fn id(&self) -> &'static str {
        "tsc-frequency"
    }
    fn title(&self) -> &'static str {
        "KVM_SET_TSC_KHZ below, above and near the host's rate, per vCPU and per VM: accepted or \
         refused as KVM documents, KVM_GET_TSC_KHZ agreeing, the guest's TSC running at the rate \
         taken"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        Ok(match &ev.frequency {
            Some(f) => judge(f, ev.env.host.kvm_flavor),
            None => super::judge::missing("TSC-frequency probes"),
        })
    }
}

/// One probe, judged.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeVerdict {
    /// Its verdict.
    pub verdict: Verdict,
    /// Why, in words.
    pub words: String,
    /// What KVM documents for it.
    pub expect: Expect,
    /// The guest TSC's rate against the host's, as measured.
    pub rate: Option<RateBound>,
    /// Whether a rate other than the host's was seen (the positive control).
    pub off_host_rate: bool,
}

/// Judges one probe against what KVM documents for its rate.
pub fn judge_probe(p: &Probe, scaling: &Scaling) -> ProbeVerdict {
    let exp = expect(p.khz, scaling);
    let head = format!(
        "{} {} ({} kHz; {})",
        p.ratio_words(),
        p.scope_words(),
        n(p.khz),
        exp.words()
    );
    let mut out = ProbeVerdict {
        verdict: Verdict::Pass,
        words: String::new(),
        expect: exp,
        rate: None,
        off_host_rate: false,
    };
    let (verdict, words) = match (&p.set, exp) {
        (Err(e), Expect::Refused) => (
            Verdict::Pass,
            format!("{head}: refused, as documented ({e})"),
        ),
        (Err(e), _) => (Verdict::Fail, format!("{head}: KVM refused it ({e})")),
        (Ok(()), _) if p.reported != Some(p.khz) => (
            Verdict::Fail,
            format!(
                "{head}: accepted, but KVM_GET_TSC_KHZ then reports {}",
                p.reported
                    .map_or("nothing".into(), |k| format!("{} kHz", n(k)))
            ),
        ),
        (Ok(()), _) => {
            out.rate = p.tsc_rate(exp);
            accepted(&head, p, exp, scaling.host_khz, &mut out)
        }
    };
    out.verdict = verdict;
    out.words = words;
    out
}

/// An accepted rate: does the guest's TSC run at it?
fn accepted(
    head: &str,
    p: &Probe,
    exp: Expect,
    host_khz: u32,
    out: &mut ProbeVerdict,
) -> (Verdict, String) {
    let Some(rate) = out.rate else {
        return (
            Verdict::Undecided,
            format!("{head}: accepted; the guest's reads gave no rate (their brackets overlap)"),
        );
    };
    // A rate KVM should have refused and took: it passes if the guest's
    // TSC really runs at it.
    let want = match exp {
        Expect::Refused => Expect::Scaled.rate(p.khz, host_khz),
        e => e.rate(p.khz, host_khz),
    };
    let seen = format!(
        "the guest's TSC ran at {} of the host's rate",
        rate.describe(4)
    );
    if !rate.contains(want) {
        let not = if exp == Expect::Refused {
            "although KVM cannot scale here and should have refused it"
        } else {
            "not"
        };
        return (
            Verdict::Fail,
            format!("{head}: accepted and reported, but {seen}, {not} {want:.4}"),
        );
    }
    if want != 1.0 && rate.contains(1.0) {
        return (
            Verdict::Undecided,
            format!("{head}: {seen}, which holds both {want:.4} and the host's rate"),
        );
    }
    out.off_host_rate = want != 1.0;
    let cannot_tell =
        exp == Expect::Unscaled && rate.contains(Expect::Scaled.rate(p.khz, host_khz));
    (
        Verdict::Pass,
        format!(
            "{head}: {seen}{}{}",
            if cannot_tell {
                " (as close to the asked rate as this bound can tell)"
            } else {
                ""
            },
            rescaled(p)
        ),
    )
}

/// What a per-vCPU set did to a TSC that had run: KVM keeps the vCPU's
/// offset and changes only its multiplier, so a scaled TSC jumps to the
/// host's TSC times the new ratio plus the old offset (below zero, i.e.
/// wrapped, when the ratio shrank). Empty when the offset moved, was not
/// read, or the TSC's rate did not change.
pub fn rescaled(p: &Probe) -> String {
    let (Some(b), Some(a)) = (p.before, p.after) else {
        return String::new();
    };
    if b.offset.is_none() || a.offset != b.offset || a.ratio() == b.ratio() {
        return String::new();
    }
    format!(
        "; its TSC went from {} to {} across the set with its offset unchanged ({}): KVM \
         changes only the multiplier, so the TSC is the host's times the new ratio plus the \
         offset given at creation",
        n(b.tsc as i64),
        n(a.tsc as i64),
        n(b.offset.unwrap_or(0) as i64)
    )
}

/// How KVM scales here, in words.
fn scaling_words(f: &FrequencyEvidence) -> String {
    format!(
        "host {} kHz, KVM_CAP_TSC_CONTROL {}, KVM_CAP_VM_TSC_CONTROL {}, tolerance {} ppm",
        n(f.scaling.host_khz),
        u8::from(f.scaling.tsc_control),
        u8::from(f.vm_control),
        f.scaling.tolerance_ppm
    )
}

/// The probes as table lines.
fn details(f: &FrequencyEvidence, judged: &[(&Probe, ProbeVerdict)]) -> Vec<String> {
    let mut out = vec![
        format!(
            "Check 10, each rate set ({}; rates are the guest TSC's against the host's)",
            scaling_words(f)
        ),
        format!(
            "  {:<8} {:>7} {:>11} {:<30} {:>11} {:<22} {:>7} {}",
            "scope", "asked", "kHz", "KVM documents", "GET_TSC_KHZ", "rate seen", "want", "verdict"
        ),
    ];
    for (p, v) in judged {
        let want = match v.expect {
            Expect::Refused if p.set.is_err() => "refused".to_string(),
            e => format!("{:.4}", e.rate(p.khz, f.scaling.host_khz)),
        };
        out.push(format!(
            "  {:<8} {:>7} {:>11} {:<30} {:>11} {:<22} {:>7} {}",
            p.scope_words(),
            p.ratio_words(),
            n(p.khz),
            v.expect.words().split(':').next().unwrap_or(""),
            match (&p.set, p.reported) {
                (Err(_), _) => "refused".to_string(),
                (Ok(()), Some(k)) => n(k),
                (Ok(()), None) => "-".into(),
            },
            v.rate.map_or("-".into(), |r| r.describe(4)),
            want,
            v.verdict.label()
        ));
    }
    out
}

/// Check 10 from every probe.
pub fn judge(f: &FrequencyEvidence, flavor: KvmFlavor) -> Finding {
    let judged: Vec<(&Probe, ProbeVerdict)> = f
        .probes
        .iter()
        .map(|p| (p, judge_probe(p, &f.scaling)))
        .collect();
    let mut finding = Finding::skip("no rate could be tried").with(
        "probes",
        judged
            .iter()
            .map(|(p, v)| {
                json!({
                    "scope": p.scope, "ratio_ppm": p.ratio_ppm, "khz": p.khz,
                    "set": p.set.as_ref().err(), "reported_khz": p.reported,
                    "expect": v.expect, "rate": v.rate, "verdict": v.verdict,
                })
            })
            .collect::<Vec<_>>(),
    );
    finding.value("host_khz", f.scaling.host_khz);
    finding.value("tsc_control", f.scaling.tsc_control);
    finding.value("vm_tsc_control", f.vm_control);
    finding.value("tolerance_ppm", f.scaling.tolerance_ppm);
    finding.value("measure_seconds", &f.seconds);
    if judged.is_empty() {
        finding.reason = format!("no rate could be tried: {}", f.errors.join("; "));
        return finding;
    }
    finding.details = details(f, &judged);
    let words = |v: Verdict| -> Vec<String> {
        judged
            .iter()
            .filter(|(_, j)| j.verdict == v)
            .map(|(_, j)| j.words.clone())
            .collect()
    };
    let per_vm = if f.vm_control {
        ""
    } else {
        "; per VM not tried: KVM_CAP_VM_TSC_CONTROL = 0"
    };
    let missing = if f.errors.is_empty() {
        String::new()
    } else {
        format!("; not measured: {}", f.errors.join("; "))
    };
    let (verdict, reason) = if !words(Verdict::Fail).is_empty() {
        (Verdict::Fail, words(Verdict::Fail).join("; "))
    } else if !words(Verdict::Undecided).is_empty() {
        (Verdict::Undecided, words(Verdict::Undecided).join("; "))
    } else if !judged.iter().any(|(_, j)| j.off_host_rate) {
        (
            Verdict::Undecided,
            "no rate other than the host's was seen in the guest (the positive control is \
             missing): every other rate was refused"
                .to_string(),
        )
    } else {
        (
            Verdict::Pass,
            format!(
                "every rate behaved as KVM documents for this host ({}): {}",
                scaling_words(f),
                words(Verdict::Pass).join("; ")
            ),
        )
    };
    let host = if verdict == Verdict::Fail {
        context(flavor)
    } else {
        String::new()
    };
    finding.set(verdict, format!("{reason}{per_vm}{missing}{host}"));
    finding
}

#[cfg(test)]
#[path = "tsc_frequency_tests.rs"]
mod tests;
