//! The methods under test: what this kernel supports, and how each puts
//! the saved TSC state into the fresh vCPUs (recording every value it
//! wrote, so the report can say what KVM made of it).

use kvm_bindings::{kvm_clock_data, KVM_CLOCK_REALTIME};
use kvm_ioctls::VcpuFd;
use serde::Serialize;

use super::error::RestoreError;
use super::offsets::{self, NEEDED_CLOCK_FLAGS};
use super::options::Method;
use super::snapshot::{get_clock, Snapshot};
pub use super::trace::{Documented, MsrWrites, Trace, TscWrite};
use crate::tsc::frequency::Ratio;
use crate::tsc::{self, host_rdtsc, TscState, MSR_IA32_TSC, MSR_IA32_TSC_ADJUST};
use crate::vstate::vm::{Vm, HIDE_CAP_ENV};

/// What the kernel offers the methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Support {
    /// The vCPU attribute KVM_VCPU_TSC_OFFSET (Linux >= 5.16).
    pub offset_attr: bool,
    /// KVM_CAP_ADJUST_CLOCK: the KVM_CLOCK_* flags KVM_GET_CLOCK can report.
    pub adjust_clock: i32,
}

impl Support {
    /// From what KVM says; the test-only [`HIDE_CAP_ENV`] may name
    /// `KVM_VCPU_TSC_OFFSET`, `KVM_CLOCK_REALTIME` or `KVM_CLOCK_HOST_TSC`
    /// to treat as missing (to test the paths of older kernels).
    pub fn new(offset_attr: bool, adjust_clock: i32) -> Support {
        let mut s = Support {
            offset_attr,
            adjust_clock,
        };
        match std::env::var(HIDE_CAP_ENV).unwrap_or_default().as_str() {
            "KVM_VCPU_TSC_OFFSET" => s.offset_attr = false,
            "KVM_CLOCK_REALTIME" => s.adjust_clock &= !(KVM_CLOCK_REALTIME as i32),
            "KVM_CLOCK_HOST_TSC" => s.adjust_clock &= !(kvm_bindings::KVM_CLOCK_HOST_TSC as i32),
            _ => {}
        }
        s
    }

    /// What `method` needs that this kernel lacks, by name.
    pub fn missing(&self, method: Method) -> Vec<&'static str> {
        if method != Method::Documented {
            return Vec::new();
        }
        let mut m = Vec::new();
        if !self.offset_attr {
            m.push("KVM_VCPU_TSC_OFFSET");
        }
        let flags = u32::try_from(self.adjust_clock).unwrap_or(0);
        m.extend(offsets::missing_flags(flags & NEEDED_CLOCK_FLAGS));
        m
    }

    /// Why `method` cannot run here, if it cannot.
    pub fn why_not(&self, method: Method) -> Option<String> {
        let missing = self.missing(method);
        if missing.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.offset_attr {
            parts.push("the vCPU attribute KVM_VCPU_TSC_OFFSET (Linux >= 5.16)".to_string());
        }
        let flags: Vec<&str> = missing
            .iter()
            .copied()
            .filter(|m| m.starts_with("KVM_CLOCK_"))
            .collect();
        if !flags.is_empty() {
            parts.push(format!(
                "the {} flag(s) of KVM_GET_CLOCK (KVM_CAP_ADJUST_CLOCK = {})",
                flags.join(" and "),
                self.adjust_clock
            ));
        }
        Some(format!(
            "this kernel lacks {}, which the {} method needs",
            parts.join(" and "),
            method.name()
        ))
    }
}

/// The one TSC frequency of every saved vCPU (KVM_GET_TSC_KHZ).
pub fn common_khz(snap: &Snapshot) -> Result<u32, RestoreError> {
    let first = snap.vcpus.first().map_or(0, |v| v.tsc.tsc_khz);
    match snap.vcpus.iter().find(|v| v.tsc.tsc_khz != first) {
        Some(v) => Err(RestoreError::Frequencies(first, v.tsc.tsc_khz)),
        None => Ok(first),
    }
}

/// The ratio KVM runs `vm`'s TSC at: its vCPU 0's KVM_GET_TSC_KHZ (the
/// destination is created at the saved rate, every vCPU alike) against the
/// host's rate, 1:1 where KVM does not scale.
fn destination_ratio(vm: &Vm) -> Result<Ratio, RestoreError> {
    let Some(fd) = vm.vcpus.first() else {
        return Ok(Ratio::ONE);
    };
    let khz = fd.get_tsc_khz().map_err(|e| RestoreError::Tsc {
        vcpu: 0,
        error: tsc::TscError::GetTscKhz(e.to_string()),
    })?;
    Ok(vm.scaling.ratio(khz))
}

fn set_msr(vcpu: u32, fd: &VcpuFd, index: u32, value: u64) -> Result<(), RestoreError> {
    tsc::set_msr(fd, index, value).map_err(|error| RestoreError::Tsc { vcpu, error })
}

