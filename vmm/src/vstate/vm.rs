//! Creating the VM: guest memory, the image, page tables, GDT, config,
//! vCPUs; opening KVM with a clear error, its limits and capabilities.

use std::collections::BTreeMap;

use kvm_bindings::{
    kvm_userspace_memory_region, CpuId, KVM_CAP_VM_TSC_CONTROL, KVM_MAX_CPUID_ENTRIES,
};
use kvm_ioctls::{Cap, Kvm, VcpuFd, VmFd};
use tsc_contract::{
    layout, Config, Variant, CLOCK_KVMCLOCK, CLOCK_RECORD_WRITES, CONFIG_COMMAND_MODE,
    CONFIG_MAGIC, CONTRACT_VERSION,
};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use super::error::VmError;
use super::memory::{self, MemError};
use crate::arch::x86_64::{cpuid, gdt, paging, regs};
use crate::guest_image;
use crate::options::{Injection, Windows, FIRST_WINDOW_MS, WINDOW_MS};
use crate::tsc;
use crate::tsc::frequency::{self, FrequencySetting, Scaling, SetVia, TscRequest};

/// A VM with its memory set up and its vCPUs created, not yet running.
///
/// Fields drop in declaration order: the vCPU and VM fds before the memory
/// they map, so KVM never holds a slot over unmapped (or reused) memory.
pub struct Vm {
    /// The vCPUs, index = position.
    pub vcpus: Vec<VcpuFd>,
    /// The VM fd.
    pub fd: VmFd,
    /// The KVM system fd.
    pub kvm: Kvm,
    /// Guest memory, identity-mapped.
    pub mem: GuestMemoryMmap,
    /// Whether the guest's CPUID exposes IA32_TSC_ADJUST.
    pub guest_tsc_adjust: bool,
    /// Whether the guest registered its kvmclock pages (asked for, and the
    /// CPUID offers kvmclock).
    pub kvmclock: bool,
    /// The windows of Linux's sync written into the config.
    pub sync_windows: Windows,
    /// Whether and from what KVM scales the vCPUs' TSCs (every readback
    /// needs it: [`crate::tsc::TscState::host_khz`]).
    pub scaling: Scaling,
    /// The guest TSC frequency the VM was created with (`--tsc-khz`).
    pub frequency: Option<FrequencySetting>,
    /// The thread that created the VM: KVM names the VM's debugfs directory
    /// `<its thread id>-<vm fd>` (`task_pid_nr(current)`), which is the
    /// process id only on the main thread.
    pub creator_tid: u32,
}

/// The most vCPUs this KVM allows.
pub fn max_vcpus(kvm: &Kvm) -> u32 {
    u32::try_from(kvm.get_max_vcpus()).unwrap_or(u32::MAX)
}

/// Test-only: the KVM device path, instead of `/dev/kvm` (to test the errors
/// for a missing or unusable device).
pub const KVM_DEVICE_ENV: &str = "TSC_RENDEZVOUS_KVM_DEVICE";
/// Test-only: the name of a KVM capability to pretend is missing (e.g.
/// `KVM_CAP_IMMEDIATE_EXIT`), to test the missing-capability error.
pub const HIDE_CAP_ENV: &str = "TSC_RENDEZVOUS_TEST_HIDE_CAP";

/// The KVM device path: `/dev/kvm` unless the test-only variable
/// [`KVM_DEVICE_ENV`] says otherwise.
pub fn kvm_device() -> String {
    std::env::var(KVM_DEVICE_ENV).unwrap_or_else(|_| "/dev/kvm".to_string())
}

/// Opens the KVM device with a clear error, and checks it is a KVM.
pub fn open_kvm() -> Result<Kvm, VmError> {
    let path = kvm_device();
    let c_path = std::ffi::CString::new(path.clone()).map_err(|_| VmError::NotKvm {
        path: path.clone(),
        api: -1,
    })?;
    let kvm = Kvm::new_with_path(&c_path).map_err(|e| VmError::open_kvm(path.clone(), e))?;
    let api = kvm.get_api_version();
    if api != 12 {
        return Err(VmError::NotKvm { path, api });
    }
    Ok(kvm)
}

/// The capabilities this tool needs, by KVM name.
pub const NEEDED_CAPS: [(Cap, &str); 4] = [
    (Cap::UserMemory, "KVM_CAP_USER_MEMORY"),
    (Cap::ExtCpuid, "KVM_CAP_EXT_CPUID"),
    (Cap::GetTscKhz, "KVM_CAP_GET_TSC_KHZ"),
    (Cap::ImmediateExit, "KVM_CAP_IMMEDIATE_EXIT"),
];

