//! The guest's TSC frequency: what `--tsc-khz` asks for ([`TscRequest`]),
//! KVM_SET_TSC_KHZ / KVM_GET_TSC_KHZ on a VM (kvm-ioctls wraps them only on
//! a vCPU), and the arithmetic of a scaled TSC ([`Ratio`]).
//!
//! With TSC scaling KVM runs a vCPU's TSC at `guest = host * ratio + offset`,
//! where `ratio` is the fixed-point `guest_khz / host_khz` (at least 32
//! fractional bits: 32 on AMD, 48 on Intel), truncated, and the product
//! truncated too. Offsets, TSC_ADJUST and the values a guest writes are in
//! guest (scaled) cycles; a host TSC interval enters them multiplied by the
//! ratio. KVM scales only when it can (KVM_CAP_TSC_CONTROL) and when the
//! asked rate lies outside its tolerance (`kvm.tsc_tolerance_ppm`, 250 ppm
//! by default); otherwise the guest's TSC runs at the host's rate whatever
//! KVM_GET_TSC_KHZ reports ([`Ratio::effective`]).

use kvm_ioctls::VmFd;
use serde::{Deserialize, Serialize};
use vmm_sys_util::errno;
use vmm_sys_util::ioctl::{ioctl, ioctl_with_val};

/// The raw VM ioctls.
mod ioctls {
    #![allow(missing_docs)]
    use vmm_sys_util::ioctl_io_nr;

    const KVMIO: u32 = 0xAE;
    ioctl_io_nr!(KVM_SET_TSC_KHZ, KVMIO, 0xa2);
    ioctl_io_nr!(KVM_GET_TSC_KHZ, KVMIO, 0xa3);
}

/// KVM's default `tsc_tolerance_ppm` (arch/x86/kvm/x86.c): a rate this close
/// to the host's is taken unscaled.
pub const DEFAULT_TOLERANCE_PPM: u32 = 250;

/// Where KVM shows its tolerance.
pub const TOLERANCE_PARAM: &str = "/sys/module/kvm/parameters/tsc_tolerance_ppm";

/// KVM's tolerance as this host sets it (the module parameter), else the
/// default.
pub fn tolerance_ppm() -> u32 {
    std::fs::read_to_string(TOLERANCE_PARAM)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_TOLERANCE_PPM)
}

/// KVM_SET_TSC_KHZ on the VM (KVM_CAP_VM_TSC_CONTROL): the rate of the
/// vCPUs created after it.
pub fn set_vm_khz(vm: &VmFd, khz: u32) -> Result<(), errno::Error> {
    // SAFETY: KVM_SET_TSC_KHZ takes its argument by value and touches no
    // memory of this process; the fd is a VM fd.
    let ret = unsafe { ioctl_with_val(vm, ioctls::KVM_SET_TSC_KHZ(), u64::from(khz)) };
    if ret < 0 {
        return Err(errno::Error::last());
    }
    Ok(())
}

/// KVM_GET_TSC_KHZ on the VM: the rate new vCPUs get (the host's unless
/// set), as KVM knows the host's TSC.
pub fn get_vm_khz(vm: &VmFd) -> Result<u32, errno::Error> {
    // SAFETY: KVM_GET_TSC_KHZ has no argument and returns the value; the fd
    // is a VM fd.
    let ret = unsafe { ioctl(vm, ioctls::KVM_GET_TSC_KHZ()) };
    if ret <= 0 {
        return Err(errno::Error::last());
    }
    u32::try_from(ret).map_err(|_| errno::Error::new(libc::ERANGE))
}

/// A guest TSC frequency asked for: kHz, or a ratio of the host's rate in
/// parts per million (`0.5x` is 500,000 ppm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TscRequest {
    /// This many kHz.
    Khz(u32),
    /// This many millionths of the host's rate.
    RatioPpm(u64),
}

