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
use crate::tsc::{self, host_rdtsc, MSR_IA32_TSC, MSR_IA32_TSC_ADJUST};
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

/// The one TSC frequency of every saved vCPU.
fn common_khz(snap: &Snapshot) -> Result<u32, RestoreError> {
    let first = snap.vcpus.first().map_or(0, |v| v.tsc.tsc_khz);
    match snap.vcpus.iter().find(|v| v.tsc.tsc_khz != first) {
        Some(v) => Err(RestoreError::Frequencies(first, v.tsc.tsc_khz)),
        None => Ok(first),
    }
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
    let shift = offsets::documented_shift(&src, &dst, d.tsc_khz)?;
    d.shift_cycles = Some(i64::try_from(shift).map_err(|_| {
        RestoreError::Clock(format!(
            "the offsets would shift by {shift} cycles: more than 2^63, the clocks are unusable"
        ))
    })?);
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

/// KVM_SET_MSRS of TSC_ADJUST, then of IA32_TSC = the saved value plus the
/// host time elapsed since it was read (host TSC cycles: no TSC scaling, the
/// guest's TSC runs at the host's rate), `passes` times over every vCPU.
fn msr(
    vm: &Vm,
    snap: &Snapshot,
    passes: usize,
    m: &mut MsrWrites,
    halfway: &mut dyn FnMut() -> Result<(), RestoreError>,
) -> Result<(), RestoreError> {
    for (i, (fd, v)) in vm.vcpus.iter().zip(&snap.vcpus).enumerate() {
        set_msr(i as u32, fd, MSR_IA32_TSC_ADJUST, v.tsc.adjust)?;
        m.adjust_written.push(v.tsc.adjust);
    }
    for pass in 0..passes {
        m.passes.push(Vec::with_capacity(snap.vcpus.len()));
        for (i, (fd, v)) in vm.vcpus.iter().zip(&snap.vcpus).enumerate() {
            let read_at = v.tsc.host_before / 2
                + v.tsc.host_after / 2
                + (v.tsc.host_before & v.tsc.host_after & 1);
            let host_before = host_rdtsc();
            let value = v.tsc.tsc.wrapping_add(host_before.wrapping_sub(read_at));
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
        assert!(w.asked_for((-4_100i64) as u64));
        assert!(w.asked_for((-4_000i64) as u64));
        assert!(!w.asked_for((-3_999i64) as u64));
        assert!(!w.asked_for((-4_101i64) as u64));
    }
}