/// The first needed capability `has` lacks, by name.
pub fn missing_capability(has: impl Fn(Cap, &str) -> bool) -> Option<&'static str> {
    NEEDED_CAPS
        .iter()
        .find(|(cap, name)| !has(*cap, name))
        .map(|&(_, name)| name)
}

/// Checks a requested vCPU count against the layout's and KVM's limits.
pub fn check_vcpu_count(requested: u32, kvm_limit: u32) -> Result<(), VmError> {
    if requested > layout::MAX_VCPUS {
        return Err(VmError::TooManyVcpus {
            requested,
            limit: layout::MAX_VCPUS,
            by: "the guest memory layout",
        });
    }
    if requested > kvm_limit {
        return Err(VmError::TooManyVcpus {
            requested,
            limit: kvm_limit,
            by: "this KVM (KVM_CAP_MAX_VCPUS)",
        });
    }
    Ok(())
}

/// What a VM is created for: its vCPUs, the guest's config and image.
#[derive(Clone, Copy, Debug)]
pub struct VmSpec<'a> {
    /// vCPUs.
    pub vcpus: u32,
    /// Rounds the guest runs (0 in command mode).
    pub rounds: u32,
    /// The first round's variant.
    pub variant: Variant,
    /// Whether the guest waits for the host's commands instead of running
    /// rounds ([`tsc_contract::Op`]).
    pub command_mode: bool,
    /// The windows of Linux's sync, ms (`Windows`).
    pub windows_ms: (u64, u64),
    /// A fault the guest injects (testing).
    pub inject: Option<Injection>,
    /// Round mode: exchanges per pair of the hand-off test after every
    /// round (0: none).
    pub handoff_exchanges: u32,
    /// Register every vCPU's kvmclock page (where KVM offers kvmclock).
    pub kvmclock: bool,
    /// Round mode, with `kvmclock`: record kvmclock around every TSC write.
    pub record_clock: bool,
    /// The guest's TSC frequency (`--tsc-khz`); `None`: the host's.
    pub tsc: Option<TscRequest>,
    /// The guest image (an ELF).
    pub image: &'a [u8],
}

impl VmSpec<'static> {
    /// A VM of `vcpus` vCPUs that runs `rounds` rounds of `variant` on the
    /// embedded guest, with Linux's windows.
    pub fn rounds(vcpus: u32, rounds: u32, variant: Variant) -> VmSpec<'static> {
        VmSpec {
            rounds,
            variant,
            command_mode: false,
            kvmclock: false,
            ..VmSpec::command_mode(vcpus)
        }
    }

    /// A command-mode VM of `vcpus` vCPUs running the embedded guest, with
    /// Linux's windows and kvmclock (where KVM offers it).
    pub fn command_mode(vcpus: u32) -> VmSpec<'static> {
        VmSpec {
            vcpus,
            rounds: 0,
            variant: Variant::XenHead,
            command_mode: true,
            windows_ms: (FIRST_WINDOW_MS, WINDOW_MS),
            inject: None,
            handoff_exchanges: 0,
            kvmclock: true,
            record_clock: false,
            tsc: None,
            image: guest_image::EMBEDDED,
        }
    }
}