/// Restores the TSC state of `snap` into `vm`'s (not yet running) vCPUs by
/// `method`, recording into `trace` as it goes (so a failure keeps what was
/// done). `halfway` runs once vCPU 0's TSC state is restored (the test-only
/// failure injection).
pub fn apply(
    method: Method,
    vm: &Vm,
    snap: &Snapshot,
    trace: &mut Option<Trace>,
    halfway: &mut dyn FnMut() -> Result<(), RestoreError>,
) -> Result<(), RestoreError> {
    match method {
        Method::Documented => {
            let t = trace.insert(Trace::Documented(Documented::default()));
            match t {
                Trace::Documented(d) => documented(vm, snap, d, halfway),
                Trace::Msr(_) => Ok(()),
            }
        }
        Method::Msr | Method::MsrTwice => {
            let t = trace.insert(Trace::Msr(MsrWrites::default()));
            let passes = if method == Method::MsrTwice { 2 } else { 1 };
            match t {
                Trace::Msr(m) => msr(vm, snap, passes, m, halfway),
                Trace::Documented(_) => Ok(()),
            }
        }
    }
}

/// vcpu.rst, "TSC offset", steps 4-7, and TSC_ADJUST by KVM_SET_MSRS.
fn documented(
    vm: &Vm,
    snap: &Snapshot,
    d: &mut Documented,
    halfway: &mut dyn FnMut() -> Result<(), RestoreError>,
) -> Result<(), RestoreError> {
    let src = snap.clock.clone().map_err(RestoreError::Clock)?;
    src.complete("source")?;
    d.tsc_khz = common_khz(snap)?;
    d.host_khz = vm.scaling.host_khz;
    d.ratio = destination_ratio(vm)?;
    let set = kvm_clock_data {
        clock: src.clock_ns,
        realtime: src.realtime_ns,
        flags: KVM_CLOCK_REALTIME,
        ..Default::default()
    };
    d.set_clock_ns = set.clock;
    d.set_realtime_ns = set.realtime;
    d.set_flags = set.flags;
    d.set_host_before = host_rdtsc();
    let r = vm.fd.set_clock(&set);
    d.set_host_after = host_rdtsc();
    r.map_err(|e| RestoreError::Kvm("KVM_SET_CLOCK(KVM_CLOCK_REALTIME)", e))?;
    let dst = get_clock(&vm.fd).map_err(RestoreError::Clock)?;
    d.destination = Some(dst);
    dst.complete("destination")?;
    let shift = offsets::documented_shift(&src, &dst, d.tsc_khz, d.ratio)?;
    let cycles = |shift: i128| {
        i64::try_from(shift).map_err(|_| {
            RestoreError::Clock(format!(
                "the offsets would shift by {shift} cycles: more than 2^63, the clocks are unusable"
            ))
        })
    };
    d.shift_cycles = Some(cycles(shift)?);
    d.literal_shift_cycles = Some(cycles(offsets::literal_shift(&src, &dst, d.tsc_khz)?)?);
    for (i, (fd, v)) in vm.vcpus.iter().zip(&snap.vcpus).enumerate() {
        let vcpu = i as u32;
        let ofs_src = v.tsc.offset.ok_or(RestoreError::NoOffset(vcpu))?;
        let ofs = offsets::shifted(ofs_src, shift);
        tsc::set_offset(fd, ofs).map_err(|error| RestoreError::Tsc { vcpu, error })?;
        d.offsets_written.push(ofs);
        set_msr(vcpu, fd, MSR_IA32_TSC_ADJUST, v.tsc.adjust)?;
        d.adjust_written.push(v.tsc.adjust);
        if i == 0 {
            halfway()?;
        }
    }
    Ok(())
}

/// The IA32_TSC the msr methods write at host TSC `now`: the saved value
/// plus the host time since it was read (the bracket's midpoint), in guest
/// cycles at `ratio`.
pub fn msr_value(saved: &TscState, now: u64, ratio: Ratio) -> u64 {
    let read_at =
        saved.host_before / 2 + saved.host_after / 2 + (saved.host_before & saved.host_after & 1);
    let since = ratio.scale(i128::from(now.wrapping_sub(read_at)));
    offsets::shifted(saved.tsc, since)
}

