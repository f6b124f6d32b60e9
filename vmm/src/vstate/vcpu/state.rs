//! One vCPU's saved state, beside the vCPU as Firecracker keeps its
//! `VcpuState`: general and special registers, FPU state, pending events
//! (exceptions, NMI, interrupt shadow), debug registers and TSC state
//! (IA32_TSC_ADJUST, IA32_TSC between two host TSC reads, the exact offset,
//! KVM_GET_TSC_KHZ). Saving runs on the vCPU's own thread while it is parked;
//! restoring puts the registers into a fresh vCPU (its TSC state is the
//! restore method's business). Whole-VM snapshots are built from these in
//! [`crate::restore`].
//!
//! The pending port I/O: a parked vCPU sits at its `out` to COMMAND_DONE.
//! KVM finishes that instruction (advances RIP past it) only on the next
//! KVM_RUN, and keeps that pending state out of everything userspace can
//! read (api.rst, KVM_RUN: "userspace should ensure that the operation is
//! completed before performing a live migration"). So before saving, the
//! vCPU thread runs KVM_RUN once with `immediate_exit` set: KVM completes the
//! I/O, then returns EINTR without running a guest instruction. The RIP
//! before and after, and the byte it stepped over, are kept as evidence.

use std::fmt;

use kvm_bindings::{kvm_debugregs, kvm_fpu, kvm_regs, kvm_sregs, kvm_vcpu_events};
use kvm_ioctls::VcpuFd;
use serde::Serialize;

use crate::tsc::{TscError, TscState};

/// The opcode of `out dx, eax`, the guest's report to COMMAND_DONE.
pub const OUT_DX_EAX: u8 = 0xef;

/// Why a vCPU's state could not be saved or restored.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum StateError {
    /// {0} failed: {1}
    Kvm(&'static str, #[source] kvm_ioctls::Error),
    /// KVM_RUN with immediate_exit set ran the guest instead of returning EINTR (exit: {0}); this KVM cannot complete pending I/O without running the guest
    Ran(String),
    /// {0}
    Tsc(#[from] TscError),
}

/// A vCPU's answer to a save request: its state, or why it could not be
/// saved.
pub type Saved = Result<Box<VcpuState>, StateError>;

/// What completing the pending port I/O did to RIP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PioCompletion {
    /// RIP at the exit, before the completing KVM_RUN.
    pub rip_at_exit: u64,
    /// RIP after it.
    pub rip_after: u64,
}

/// How the pending `out` ended, judged from RIP and guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PioState {
    /// The completing KVM_RUN stepped RIP over the `out` (as Linux has done
    /// since it stopped advancing RIP before the exit).
    Completed,
    /// RIP was already past the `out` at the exit (older KVMs).
    AlreadyPast,
    /// Neither: the `out` would run again after a restore.
    NotCompleted,
}

impl PioCompletion {
    /// Judges the completion from the guest's code bytes (`byte_at(addr)`:
    /// the byte at guest address `addr`, `None` outside memory).
    pub fn state(&self, byte_at: impl Fn(u64) -> Option<u8>) -> PioState {
        let out_at = |a: u64| byte_at(a) == Some(OUT_DX_EAX);
        if self.rip_after == self.rip_at_exit.wrapping_add(1) && out_at(self.rip_at_exit) {
            PioState::Completed
        } else if self.rip_after == self.rip_at_exit
            && out_at(self.rip_after.wrapping_sub(1))
            && !out_at(self.rip_after)
        {
            PioState::AlreadyPast
        } else {
            PioState::NotCompleted
        }
    }
}

/// One vCPU's saved state.
#[derive(Clone, Copy, Default)]
pub struct VcpuState {
    /// General registers.
    pub regs: kvm_regs,
    /// Special registers (segments, control registers, EFER, ...).
    pub sregs: kvm_sregs,
    /// x87/SSE state.
    pub fpu: kvm_fpu,
    /// Pending exceptions, NMI, interrupt shadow.
    pub events: kvm_vcpu_events,
    /// Debug registers.
    pub debugregs: kvm_debugregs,
    /// TSC state: TSC_ADJUST, IA32_TSC (bracketed), offset, frequency.
    pub tsc: TscState,
    /// What completing the pending I/O did.
    pub pio: PioCompletion,
}