impl TscRequest {
    /// Parses `KHZ` (a whole number of kHz) or `Rx` (a ratio of the host's
    /// rate with up to six decimals, e.g. `0.5x`, `2x`, `1.0002x`).
    pub fn parse(text: &str) -> Result<TscRequest, String> {
        let t = text.trim();
        if let Some(r) = t.strip_suffix('x').or_else(|| t.strip_suffix('X')) {
            let ppm = parse_ppm(r).ok_or_else(|| {
                format!("'{text}' is not a ratio of the host's rate (e.g. 0.5x, 2x, 1.0002x)")
            })?;
            if ppm == 0 || ppm > 64_000_000 {
                return Err(format!(
                    "'{text}': the ratio must be above 0 and at most 64x (KVM's limit is lower)"
                ));
            }
            return Ok(TscRequest::RatioPpm(ppm));
        }
        match t.parse::<u32>() {
            Ok(0) => Err("a TSC frequency of 0 kHz cannot be set".into()),
            Ok(k) => Ok(TscRequest::Khz(k)),
            Err(_) => Err(format!(
                "'{text}' is neither kHz (e.g. 2000000) nor a ratio of the host's rate (e.g. 0.5x)"
            )),
        }
    }

    /// The kHz asked for on a host of `host_khz` (a ratio rounded to the
    /// nearest kHz, at least 1).
    pub fn resolve(self, host_khz: u32) -> u32 {
        match self {
            TscRequest::Khz(k) => k,
            TscRequest::RatioPpm(ppm) => {
                let k = (u128::from(host_khz) * u128::from(ppm) + 500_000) / 1_000_000;
                u32::try_from(k).unwrap_or(u32::MAX).max(1)
            }
        }
    }

    /// As the option is written.
    pub fn describe(self) -> String {
        match self {
            TscRequest::Khz(k) => format!("{k} kHz"),
            TscRequest::RatioPpm(ppm) => format!("{}x the host's rate", fmt_ppm(ppm)),
        }
    }
}

/// `digits[.decimals]` as millionths (at most six decimals).
fn parse_ppm(s: &str) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() || frac.len() > 6 {
        return None;
    }
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !digits(frac) {
        return None;
    }
    let int: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac: u64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<6}").parse().ok()?
    };
    int.checked_mul(1_000_000)?.checked_add(frac)
}

/// Millionths as a decimal ratio without trailing zeros (`500000` -> `0.5`).
pub fn fmt_ppm(ppm: u64) -> String {
    let s = format!("{}.{:06}", ppm / 1_000_000, ppm % 1_000_000);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
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
}

/// How KVM_SET_TSC_KHZ was applied to a VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetVia {
    /// On the VM before its vCPUs were created (KVM_CAP_VM_TSC_CONTROL).
    Vm,
    /// On every vCPU after its creation.
    Vcpu,
}

/// The guest TSC frequency a VM was created with (`--tsc-khz`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrequencySetting {
    /// What was asked for.
    pub asked: TscRequest,
    /// The rate set, kHz.
    pub khz: u32,
    /// The host's rate as KVM knows it, kHz.
    pub host_khz: u32,
    /// Where KVM_SET_TSC_KHZ went.
    pub via: SetVia,
    /// After a per-vCPU set that changed the ratio, every vCPU's TSC was
    /// written 0 by the host (KVM_SET_MSRS, as QEMU does after setting the
    /// rate): KVM keeps the offset it gave the vCPU at creation and changes
    /// only the multiplier, so the TSC would otherwise jump.
    pub resynced: bool,
    /// Whether KVM scales at this rate ([`Ratio::effective`]): KVM_CAP_TSC_CONTROL
    /// and a rate beyond its tolerance.
    pub scaled: bool,
}

