//! The guest's memory as the host reads and writes it, at the addresses the
//! contract crate lays out: the config, the rendezvous' shared state, the
//! command slots, the records, the progress slots, Linux's result slots.
//! Writes happen only while every vCPU is parked (or before any runs); what
//! is read is untrusted and decoded with checks by whoever uses it.

use tsc_contract::{
    handoff, layout, ClockRecord, CommandSlot, Config, HandoffError, HandoffResult,
    PvclockTimeInfo, RoundRecord, Variant, CLOCK_RECORD_SIZE, COMMAND_SLOT_SIZE,
    HANDOFF_RESULT_SIZE, PVCLOCK_TIME_INFO_SIZE, RECORD_SIZE,
};
use tsc_sync::handoff::HANDOFF_SHARED_SIZE;
use tsc_sync::SHARED_SIZE;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// A guest memory access that failed.
#[derive(Debug, thiserror::Error)]
#[error("guest memory: {0}")]
pub struct MemError(pub String);

fn mem_err(e: impl std::fmt::Display) -> MemError {
    MemError(e.to_string())
}

/// Writes `words` little-endian from `addr`.
pub fn write_u64s(mem: &GuestMemoryMmap, words: &[u64], addr: u64) -> Result<(), MemError> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write_slice(&bytes, GuestAddress(addr)).map_err(mem_err)
}

/// Writes the config the guest reads.
pub fn write_config(mem: &GuestMemoryMmap, c: &Config) -> Result<(), MemError> {
    mem.write_slice(&c.to_bytes(), GuestAddress(layout::CONFIG))
        .map_err(mem_err)
}

/// Reads vCPU `vcpu`'s progress slot (raw, untrusted: decode it with
/// [`tsc_contract::Progress::decode`]).
pub fn read_progress(mem: &GuestMemoryMmap, vcpu: u32) -> Option<u64> {
    mem.read_obj(GuestAddress(layout::progress(vcpu))).ok()
}

/// Sets the variant of the next round (all vCPUs must be parked).
pub fn set_variant(mem: &GuestMemoryMmap, variant: Variant) -> Result<(), MemError> {
    let offset = std::mem::offset_of!(Config, variant) as u64;
    mem.write_obj(variant as u32, GuestAddress(layout::CONFIG + offset))
        .map_err(mem_err)
}

/// Zeroes the rendezvous' shared state: Xen starts every calibration with a
/// fresh one; and Linux's sync's and the hand-off test's (all vCPUs must be
/// parked).
pub fn reset_rendezvous(mem: &GuestMemoryMmap) -> Result<(), MemError> {
    mem.write_slice(&[0u8; SHARED_SIZE], GuestAddress(layout::RENDEZVOUS))
        .and_then(|()| {
            mem.write_slice(
                &[0u8; tsc_sync::linux::LINUX_SHARED_SIZE],
                GuestAddress(layout::SYNC),
            )
        })
        .and_then(|()| mem.write_slice(&[0u8; HANDOFF_SHARED_SIZE], GuestAddress(layout::HANDOFF)))
        .map_err(mem_err)
}

/// Why the hand-off test's results cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HandoffReadError {
    /// A guest memory read failed.
    #[error("{0}")]
    Memory(#[from] MemError),
    /// A pair's result is not what the test asked for.
    #[error("the hand-off result of pair ({a}, {b}) is invalid: {error}")]
    Invalid {
        /// The initiator.
        a: u32,
        /// The responder.
        b: u32,
        /// What is wrong with it.
        error: HandoffError,
    },
    /// The test cannot have this many pairs.
    #[error("{vcpus} vCPUs have more ordered pairs than the layout holds ({max})")]
    TooManyPairs {
        /// vCPUs.
        vcpus: u32,
        /// The layout's limit.
        max: u32,
    },
}

