//! Facts about the host: which backend ran the algorithms, which KVM this is,
//! the kernel, the CPU, and for the host backend which host CPUs its threads
//! used.

use crate::tsc::frequency::FrequencySetting;
use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

pub use crate::options::Backend;
use crate::options::Windows;
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

    /// The flavour as `--json` writes it (`vmx`, `svm`, `pvm`, `unknown`).
    pub fn key(self) -> &'static str {
        match self {
            KvmFlavor::Vmx => "vmx",
            KvmFlavor::Svm => "svm",
            KvmFlavor::Pvm => "pvm",
            KvmFlavor::Unknown => "unknown",
        }
    }

    /// The kernel module that implements it (`kvm_intel`, `kvm_amd`,
    /// `kvm_pvm`; `unknown`).
    pub fn module(self) -> &'static str {
        match self {
            KvmFlavor::Vmx => "kvm_intel",
            KvmFlavor::Svm => "kvm_amd",
            KvmFlavor::Pvm => "kvm_pvm",
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

/// This host's name (uname's nodename), `unknown` when uname fails.
pub fn host_name() -> String {
    // SAFETY: uname writes into the zeroed struct we pass and nothing else.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return "unknown".into();
    }
    // SAFETY: uname NUL-terminates `nodename` on success.
    let name = unsafe { std::ffi::CStr::from_ptr(uts.nodename.as_ptr()) };
    name.to_string_lossy().into_owned()
}

/// `(major, minor)` of a kernel release string; `None` if it does not start
/// with two numbers.
pub fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// What /proc/cpuinfo says of the first CPU: its model name and flags.
#[derive(Debug, Default, PartialEq, Eq)]
struct CpuInfo {
    model: Option<String>,
    flags: Vec<String>,
}

impl CpuInfo {
    /// Parses the text of /proc/cpuinfo (the first `model name` and
    /// `flags` lines).
    fn parse(text: &str) -> CpuInfo {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim())
        };
        CpuInfo {
            model: field("model name").map(str::to_string),
            flags: field("flags")
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect(),
        }
    }
}

/// /proc/cpuinfo, read and parsed once per process.
fn cpuinfo() -> &'static CpuInfo {
    static INFO: OnceLock<CpuInfo> = OnceLock::new();
    INFO.get_or_init(|| {
        fs::read_to_string("/proc/cpuinfo")
            .map(|t| CpuInfo::parse(&t))
            .unwrap_or_default()
    })
}

/// The host CPU's model name from /proc/cpuinfo.
pub fn cpu_model() -> Option<String> {
    cpuinfo().model.clone()
}

/// The TSC-related CPU flags from /proc/cpuinfo (tsc, constant_tsc, ...).
pub fn tsc_flags() -> Vec<String> {
    cpuinfo()
        .flags
        .iter()
        .filter(|f| f.contains("tsc") || *f == "vmx" || *f == "svm")
        .cloned()
        .collect()
}

/// Whether /proc/cpuinfo lists the CPU flag `name` (e.g. `hypervisor`: this
/// OS runs in a virtual machine).
pub fn has_cpu_flag(name: &str) -> bool {
    cpuinfo().flags.iter().any(|f| f == name)
}

/// The host's current clocksource.
pub fn clocksource() -> Option<String> {
    fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .ok()
        .map(|s| s.trim().to_string())
}

/// How a run was paced: what let vCPUs (or threads) that wait for others
/// give their host CPU up, when there were more of them than host cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pacing {
    /// No more vCPUs than host cores: nothing but the rendezvous paced it.
    None,
    /// The guest's spin-waits yielded: the VMM rewrote each `pause` of the
    /// guest into an exit it turns into a yield of the vCPU's host thread
    /// (a stand-in for pause-loop exiting).
    GuestYield,
    /// The VMM interrupted the vCPUs every 200 us so that spinning ones
    /// yield (a guest image that lists no `pause` to rewrite).
    SpinBreaker,
    /// Host backend: the threads yielded in every spin.
    ThreadYield,
}

impl Pacing {
    /// The name used in JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Pacing::None => "none",
            Pacing::GuestYield => "guest_yield",
            Pacing::SpinBreaker => "spin_breaker",
            Pacing::ThreadYield => "thread_yield",
        }
    }
}

