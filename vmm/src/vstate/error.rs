//! vstate's own errors: why the VM could not be set up ([`VmError`]) and why
//! the vCPU pool did not do what it was asked ([`PoolError`]); the run's
//! error wraps both.

use super::memory::MemError;
use super::vcpu::error::VcpuError;
use crate::guest_image::ImageError;
use crate::stop::Signal;
use crate::tsc::TscError;
use crate::watchdog::Stall;

/// Why the VM could not be set up.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum VmError {
    /// cannot open {path} ({source}): {hint}
    OpenKvm {
        /// The device path.
        path: String,
        /// Why it could not be opened.
        source: kvm_ioctls::Error,
        /// What to do about it.
        hint: &'static str,
    },
    /// {path} is not a usable KVM device (KVM_GET_API_VERSION returned {api}, expected 12); check that it is the kvm character device (10:232)
    NotKvm {
        /// The device path.
        path: String,
        /// What KVM_GET_API_VERSION said (-1: the ioctl failed).
        api: i32,
    },
    /// this KVM lacks {0}, which tsc-rendezvous needs; use a newer kernel
    MissingCapability(&'static str),
    /// --vcpus {requested} is more than {by} allows ({limit}); use at most {limit}
    TooManyVcpus {
        /// Asked for.
        requested: u32,
        /// The limit.
        limit: u32,
        /// Whose limit it is.
        by: &'static str,
    },
    /// {0} failed: {1}
    Kvm(&'static str, #[source] kvm_ioctls::Error),
    /// KVM_SET_TSC_KHZ({khz} kHz) on {scope} failed ({errno}): {why}
    SetTscKhz {
        /// The rate asked for.
        khz: u32,
        /// "the VM" or "vCPU N".
        scope: String,
        /// What KVM said.
        errno: String,
        /// What that means here (from KVM's capabilities and the host's rate).
        why: String,
    },
    /// after KVM_SET_TSC_KHZ on every vCPU, writing their TSCs 0 (KVM_SET_MSRS) failed: {0}
    Resync(#[source] TscError),
    /// --tsc-khz {asked} needs the host's TSC rate, and KVM_GET_TSC_KHZ gave none: {why}
    NoHostRate {
        /// The option as given.
        asked: String,
        /// What KVM said.
        why: String,
    },
    /// {0}
    Memory(#[from] MemError),
    /// guest image: {0}
    Image(#[from] ImageError),
}

impl VmError {
    /// The error for a device that cannot be opened, with what to do about it.
    pub fn open_kvm(path: String, source: kvm_ioctls::Error) -> VmError {
        let hint = match source.errno() {
            libc::ENOENT => "/dev/kvm does not exist: load the kvm module (kvm_intel or kvm_amd), or enable nested virtualisation for this VM",
            libc::EACCES | libc::EPERM => "no permission: add yourself to the kvm group (`sudo usermod -aG kvm $USER`, then log in again) or install a udev rule giving /dev/kvm mode 0666",
            _ => "check that /dev/kvm exists and is readable and writable",
        };
        VmError::OpenKvm { path, source, hint }
    }
}

/// Why the vCPU threads did not do what they were asked.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum PoolError {
    /// cannot start a vCPU thread: {0}
    Spawn(#[source] std::io::Error),
    /// cannot install the vCPU kick signal handler: {0}
    KickHandler(#[source] vmm_sys_util::errno::Error),
    /// vCPU {vcpu} in round {round}: {error}
    Vcpu {
        /// The vCPU.
        vcpu: u32,
        /// In which round (in command mode: which command).
        round: u32,
        /// What happened.
        #[source]
        error: VcpuError,
    },
    /// reading vCPU {vcpu}'s TSC state failed: {error}
    Readback {
        /// The vCPU.
        vcpu: u32,
        /// The error.
        #[source]
        error: TscError,
    },
    /// vCPU {vcpu} reported the end of round {found} while round {expected} was running
    WrongRound {
        /// The vCPU.
        vcpu: u32,
        /// The round running.
        expected: u32,
        /// What the guest reported.
        found: u32,
    },
    /// vCPU {vcpu} reported command {found} done while command {expected} was running
    WrongCommand {
        /// The vCPU.
        vcpu: u32,
        /// The command running.
        expected: u32,
        /// What the guest reported.
        found: u32,
    },
    /// vCPU {vcpu} reported it had finished every round while round {round} was running
    FinishedEarly {
        /// The vCPU.
        vcpu: u32,
        /// The round running.
        round: u32,
    },
    /// {0}
    Timeout(Stall),
    /// interrupted by {signal} in round {round}; the vCPUs were stopped
    Interrupted {
        /// The signal.
        signal: Signal,
        /// The round running.
        round: u32,
    },
    /// vCPU {0}'s thread ended unexpectedly
    Lost(u32),
    /// round {round} can neither be taken nor started: the round driver planned no variant for it
    NotPlanned {
        /// The round.
        round: u32,
    },
}

impl PoolError {
    /// The signal that stopped the pool, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self {
            PoolError::Interrupted { signal, .. } => Some(signal.0),
            _ => None,
        }
    }
}
