//! What a readback yields and how it fails: one vCPU's TSC state
//! ([`TscState`]), where its exact offset came from ([`OffsetSource`]),
//! [`TscError`], the host's own TSC and the MSR numbers.
//! A leaf, so that whoever keeps a TSC state needs nothing of KVM.

use serde::{Deserialize, Serialize};
use vmm_sys_util::errno;

use super::frequency::Ratio;

/// IA32_TSC.
pub const MSR_IA32_TSC: u32 = 0x10;
/// IA32_TSC_ADJUST.
pub const MSR_IA32_TSC_ADJUST: u32 = 0x3b;

/// A failed readback.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum TscError {
    /// KVM_GET_MSRS: {0}
    GetMsrs(String),
    /// KVM_SET_MSRS: {0}
    SetMsrs(String),
    /// KVM_GET_DEVICE_ATTR(KVM_VCPU_TSC_OFFSET): {0}
    GetOffset(#[source] errno::Error),
    /// KVM_SET_DEVICE_ATTR(KVM_VCPU_TSC_OFFSET): {0}
    SetOffset(#[source] errno::Error),
    /// KVM_GET_TSC_KHZ: {0}
    GetTscKhz(String),
    /// KVM_SET_TSC_KHZ: {0}
    SetTscKhz(String),
    /// reading the TSC offset from KVM's debugfs: {0}
    Debugfs(#[source] std::io::Error),
}

/// One vCPU's TSC state as KVM reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TscState {
    /// IA32_TSC_ADJUST.
    pub adjust: u64,
    /// IA32_TSC, as of the moment of the ioctl.
    pub tsc: u64,
    /// Host TSC just before reading IA32_TSC.
    pub host_before: u64,
    /// Host TSC just after.
    pub host_after: u64,
    /// The vCPU's exact TSC offset, where the kernel shows it (see
    /// [`OffsetSource`]).
    pub offset: Option<u64>,
    /// The vCPU's TSC frequency in kHz.
    pub tsc_khz: u32,
    /// The host's TSC rate as KVM knows it, kHz (0: unknown, as on the host
    /// backend).
    pub host_khz: u32,
    /// Whether KVM scales this vCPU's TSC from the host's (TSC scaling and a
    /// rate beyond KVM's tolerance: [`crate::tsc::frequency::Ratio::effective`]);
    /// then the bracket (host cycles) enters the estimates multiplied by
    /// `tsc_khz / host_khz`.
    pub scaled: bool,
}

impl TscState {
    /// How this vCPU's TSC runs against the host's.
    pub fn ratio(&self) -> Ratio {
        if self.scaled {
            Ratio {
                guest_khz: self.tsc_khz,
                host_khz: self.host_khz,
            }
        } else {
            Ratio::ONE
        }
    }

    /// The rate this vCPU's TSC advances at between guest entries, kHz:
    /// KVM_GET_TSC_KHZ where KVM scales (or nothing else is known), the
    /// host's where it does not (a rate within KVM's tolerance, or one it
    /// serves by catch-up, which sets the TSC forward at guest entries only).
    pub fn running_khz(&self) -> u32 {
        if self.scaled || self.host_khz == 0 {
            self.tsc_khz
        } else {
            self.host_khz
        }
    }

    /// The bracket's midpoint (host cycles).
    fn mid(&self) -> u64 {
        self.host_before / 2 + self.host_after / 2 + (self.host_before & self.host_after & 1)
    }

    /// The vCPU's TSC offset estimated from the bracketed read: guest TSC minus
    /// the bracket's midpoint in guest cycles (wrapping, as offsets are).
    pub fn estimated_offset(&self) -> u64 {
        let mid = self.ratio().scale(i128::from(self.mid()));
        (i128::from(self.tsc) - mid).rem_euclid(1i128 << 64) as u64
    }

    /// The estimate's error bar, in (guest) cycles: half the bracket's
    /// width, scaled, plus the scaling's own error over the whole host TSC.
    pub fn estimate_error(&self) -> u64 {
        let r = self.ratio();
        r.scale_up(self.host_after.wrapping_sub(self.host_before).div_ceil(2))
            + r.scale_error(self.mid())
    }

    /// This vCPU's offset minus `base`'s (the same vCPU earlier, or another
    /// one), estimated from the two bracketed reads, with its error bar.
    /// At one ratio the host interval between the reads is scaled, not
    /// each read's host TSC, so the scaling's error stays that of the
    /// interval.
    pub fn offset_minus(&self, base: &TscState) -> (i64, u64) {
        if self.ratio() != base.ratio() {
            let d = self
                .estimated_offset()
                .wrapping_sub(base.estimated_offset()) as i64;
            return (d, self.estimate_error() + base.estimate_error());
        }
        let r = self.ratio();
        let between = i128::from(self.mid()) - i128::from(base.mid());
        let tsc = i128::from(self.tsc) - i128::from(base.tsc);
        let d = (tsc - r.scale(between)).rem_euclid(1i128 << 64) as u64 as i64;
        let half = |s: &TscState| s.host_after.wrapping_sub(s.host_before).div_ceil(2);
        let err = r.scale_up(half(self))
            + r.scale_up(half(base))
            + r.scale_error(between.unsigned_abs().min(u128::from(u64::MAX)) as u64);
        (d, err)
    }
}

/// The host's TSC, ordered against earlier loads.
pub fn host_rdtsc() -> u64 {
    // SAFETY: lfence and rdtsc are available on every x86-64 CPU and have no
    // memory effects.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}

/// Where the exact per-vCPU TSC offsets come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffsetSource {
    /// The vCPU attribute KVM_VCPU_TSC_OFFSET (Linux >= 5.16).
    KvmVcpuTscOffset,
    /// KVM's debugfs, `<pid>-<vm fd>/vcpu<N>/tsc-offset` (any kernel, as
    /// root with debugfs mounted).
    Debugfs,
    /// Neither: no exact offsets; the bracketed reads are the only estimate.
    None,
    /// The host backend: each thread's own offset, exact by construction
    /// (no KVM involved).
    HostThread,
}

impl OffsetSource {
    /// How reports name it.
    pub fn describe(self) -> &'static str {
        match self {
            OffsetSource::KvmVcpuTscOffset => "KVM_VCPU_TSC_OFFSET (exact)",
            OffsetSource::Debugfs => "KVM debugfs tsc-offset (exact)",
            OffsetSource::None => {
                "none: no KVM_VCPU_TSC_OFFSET (Linux < 5.16) and no readable KVM debugfs"
            }
            OffsetSource::HostThread => "the host threads' own offsets (exact, no KVM)",
        }
    }

    /// Its short name in verdict reasons.
    pub fn short(self) -> &'static str {
        match self {
            OffsetSource::KvmVcpuTscOffset => "KVM_VCPU_TSC_OFFSET",
            OffsetSource::Debugfs => "KVM debugfs",
            OffsetSource::None => "no exact offsets",
            OffsetSource::HostThread => "per-thread offsets",
        }
    }

    /// No exact source (the default of documents that do not say).
    pub fn none() -> OffsetSource {
        OffsetSource::None
    }

    /// Whether the offsets it gives are exact.
    pub fn exact(self) -> bool {
        self != OffsetSource::None
    }
}
