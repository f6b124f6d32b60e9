//! The TSC-frequency family of checks (10-13): what KVM_SET_TSC_KHZ does to
//! a guest's TSC and kvmclock, measured on VMs of their own once per
//! `check` run ([`measure`]) and judged by pure judges:
//!
//! - 10 `tsc-frequency`: rates below and above the host's, per vCPU and
//!   (KVM_CAP_VM_TSC_CONTROL) per VM: accepted or refused as KVM documents
//!   for this host, KVM_GET_TSC_KHZ agreeing, and the guest's TSC running at
//!   the rate KVM took, measured by the guest against host brackets;
//! - 11 `kvmclock-frequency`: each page's multiplier and shift stand for the
//!   rate the TSC runs at, kvmclock runs at the host's real time whatever
//!   the TSC's rate, and runs on across a vCPU's change of rate;
//! - 12 `mixed-frequency`: vCPUs of one VM at different rates, against what
//!   KVM_GET_CLOCK and each page's stable bit promise (check 9's judge);
//! - 13 `scaled-rendezvous`: the rendezvous on a scaled TSC, the offsets,
//!   TSC_ADJUST and the bracketed estimate agreeing in scaled units.
//!
//! What KVM documents (arch/x86/kvm/x86.c, `kvm_set_tsc_khz`): a rate within
//! `tsc_tolerance_ppm` of the host's is taken unscaled; beyond it KVM
//! scales where it can (KVM_CAP_TSC_CONTROL); without scaling it serves a
//! higher rate by catch-up (the TSC set forward at every guest entry) and
//! refuses a lower one. [`expect`] says which applies to a rate on this
//! host; the judges compare it with what was measured.

mod measure;
pub mod rate;
#[cfg(test)]
pub mod testdata;

pub use measure::measure;

use serde::Serialize;

use super::clock_view::ClockView;
use crate::session::GuestRead;
use crate::tsc::frequency::{fmt_ppm, FrequencySetting, Ratio, Scaling, SetVia};
use crate::tsc::TscState;
use rate::{Bracketed, RateBound};

/// What KVM documents for a rate on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    /// Within KVM's tolerance: accepted, the TSC at the host's rate.
    Unscaled,
    /// Beyond it, with TSC scaling: accepted, the TSC at the asked rate.
    Scaled,
    /// Above the host's without scaling: accepted, served by catch-up.
    CatchUp,
    /// Below the host's without scaling: refused.
    Refused,
}

/// What KVM documents for `khz` on a host `scaling` describes.
pub fn expect(khz: u32, scaling: &Scaling) -> Expect {
    if Ratio::effective(khz, scaling.host_khz, true, scaling.tolerance_ppm).is_one() {
        Expect::Unscaled
    } else if scaling.tsc_control {
        Expect::Scaled
    } else if khz > scaling.host_khz {
        Expect::CatchUp
    } else {
        Expect::Refused
    }
}

impl Expect {
    /// The rate the guest's TSC must run at against the host's, as a ratio,
    /// for an accepted `khz` (catch-up: in the long run).
    pub fn rate(self, khz: u32, host_khz: u32) -> f64 {
        match self {
            Expect::Unscaled => 1.0,
            _ => f64::from(khz) / f64::from(host_khz.max(1)),
        }
    }

    /// The rate a page's multiplier must stand for, kHz: the rate the TSC
    /// runs at between guest entries (the host's unless KVM scales).
    pub fn page_khz(self, khz: u32, host_khz: u32) -> u32 {
        match self {
            Expect::Scaled => khz,
            _ => host_khz,
        }
    }

    /// In words.
    pub fn words(self) -> &'static str {
        match self {
            Expect::Unscaled => "within KVM's tolerance: taken unscaled",
            Expect::Scaled => "scaled (KVM_CAP_TSC_CONTROL)",
            Expect::CatchUp => "no TSC scaling, above the host's rate: served by catch-up",
            Expect::Refused => "no TSC scaling, below the host's rate: refused",
        }
    }
}

/// One rate set on a fresh one-vCPU VM and what followed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    /// Where KVM_SET_TSC_KHZ went.
    pub scope: SetVia,
    /// The rate asked for, in millionths of the host's.
    pub ratio_ppm: u64,
    /// And in kHz.
    pub khz: u32,
    /// What KVM_SET_TSC_KHZ said.
    pub set: Result<(), String>,
    /// KVM_GET_TSC_KHZ of the vCPU afterwards.
    pub reported: Option<u32>,
    /// The vCPU's state before the set (per-vCPU scope).
    pub before: Option<TscState>,
    /// Its state after the set (per-VM: right after creation).
    pub after: Option<TscState>,
    /// A guest read before the set (per-vCPU scope).
    pub pre: Option<GuestRead>,
    /// Guest reads after it, a pause apart ([`measure`]'s pause).
    pub reads: Vec<GuestRead>,
}

