//! Why a restore (or its measurement) failed: the run's and the VM's errors
//! composed with what saving, restoring and the offset arithmetic can find
//! wrong.

use super::offsets;
use super::options::Step;
use crate::error::RunError;
use crate::stop::Signal;
use crate::tsc::TscError;
use crate::vstate::{StateError, VmError};

/// Why a restore (or its measurement) failed.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum RestoreError {
    /// {0}
    Run(#[from] RunError),
    /// {0}
    Vm(#[from] VmError),
    /// saving vCPU {vcpu}: {error}
    Save {
        /// The vCPU.
        vcpu: u32,
        /// Why.
        #[source]
        error: StateError,
    },
    /// vCPU {vcpu}'s pending port I/O was not completed (RIP {rip_at_exit:#x} before the completing KVM_RUN, {rip_after:#x} after, not past an `out dx, eax`): the restored guest would repeat its last report
    PioNotCompleted {
        /// The vCPU.
        vcpu: u32,
        /// RIP before.
        rip_at_exit: u64,
        /// RIP after.
        rip_after: u64,
    },
    /// restoring vCPU {vcpu}: {error}
    Vcpu {
        /// The vCPU.
        vcpu: u32,
        /// Why.
        #[source]
        error: StateError,
    },
    /// restoring vCPU {vcpu}'s TSC state: {error}
    Tsc {
        /// The vCPU.
        vcpu: u32,
        /// The error.
        #[source]
        error: TscError,
    },
    /// restoring vCPU {vcpu}'s MSR_KVM_SYSTEM_TIME_NEW (its kvmclock page): {error}
    Kvmclock {
        /// The vCPU.
        vcpu: u32,
        /// The error.
        #[source]
        error: TscError,
    },
    /// {0} failed: {1}
    Kvm(&'static str, #[source] kvm_ioctls::Error),
    /// {0}
    Clock(String),
    /// {0}
    Offsets(#[from] offsets::OffsetError),
    /// the vCPUs' TSC frequencies differ ({0} kHz and {1} kHz): one frequency cannot convert the clock for all of them
    Frequencies(u32, u32),
    /// vCPU {0}'s exact TSC offset was not saved (no KVM_VCPU_TSC_OFFSET readback): the documented method needs it
    NoOffset(u32),
    /// guest memory: {0}
    Memory(String),
    /// interrupted by {0} while waiting between the snapshot and the restore
    Interrupted(Signal),
    /// injected failure in step '{0}' (TSC_RENDEZVOUS_TEST_RESTORE_FAIL)
    Injected(Step),
}

impl RestoreError {
    /// The signal that stopped it, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self {
            RestoreError::Run(e) => e.signal(),
            RestoreError::Interrupted(s) => Some(s.0),
            _ => None,
        }
    }

    /// Whether it is a setup error (no usable KVM, a missing capability)
    /// rather than a failure once things ran.
    pub fn is_setup(&self) -> bool {
        match self {
            RestoreError::Run(e) => e.is_setup(),
            RestoreError::Vm(_) => true,
            _ => false,
        }
    }
}
