//! x86-64 guest setup: long mode entered directly, without firmware.

pub mod cpuid;
pub mod gdt;
pub mod paging;
pub mod regs;
