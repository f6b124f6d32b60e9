//! KVM spoken to directly, with raw ioctls of the tests' own, so that a
//! probe of what this kernel does shares no code with the VMM under test:
//! /dev/kvm opened with open(2), a VM and its vCPUs created with
//! KVM_CREATE_VM and KVM_CREATE_VCPU, the vCPU attribute KVM_VCPU_TSC_OFFSET
//! (Documentation/virt/kvm/devices/vcpu.rst, group KVM_VCPU_TSC_CTRL)
//! queried, read and written with KVM_{HAS,GET,SET}_DEVICE_ATTR. The ioctl
//! numbers are worked out here from linux/kvm.h's definitions.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// KVMIO, the ioctl type of every KVM ioctl.
const KVMIO: u64 = 0xAE;

/// `_IO(KVMIO, nr)`.
const fn io(nr: u64) -> u64 {
    (KVMIO << 8) | nr
}

/// `_IOW(KVMIO, nr, size)`: direction write (1) in bits 30-31, the size in
/// bits 16-29.
const fn iow(nr: u64, size: u64) -> u64 {
    (1 << 30) | (size << 16) | (KVMIO << 8) | nr
}

/// `struct kvm_device_attr`.
#[repr(C)]
struct DeviceAttr {
    flags: u32,
    group: u32,
    attr: u64,
    addr: u64,
}

const ATTR_SIZE: u64 = std::mem::size_of::<DeviceAttr>() as u64;
const KVM_GET_API_VERSION: u64 = io(0x00);
const KVM_CREATE_VM: u64 = io(0x01);
const KVM_CREATE_VCPU: u64 = io(0x41);
const KVM_SET_DEVICE_ATTR: u64 = iow(0xe1, ATTR_SIZE);
const KVM_GET_DEVICE_ATTR: u64 = iow(0xe2, ATTR_SIZE);
const KVM_HAS_DEVICE_ATTR: u64 = iow(0xe3, ATTR_SIZE);
/// KVM_VCPU_TSC_CTRL and KVM_VCPU_TSC_OFFSET.
const TSC_CTRL: u32 = 0;
const TSC_OFFSET: u64 = 0;

/// An ioctl on `fd` with an integer argument; the result or the errno.
fn ioctl(fd: &OwnedFd, request: u64, arg: u64) -> Result<i32, std::io::Error> {
    // SAFETY: every request used here takes either an integer or a pointer
    // to a `DeviceAttr` that lives across the call (and whose `addr` points
    // to a u64 that does); the kernel reads or writes nothing else.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: i32) -> OwnedFd {
    // SAFETY: `fd` was just returned by the kernel, is open and owned by
    // nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A VM with `vcpus` vCPUs, none of which has run.
pub struct RawVm {
    _kvm: OwnedFd,
    _vm: OwnedFd,
    pub vcpus: Vec<OwnedFd>,
}

impl RawVm {
    pub fn new(vcpus: u32) -> Result<RawVm, String> {
        let path = c"/dev/kvm";
        // SAFETY: a NUL-terminated path; open(2) returns a new fd or -1.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!(
                "open /dev/kvm: {}",
                std::io::Error::last_os_error()
            ));
        }
        let kvm = owned(fd);
        let api = ioctl(&kvm, KVM_GET_API_VERSION, 0).map_err(|e| e.to_string())?;
        if api != 12 {
            return Err(format!("KVM API version {api}, not 12"));
        }
        let vm = owned(ioctl(&kvm, KVM_CREATE_VM, 0).map_err(|e| format!("KVM_CREATE_VM: {e}"))?);
        let vcpus = (0..vcpus)
            .map(|i| {
                ioctl(&vm, KVM_CREATE_VCPU, u64::from(i))
                    .map(owned)
                    .map_err(|e| format!("KVM_CREATE_VCPU {i}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(RawVm {
            _kvm: kvm,
            _vm: vm,
            vcpus,
        })
    }
}

fn attr(value: &mut u64) -> DeviceAttr {
    DeviceAttr {
        flags: 0,
        group: TSC_CTRL,
        attr: TSC_OFFSET,
        addr: value as *mut u64 as u64,
    }
}

/// Whether the vCPU has the attribute KVM_VCPU_TSC_OFFSET (Linux >= 5.16).
pub fn has_tsc_offset(vcpu: &OwnedFd) -> bool {
    let mut unused = 0u64;
    let a = attr(&mut unused);
    ioctl(vcpu, KVM_HAS_DEVICE_ATTR, &a as *const DeviceAttr as u64).is_ok()
}

/// The vCPU's TSC offset.
pub fn get_tsc_offset(vcpu: &OwnedFd) -> Result<u64, String> {
    let mut value = 0u64;
    let a = attr(&mut value);
    ioctl(vcpu, KVM_GET_DEVICE_ATTR, &a as *const DeviceAttr as u64)
        .map_err(|e| format!("KVM_GET_DEVICE_ATTR: {e}"))?;
    Ok(value)
}

/// Sets the vCPU's TSC offset.
pub fn set_tsc_offset(vcpu: &OwnedFd, mut value: u64) -> Result<(), String> {
    let a = attr(&mut value);
    ioctl(vcpu, KVM_SET_DEVICE_ATTR, &a as *const DeviceAttr as u64)
        .map(drop)
        .map_err(|e| format!("KVM_SET_DEVICE_ATTR: {e}"))
}

/// The ioctl numbers agree with linux/kvm.h's values (as the kernel's
/// headers spell them out: KVM_SET_DEVICE_ATTR is 0x4018aee1).
pub fn self_test() {
    assert_eq!(KVM_CREATE_VM, 0xae01);
    assert_eq!(KVM_CREATE_VCPU, 0xae41);
    assert_eq!(ATTR_SIZE, 24);
    assert_eq!(KVM_SET_DEVICE_ATTR, 0x4018_aee1);
    assert_eq!(KVM_GET_DEVICE_ATTR, 0x4018_aee2);
    assert_eq!(KVM_HAS_DEVICE_ATTR, 0x4018_aee3);
}