impl Vm {
    /// Creates the VM `spec` describes: memory, the guest image, page
    /// tables, GDT, the vCPUs with their CPUID and registers, and the config
    /// (written once, with the windows at the guest's TSC frequency).
    pub fn new(kvm: Kvm, spec: &VmSpec<'_>) -> Result<Vm, VmError> {
        let hidden = std::env::var(HIDE_CAP_ENV).unwrap_or_default();
        if let Some(name) =
            missing_capability(|cap, name| name != hidden && kvm.check_extension(cap))
        {
            return Err(VmError::MissingCapability(name));
        }
        check_vcpu_count(spec.vcpus, max_vcpus(&kvm))?;

        let fd =
            retry_interrupted(|| kvm.create_vm()).map_err(|e| VmError::Kvm("KVM_CREATE_VM", e))?;
        let creator_tid = current_tid();
        let mem =
            GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), layout::MEM_SIZE as usize)])
                .map_err(|e| VmError::Memory(MemError(e.to_string())))?;
        for (slot, region) in mem.iter().enumerate() {
            let host = mem
                .get_host_address(region.start_addr())
                .map_err(|e| VmError::Memory(MemError(e.to_string())))?;
            let r = kvm_userspace_memory_region {
                slot: slot as u32,
                flags: 0,
                guest_phys_addr: region.start_addr().0,
                memory_size: region.len(),
                userspace_addr: host as u64,
            };
            // SAFETY: the region is a live mmap owned by `mem`; Vm drops its
            // vCPU and VM fds before `mem`, and the runner joins the vCPU
            // threads (which own the vCPU fds) before dropping its clone.
            unsafe { fd.set_user_memory_region(r) }
                .map_err(|e| VmError::Kvm("KVM_SET_USER_MEMORY_REGION", e))?;
        }

        let entry = guest_image::load(&mem, spec.image)?;
        write_tables(&mem)?;
        memory::reset_rendezvous(&mem)?;

        let base_cpuid = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(|e| VmError::Kvm("KVM_GET_SUPPORTED_CPUID", e))?;
        let guest_tsc_adjust = cpuid::has_tsc_adjust(&base_cpuid);
        let kvmclock = spec.kvmclock && cpuid::has_kvmclock(&base_cpuid);
        let vm_rate = frequency::get_vm_khz(&fd);
        let early = match spec.tsc {
            Some(req) if kvm.check_extension_raw(u64::from(KVM_CAP_VM_TSC_CONTROL)) > 0 => {
                let host = vm_rate.map_err(|e| VmError::NoHostRate {
                    asked: req.describe(),
                    why: e.to_string(),
                })?;
                let khz = req.resolve(host);
                frequency::set_vm_khz(&fd, khz)
                    .map_err(|e| set_error(&kvm, khz, host, "the VM".into(), e.to_string()))?;
                Some((req, khz, host))
            }
            _ => None,
        };
        let mut vcpu_fds = Vec::with_capacity(spec.vcpus as usize);
        for index in 0..spec.vcpus {
            vcpu_fds.push(create_vcpu(&fd, &base_cpuid, index, entry)?);
        }
        let first_rate = vcpu_fds.first().and_then(|v| v.get_tsc_khz().ok());
        let host_khz = early
            .map(|(_, _, host)| host)
            .or(vm_rate.ok())
            .or(first_rate)
            .unwrap_or(0);
        let scaling = Scaling {
            host_khz,
            tsc_control: kvm.check_extension(Cap::TscControl),
            tolerance_ppm: frequency::tolerance_ppm(),
        };
        let frequency = match (early, spec.tsc) {
            (Some((asked, khz, host_khz)), _) => Some(FrequencySetting {
                asked,
                khz,
                host_khz,
                via: SetVia::Vm,
                resynced: false,
                scaled: !scaling.ratio(khz).is_one(),
            }),
            (None, Some(asked)) => Some(set_per_vcpu(&kvm, &vcpu_fds, asked, &scaling)?),
            (None, None) => None,
        };
        // The windows at the guest's TSC frequency (0 when KVM cannot say).
        let khz = vcpu_fds
            .first()
            .and_then(|v| v.get_tsc_khz().ok())
            .unwrap_or(0);
        let sync_windows = Windows::at(khz, spec.windows_ms);
        memory::write_config(&mem, &config(spec, sync_windows, kvmclock))?;
        Ok(Vm {
            kvm,
            fd,
            mem,
            vcpus: vcpu_fds,
            guest_tsc_adjust,
            kvmclock,
            sync_windows,
            scaling,
            frequency,
            creator_tid,
        })
    }
}

/// KVM_SET_TSC_KHZ on every vCPU, then, where that changed the ratio, every
/// vCPU's TSC written 0 by the host: KVM keeps each vCPU's creation offset
/// and changes only its multiplier, which would make the TSC jump.
fn set_per_vcpu(
    kvm: &Kvm,
    vcpus: &[VcpuFd],
    asked: TscRequest,
    scaling: &Scaling,
) -> Result<FrequencySetting, VmError> {
    if scaling.host_khz == 0 {
        return Err(VmError::NoHostRate {
            asked: asked.describe(),
            why: "neither the VM nor vCPU 0 reported a rate".into(),
        });
    }
    let khz = asked.resolve(scaling.host_khz);
    for (i, v) in vcpus.iter().enumerate() {
        v.set_tsc_khz(khz).map_err(|e| {
            set_error(
                kvm,
                khz,
                scaling.host_khz,
                format!("vCPU {i}"),
                e.to_string(),
            )
        })?;
    }
    let scaled = !scaling.ratio(khz).is_one();
    if scaled {
        for v in vcpus {
            tsc::set_msr(v, tsc::MSR_IA32_TSC, 0).map_err(VmError::Resync)?;
        }
    }
    Ok(FrequencySetting {
        asked,
        khz,
        host_khz: scaling.host_khz,
        via: SetVia::Vcpu,
        resynced: scaled,
        scaled,
    })
}

