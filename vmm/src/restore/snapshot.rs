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
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

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
    /// The indices of the pages of `mem` that are not zero, ascending.
    pub pages: Vec<usize>,
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

    /// Writes the saved memory into `mem` (a fresh VM's): a page the guest
    /// had written, or one `mem` holds already (the image, the config), is
    /// compared and written where it differs; a page neither touched is
    /// zero on both sides and left alone, never faulted in. `mem` then
    /// equals the snapshot.
    pub fn restore_memory(&self, mem: &GuestMemoryMmap) -> Result<(), MemError> {
        let here = touched_pages(mem, self.mem.len());
        let mut now = [0u8; PAGE];
        for (i, saved) in self.mem.chunks(PAGE).enumerate() {
            let needed = self.pages.binary_search(&i).is_ok() || may_be_backed(here.as_deref(), i);
            if !needed {
                continue;
            }
            let at = GuestAddress((i * PAGE) as u64);
            let now = now.get_mut(..saved.len()).unwrap_or_default();
            mem.read_slice(now, at)
                .map_err(|e| MemError(e.to_string()))?;
            if now != saved {
                mem.write_slice(saved, at)
                    .map_err(|e| MemError(e.to_string()))?;
            }
        }
        Ok(())
    }
}

/// The unit of the memory copies: a host page.
const PAGE: usize = 4096;

/// Which of the first `len` bytes' pages of `mem` the host has ever had to
/// back, from /proc/self/pagemap (bit 63: present, bit 62: swapped); `None`
/// when it cannot be read. Guest memory is private anonymous memory, so a
/// page that is neither present nor swapped was never written and reads as
/// zero. Reading such a page would cost it a page fault (the guest touches a
/// few dozen of its 4,096 pages).
fn touched_pages(mem: &GuestMemoryMmap, len: usize) -> Option<Vec<bool>> {
    use std::io::{Read, Seek, SeekFrom};
    // One region from address 0 holding all `len` bytes: its host pages
    // follow each other.
    let region = mem.iter().next()?;
    if mem.iter().count() != 1 || region.start_addr().0 != 0 || (region.len() as usize) < len {
        return None;
    }
    let base = mem.get_host_address(GuestAddress(0)).ok()? as usize;
    if base % PAGE != 0 {
        return None;
    }
    let pages = len.div_ceil(PAGE);
    let mut raw = vec![0u8; pages * 8];
    let mut f = std::fs::File::open("/proc/self/pagemap").ok()?;
    f.seek(SeekFrom::Start((base / PAGE * 8) as u64)).ok()?;
    f.read_exact(&mut raw).ok()?;
    Some(
        raw.chunks_exact(8)
            .map(|e| {
                let word = u64::from_le_bytes(e.try_into().unwrap_or([0xff; 8]));
                word & (3 << 62) != 0
            })
            .collect(),
    )
}

/// Whether page `i` may hold something other than zeros: the host backed it
/// ([`touched_pages`]), or `touched` is `None` because that is unknown.
fn may_be_backed(touched: Option<&[bool]>, i: usize) -> bool {
    touched.is_none_or(|t| t.get(i).copied().unwrap_or(true))
}

/// Guest memory from address 0, `len` bytes, into a zeroed buffer, and the
/// indices of its pages that are not zero (ascending). Only the pages the
/// host backs ([`touched_pages`]) are read, and only those not zero are
/// written: the others stay unfaulted on both sides.
pub fn save_memory(mem: &GuestMemoryMmap, len: usize) -> Result<(Vec<u8>, Vec<usize>), MemError> {
    let touched = touched_pages(mem, len);
    let mut out = vec![0u8; len];
    let mut nonzero = Vec::new();
    let mut page = [0u8; PAGE];
    for (i, dst) in out.chunks_mut(PAGE).enumerate() {
        if !may_be_backed(touched.as_deref(), i) {
            continue;
        }
        let page = page.get_mut(..dst.len()).unwrap_or_default();
        mem.read_slice(page, GuestAddress((i * PAGE) as u64))
            .map_err(|e| MemError(e.to_string()))?;
        if page.iter().any(|&b| b != 0) {
            dst.copy_from_slice(page);
            nonzero.push(i);
        }
    }
    Ok((out, nonzero))
}

/// The byte at guest address `addr` of a memory image.
pub fn byte(mem: &[u8], addr: u64) -> Option<u8> {
    usize::try_from(addr).ok().and_then(|a| mem.get(a)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(len: usize) -> GuestMemoryMmap {
        GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), len)]).expect("anonymous memory")
    }

    /// What the guest wrote is saved, what it never touched is zero, and a
    /// restore into memory that holds something else (a fresh VM's image)
    /// makes it equal to the snapshot.
    #[test]
    fn memory_round_trips_through_a_snapshot() {
        let len = 64 * PAGE;
        let src = memory(len);
        src.write_slice(&[7u8; 10], GuestAddress(3 * PAGE as u64 + 5))
            .expect("write");
        src.write_slice(&[0u8; PAGE], GuestAddress(9 * PAGE as u64))
            .expect("a touched page that stays zero");
        src.write_obj(0xdead_beefu32, GuestAddress(len as u64 - 4))
            .expect("write");
        let (mem, pages) = save_memory(&src, len).expect("saved");
        assert_eq!(pages, [3, 63]);
        let mut all = vec![0u8; len];
        src.read_slice(&mut all, GuestAddress(0)).expect("read");
        assert_eq!(mem, all);

        let dst = memory(len);
        dst.write_slice(&[1u8; 100], GuestAddress(3 * PAGE as u64))
            .expect("the destination's own contents");
        dst.write_slice(&[2u8; 100], GuestAddress(20 * PAGE as u64))
            .expect("the destination's own contents");
        let snap = Snapshot {
            vcpus: Vec::new(),
            mem,
            pages,
            clock: Err("none".into()),
            next_command: 0,
            kvmclock_msrs: Vec::new(),
        };
        snap.restore_memory(&dst).expect("restored");
        let mut back = vec![0u8; len];
        dst.read_slice(&mut back, GuestAddress(0)).expect("read");
        assert!(back == all, "the restored memory equals the saved");
    }
}