impl fmt::Debug for VcpuState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VcpuState")
            .field("rip", &format_args!("{:#x}", self.regs.rip))
            .field("rsp", &format_args!("{:#x}", self.regs.rsp))
            .field("tsc", &self.tsc)
            .field("pio", &self.pio)
            .finish_non_exhaustive()
    }
}

/// Completes the vCPU's pending I/O (KVM_RUN with `immediate_exit`), then
/// saves its state, its TSC state as `read_tsc` reads it back. Called on the
/// vCPU's own thread while it is parked.
pub fn save_vcpu(
    fd: &mut VcpuFd,
    read_tsc: impl FnOnce(&VcpuFd) -> Result<TscState, TscError>,
) -> Result<VcpuState, StateError> {
    let kvm = |what: &'static str| move |e: kvm_ioctls::Error| StateError::Kvm(what, e);
    let rip_at_exit = fd.get_regs().map_err(kvm("KVM_GET_REGS"))?.rip;
    fd.set_kvm_immediate_exit(1);
    let ran = match fd.run() {
        Err(e) if e.errno() == libc::EINTR => Ok(()),
        Err(e) => Err(StateError::Kvm("KVM_RUN (immediate_exit)", e)),
        Ok(exit) => Err(StateError::Ran(format!("{exit:?}"))),
    };
    fd.set_kvm_immediate_exit(0);
    ran?;
    let regs = fd.get_regs().map_err(kvm("KVM_GET_REGS"))?;
    let tsc = read_tsc(fd)?;
    Ok(VcpuState {
        regs,
        sregs: fd.get_sregs().map_err(kvm("KVM_GET_SREGS"))?,
        fpu: fd.get_fpu().map_err(kvm("KVM_GET_FPU"))?,
        events: fd.get_vcpu_events().map_err(kvm("KVM_GET_VCPU_EVENTS"))?,
        debugregs: fd.get_debug_regs().map_err(kvm("KVM_GET_DEBUGREGS"))?,
        tsc,
        pio: PioCompletion {
            rip_at_exit,
            rip_after: regs.rip,
        },
    })
}

/// Puts a saved vCPU state into a fresh vCPU (its TSC state is the method
/// under test's business, not this).
pub fn restore_vcpu(fd: &VcpuFd, s: &VcpuState) -> Result<(), StateError> {
    let kvm = |what: &'static str| move |e: kvm_ioctls::Error| StateError::Kvm(what, e);
    fd.set_sregs(&s.sregs).map_err(kvm("KVM_SET_SREGS"))?;
    fd.set_regs(&s.regs).map_err(kvm("KVM_SET_REGS"))?;
    fd.set_fpu(&s.fpu).map_err(kvm("KVM_SET_FPU"))?;
    fd.set_vcpu_events(&s.events)
        .map_err(kvm("KVM_SET_VCPU_EVENTS"))?;
    fd.set_debug_regs(&s.debugregs)
        .map_err(kvm("KVM_SET_DEBUGREGS"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(at: u64, bytes: &[u8]) -> impl Fn(u64) -> Option<u8> + '_ {
        move |a| {
            a.checked_sub(at)
                .and_then(|i| bytes.get(usize::try_from(i).ok()?))
                .copied()
        }
    }

    #[test]
    fn the_completed_out_is_told_from_a_pending_one() {
        // mov edx, 0x520; out dx, eax; add ...
        let bytes = [0xba, 0x20, 0x05, 0x00, 0x00, OUT_DX_EAX, 0x83];
        let mem = code(0x1000, &bytes);
        let done = PioCompletion {
            rip_at_exit: 0x1005,
            rip_after: 0x1006,
        };
        assert_eq!(done.state(&mem), PioState::Completed);
        let past = PioCompletion {
            rip_at_exit: 0x1006,
            rip_after: 0x1006,
        };
        assert_eq!(past.state(&mem), PioState::AlreadyPast);
        let pending = PioCompletion {
            rip_at_exit: 0x1005,
            rip_after: 0x1005,
        };
        assert_eq!(pending.state(&mem), PioState::NotCompleted);
        let elsewhere = PioCompletion {
            rip_at_exit: 0x1001,
            rip_after: 0x1002,
        };
        assert_eq!(elsewhere.state(&mem), PioState::NotCompleted);
        assert_eq!(done.state(|_| None), PioState::NotCompleted);
    }
}
