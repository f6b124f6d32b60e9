//! Reading a vCPU's TSC state back through KVM, while it is outside KVM_RUN.
//!
//! Per vCPU: IA32_TSC_ADJUST (KVM_GET_MSRS), IA32_TSC bracketed by host TSC
//! reads (an error bar), the exact TSC offset where the kernel shows it
//! ([`OffsetSource`]: the KVM_VCPU_TSC_OFFSET attribute on Linux >= 5.16, else
//! KVM's debugfs) and KVM_GET_TSC_KHZ.

pub mod clock;
pub mod clock_points;
pub mod debugfs;
pub mod frequency;
pub mod host_clock;
pub mod rate;
mod state;

pub use state::{host_rdtsc, OffsetSource, TscError, TscState, MSR_IA32_TSC, MSR_IA32_TSC_ADJUST};

use std::path::Path;

use state::Scaling;

use kvm_bindings::{kvm_device_attr, kvm_msr_entry, Msrs};
use kvm_ioctls::VcpuFd;
use vmm_sys_util::errno;
use vmm_sys_util::ioctl::ioctl_with_ref;

/// The raw ioctls kvm-ioctls 0.25 wraps only on aarch64.
mod ioctls {
    #![allow(missing_docs)]
    use kvm_bindings::kvm_device_attr;
    use vmm_sys_util::ioctl_iow_nr;

    const KVMIO: u32 = 0xAE;
    ioctl_iow_nr!(KVM_SET_DEVICE_ATTR, KVMIO, 0xe1, kvm_device_attr);
    ioctl_iow_nr!(KVM_GET_DEVICE_ATTR, KVMIO, 0xe2, kvm_device_attr);
    ioctl_iow_nr!(KVM_HAS_DEVICE_ATTR, KVMIO, 0xe3, kvm_device_attr);
}
use ioctls::{KVM_GET_DEVICE_ATTR, KVM_HAS_DEVICE_ATTR, KVM_SET_DEVICE_ATTR};

/// vCPU attribute group KVM_VCPU_TSC_CTRL.
pub const KVM_VCPU_TSC_CTRL: u32 = 0;
/// Attribute KVM_VCPU_TSC_OFFSET in that group.
pub const KVM_VCPU_TSC_OFFSET: u64 = 0;

fn attr(addr: u64) -> kvm_device_attr {
    kvm_device_attr {
        flags: 0,
        group: KVM_VCPU_TSC_CTRL,
        attr: KVM_VCPU_TSC_OFFSET,
        addr,
    }
}

/// Whether this vCPU has the KVM_VCPU_TSC_OFFSET attribute (Linux >= 5.16).
pub fn has_offset_attr(vcpu: &VcpuFd) -> bool {
    let a = attr(0);
    // SAFETY: KVM_HAS_DEVICE_ATTR only reads the attribute struct, which lives
    // for the whole call; the fd is a vCPU fd.
    let ret = unsafe { ioctl_with_ref(vcpu, KVM_HAS_DEVICE_ATTR(), &a) };
    ret == 0
}

/// The vCPU's TSC offset through KVM_GET_DEVICE_ATTR.
pub fn get_offset(vcpu: &VcpuFd) -> Result<u64, TscError> {
    let mut value: u64 = 0;
    let a = attr(&mut value as *mut u64 as u64);
    // SAFETY: KVM writes 8 bytes to `addr`, which points at `value`, alive and
    // writable for the whole call.
    let ret = unsafe { ioctl_with_ref(vcpu, KVM_GET_DEVICE_ATTR(), &a) };
    if ret != 0 {
        return Err(TscError::GetOffset(errno::Error::last()));
    }
    Ok(value)
}

