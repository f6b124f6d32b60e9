//! A snapshot of a command-mode VM whose vCPUs are all parked, and putting
//! it into a fresh VM.
//!
//! What is saved: guest memory (all of it), and per vCPU its general and
//! special registers, FPU state, pending events (exceptions, NMI, interrupt
//! shadow), debug registers and TSC state (IA32_TSC_ADJUST, IA32_TSC
//! between two host TSC reads, the exact offset, KVM_GET_TSC_KHZ); for the
//! VM, KVM_GET_CLOCK between two host TSC reads. There is no in-kernel
//! irqchip, so no LAPIC, IOAPIC or PIT state; the CPUID is the one every VM
//! of this tool gets.
//!
//! The pending port I/O: a parked vCPU sits at its `out` to COMMAND_DONE.
//! KVM finishes that instruction (advances RIP past it) only on the next
//! KVM_RUN, and keeps that pending state out of everything userspace can
//! read (api.rst, KVM_RUN: "userspace should ensure that the operation is
//! completed before performing a live migration"). So before saving, each
//! vCPU thread runs KVM_RUN once with `immediate_exit` set: KVM completes the
//! I/O, then returns EINTR without running a guest instruction. The RIP
//! before and after, and the byte it stepped over, are kept as evidence.

use std::fmt;

use kvm_bindings::{kvm_debugregs, kvm_fpu, kvm_regs, kvm_sregs, kvm_vcpu_events};
use kvm_ioctls::{VcpuFd, VmFd};
use serde::Serialize;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::offsets::ClockSample;
use super::RestoreError;
use crate::session::Session;
use crate::tsc::{self, host_rdtsc, MsrReader, OffsetReader, TscError, TscState};

/// The opcode of `out dx, eax`, the guest's report to COMMAND_DONE.
pub const OUT_DX_EAX: u8 = 0xef;

/// Why a vCPU's state could not be saved.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum SaveError {
    /// {0} failed: {1}
    Kvm(&'static str, #[source] kvm_ioctls::Error),
    /// KVM_RUN with immediate_exit set ran the guest instead of returning EINTR (exit: {0}); this KVM cannot complete pending I/O without running the guest
    Ran(String),
    /// {0}
    Tsc(#[from] TscError),
}

/// A vCPU's answer to a save request: its state, or why it could not be
/// saved.
pub type Saved = Result<Box<VcpuSnapshot>, SaveError>;

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
pub struct VcpuSnapshot {
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

impl fmt::Debug for VcpuSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VcpuSnapshot")
            .field("rip", &format_args!("{:#x}", self.regs.rip))
            .field("rsp", &format_args!("{:#x}", self.regs.rsp))
            .field("tsc", &self.tsc)
            .field("pio", &self.pio)
            .finish_non_exhaustive()
    }
}

/// Completes the vCPU's pending I/O (KVM_RUN with `immediate_exit`), then
/// saves its state. Called on the vCPU's own thread while it is parked.
pub fn save_vcpu(
    fd: &mut VcpuFd,
    offsets: &OffsetReader,
    msrs: Option<&mut MsrReader>,
) -> Result<VcpuSnapshot, SaveError> {
    let kvm = |what: &'static str| move |e: kvm_ioctls::Error| SaveError::Kvm(what, e);
    let rip_at_exit = fd.get_regs().map_err(kvm("KVM_GET_REGS"))?.rip;
    fd.set_kvm_immediate_exit(1);
    let ran = match fd.run() {
        Err(e) if e.errno() == libc::EINTR => Ok(()),
        Err(e) => Err(SaveError::Kvm("KVM_RUN (immediate_exit)", e)),
        Ok(exit) => Err(SaveError::Ran(format!("{exit:?}"))),
    };
    fd.set_kvm_immediate_exit(0);
    ran?;
    let regs = fd.get_regs().map_err(kvm("KVM_GET_REGS"))?;
    let tsc = match msrs {
        Some(m) => tsc::read_with(fd, offsets, m)?,
        None => tsc::read(fd, offsets)?,
    };
    Ok(VcpuSnapshot {
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
pub fn restore_vcpu(vcpu: u32, fd: &VcpuFd, s: &VcpuSnapshot) -> Result<(), RestoreError> {
    let kvm = |what: &'static str| {
        move |source: kvm_ioctls::Error| RestoreError::Vcpu { vcpu, what, source }
    };
    fd.set_sregs(&s.sregs).map_err(kvm("KVM_SET_SREGS"))?;
    fd.set_regs(&s.regs).map_err(kvm("KVM_SET_REGS"))?;
    fd.set_fpu(&s.fpu).map_err(kvm("KVM_SET_FPU"))?;
    fd.set_vcpu_events(&s.events)
        .map_err(kvm("KVM_SET_VCPU_EVENTS"))?;
    fd.set_debug_regs(&s.debugregs)
        .map_err(kvm("KVM_SET_DEBUGREGS"))
}

/// A whole VM's snapshot.
pub struct Snapshot {
    /// Every vCPU's state, index = vCPU.
    pub vcpus: Vec<VcpuSnapshot>,
    /// Guest memory from address 0.
    pub mem: Vec<u8>,
    /// KVM_GET_CLOCK of the source, or why it failed.
    pub clock: Result<ClockSample, String>,
    /// The number of the command the guest will report done next.
    pub next_command: u32,
}

/// What a report keeps of one vCPU's snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct VcpuSaved {
    /// The TSC state saved.
    pub tsc: TscState,
    /// RIP around the completing KVM_RUN.
    pub pio: PioCompletion,
    /// How the pending I/O ended.
    pub pio_state: PioState,
}

/// What a report keeps of a snapshot (not the memory and registers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SnapshotInfo {
    /// Per vCPU.
    pub vcpus: Vec<VcpuSaved>,
    /// KVM_GET_CLOCK of the source.
    pub clock: Option<ClockSample>,
    /// Why KVM_GET_CLOCK failed, when it did.
    pub clock_error: Option<String>,
    /// Bytes of guest memory saved.
    pub memory_bytes: usize,
    /// The command the guest reports next.
    pub next_command: u32,
}