impl Probe {
    /// The rate asked, as a ratio of the host's (`0.5x`).
    pub fn ratio_words(&self) -> String {
        format!("{}x", fmt_ppm(self.ratio_ppm))
    }

    /// Where it was set, in words.
    pub fn scope_words(&self) -> &'static str {
        match self.scope {
            SetVia::Vm => "per VM",
            SetVia::Vcpu => "per vCPU",
        }
    }

    /// The first and the last read after the set, the tightest bracket of
    /// each end when a pause holds several.
    pub fn ends(&self) -> Option<(GuestRead, GuestRead)> {
        let width = |r: &&GuestRead| r.host_after.saturating_sub(r.host_before);
        let half = self.reads.len() / 2;
        let first = self.reads.get(..half.max(1))?.iter().min_by_key(width)?;
        let last = self.reads.get(half..)?.iter().min_by_key(width)?;
        (first.host_after < last.host_before).then_some((*first, *last))
    }

    /// The guest TSC's rate against the host's over the reads after the
    /// set, for `expect` (catch-up: the widened bound).
    pub fn tsc_rate(&self, expect: Expect) -> Option<RateBound> {
        let (f, l) = self.ends()?;
        let b = |r: GuestRead| Bracketed {
            value: r.tsc,
            before: r.host_before,
            after: r.host_after,
        };
        match expect {
            // A TSC KVM takes unscaled or scales is linear in the host's,
            // up to KVM's fixed-point rounding (2 cycles, the ratio's
            // truncation over the interval).
            Expect::Unscaled | Expect::Scaled => {
                let span = l.host_after.saturating_sub(f.host_before);
                RateBound::linear(b(f), b(l), (span >> 32) + 2)
            }
            Expect::CatchUp | Expect::Refused => RateBound::catch_up(b(f), b(l), 2),
        }
    }

    /// kvmclock's rate against the host's CLOCK_MONOTONIC_RAW over the
    /// reads after the set (`None` without a registered page).
    pub fn kvmclock_rate(&self) -> Option<RateBound> {
        let (f, l) = self.ends()?;
        if f.version == 0 || l.version == 0 {
            return None;
        }
        let b = |r: GuestRead| Bracketed {
            value: r.kvmclock_ns,
            before: r.mono_before_ns,
            after: r.mono_after_ns,
        };
        // kvmclock rounds each reading down to a ns.
        RateBound::linear(b(f), b(l), 2)
    }
}

/// Two vCPUs of one VM at different rates (check 12).
#[derive(Clone, Debug, PartialEq)]
pub struct Mixed {
    /// The rate set on each vCPU, kHz (vCPU 0 keeps the host's).
    pub khz: Vec<u32>,
    /// What KVM_SET_TSC_KHZ said for each vCPU it was asked of.
    pub set: Vec<Result<(), String>>,
    /// kvmclock afterwards: KVM_GET_CLOCK, the pages, the vCPUs' kvmclocks
    /// against each other.
    pub view: ClockView,
}

/// The rendezvous on a scaled TSC (check 13).
#[derive(Clone, Debug, Default)]
pub struct ScaledRounds {
    /// How the VM's rate was set.
    pub setting: Option<FrequencySetting>,
    /// The rounds run.
    pub rounds: u32,
    /// vCPU-rounds compared (offset delta against TSC_ADJUST delta).
    pub vcpu_rounds: u64,
    /// Of those, where the offset did not move by the TSC_ADJUST delta.
    pub mismatches: u64,
    /// vCPU-rounds with a write.
    pub wrote: u64,
    /// Of those, decided as taken effect.
    pub honoured: u64,
    /// The first disagreements between the methods, in words.
    pub disagreements: Vec<String>,
    /// The control: the vCPU-round where the bracketed estimate with the
    /// host interval left unscaled misses the exact offsets' move by the
    /// most: (that miss, the scaled estimate's miss, its error bar), cycles.
    pub control: Option<(i64, i64, u64)>,
}

/// Everything checks 10-13 judge.
#[derive(Clone, Debug, Default)]
pub struct FrequencyEvidence {
    /// KVM's scaling on this host.
    pub scaling: Scaling,
    /// KVM_CAP_VM_TSC_CONTROL.
    pub vm_control: bool,
    /// Every rate tried (check 10; check 11 reads their kvmclocks).
    pub probes: Vec<Probe>,
    /// The mixed-rate VM (check 12).
    pub mixed: Option<Mixed>,
    /// The scaled rendezvous (check 13; `None` where KVM cannot scale).
    pub scaled: Option<ScaledRounds>,
    /// What could not be measured, and why.
    pub errors: Vec<String>,
    /// Wall time of each part of the measurement, seconds (where a check
    /// run's time goes).
    pub seconds: Vec<(String, f64)>,
}