/// Facts about the host, as reported.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostInfo {
    /// Where the algorithms ran. Missing in documents written before the
    /// host backend existed: KVM.
    #[serde(default)]
    pub backend: Backend,
    /// See [`KvmFlavor`]. Not meaningful for the host backend (no KVM is
    /// used): [`KvmFlavor::Unknown`] there.
    pub kvm_flavor: KvmFlavor,
    /// `uname -r`.
    pub kernel_release: String,
    /// `(major, minor)` of the release, when it parses.
    pub kernel_version: Option<(u32, u32)>,
    /// The TSC frequency in kHz: the guest's (KVM_GET_TSC_KHZ of vCPU 0), or
    /// for the host backend the host's, measured against CLOCK_MONOTONIC.
    pub tsc_khz: Option<u32>,
    /// The CPU model.
    pub cpu_model: Option<String>,
    /// TSC-related CPU flags.
    pub cpu_tsc_flags: Vec<String>,
    /// The host clocksource.
    pub clocksource: Option<String>,
    /// Whether the vCPU attribute KVM_VCPU_TSC_OFFSET is available (Linux >= 5.16).
    pub tsc_offset_attr: bool,
    /// Where the exact per-vCPU TSC offsets came from (the host backend's
    /// are its threads' own: [`OffsetSource::HostThread`]). Missing in early
    /// documents: none.
    #[serde(default = "OffsetSource::none")]
    pub offset_source: OffsetSource,
    /// Whether the guest sees IA32_TSC_ADJUST in its CPUID (the host
    /// backend simulates one per thread: true).
    pub guest_tsc_adjust: bool,
    /// The host backend's threads; `None` for KVM.
    #[serde(default)]
    pub host_threads: Option<HostThreads>,
    /// The windows Linux's sync ran with (every run has them; they matter
    /// for `linux-tsc-sync`). Not read back from JSON.
    #[serde(default, skip_deserializing)]
    pub sync_windows: Option<Windows>,
    /// `--initial-skew`: the cycles the last vCPU started ahead of vCPU 0
    /// (vCPU k: `k * cycles / (N - 1)`), set and verified before the first
    /// round; `None` when the run started as the hypervisor set it up.
    #[serde(default)]
    pub initial_skew_cycles: Option<u64>,
    /// How the run was paced (`Pacing`); `None` where no rounds ran
    /// (check, restore) and in earlier documents, and then not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing: Option<Pacing>,
    /// The host's own TSC rate as KVM knows it (what a vCPU gets unless
    /// set), kHz; `None` on the host backend and in earlier documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_tsc_khz: Option<u32>,
    /// `--tsc-khz`: how the guest's TSC frequency was set; `None` when it
    /// was not (the host's rate), and then not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_tsc: Option<FrequencySetting>,
}

/// The host backend's threads and the host CPUs they ran on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostThreads {
    /// Threads, one per "vCPU".
    pub threads: u32,
    /// The host CPUs this process may run on (its affinity mask).
    pub host_cpus: Vec<u32>,
    /// Per thread, the host CPU it was pinned to; `None` when it was not
    /// pinned (more threads than CPUs, or pinning failed: see the notes).
    pub pinned: Vec<Option<u32>>,
    /// Whether the threads outnumbered the host CPUs (they then yield in
    /// every spin).
    pub overcommitted: bool,
    /// How [`HostInfo::tsc_khz`] was obtained.
    pub tsc_khz_source: String,
    /// Whether this OS itself runs in a virtual machine (the CPU reports the
    /// `hypervisor` flag): then a hypervisor below this OS schedules its CPUs
    /// and may virtualise `rdtsc`.
    pub os_under_hypervisor: bool,
}

impl HostThreads {
    /// Which host CPUs the threads ran on, in words.
    pub fn placement(&self) -> String {
        let cpus = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        let pinned: Vec<u32> = self.pinned.iter().flatten().copied().collect();
        let placed = if pinned.len() == self.pinned.len() {
            format!("pinned to host CPUs {} (one each)", cpus(&pinned))
        } else if pinned.is_empty() {
            format!(
                "not pinned ({} threads for {} host CPU(s): {})",
                self.threads,
                self.host_cpus.len(),
                cpus(&self.host_cpus)
            )
        } else {
            format!(
                "partly pinned, to host CPUs {} (see the notes)",
                cpus(&pinned)
            )
        };
        format!("{} thread(s) of this OS, {placed}", self.threads)
    }
}

/// The windows of Linux's sync, in words.
pub fn windows_line(w: &Windows) -> String {
    format!(
        "{} ms for an AP that starts a package (none here: all CPUs are one package), {} ms \
         ({} cycles) for every other AP",
        w.first_ms,
        w.ms,
        crate::units::fmt_num(w.cycles as f64)
    )
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
    /// The host's TSC rate as KVM knows it.
    pub host_tsc_khz: Option<u32>,
    /// `--tsc-khz`: how the guest's rate was set.
    pub guest_tsc: Option<FrequencySetting>,
}

impl HostInfo {
    /// Gathers the host's facts, with what the VM said (KVM backend).
    pub fn collect(vm: VmFacts) -> HostInfo {
        let release = kernel_release();
        HostInfo {
            backend: Backend::Kvm,
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
            host_threads: None,
            sync_windows: None,
            initial_skew_cycles: None,
            pacing: None,
            host_tsc_khz: vm.host_tsc_khz,
            guest_tsc: vm.guest_tsc,
        }
    }

    /// Gathers the host's facts for the host backend: the host's TSC
    /// frequency as measured, its threads. No KVM is involved: no flavour,
    /// no offset attribute; TSC_ADJUST is simulated per thread.
    pub fn host_backend(tsc_khz: u32, threads: HostThreads) -> HostInfo {
        let release = kernel_release();
        HostInfo {
            backend: Backend::Host,
            kvm_flavor: KvmFlavor::Unknown,
            kernel_version: parse_kernel_version(&release),
            kernel_release: release,
            tsc_khz: Some(tsc_khz),
            cpu_model: cpu_model(),
            cpu_tsc_flags: tsc_flags(),
            clocksource: clocksource(),
            tsc_offset_attr: false,
            offset_source: OffsetSource::HostThread,
            guest_tsc_adjust: true,
            host_threads: Some(threads),
            sync_windows: None,
            initial_skew_cycles: None,
            pacing: None,
            host_tsc_khz: None,
            guest_tsc: None,
        }
    }

