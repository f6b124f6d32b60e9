//! What a readback yields and how it fails: one vCPU's TSC state
//! ([`TscState`]), where its exact offset came from ([`OffsetSource`]),
//! [`TscError`], the host's own TSC and the MSR numbers, and how a scaled
//! TSC runs against the host's ([`Ratio`], [`Scaling`]).
//! A leaf, so that whoever keeps a TSC state needs nothing of KVM.

use serde::{Deserialize, Serialize};
use vmm_sys_util::errno;

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
    /// rate beyond KVM's tolerance: `Ratio::effective`);
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
            .saturating_add(r.scale_error(self.mid()))
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
            return (
                d,
                self.estimate_error().saturating_add(base.estimate_error()),
            );
        }
        let r = self.ratio();
        let between = i128::from(self.mid()) - i128::from(base.mid());
        let tsc = i128::from(self.tsc) - i128::from(base.tsc);
        let d = (tsc - r.scale(between)).rem_euclid(1i128 << 64) as u64 as i64;
        let half = |s: &TscState| s.host_after.wrapping_sub(s.host_before).div_ceil(2);
        let err = r
            .scale_up(half(self))
            .saturating_add(r.scale_up(half(base)))
            .saturating_add(r.scale_error(between.unsigned_abs().min(u128::from(u64::MAX)) as u64));
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

/// How a vCPU's TSC runs against the host's: `guest_khz / host_khz` where
/// KVM scales, 1:1 where it does not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Ratio {
    /// The guest's rate, kHz (0: unknown, taken as the host's).
    pub guest_khz: u32,
    /// The host's rate as KVM knows it, kHz (0: unknown, taken as the guest's).
    pub host_khz: u32,
}

impl Ratio {
    /// 1:1.
    pub const ONE: Ratio = Ratio {
        guest_khz: 0,
        host_khz: 0,
    };

    /// The ratio a vCPU whose KVM_GET_TSC_KHZ is `guest_khz` really runs at
    /// on a host of `host_khz`: scaled only when KVM can scale
    /// (`tsc_control`: KVM_CAP_TSC_CONTROL) and the rate lies beyond its
    /// tolerance; else 1:1 (unscaled, or served by catch-up).
    pub fn effective(
        guest_khz: u32,
        host_khz: u32,
        tsc_control: bool,
        tolerance_ppm: u32,
    ) -> Ratio {
        let off_ppm = |g: u32, h: u32| {
            (i128::from(g) - i128::from(h)).unsigned_abs() * 1_000_000 / u128::from(h.max(1))
        };
        if tsc_control && host_khz != 0 && off_ppm(guest_khz, host_khz) > u128::from(tolerance_ppm)
        {
            Ratio {
                guest_khz,
                host_khz,
            }
        } else {
            Ratio::ONE
        }
    }

    /// Whether host and guest cycles are the same.
    pub fn is_one(self) -> bool {
        self.guest_khz == 0 || self.host_khz == 0 || self.guest_khz == self.host_khz
    }

    /// `host` host cycles in guest cycles, rounded to the nearest.
    pub fn scale(self, host: i128) -> i128 {
        if self.is_one() {
            return host;
        }
        let (g, h) = (i128::from(self.guest_khz), i128::from(self.host_khz));
        (2 * host * g + h).div_euclid(2 * h)
    }

    /// `host` host cycles in guest cycles, rounded up (for error bars).
    pub fn scale_up(self, host: u64) -> u64 {
        if self.is_one() {
            return host;
        }
        let v = (u128::from(host) * u128::from(self.guest_khz)).div_ceil(u128::from(self.host_khz));
        u64::try_from(v).unwrap_or(u64::MAX)
    }

    /// A bound on how far [`Ratio::scale`] of a host interval of `span`
    /// cycles can be from what KVM's fixed-point arithmetic makes of it:
    /// the ratio's truncation (under 2^-32 relative), both products'
    /// truncation and this function's rounding. 0 when unscaled.
    pub fn scale_error(self, span: u64) -> u64 {
        if self.is_one() {
            return 0;
        }
        (span >> 32) + 3
    }

    /// The ratio in millionths (1,000,000 when 1:1).
    pub fn ppm(self) -> u64 {
        if self.is_one() {
            return 1_000_000;
        }
        (u64::from(self.guest_khz) * 1_000_000 + u64::from(self.host_khz) / 2)
            / u64::from(self.host_khz)
    }
}

/// What decides whether KVM scales a vCPU's TSC: the host's rate as KVM
/// knows it, whether KVM can scale (KVM_CAP_TSC_CONTROL) and its
/// tolerance. The same for every vCPU of a VM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Scaling {
    /// The host's TSC rate as KVM knows it (what a vCPU gets unless set), kHz.
    pub host_khz: u32,
    /// KVM_CAP_TSC_CONTROL: KVM can scale.
    pub tsc_control: bool,
    /// Rates this close to the host's are taken unscaled, ppm.
    pub tolerance_ppm: u32,
}

impl Scaling {
    /// How a vCPU whose KVM_GET_TSC_KHZ is `guest_khz` runs ([`Ratio::effective`]).
    pub fn ratio(&self, guest_khz: u32) -> Ratio {
        Ratio::effective(
            guest_khz,
            self.host_khz,
            self.tsc_control,
            self.tolerance_ppm,
        )
    }

    /// Whether KVM scales a vCPU whose KVM_GET_TSC_KHZ is `guest_khz`
    /// ([`crate::tsc::TscState::scaled`]).
    pub fn scales(&self, guest_khz: u32) -> bool {
        !self.ratio(guest_khz).is_one()
    }

    /// The rate a vCPU whose KVM_GET_TSC_KHZ is `guest_khz` runs its TSC
    /// at between guest entries, kHz, as [`TscState::running_khz`]: the
    /// rate where KVM scales (or the host's is unknown), else the host's.
    pub fn running_khz(&self, guest_khz: u32) -> u32 {
        if self.scales(guest_khz) || self.host_khz == 0 {
            guest_khz
        } else {
            self.host_khz
        }
    }

    /// Whether KVM serves `guest_khz` by catch-up: no TSC scaling, a rate
    /// above the host's beyond the tolerance. The TSC then runs at the
    /// host's rate between guest entries and KVM moves it forward (never
    /// back) at entries, towards where `guest_khz` would have taken it.
    pub fn catches_up(&self, guest_khz: u32) -> bool {
        !self.tsc_control
            && guest_khz > self.host_khz
            && !Ratio::effective(guest_khz, self.host_khz, true, self.tolerance_ppm).is_one()
    }
}