impl FrequencySetting {
    /// In words, for reports.
    pub fn describe(&self) -> String {
        let via = match self.via {
            SetVia::Vm => "KVM_SET_TSC_KHZ on the VM",
            SetVia::Vcpu if self.resynced => {
                "KVM_SET_TSC_KHZ on every vCPU, then KVM_SET_MSRS(IA32_TSC = 0)"
            }
            SetVia::Vcpu => "KVM_SET_TSC_KHZ on every vCPU",
        };
        let how = if self.scaled {
            format!(
                "scaled, {}x the host's {} kHz",
                fmt_ppm(
                    Ratio {
                        guest_khz: self.khz,
                        host_khz: self.host_khz
                    }
                    .ppm()
                ),
                self.host_khz
            )
        } else {
            format!(
                "not scaled by KVM (the host's {} kHz: no TSC scaling or within its tolerance)",
                self.host_khz
            )
        };
        format!("{} kHz ({}), {via}; {how}", self.khz, self.asked.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_as_khz_or_ratio() {
        assert_eq!(TscRequest::parse("2000000"), Ok(TscRequest::Khz(2_000_000)));
        assert_eq!(TscRequest::parse("0.5x"), Ok(TscRequest::RatioPpm(500_000)));
        assert_eq!(TscRequest::parse("2x"), Ok(TscRequest::RatioPpm(2_000_000)));
        assert_eq!(TscRequest::parse(".25x"), Ok(TscRequest::RatioPpm(250_000)));
        assert_eq!(
            TscRequest::parse("1.0002X"),
            Ok(TscRequest::RatioPpm(1_000_200))
        );
        for bad in ["0", "x", "0x", "-1", "1.5", "1.0000001x", "abc", "", "65x"] {
            assert!(TscRequest::parse(bad).is_err(), "{bad}");
        }
        let e = TscRequest::parse("fast").expect_err("not a rate");
        assert!(e.contains("kHz") && e.contains("0.5x"), "{e}");
    }

    #[test]
    fn ratios_resolve_against_the_host_to_the_nearest_khz() {
        assert_eq!(TscRequest::RatioPpm(500_000).resolve(2_596_125), 1_298_063);
        assert_eq!(
            TscRequest::RatioPpm(2_000_000).resolve(2_596_125),
            5_192_250
        );
        assert_eq!(TscRequest::Khz(123).resolve(2_596_125), 123);
        assert_eq!(TscRequest::RatioPpm(1).resolve(1), 1, "never 0 kHz");
        assert_eq!(fmt_ppm(500_000), "0.5");
        assert_eq!(fmt_ppm(2_000_000), "2");
        assert_eq!(fmt_ppm(1_000_200), "1.0002");
        assert_eq!(
            TscRequest::RatioPpm(500_000).describe(),
            "0.5x the host's rate"
        );
    }

    #[test]
    fn kvm_scales_only_beyond_its_tolerance_and_with_tsc_control() {
        let h = 2_000_000;
        assert_eq!(Ratio::effective(1_000_000, h, true, 250).ppm(), 500_000);
        assert!(
            Ratio::effective(1_000_000, h, false, 250).is_one(),
            "no TSC_CONTROL"
        );
        assert!(
            Ratio::effective(2_000_400, h, true, 250).is_one(),
            "200 ppm: within"
        );
        assert!(
            !Ratio::effective(2_000_600, h, true, 250).is_one(),
            "300 ppm: beyond"
        );
        assert!(Ratio::effective(h, h, true, 250).is_one());
    }

    #[test]
    fn scaling_rounds_to_the_nearest_cycle_and_bounds_kvms_fixed_point() {
        let r = Ratio {
            guest_khz: 1_000_000,
            host_khz: 3_000_000,
        };
        assert_eq!(r.scale(3), 1);
        assert_eq!(r.scale(4), 1);
        assert_eq!(r.scale(5), 2);
        assert_eq!(r.scale(-5), -2);
        assert_eq!(r.scale_up(4), 2);
        assert_eq!(Ratio::ONE.scale(-7), -7);
        assert_eq!(Ratio::ONE.scale_error(u64::MAX), 0);
        // KVM's own arithmetic at 32 fractional bits, over a day of cycles.
        let frac = 32;
        let fixed = (1u128 << frac) * 1_000_000 / 3_000_000;
        let kvm = |h: u128| (h * fixed) >> frac;
        for (a, b) in [(0u64, 1u64), (1_000, 999_999_999), (7, 259_612_500_000_000)] {
            let truth = kvm(u128::from(b)) as i128 - kvm(u128::from(a)) as i128;
            let ours = r.scale(i128::from(b - a));
            assert!(
                (truth - ours).unsigned_abs() <= u128::from(r.scale_error(b - a)),
                "{a}..{b}: KVM {truth}, scale {ours}"
            );
        }
    }
}