    /// The guest's TSC in words: its rate and, when `--tsc-khz` set it,
    /// how (`None` when the rate is unknown).
    pub fn tsc_words(&self) -> Option<String> {
        let k = self.tsc_khz?;
        Some(match &self.guest_tsc {
            Some(g) => format!("{k} kHz: --tsc-khz {}", g.describe()),
            None => format!("{k} kHz"),
        })
    }

    /// Whether the algorithms ran on host threads (no hypervisor involved).
    pub fn on_host_threads(&self) -> bool {
        self.backend == Backend::Host
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_gives_the_first_model_and_its_flags() {
        let text = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu tsc \
                    constant_tsc hypervisor svm\n\nprocessor\t: 1\nmodel name\t: other\n";
        let c = CpuInfo::parse(text);
        assert_eq!(c.model.as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(c.flags, ["fpu", "tsc", "constant_tsc", "hypervisor", "svm"]);
        assert_eq!(CpuInfo::parse(""), CpuInfo::default());
    }

    /// The outputs' flavour label is the one `--json` writes.
    #[test]
    fn a_flavours_key_is_its_json_name() {
        for f in [
            KvmFlavor::Vmx,
            KvmFlavor::Svm,
            KvmFlavor::Pvm,
            KvmFlavor::Unknown,
        ] {
            assert_eq!(serde_json::to_value(f).ok(), Some(f.key().into()));
        }
        assert_eq!(KvmFlavor::Vmx.module(), "kvm_intel");
        assert_eq!(KvmFlavor::Svm.module(), "kvm_amd");
    }

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

    fn kvm_host() -> HostInfo {
        HostInfo {
            backend: Backend::Kvm,
            kvm_flavor: KvmFlavor::Svm,
            kernel_release: "6.1.0".into(),
            kernel_version: Some((6, 1)),
            tsc_khz: Some(2_000_000),
            cpu_model: Some("a CPU".into()),
            cpu_tsc_flags: vec!["tsc".into()],
            clocksource: Some("tsc".into()),
            tsc_offset_attr: true,
            offset_source: OffsetSource::KvmVcpuTscOffset,
            guest_tsc_adjust: true,
            host_threads: None,
            sync_windows: Some(Windows::at(2_000_000, (20, 2))),
            initial_skew_cycles: None,
            pacing: Some(Pacing::GuestYield),
            host_tsc_khz: Some(2_000_000),
            guest_tsc: None,
        }
    }

    /// A KVM document round-trips (the windows are not read back); one
    /// written before the backend and the windows existed still loads, as
    /// KVM.
    #[test]
    fn host_facts_round_trip_and_old_documents_load_as_kvm() {
        let h = kvm_host();
        let v = serde_json::to_value(&h).expect("serialises");
        assert_eq!(v["backend"], "kvm");
        assert_eq!(v["offset_source"], "kvm_vcpu_tsc_offset");
        assert_eq!(v["sync_windows"]["cycles"], 4_000_000);
        assert_eq!(v["pacing"], "guest_yield");
        let back: HostInfo = serde_json::from_value(v.clone()).expect("loads");
        assert_eq!(
            back,
            HostInfo {
                sync_windows: None,
                initial_skew_cycles: None,
                ..h.clone()
            }
        );
        let mut old = v;
        for k in [
            "backend",
            "host_threads",
            "sync_windows",
            "offset_source",
            "pacing",
        ] {
            old.as_object_mut().map(|o| o.remove(k));
        }
        let back: HostInfo = serde_json::from_value(old).expect("an old document loads");
        assert_eq!(back.backend, Backend::Kvm);
        assert_eq!(back.pacing, None);
        assert_eq!(back.offset_source, OffsetSource::None);
    }

    /// The host backend names its own offset source in JSON.
    #[test]
    fn the_host_backend_says_its_offsets_are_per_thread() {
        let h = HostInfo {
            backend: Backend::Host,
            offset_source: OffsetSource::HostThread,
            host_threads: Some(HostThreads {
                threads: 2,
                host_cpus: vec![0, 1],
                pinned: vec![Some(0), Some(1)],
                overcommitted: false,
                tsc_khz_source: "measured".into(),
                os_under_hypervisor: true,
            }),
            ..kvm_host()
        };
        let v = serde_json::to_value(&h).expect("serialises");
        assert_eq!(
            (&v["backend"], &v["offset_source"]),
            (&"host".into(), &"host_thread".into())
        );
        assert_eq!(v["host_threads"]["pinned"][1], 1);
        let back: HostInfo = serde_json::from_value(v).expect("loads");
        assert!(back.on_host_threads());
        assert_eq!(back.host_threads, h.host_threads);
    }
}