/// Sets the vCPU's TSC offset through KVM_SET_DEVICE_ATTR: exactly, without
/// touching TSC_ADJUST and without KVM's one-second matching of host TSC
/// writes (Documentation/virt/kvm/devices/vcpu.rst, "TSC offset").
pub fn set_offset(vcpu: &VcpuFd, offset: u64) -> Result<(), TscError> {
    let a = attr(&offset as *const u64 as u64);
    // SAFETY: KVM reads 8 bytes from `addr`, which points at `offset`, alive
    // for the whole call; it writes nothing back.
    let ret = unsafe { ioctl_with_ref(vcpu, KVM_SET_DEVICE_ATTR(), &a) };
    if ret != 0 {
        return Err(TscError::SetOffset(errno::Error::last()));
    }
    Ok(())
}

/// Test-only: the name of an offset source to use instead of the best one
/// (`debugfs` or `none`), to exercise the fallbacks on a kernel that has the
/// attribute.
pub const OFFSET_SOURCE_ENV: &str = "TSC_RENDEZVOUS_TEST_OFFSET_SOURCE";

/// Reads one vCPU's exact offset, from wherever this kernel shows it.
#[derive(Debug)]
pub enum OffsetReader {
    /// KVM_GET_DEVICE_ATTR(KVM_VCPU_TSC_OFFSET).
    Attr,
    /// The vCPU's debugfs file.
    Debugfs(debugfs::OffsetFile),
    /// No exact source.
    None,
}

impl OffsetReader {
    /// The best source for every vCPU of a VM: the attribute when vCPU 0 has
    /// it, else every vCPU's debugfs file under `vm_dir` when all of them can
    /// be read, else none.
    pub fn choose(vcpus: &[VcpuFd], vm_dir: Option<&Path>) -> Vec<OffsetReader> {
        let forced = std::env::var(OFFSET_SOURCE_ENV).unwrap_or_default();
        let attr = forced.is_empty() && vcpus.first().is_some_and(has_offset_attr);
        if attr {
            return vcpus.iter().map(|_| OffsetReader::Attr).collect();
        }
        if let (Some(dir), false) = (vm_dir, forced == "none") {
            let files: Result<Vec<_>, _> = (0..vcpus.len() as u32)
                .map(|i| debugfs::OffsetFile::open(dir, i))
                .collect();
            match files {
                Ok(f) => return f.into_iter().map(OffsetReader::Debugfs).collect(),
                Err(e) => log::info!("no exact TSC offsets from debugfs ({}): {e}", dir.display()),
            }
        }
        vcpus.iter().map(|_| OffsetReader::None).collect()
    }

    /// Which source this is.
    pub fn source(&self) -> OffsetSource {
        match self {
            OffsetReader::Attr => OffsetSource::KvmVcpuTscOffset,
            OffsetReader::Debugfs(_) => OffsetSource::Debugfs,
            OffsetReader::None => OffsetSource::None,
        }
    }

    /// The vCPU's offset now (`None` without an exact source).
    pub fn read(&self, vcpu: &VcpuFd) -> Result<Option<u64>, TscError> {
        match self {
            OffsetReader::Attr => get_offset(vcpu).map(Some),
            OffsetReader::Debugfs(f) => f.read().map(Some).map_err(TscError::Debugfs),
            OffsetReader::None => Ok(None),
        }
    }
}

/// A reusable KVM_GET_MSRS buffer for one MSR, so that reading a vCPU back
/// every round allocates nothing.
pub struct MsrReader {
    buf: Msrs,
}

impl MsrReader {
    /// A buffer for one MSR.
    pub fn new() -> Result<MsrReader, TscError> {
        let buf = Msrs::from_entries(&[kvm_msr_entry::default()])
            .map_err(|e| TscError::GetMsrs(format!("{e:?}")))?;
        Ok(MsrReader { buf })
    }

