//! The KVM floors, written directly on kvm-ioctls: the least a VMM must do.
//!
//! - [`BareVm`]: open `/dev/kvm`, create a VM with 2 MiB of anonymous memory,
//!   identity page tables (one 2 MiB page), a three-entry GDT and six bytes
//!   of guest code, and N vCPUs entering that code in 64-bit mode (KVM's
//!   supported CPUID, long-mode sregs, `rip`/`rflags`/`rsp`). The code is
//!   `1: out 0x80, al; jmp 1b`: every KVM_RUN comes back with one port
//!   write, the guest's first exit.
//! - [`boot`]: create that VM, run each vCPU once to its first exit (one
//!   after the other, on the calling thread: the fewest threads a VMM can
//!   use) and tear it down, timing both halves.
//! - [`ioctl_costs`]: the time of each ioctl a round needs, on a bare vCPU:
//!   KVM_RUN to the next `out` and back, KVM_GET_MSRS of one MSR,
//!   KVM_GET_DEVICE_ATTR of the TSC offset, KVM_GET_TSC_KHZ.

use std::time::{Duration, Instant};

use kvm_bindings::{
    kvm_device_attr, kvm_msr_entry, kvm_segment, kvm_userspace_memory_region, Msrs,
    KVM_MAX_CPUID_ENTRIES,
};
use kvm_ioctls::{Kvm, VcpuExit, VcpuFd, VmFd};

const MEM: usize = 2 << 20;
const PML4: u64 = 0x1000;
const PDPT: u64 = 0x2000;
const PD: u64 = 0x3000;
const GDT: u64 = 0x4000;
const CODE: u64 = 0x8000;
const STACK: u64 = 0x10000;
/// `out 0x80, al; jmp $-2` (back to the `out`).
const GUEST: [u8; 4] = [0xe6, 0x80, 0xeb, 0xfc];
const PORT: u16 = 0x80;

/// Anonymous memory mapped for the guest, unmapped on drop.
struct Mem {
    ptr: *mut u8,
}

impl Mem {
    fn new() -> Result<Mem, String> {
        // SAFETY: an anonymous private mapping of MEM bytes at an address of
        // the kernel's choice; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MEM,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        Ok(Mem { ptr: p.cast() })
    }

    fn write(&self, at: u64, bytes: &[u8]) {
        let at = at as usize;
        assert!(
            at + bytes.len() <= MEM,
            "a bare VM's write lies in its memory"
        );
        // SAFETY: the destination lies inside the mapping (asserted above),
        // which no vCPU runs on yet; the source is a distinct slice.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(at), bytes.len()) };
    }

    fn write_u64s(&self, at: u64, words: &[u64]) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.write(at, &bytes);
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the mapping made in `new`, of MEM bytes; the VM
        // that used it is gone (BareVm drops its fds first).
        unsafe { libc::munmap(self.ptr.cast(), MEM) };
    }
}

/// A minimal VM: memory, tables, code, vCPUs at the code.
pub struct BareVm {
    /// The vCPUs.
    pub vcpus: Vec<VcpuFd>,
    _vm: VmFd,
    _kvm: Kvm,
    _mem: Mem,
}

fn segment(selector: u16, type_: u8, long: bool) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db: u8::from(!long),
        s: 1,
        l: u8::from(long),
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

impl BareVm {
    /// Creates the VM with `vcpus` vCPUs, none run yet.
    pub fn new(vcpus: u32) -> Result<BareVm, String> {
        let e = |what: &str| {
            let what = what.to_string();
            move |err: kvm_ioctls::Error| format!("{what}: {err}")
        };
        let kvm = Kvm::new().map_err(e("open /dev/kvm"))?;
        let vm = kvm.create_vm().map_err(e("KVM_CREATE_VM"))?;
        let mem = Mem::new()?;
        let region = kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: MEM as u64,
            userspace_addr: mem.ptr as u64,
        };
        // SAFETY: the region is a live mapping of MEM bytes owned by `mem`,
        // which BareVm drops after the VM and vCPU fds.
        unsafe { vm.set_user_memory_region(region) }.map_err(e("KVM_SET_USER_MEMORY_REGION"))?;
        mem.write_u64s(PML4, &[PDPT | 3]);
        mem.write_u64s(PDPT, &[PD | 3]);
        mem.write_u64s(PD, &[0x83]);
        mem.write_u64s(GDT, &[0, 0x00af_9b00_0000_ffff, 0x00cf_9300_0000_ffff]);
        mem.write(CODE, &GUEST);
        let cpuid = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(e("KVM_GET_SUPPORTED_CPUID"))?;
        let mut fds = Vec::with_capacity(vcpus as usize);
        for i in 0..vcpus {
            let v = vm.create_vcpu(u64::from(i)).map_err(e("KVM_CREATE_VCPU"))?;
            v.set_cpuid2(&cpuid).map_err(e("KVM_SET_CPUID2"))?;
            let mut s = v.get_sregs().map_err(e("KVM_GET_SREGS"))?;
            s.cs = segment(0x08, 11, true);
            let data = segment(0x10, 3, false);
            (s.ds, s.es, s.fs, s.gs, s.ss) = (data, data, data, data, data);
            s.gdt.base = GDT;
            s.gdt.limit = 23;
            s.cr0 = 0x8005_0033;
            s.cr3 = PML4;
            s.cr4 = 1 << 5;
            s.efer = 0x500;
            v.set_sregs(&s).map_err(e("KVM_SET_SREGS"))?;
            let regs = kvm_bindings::kvm_regs {
                rflags: 2,
                rip: CODE,
                rsp: STACK,
                ..Default::default()
            };
            v.set_regs(&regs).map_err(e("KVM_SET_REGS"))?;
            fds.push(v);
        }
        Ok(BareVm {
            vcpus: fds,
            _vm: vm,
            _kvm: kvm,
            _mem: mem,
        })
    }
}

