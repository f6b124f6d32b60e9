//! kvmclock as a guest reads it: the per-vCPU `pvclock_vcpu_time_info` page
//! the hypervisor keeps ([`PvclockPage`]), read with the version protocol
//! (an odd version means an update is under way; a version that changed
//! during the read means the fields may be torn: read again), and turned
//! into nanoseconds with the page's scale (`system_time + ((tsc -
//! tsc_timestamp) << shift) * mul >> 32`, the shift right when negative, the
//! product in 128 bits). No floating point: the guest has no SSE.

use core::sync::atomic::{AtomicI8, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::Cpu;

/// [`PvclockPage::flags`]: every vCPU's kvmclock comes from one master
/// clock, so kvmclock is the same on every vCPU (KVM's master clock is on).
pub const PVCLOCK_TSC_STABLE_BIT: u8 = 1 << 0;
/// [`PvclockPage::flags`]: the VM was stopped (by the host).
pub const PVCLOCK_GUEST_STOPPED: u8 = 1 << 1;

/// `struct pvclock_vcpu_time_info`, as the hypervisor writes it (little
/// endian, 32 bytes), each field an atomic so that a concurrent writer
/// (the hypervisor, or a test's thread) is sound to race with.
#[repr(C, align(32))]
#[derive(Debug, Default)]
pub struct PvclockPage {
    /// Odd while the hypervisor updates the page.
    pub version: AtomicU32,
    /// Padding.
    pub pad0: AtomicU32,
    /// The guest TSC at which `system_time` was true.
    pub tsc_timestamp: AtomicU64,
    /// kvmclock at `tsc_timestamp`, ns.
    pub system_time: AtomicU64,
    /// The TSC-to-ns multiplier (a 32.32 fixed-point fraction after the shift).
    pub tsc_to_system_mul: AtomicU32,
    /// The shift applied to a TSC delta before the multiplication.
    pub tsc_shift: AtomicI8,
    /// `PVCLOCK_*` flags.
    pub flags: AtomicU8,
    /// Padding.
    pub pad: [AtomicU8; 2],
}

/// Size of [`PvclockPage`]: 32 bytes, as the ABI has it.
pub const PVCLOCK_PAGE_SIZE: usize = 32;
const _: () = assert!(core::mem::size_of::<PvclockPage>() == PVCLOCK_PAGE_SIZE);
const _: () = assert!(core::mem::offset_of!(PvclockPage, tsc_timestamp) == 8);
const _: () = assert!(core::mem::offset_of!(PvclockPage, system_time) == 16);
const _: () = assert!(core::mem::offset_of!(PvclockPage, tsc_to_system_mul) == 24);
const _: () = assert!(core::mem::offset_of!(PvclockPage, tsc_shift) == 28);
const _: () = assert!(core::mem::offset_of!(PvclockPage, flags) == 29);
// The same layout as the contract's plain view of the page.
const _: () = assert!(PVCLOCK_PAGE_SIZE == tsc_contract::PVCLOCK_TIME_INFO_SIZE);
const _: () = assert!(PVCLOCK_TSC_STABLE_BIT == tsc_contract::PVCLOCK_TSC_STABLE_BIT);

/// One consistent read of a page, and the kvmclock it gives at `tsc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PvclockReading {
    /// The (even) version the fields were read under.
    pub version: u32,
    /// `PVCLOCK_*` flags.
    pub flags: u8,
    /// The page's TSC timestamp.
    pub tsc_timestamp: u64,
    /// The page's system time, ns.
    pub system_time: u64,
    /// The page's multiplier.
    pub mul: u32,
    /// The page's shift.
    pub shift: i8,
    /// The TSC read inside the read (ordered).
    pub tsc: u64,
    /// kvmclock at `tsc`, ns.
    pub ns: u64,
    /// How many times the read had to start again (odd or changed version).
    pub retries: u32,
}

/// `delta` TSC cycles in ns by the page's scale: shifted left by `shift`
/// (right when negative), times `mul`, over 2^32; wrapping like the kernel's
/// `pvclock_scale_delta` (a shift of 64 or more leaves nothing).
pub fn scale_delta(delta: u64, mul: u32, shift: i8) -> u64 {
    let d = if shift < 0 {
        delta
            .checked_shr(u32::from(shift.unsigned_abs()))
            .unwrap_or(0)
    } else {
        delta.checked_shl(shift as u32).unwrap_or(0)
    };
    ((u128::from(d) * u128::from(mul)) >> 32) as u64
}

/// kvmclock at guest TSC `tsc` by a page's fields: `system_time` plus the
/// scaled distance from `tsc_timestamp`, which wraps as the kernel's
/// unsigned arithmetic does (a TSC below the timestamp, e.g. after a
/// backwards TSC write the page did not follow, gives a huge value).
pub fn kvmclock_at(tsc: u64, tsc_timestamp: u64, system_time: u64, mul: u32, shift: i8) -> u64 {
    system_time.wrapping_add(scale_delta(tsc.wrapping_sub(tsc_timestamp), mul, shift))
}

/// Reads `page` with the version protocol, the TSC read in the middle (as
/// Linux's `__pvclock_read_cycles`), at most `max_retries` times over (then
/// the last, possibly torn, read is returned with `retries` saying so).
pub fn read<C: Cpu>(page: &PvclockPage, ops: &mut C, max_retries: u32) -> PvclockReading {
    let mut retries = 0;
    loop {
        let version = page.version.load(Ordering::Acquire);
        let tsc_timestamp = page.tsc_timestamp.load(Ordering::Acquire);
        let system_time = page.system_time.load(Ordering::Acquire);
        let mul = page.tsc_to_system_mul.load(Ordering::Acquire);
        let shift = page.tsc_shift.load(Ordering::Acquire);
        let flags = page.flags.load(Ordering::Acquire);
        let tsc = ops.rdtsc_ordered();
        let again = page.version.load(Ordering::Acquire);
        let torn = version & 1 == 1 || again != version;
        if !torn || retries >= max_retries {
            return PvclockReading {
                version,
                flags,
                tsc_timestamp,
                system_time,
                mul,
                shift,
                tsc,
                ns: kvmclock_at(tsc, tsc_timestamp, system_time, mul, shift),
                retries,
            };
        }
        retries += 1;
        ops.relax();
    }
}

/// A CPU whose "TSC" is its kvmclock: the same algorithms (the forced
/// hand-off test) then measure kvmclock across vCPUs, in ns. A write of the
/// TSC is not allowed through it (nothing here writes one).
pub struct KvmclockCpu<'a, C: Cpu> {
    /// The CPU whose pages are read.
    pub inner: &'a mut C,
    /// This vCPU's page.
    pub page: &'a PvclockPage,
}

impl<C: Cpu> Cpu for KvmclockCpu<'_, C> {
    fn rdtsc_ordered(&mut self) -> u64 {
        read(self.page, self.inner, 1_000).ns
    }
    fn write_tsc(&mut self, value: u64) {
        // The hand-off test writes nothing; a caller that did would be
        // writing the real TSC, which this view does not own.
        let _ = value;
    }
    fn relax(&mut self) {
        self.inner.relax();
    }
}