    /// Reads MSR `index` of `vcpu`.
    pub fn get(&mut self, vcpu: &VcpuFd, index: u32) -> Result<u64, TscError> {
        if let Some(e) = self.buf.as_mut_slice().first_mut() {
            *e = kvm_msr_entry {
                index,
                ..Default::default()
            };
        }
        let n = vcpu
            .get_msrs(&mut self.buf)
            .map_err(|e| TscError::GetMsrs(e.to_string()))?;
        match (n, self.buf.as_slice().first()) {
            (1, Some(e)) => Ok(e.data),
            _ => Err(TscError::GetMsrs(format!(
                "MSR {index:#x} not returned (KVM processed {n} of 1)"
            ))),
        }
    }
}

/// Reads one MSR through KVM_GET_MSRS.
pub fn get_msr(vcpu: &VcpuFd, index: u32) -> Result<u64, TscError> {
    MsrReader::new()?.get(vcpu, index)
}

/// Writes one MSR through KVM_SET_MSRS (a host-initiated write).
pub fn set_msr(vcpu: &VcpuFd, index: u32, data: u64) -> Result<(), TscError> {
    let msrs = Msrs::from_entries(&[kvm_msr_entry {
        index,
        data,
        ..Default::default()
    }])
    .map_err(|e| TscError::SetMsrs(format!("{e:?}")))?;
    let n = vcpu
        .set_msrs(&msrs)
        .map_err(|e| TscError::SetMsrs(e.to_string()))?;
    if n != 1 {
        return Err(TscError::SetMsrs(format!(
            "MSR {index:#x} not written (KVM processed {n} of 1)"
        )));
    }
    Ok(())
}

/// Reads everything, the offset through `offsets`; `scaling` says whether
/// the vCPU's TSC is scaled from the host's ([`TscState::host_khz`]).
pub fn read(
    vcpu: &VcpuFd,
    offsets: &OffsetReader,
    scaling: &Scaling,
) -> Result<TscState, TscError> {
    read_with(vcpu, offsets, &mut MsrReader::new()?, scaling)
}

/// As [`read`], with a reusable MSR buffer (no allocation).
pub fn read_with(
    vcpu: &VcpuFd,
    offsets: &OffsetReader,
    msrs: &mut MsrReader,
    scaling: &Scaling,
) -> Result<TscState, TscError> {
    let adjust = msrs.get(vcpu, MSR_IA32_TSC_ADJUST)?;
    let host_before = host_rdtsc();
    let tsc = msrs.get(vcpu, MSR_IA32_TSC)?;
    let host_after = host_rdtsc();
    let offset = offsets.read(vcpu)?;
    let tsc_khz = vcpu
        .get_tsc_khz()
        .map_err(|e| TscError::GetTscKhz(e.to_string()))?;
    Ok(TscState {
        adjust,
        tsc,
        host_before,
        host_after,
        offset,
        tsc_khz,
        host_khz: scaling.host_khz,
        scaled: scaling.scales(tsc_khz),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        // _IOW(0xAE, 0xe1/0xe2/0xe3, struct kvm_device_attr) with a 24-byte struct.
        assert_eq!(std::mem::size_of::<kvm_device_attr>(), 24);
        assert_eq!(KVM_SET_DEVICE_ATTR(), 0x4018_aee1);
        assert_eq!(KVM_GET_DEVICE_ATTR(), 0x4018_aee2);
        assert_eq!(KVM_HAS_DEVICE_ATTR(), 0x4018_aee3);
    }

    #[test]
    fn the_bracket_estimate_uses_the_midpoint() {
        let s = TscState {
            tsc: 1_000_500,
            host_before: 1_000,
            host_after: 2_000,
            ..Default::default()
        };
        assert_eq!(s.estimated_offset(), 999_000);
        assert_eq!(s.estimate_error(), 500);
    }

    #[test]
    fn the_bracket_estimate_wraps_like_an_offset() {
        let s = TscState {
            tsc: 100,
            host_before: u64::MAX - 1,
            host_after: u64::MAX - 1,
            ..Default::default()
        };
        assert_eq!(s.estimated_offset() as i64, 102);
    }
}
