//! Facts about the host: which KVM this is, the kernel, the CPU.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::tsc::OffsetSource;

/// Which hypervisor implements /dev/kvm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvmFlavor {
    /// Intel VMX (kvm_intel).
    Vmx,
    /// AMD SVM (kvm_amd).
    Svm,
    /// PVM (kvm_pvm), a software hypervisor that cannot offset the TSC.
    Pvm,
    /// None of the above could be identified.
    Unknown,
}

impl KvmFlavor {
    /// The flavour's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            KvmFlavor::Vmx => "VMX",
            KvmFlavor::Svm => "SVM",
            KvmFlavor::Pvm => "PVM",
            KvmFlavor::Unknown => "unknown",
        }
    }
}

/// Identifies the flavour from the loaded modules under `sys_module`
/// (normally `/sys/module`). PVM wins: it can be loaded beside kvm_intel.
pub fn detect_flavor_in(sys_module: &Path) -> KvmFlavor {
    if sys_module.join("kvm_pvm").exists() {
        KvmFlavor::Pvm
    } else if sys_module.join("kvm_intel").exists() {
        KvmFlavor::Vmx
    } else if sys_module.join("kvm_amd").exists() {
        KvmFlavor::Svm
    } else {
        KvmFlavor::Unknown
    }
}

/// The running kernel's release, e.g. `6.1.0-57-amd64`.
pub fn kernel_release() -> String {
    // SAFETY: uname writes into the zeroed struct we pass and nothing else.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return "unknown".into();
    }
    // SAFETY: uname NUL-terminates `release` on success.
    let release = unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) };
    release.to_string_lossy().into_owned()
}

/// `(major, minor)` of a kernel release string; `None` if it does not start
/// with two numbers.
pub fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The host CPU's model name from /proc/cpuinfo.
pub fn cpu_model() -> Option<String> {
    let info = fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The TSC-related CPU flags from /proc/cpuinfo (tsc, constant_tsc, ...).
pub fn tsc_flags() -> Vec<String> {
    let Ok(info) = fs::read_to_string("/proc/cpuinfo") else {
        return Vec::new();
    };
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v)
        .unwrap_or("");
    flags
        .split_whitespace()
        .filter(|f| f.contains("tsc") || *f == "vmx" || *f == "svm")
        .map(str::to_string)
        .collect()
}

/// The host's current clocksource.
pub fn clocksource() -> Option<String> {
    fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Facts about the host, as reported.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostInfo {
    /// See [`KvmFlavor`].
    pub kvm_flavor: KvmFlavor,
    /// `uname -r`.
    pub kernel_release: String,
    /// `(major, minor)` of the release, when it parses.
    pub kernel_version: Option<(u32, u32)>,
    /// The guest TSC frequency (KVM_GET_TSC_KHZ of vCPU 0), in kHz.
    pub tsc_khz: Option<u32>,
    /// The CPU model.
    pub cpu_model: Option<String>,
    /// TSC-related CPU flags.
    pub cpu_tsc_flags: Vec<String>,
    /// The host clocksource.
    pub clocksource: Option<String>,
    /// Whether the vCPU attribute KVM_VCPU_TSC_OFFSET is available (Linux >= 5.16).
    pub tsc_offset_attr: bool,
    /// Where the exact per-vCPU TSC offsets came from.
    #[serde(default = "no_offset_source")]
    pub offset_source: OffsetSource,
    /// Whether the guest sees IA32_TSC_ADJUST in its CPUID.
    pub guest_tsc_adjust: bool,
}

fn no_offset_source() -> OffsetSource {
    OffsetSource::None
}

/// What a VM says about the host: the guest TSC frequency, whether KVM has the
/// offset attribute, where the exact offsets come from and whether the guest
/// sees IA32_TSC_ADJUST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmFacts {
    /// KVM_GET_TSC_KHZ of vCPU 0.
    pub tsc_khz: Option<u32>,
    /// Whether the vCPU attribute KVM_VCPU_TSC_OFFSET exists.
    pub tsc_offset_attr: bool,
    /// Where the exact offsets come from.
    pub offset_source: OffsetSource,
    /// Whether the guest's CPUID exposes IA32_TSC_ADJUST.
    pub guest_tsc_adjust: bool,
}

impl HostInfo {
    /// Gathers the host's facts, with what the VM said.
    pub fn collect(vm: VmFacts) -> HostInfo {
        let release = kernel_release();
        HostInfo {
            kvm_flavor: detect_flavor_in(Path::new("/sys/module")),
            kernel_version: parse_kernel_version(&release),
            kernel_release: release,
            tsc_khz: vm.tsc_khz,
            cpu_model: cpu_model(),
            cpu_tsc_flags: tsc_flags(),
            clocksource: clocksource(),
            tsc_offset_attr: vm.tsc_offset_attr,
            offset_source: vm.offset_source,
            guest_tsc_adjust: vm.guest_tsc_adjust,
        }
    }
}

/// A cycle count in nanoseconds at `tsc_khz`.
pub fn cycles_to_ns(cycles: f64, tsc_khz: u32) -> f64 {
    cycles * 1_000_000.0 / f64::from(tsc_khz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(parse_kernel_version("6.1.0-57-amd64"), Some((6, 1)));
        assert_eq!(parse_kernel_version("5.10.209"), Some((5, 10)));
        assert_eq!(parse_kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(parse_kernel_version("weird"), None);
    }

    #[test]
    fn flavor_comes_from_the_loaded_modules() {
        let dir = std::env::temp_dir().join(format!("tsc-flavor-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("kvm")).expect("temp dir");
        assert_eq!(detect_flavor_in(&dir), KvmFlavor::Unknown);
        fs::create_dir_all(dir.join("kvm_amd")).expect("temp dir");
        assert_eq!(detect_flavor_in(&dir), KvmFlavor::Svm);
        fs::create_dir_all(dir.join("kvm_intel")).expect("temp dir");
        assert_eq!(detect_flavor_in(&dir), KvmFlavor::Vmx);
        fs::create_dir_all(dir.join("kvm_pvm")).expect("temp dir");
        assert_eq!(detect_flavor_in(&dir), KvmFlavor::Pvm);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn cycles_convert_at_the_given_frequency() {
        assert_eq!(cycles_to_ns(2_000.0, 2_000_000), 1_000.0);
    }
}