/// Reads and validates every pair's result of the hand-off test tagged `tag`
/// on `vcpus` vCPUs (every ordered pair when `all`, else vCPU 0's) with
/// `exchanges` exchanges each, into `out` in pair order.
pub fn read_handoff(
    mem: &GuestMemoryMmap,
    vcpus: u32,
    all: bool,
    tag: u32,
    exchanges: u32,
    out: &mut Vec<HandoffResult>,
) -> Result<(), HandoffReadError> {
    out.clear();
    let pairs = handoff::pairs(vcpus, all).ok_or(HandoffReadError::TooManyPairs {
        vcpus,
        max: handoff::MAX_PAIRS,
    })?;
    for p in 0..pairs {
        let Some((a, b)) = handoff::pair(p, vcpus, all) else {
            break;
        };
        let mut buf = [0u8; HANDOFF_RESULT_SIZE];
        mem.read_slice(&mut buf, GuestAddress(layout::handoff_result(p)))
            .map_err(mem_err)?;
        let r = HandoffResult::from_bytes(&buf)
            .ok_or_else(|| MemError("short hand-off result".into()))?;
        r.validate(a, b, tag, exchanges)
            .map_err(|error| HandoffReadError::Invalid { a, b, error })?;
        out.push(r);
    }
    Ok(())
}

/// Reads the rendezvous semaphore (for diagnostics).
pub fn read_semaphore(mem: &GuestMemoryMmap) -> Option<u32> {
    mem.read_obj(GuestAddress(layout::RENDEZVOUS)).ok()
}

/// Writes vCPU `index`'s command slot (the vCPU must be parked).
pub fn write_command(mem: &GuestMemoryMmap, index: u32, c: &CommandSlot) -> Result<(), MemError> {
    mem.write_slice(&c.to_bytes(), GuestAddress(layout::command(index)))
        .map_err(mem_err)
}

/// Reads vCPU `index`'s command slot.
pub fn read_command(mem: &GuestMemoryMmap, index: u32) -> Result<CommandSlot, MemError> {
    let mut b = [0u8; COMMAND_SLOT_SIZE];
    mem.read_slice(&mut b, GuestAddress(layout::command(index)))
        .map_err(mem_err)?;
    CommandSlot::from_bytes(&b).ok_or_else(|| MemError("short command slot".into()))
}

/// Zeroes the warp test's shared state (all vCPUs must be parked).
pub fn reset_warp(mem: &GuestMemoryMmap) -> Result<(), MemError> {
    mem.write_slice(
        &[0u8; tsc_sync::warp::WARP_SHARED_SIZE],
        GuestAddress(layout::WARP),
    )
    .map_err(mem_err)
}

/// Zeroes every vCPU's result slot of Linux's sync, so that a slot the guest
/// did not write this round cannot pass for a result (all vCPUs must be
/// parked; the protocol's own state is zeroed with the rendezvous').
pub fn clear_sync_results(mem: &GuestMemoryMmap, vcpus: u32) -> Result<(), MemError> {
    let zero = [0u8; layout::SYNC_RESULT_SIZE as usize];
    (0..vcpus)
        .try_for_each(|i| mem.write_slice(&zero, GuestAddress(layout::sync_result(i))))
        .map_err(mem_err)
}

/// Reads every vCPU's record (raw: validate it before use) into `out`,
/// reusing its storage. `Err(vcpu)`: that vCPU's record cannot be read.
pub fn read_records(
    mem: &GuestMemoryMmap,
    vcpus: u32,
    out: &mut Vec<RoundRecord>,
) -> Result<(), u32> {
    out.clear();
    for vcpu in 0..vcpus {
        let mut buf = [0u8; RECORD_SIZE];
        let record = mem
            .read_slice(&mut buf, GuestAddress(layout::record(vcpu)))
            .ok()
            .and_then(|()| RoundRecord::from_bytes(&buf))
            .ok_or(vcpu)?;
        out.push(record);
    }
    Ok(())
}

/// vCPU `vcpu`'s kvmclock page as it is now (raw, untrusted).
pub fn read_pvclock(mem: &GuestMemoryMmap, vcpu: u32) -> Result<PvclockTimeInfo, MemError> {
    let mut b = [0u8; PVCLOCK_TIME_INFO_SIZE];
    mem.read_slice(&mut b, GuestAddress(layout::pvclock(vcpu)))
        .map_err(mem_err)?;
    PvclockTimeInfo::from_bytes(&b).ok_or_else(|| MemError("short kvmclock page".into()))
}

/// vCPU `vcpu`'s clock record (raw, untrusted: check it with
/// [`ClockRecord::is_for`]).
pub fn read_clock_record(mem: &GuestMemoryMmap, vcpu: u32) -> Result<ClockRecord, MemError> {
    let mut b = [0u8; CLOCK_RECORD_SIZE];
    mem.read_slice(&mut b, GuestAddress(layout::clock_record(vcpu)))
        .map_err(mem_err)?;
    ClockRecord::from_bytes(&b).ok_or_else(|| MemError("short clock record".into()))
}