/// Runs `vcpu` to its next exit, which must be the guest's `out`.
pub fn run_to_exit(vcpu: &mut VcpuFd) -> Result<(), String> {
    match vcpu.run() {
        Ok(VcpuExit::IoOut(PORT, _)) => Ok(()),
        Ok(other) => Err(format!("unexpected exit {other:?}")),
        Err(e) => Err(format!("KVM_RUN: {e}")),
    }
}

/// The times of one bare boot.
#[derive(Clone, Copy, Debug)]
pub struct Boot {
    /// From opening /dev/kvm until every vCPU has made its first exit.
    pub to_first_exit: Duration,
    /// Closing every fd and unmapping the memory.
    pub teardown: Duration,
}

/// One bare boot of `vcpus` vCPUs; `at_first_exit` runs once every vCPU
/// has exited (e.g. prints the line a parent waits for).
pub fn boot(vcpus: u32, at_first_exit: impl FnOnce()) -> Result<Boot, String> {
    let start = Instant::now();
    let mut vm = BareVm::new(vcpus)?;
    for v in &mut vm.vcpus {
        run_to_exit(v)?;
    }
    let to_first_exit = start.elapsed();
    at_first_exit();
    let t = Instant::now();
    drop(vm);
    Ok(Boot {
        to_first_exit,
        teardown: t.elapsed(),
    })
}

/// The measured cost of one ioctl, microseconds.
#[derive(Clone, Debug)]
pub struct IoctlCost {
    /// Its name.
    pub name: &'static str,
    /// The median over batches of the mean wall time per call.
    pub us: f64,
}

/// The mean wall time per call of `f`, microseconds, median of `batches`
/// batches of `calls` after a warm-up.
fn per_call(
    calls: u32,
    batches: u32,
    mut f: impl FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    for _ in 0..calls / 10 {
        f()?;
    }
    let mut means = Vec::new();
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..calls {
            f()?;
        }
        means.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(calls));
    }
    means.sort_by(f64::total_cmp);
    Ok(means[means.len() / 2])
}

/// `_IOW(KVMIO, 0xe2, struct kvm_device_attr)`: KVM_GET_DEVICE_ATTR.
const KVM_GET_DEVICE_ATTR: libc::c_ulong = 0x4018_aee2;

/// The time of every ioctl a round needs, on one bare vCPU.
pub fn ioctl_costs(calls: u32) -> Result<Vec<IoctlCost>, String> {
    let mut vm = BareVm::new(1)?;
    let v = vm.vcpus.first_mut().ok_or("no vCPU")?;
    let mut out = Vec::new();
    let run = per_call(calls, 5, || run_to_exit(v))?;
    out.push(IoctlCost {
        name: "KVM_RUN (to the next out)",
        us: run,
    });
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry {
        index: 0x3b,
        ..Default::default()
    }])
    .map_err(|e| format!("{e:?}"))?;
    let msr = per_call(calls, 5, || match v.get_msrs(&mut msrs) {
        Ok(1) => Ok(()),
        Ok(n) => Err(format!("KVM_GET_MSRS processed {n} of 1")),
        Err(e) => Err(format!("KVM_GET_MSRS: {e}")),
    })?;
    out.push(IoctlCost {
        name: "KVM_GET_MSRS (one MSR)",
        us: msr,
    });
    let mut value = 0u64;
    let attr = kvm_device_attr {
        flags: 0,
        group: 0,
        attr: 0,
        addr: &mut value as *mut u64 as u64,
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&*v);
    let get_attr = || {
        // SAFETY: KVM_GET_DEVICE_ATTR reads `attr` and writes 8 bytes to
        // `value`, both alive for the call; `fd` is a vCPU fd.
        match unsafe { libc::ioctl(fd, KVM_GET_DEVICE_ATTR, &attr) } {
            0 => Ok(()),
            _ => Err(format!(
                "KVM_GET_DEVICE_ATTR: {}",
                std::io::Error::last_os_error()
            )),
        }
    };
    // KVM_VCPU_TSC_OFFSET needs Linux >= 5.16: without it, no such ioctl.
    if get_attr().is_ok() {
        let attr_us = per_call(calls, 5, get_attr)?;
        out.push(IoctlCost {
            name: "KVM_GET_DEVICE_ATTR (TSC offset)",
            us: attr_us,
        });
    }
    let khz = per_call(calls, 5, || {
        v.get_tsc_khz()
            .map(|_| ())
            .map_err(|e| format!("KVM_GET_TSC_KHZ: {e}"))
    })?;
    out.push(IoctlCost {
        name: "KVM_GET_TSC_KHZ",
        us: khz,
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare VM boots and every ioctl a round needs can be timed (skipped
    /// without a usable /dev/kvm).
    #[test]
    fn a_bare_vm_boots() {
        if Kvm::new().is_err() {
            eprintln!("no usable /dev/kvm: skipped");
            return;
        }
        let b = boot(2, || {}).expect("boots");
        assert!(b.to_first_exit > Duration::ZERO);
        let c = ioctl_costs(20).expect("timed");
        assert!(c.iter().all(|c| c.us > 0.0), "{c:?}");
    }
}
