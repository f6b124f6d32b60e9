//! kvmclock in the guest: registering each vCPU's page, and what kvmclock
//! does around a write of a TSC MSR (recorded for the host in the vCPU's
//! [`ClockRecord`]): a command's write between two reads, or a round's
//! final write between a read before it and one after the loop. The reading itself is `tsc_sync::pvclock`'s, the same
//! code the host-thread tests run.

use core::ptr::write_volatile;

use tsc_contract::{layout, ClockRecord, CLOCK_MAGIC, MSR_KVM_SYSTEM_TIME_NEW};
use tsc_sync::pvclock::{self, PvclockPage, PvclockReading};

use crate::cpu::{self, Hw};

/// The MSR a round's write goes to.
const IA32_TSC: u32 = 0x10;

/// vCPU `index`'s kvmclock page.
pub fn page(index: u32) -> &'static PvclockPage {
    // SAFETY: the page is guest RAM reserved for this vCPU's kvmclock
    // (layout::pvclock, 32-byte aligned, MAX_VCPUS of them; index was
    // checked against the config); PvclockPage is made of atomics, so
    // racing with the hypervisor's updates is sound.
    unsafe { &*(layout::pvclock(index) as *const PvclockPage) }
}

/// Registers vCPU `index`'s page with KVM (MSR_KVM_SYSTEM_TIME_NEW, bit 0
/// enables it). KVM fills it before the vCPU next runs.
pub fn enable(index: u32) {
    cpu::wrmsr(MSR_KVM_SYSTEM_TIME_NEW, layout::pvclock(index) | 1);
}

/// Reads kvmclock now (the version protocol, a bounded number of retries).
pub fn now(ops: &mut Hw, index: u32) -> PvclockReading {
    pvclock::read(page(index), ops, 1_000)
}

/// Writes MSR `msr` = `value` between two kvmclock reads and keeps what
/// they saw in vCPU `index`'s clock record, tagged `tag`.
pub fn clocked_write(ops: &mut Hw, index: u32, msr: u32, value: u64, tag: u32) {
    let before = now(ops, index);
    cpu::wrmsr(msr, value);
    let after = now(ops, index);
    store(index, msr, value, tag, &before, &after);
}

/// After a round's loop: reads kvmclock again and keeps, in vCPU `index`'s
/// clock record tagged `round`, what it saw across the IA32_TSC write of
/// `written` since `before` (read just before the write).
pub fn after_round(ops: &mut Hw, index: u32, written: u64, round: u32, before: &PvclockReading) {
    let after = now(ops, index);
    store(index, IA32_TSC, written, round, before, &after);
}

/// Writes vCPU `index`'s clock record, one volatile store per field (no SSE
/// moves).
fn store(index: u32, msr: u32, written: u64, tag: u32, b: &PvclockReading, a: &PvclockReading) {
    let r = ClockRecord {
        magic: CLOCK_MAGIC,
        tag,
        msr,
        version_before: b.version,
        version_after: a.version,
        flags: u32::from(b.flags) | (u32::from(a.flags) << 8),
        mul_before: b.mul,
        mul_after: a.mul,
        shifts: u32::from(b.shift as u8) | (u32::from(a.shift as u8) << 8),
        reserved: 0,
        written,
        tsc_timestamp_before: b.tsc_timestamp,
        tsc_timestamp_after: a.tsc_timestamp,
        system_time_before: b.system_time,
        system_time_after: a.system_time,
        tsc_before: b.tsc,
        tsc_after: a.tsc,
        kvmclock_before: b.ns,
        kvmclock_after: a.ns,
    };
    let p = layout::clock_record(index) as *mut ClockRecord;
    // SAFETY: vCPU `index`'s clock record slot is guest RAM reserved for it
    // (layout::clock_record, MAX_VCPUS of them), written by this vCPU only.
    unsafe {
        write_volatile(&raw mut (*p).magic, r.magic);
        write_volatile(&raw mut (*p).tag, r.tag);
        write_volatile(&raw mut (*p).msr, r.msr);
        write_volatile(&raw mut (*p).version_before, r.version_before);
        write_volatile(&raw mut (*p).version_after, r.version_after);
        write_volatile(&raw mut (*p).flags, r.flags);
        write_volatile(&raw mut (*p).mul_before, r.mul_before);
        write_volatile(&raw mut (*p).mul_after, r.mul_after);
        write_volatile(&raw mut (*p).shifts, r.shifts);
        write_volatile(&raw mut (*p).reserved, r.reserved);
        write_volatile(&raw mut (*p).written, r.written);
        write_volatile(&raw mut (*p).tsc_timestamp_before, r.tsc_timestamp_before);
        write_volatile(&raw mut (*p).tsc_timestamp_after, r.tsc_timestamp_after);
        write_volatile(&raw mut (*p).system_time_before, r.system_time_before);
        write_volatile(&raw mut (*p).system_time_after, r.system_time_after);
        write_volatile(&raw mut (*p).tsc_before, r.tsc_before);
        write_volatile(&raw mut (*p).tsc_after, r.tsc_after);
        write_volatile(&raw mut (*p).kvmclock_before, r.kvmclock_before);
        write_volatile(&raw mut (*p).kvmclock_after, r.kvmclock_after);
    }
}