/// KVM_SET_MSRS of TSC_ADJUST, then of IA32_TSC = the saved value plus the
/// host time elapsed since it was read, in guest cycles (the host TSC
/// interval multiplied by the destination's ratio, as KVM's `guest = host *
/// ratio + offset` runs it), `passes` times over every vCPU.
fn msr(
    vm: &Vm,
    snap: &Snapshot,
    passes: usize,
    m: &mut MsrWrites,
    halfway: &mut dyn FnMut() -> Result<(), RestoreError>,
) -> Result<(), RestoreError> {
    m.ratio = destination_ratio(vm)?;
    for (i, (fd, v)) in vm.vcpus.iter().zip(&snap.vcpus).enumerate() {
        set_msr(i as u32, fd, MSR_IA32_TSC_ADJUST, v.tsc.adjust)?;
        m.adjust_written.push(v.tsc.adjust);
    }
    for pass in 0..passes {
        m.passes.push(Vec::with_capacity(snap.vcpus.len()));
        for (i, (fd, v)) in vm.vcpus.iter().zip(&snap.vcpus).enumerate() {
            let host_before = host_rdtsc();
            let value = msr_value(&v.tsc, host_before, m.ratio);
            let r = set_msr(i as u32, fd, MSR_IA32_TSC, value);
            let host_after = host_rdtsc();
            r?;
            if let Some(p) = m.passes.last_mut() {
                p.push(TscWrite {
                    value,
                    host_before,
                    host_after,
                });
            }
            if pass == 0 && i == 0 {
                halfway()?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_method_names_what_an_old_kernel_lacks() {
        let old = Support {
            offset_attr: false,
            adjust_clock: 2,
        };
        assert_eq!(
            old.missing(Method::Documented),
            [
                "KVM_VCPU_TSC_OFFSET",
                "KVM_CLOCK_REALTIME",
                "KVM_CLOCK_HOST_TSC"
            ]
        );
        let why = old.why_not(Method::Documented).expect("not supported");
        assert!(
            why.contains("KVM_VCPU_TSC_OFFSET (Linux >= 5.16)")
                && why.contains("KVM_CLOCK_REALTIME and KVM_CLOCK_HOST_TSC")
                && why.contains("KVM_CAP_ADJUST_CLOCK = 2"),
            "{why}"
        );
        assert_eq!(old.why_not(Method::Msr), None, "msr needs nothing extra");
        let new = Support {
            offset_attr: true,
            adjust_clock: 14,
        };
        assert_eq!(new.why_not(Method::Documented), None);
        let no_host_tsc = Support {
            offset_attr: true,
            adjust_clock: 6,
        };
        assert_eq!(
            no_host_tsc.missing(Method::Documented),
            ["KVM_CLOCK_HOST_TSC"]
        );
    }

    #[test]
    fn a_write_asks_for_the_offset_of_its_bracket() {
        let w = TscWrite {
            value: 1_000,
            host_before: 5_000,
            host_after: 5_100,
        };
        // value - host: between 1000 - 5100 and 1000 - 5000 (negative, wrapped).
        let one = Ratio::ONE;
        assert!(w.asked_for((-4_100i64) as u64, one));
        assert!(w.asked_for((-4_000i64) as u64, one));
        assert!(!w.asked_for((-3_999i64) as u64, one));
        assert!(!w.asked_for((-4_101i64) as u64, one));
    }

    /// With scaling KVM subtracts the host TSC multiplied by the ratio, in
    /// its fixed point (within the scale error of the host TSC).
    #[test]
    fn a_scaled_write_asks_for_the_scaled_offset_of_its_bracket() {
        let half = Ratio {
            guest_khz: 1_000_000,
            host_khz: 2_000_000,
        };
        let w = TscWrite {
            value: 1_000,
            host_before: 5_000,
            host_after: 5_100,
        };
        // value - host / 2: between 1000 - 2550 and 1000 - 2500, widened by
        // the scale error (3 cycles at these TSCs).
        assert_eq!(w.asked_offset(half), ((-1_553i64) as u64, 56));
        assert!(w.asked_for((-1_550i64) as u64, half));
        assert!(w.asked_for((-1_497i64) as u64, half));
        assert!(!w.asked_for((-1_496i64) as u64, half));
        assert!(
            !w.asked_for((-4_100i64) as u64, half),
            "the unscaled offset"
        );
        // Where KVM computes it from a host TSC of a week (2.6 GHz): its
        // 32-bit fraction is within the error of the exact ratio.
        let ratio = Ratio {
            guest_khz: 1_298_063,
            host_khz: 2_596_125,
        };
        let h = 2_596_125_000 * 604_800;
        let fixed = (1_298_063u128 << 32) / 2_596_125;
        let kvm = ((u128::from(h) * fixed) >> 32) as u64;
        let w = TscWrite {
            value: 77,
            host_before: h - 10,
            host_after: h + 10,
        };
        assert!(w.asked_for(77u64.wrapping_sub(kvm), ratio));
    }

    /// The msr methods' value: the saved TSC plus the host time since its
    /// read in guest cycles (a read at 1,000..1,002 host cycles written at
    /// 2,001, 1,000 host cycles later: 500 guest cycles at 0.5, 2,000 at 2).
    #[test]
    fn the_time_since_the_read_enters_the_value_scaled() {
        let saved = TscState {
            tsc: u64::MAX - 99,
            host_before: 1_000,
            host_after: 1_002,
            ..TscState::default()
        };
        let at = |guest_khz| Ratio {
            guest_khz,
            host_khz: 2_000_000,
        };
        assert_eq!(msr_value(&saved, 2_001, Ratio::ONE), 900);
        assert_eq!(msr_value(&saved, 2_001, at(1_000_000)), 400);
        assert_eq!(msr_value(&saved, 2_001, at(4_000_000)), 1_900);
    }
}
