//! The guest's TSC frequency: KVM_SET_TSC_KHZ / KVM_GET_TSC_KHZ on a VM
//! (kvm-ioctls wraps them only on a vCPU) and KVM's tolerance, with, for
//! whoever works with rates, what `--tsc-khz` asks for ([`TscRequest`],
//! defined in the options) and the arithmetic of a scaled TSC ([`Ratio`],
//! [`Scaling`], defined beside the TSC state that carries them), re-exported
//! here. The definitions sit in those leaves to keep import chains short.
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

pub use super::state::{Ratio, Scaling};
pub use crate::options::{fmt_ppm, FrequencySetting, SetVia, TscRequest};
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_tsc_runs_at_the_scaled_rate_or_the_hosts_and_catches_up_only_without_scaling() {
        let host = 2_000_000;
        let scaling = |tsc_control| Scaling {
            host_khz: host,
            tsc_control,
            tolerance_ppm: 250,
        };
        let (yes, no) = (scaling(true), scaling(false));
        assert_eq!(yes.running_khz(1_000_000), 1_000_000, "scaled");
        assert_eq!(
            no.running_khz(4_000_000),
            host,
            "catch-up runs at the host's"
        );
        assert_eq!(yes.running_khz(2_000_400), host, "within the tolerance");
        assert!(no.catches_up(4_000_000));
        assert!(!yes.catches_up(4_000_000), "scaled, not caught up");
        assert!(!no.catches_up(2_000_400), "within the tolerance");
        assert!(!no.catches_up(1_000_000), "below: refused, not caught up");
        assert_eq!(Scaling::default().running_khz(1_234), 1_234, "host unknown");
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