impl Snapshot {
    /// Saves every (parked) vCPU of `s` and the VM: each vCPU's pending port
    /// I/O is completed first, and must have been (else the restored guest
    /// would report its last command again).
    pub fn take(s: &mut Session) -> Result<Snapshot, RestoreError> {
        let saved = s.save_vcpus()?;
        let mut vcpus = Vec::with_capacity(saved.len());
        for (i, r) in saved.into_iter().enumerate() {
            let vcpu = i as u32;
            vcpus.push(*r.map_err(|error| RestoreError::Save { vcpu, error })?);
        }
        let mem_len = usize::try_from(tsc_contract::layout::MEM_SIZE)
            .map_err(|e| RestoreError::Memory(e.to_string()))?;
        let mut mem = vec![0u8; mem_len];
        s.mem()
            .read_slice(&mut mem, GuestAddress(0))
            .map_err(|e| RestoreError::Memory(e.to_string()))?;
        for (i, v) in vcpus.iter().enumerate() {
            if v.pio.state(|a| byte(&mem, a)) == PioState::NotCompleted {
                return Err(RestoreError::PioNotCompleted {
                    vcpu: i as u32,
                    rip_at_exit: v.pio.rip_at_exit,
                    rip_after: v.pio.rip_after,
                });
            }
        }
        let clock = match s.vm_fd() {
            Some(fd) => get_clock(fd),
            None => Err("the VM is gone".into()),
        };
        Ok(Snapshot {
            vcpus,
            mem,
            clock,
            next_command: s.next_command(),
        })
    }

    /// What a report keeps of it.
    pub fn info(&self) -> SnapshotInfo {
        SnapshotInfo {
            vcpus: self
                .vcpus
                .iter()
                .map(|v| VcpuSaved {
                    tsc: v.tsc,
                    pio: v.pio,
                    pio_state: v.pio.state(|a| byte(&self.mem, a)),
                })
                .collect(),
            clock: self.clock.as_ref().ok().copied(),
            clock_error: self.clock.as_ref().err().cloned(),
            memory_bytes: self.mem.len(),
            next_command: self.next_command,
        }
    }

    /// Writes the saved memory into `mem`.
    pub fn restore_memory(&self, mem: &GuestMemoryMmap) -> Result<(), RestoreError> {
        mem.write_slice(&self.mem, GuestAddress(0))
            .map_err(|e| RestoreError::Memory(e.to_string()))
    }
}

fn byte(mem: &[u8], addr: u64) -> Option<u8> {
    usize::try_from(addr).ok().and_then(|a| mem.get(a)).copied()
}

/// KVM_GET_CLOCK between two host TSC reads.
pub fn get_clock(fd: &VmFd) -> Result<ClockSample, String> {
    let before = host_rdtsc();
    let d = fd
        .get_clock()
        .map_err(|e| format!("KVM_GET_CLOCK failed: {e}"))?;
    let after = host_rdtsc();
    Ok(ClockSample::from_kvm(&d, before, after))
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
