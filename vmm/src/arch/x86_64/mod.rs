//! x86-64 guest setup: long mode entered directly, without firmware.

pub mod cpuid;
pub mod gdt;
pub mod paging;
pub mod regs;

/// IA32_TSC.
pub const MSR_IA32_TSC: u32 = 0x10;
/// IA32_TSC_ADJUST.
pub const MSR_IA32_TSC_ADJUST: u32 = 0x3b;