/// The error of a refused KVM_SET_TSC_KHZ, with what KVM's capabilities say
/// about it.
fn set_error(kvm: &Kvm, khz: u32, host_khz: u32, scope: String, errno: String) -> VmError {
    let why = if !kvm.check_extension(Cap::TscControl) && khz < host_khz {
        format!(
            "this KVM cannot scale the TSC (KVM_CAP_TSC_CONTROL = 0), and without scaling it \
             refuses a rate below the host's {host_khz} kHz; ask for at least the host's rate"
        )
    } else {
        "KVM refused the rate".to_string()
    };
    VmError::SetTscKhz {
        khz,
        scope,
        errno,
        why,
    }
}

/// vCPU `index`, in long mode at `entry`, with its APIC ID in the CPUID.
fn create_vcpu(fd: &VmFd, cpuid: &CpuId, index: u32, entry: u64) -> Result<VcpuFd, VmError> {
    let vcpu = fd
        .create_vcpu(u64::from(index))
        .map_err(|e| VmError::Kvm("KVM_CREATE_VCPU", e))?;
    let mut c = cpuid.clone();
    cpuid::set_apic_id(&mut c, index);
    vcpu.set_cpuid2(&c)
        .map_err(|e| VmError::Kvm("KVM_SET_CPUID2", e))?;
    let sregs = vcpu
        .get_sregs()
        .map_err(|e| VmError::Kvm("KVM_GET_SREGS", e))?;
    vcpu.set_sregs(&regs::long_mode_sregs(sregs))
        .map_err(|e| VmError::Kvm("KVM_SET_SREGS", e))?;
    vcpu.set_regs(&regs::entry_regs(entry, index))
        .map_err(|e| VmError::Kvm("KVM_SET_REGS", e))?;
    Ok(vcpu)
}

/// The guest's config for `spec`.
fn config(spec: &VmSpec<'_>, windows: Windows, kvmclock: bool) -> Config {
    let mut c = Config {
        magic: CONFIG_MAGIC,
        version: CONTRACT_VERSION,
        vcpus: spec.vcpus,
        rounds: spec.rounds,
        variant: spec.variant as u32,
        flags: if spec.command_mode {
            CONFIG_COMMAND_MODE
        } else {
            0
        },
        sync_first_window_cycles: windows.first_cycles,
        sync_window_cycles: windows.cycles,
        handoff_exchanges: spec.handoff_exchanges,
        clock_flags: match (kvmclock, spec.record_clock) {
            (false, _) => 0,
            (true, false) => CLOCK_KVMCLOCK,
            (true, true) => CLOCK_KVMCLOCK | CLOCK_RECORD_WRITES,
        },
        ..Config::default()
    };
    if let Some(inj) = &spec.inject {
        inj.apply(&mut c);
    }
    c
}

/// The calling thread's id (the `pid` KVM names things after).
fn current_tid() -> u32 {
    // SAFETY: gettid has no arguments and no side effects; it cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    u32::try_from(tid).unwrap_or_else(|_| std::process::id())
}

fn write_tables(mem: &GuestMemoryMmap) -> Result<(), MemError> {
    let t = paging::identity_tables(layout::PDPT, layout::PD);
    memory::write_u64s(mem, &t.pml4, layout::PML4)?;
    memory::write_u64s(mem, &t.pdpt, layout::PDPT)?;
    memory::write_u64s(mem, &t.pd, layout::PD)?;
    memory::write_u64s(mem, &gdt::GDT, layout::GDT)
}

