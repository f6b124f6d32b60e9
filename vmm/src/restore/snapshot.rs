//! A snapshot of a command-mode VM whose vCPUs are all parked, and putting
//! it into a fresh VM.
//!
//! What is saved: guest memory (all of it), and per vCPU its general and
//! special registers, FPU state, pending events (exceptions, NMI, interrupt
//! shadow), debug registers and TSC state (IA32_TSC_ADJUST, IA32_TSC
//! between two host TSC reads, the exact offset, KVM_GET_TSC_KHZ); for the
//! VM, KVM_GET_CLOCK between two host TSC reads; and every vCPU's
//! MSR_KVM_SYSTEM_TIME_NEW, without which the restored vCPUs' kvmclock pages
//! would never be written again. There is no in-kernel
//! irqchip, so no LAPIC, IOAPIC or PIT state; the CPUID is the one every VM
//! of this tool gets.
//!
//! Per vCPU the state is [`crate::vstate::VcpuState`], saved on the vCPU's
//! own thread with its pending port I/O completed first; this module checks
//! that completion against the saved memory.

use serde::Serialize;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::offsets::ClockSample;
pub use crate::tsc::clock::get_clock;
use crate::tsc::TscState;
use crate::vstate::vcpu::state::{PioCompletion, PioState, VcpuState};
use crate::vstate::MemError;

/// A whole VM's snapshot.
pub struct Snapshot {
    /// Every vCPU's state, index = vCPU.
    pub vcpus: Vec<VcpuState>,
    /// Guest memory from address 0.
    pub mem: Vec<u8>,
    /// KVM_GET_CLOCK of the source, or why it failed.
    pub clock: Result<ClockSample, String>,
    /// The number of the command the guest will report done next.
    pub next_command: u32,
    /// Every vCPU's MSR_KVM_SYSTEM_TIME_NEW (`None` without kvmclock).
    pub kvmclock_msrs: Vec<Option<u64>>,
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
    /// Its MSR_KVM_SYSTEM_TIME_NEW (its kvmclock page's address, bit 0 =
    /// enabled), written back by the restore; `None` without kvmclock.
    pub kvmclock_msr: Option<u64>,
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
    /// What a report keeps of it.
    pub fn info(&self) -> SnapshotInfo {
        SnapshotInfo {
            vcpus: self
                .vcpus
                .iter()
                .enumerate()
                .map(|(i, v)| VcpuSaved {
                    tsc: v.tsc,
                    pio: v.pio,
                    pio_state: v.pio.state(|a| byte(&self.mem, a)),
                    kvmclock_msr: self.kvmclock_msrs.get(i).copied().flatten(),
                })
                .collect(),
            clock: self.clock.as_ref().ok().copied(),
            clock_error: self.clock.as_ref().err().cloned(),
            memory_bytes: self.mem.len(),
            next_command: self.next_command,
        }
    }

    /// Writes the saved memory into `mem`.
    pub fn restore_memory(&self, mem: &GuestMemoryMmap) -> Result<(), MemError> {
        mem.write_slice(&self.mem, GuestAddress(0))
            .map_err(|e| MemError(e.to_string()))
    }
}

/// The byte at guest address `addr` of a memory image.
pub fn byte(mem: &[u8], addr: u64) -> Option<u8> {
    usize::try_from(addr).ok().and_then(|a| mem.get(a)).copied()
}