/// The KVM capabilities a report states, by name.
pub fn capabilities(kvm: &Kvm) -> BTreeMap<String, i32> {
    use kvm_bindings::{
        KVM_CAP_ADJUST_CLOCK, KVM_CAP_GET_TSC_KHZ, KVM_CAP_TSC_CONTROL, KVM_CAP_TSC_DEADLINE_TIMER,
        KVM_CAP_VM_TSC_CONTROL,
    };
    let mut m = BTreeMap::new();
    for (name, cap) in [
        ("KVM_CAP_TSC_CONTROL", KVM_CAP_TSC_CONTROL),
        ("KVM_CAP_GET_TSC_KHZ", KVM_CAP_GET_TSC_KHZ),
        ("KVM_CAP_VM_TSC_CONTROL", KVM_CAP_VM_TSC_CONTROL),
        ("KVM_CAP_ADJUST_CLOCK", KVM_CAP_ADJUST_CLOCK),
        ("KVM_CAP_TSC_DEADLINE_TIMER", KVM_CAP_TSC_DEADLINE_TIMER),
    ] {
        m.insert(name.to_string(), kvm.check_extension_raw(u64::from(cap)));
    }
    m.insert("KVM_CAP_MAX_VCPUS".into(), max_vcpus(kvm) as i32);
    m
}

/// How often an ioctl that a signal interrupted is tried again.
const EINTR_RETRIES: u32 = 100;

/// `f` again while a signal interrupts it (EINTR), at most
/// [`EINTR_RETRIES`] times. The tool's stop handler does not restart system
/// calls, and KVM_CREATE_VM can end EINTR when a SIGINT lands in it (seen on
/// Linux 6.1): tried again, the VM exists and the stop request, still
/// pending, ends the run as a stop (exit 130, the report kept) instead of as
/// a failure to create the VM.
fn retry_interrupted<T>(
    mut f: impl FnMut() -> Result<T, kvm_ioctls::Error>,
) -> Result<T, kvm_ioctls::Error> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if e.errno() == libc::EINTR && tries < EINTR_RETRIES => tries += 1,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_capability_is_named() {
        assert_eq!(missing_capability(|_, _| true), None);
        assert_eq!(
            missing_capability(|_, n| n != "KVM_CAP_GET_TSC_KHZ"),
            Some("KVM_CAP_GET_TSC_KHZ")
        );
        let e = VmError::MissingCapability("KVM_CAP_IMMEDIATE_EXIT").to_string();
        assert!(e.contains("KVM_CAP_IMMEDIATE_EXIT") && e.contains("newer kernel"));
    }

    #[test]
    fn vcpu_counts_are_checked_against_both_limits() {
        assert!(check_vcpu_count(4, 8).is_ok());
        let e = check_vcpu_count(9, 8)
            .expect_err("over KVM's limit")
            .to_string();
        assert!(
            e.contains("KVM_CAP_MAX_VCPUS") && e.contains("use at most 8"),
            "{e}"
        );
        let e = check_vcpu_count(513, 4096)
            .expect_err("over the layout")
            .to_string();
        assert!(e.contains("layout") && e.contains("use at most 512"), "{e}");
    }

    #[test]
    fn open_errors_say_how_to_get_access() {
        let e =
            VmError::open_kvm("/dev/kvm".into(), kvm_ioctls::Error::new(libc::EACCES)).to_string();
        assert!(e.starts_with("cannot open /dev/kvm ("), "{e}");
        assert!(e.contains("kvm group") && e.contains("udev rule"), "{e}");
        let e =
            VmError::open_kvm("/dev/kvm".into(), kvm_ioctls::Error::new(libc::ENOENT)).to_string();
        assert!(e.contains("load the kvm module"), "{e}");
    }

    #[test]
    fn an_interrupted_ioctl_is_tried_again_and_other_errors_are_not() {
        let mut calls = 0;
        let got = retry_interrupted(|| {
            calls += 1;
            if calls < 3 {
                Err(kvm_ioctls::Error::new(libc::EINTR))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(got.ok(), Some(3));
        let mut calls = 0;
        let got: Result<(), _> = retry_interrupted(|| {
            calls += 1;
            Err(kvm_ioctls::Error::new(libc::ENOMEM))
        });
        assert_eq!(
            (got.err().map(|e| e.errno()), calls),
            (Some(libc::ENOMEM), 1)
        );
        let mut calls = 0;
        let got: Result<(), _> = retry_interrupted(|| {
            calls += 1;
            Err(kvm_ioctls::Error::new(libc::EINTR))
        });
        assert_eq!(got.err().map(|e| e.errno()), Some(libc::EINTR));
        assert_eq!(
            calls,
            EINTR_RETRIES + 1,
            "bounded: a signal storm cannot hang it"
        );
    }
}
