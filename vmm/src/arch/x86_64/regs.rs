//! Register state of a vCPU at entry: long mode with paging, interrupts off,
//! `rip` at the guest's entry point, `rsp` at its own stack, `rdi` its index.

use kvm_bindings::{kvm_regs, kvm_sregs};
use tsc_contract::layout;

use super::gdt::{self, CODE_SELECTOR, DATA_SELECTOR};

/// CR0: PE | MP | ET | NE | WP | AM | PG.
pub const CR0: u64 = 0x8005_0033;
/// CR4: PAE.
pub const CR4_PAE: u64 = 1 << 5;
/// EFER: LME | LMA.
pub const EFER_LONG_MODE: u64 = 0x500;

/// Turns `base` (from `KVM_GET_SREGS`) into long-mode sregs for our tables.
pub fn long_mode_sregs(mut s: kvm_sregs) -> kvm_sregs {
    let code = gdt::segment(&gdt::GDT, CODE_SELECTOR);
    let data = gdt::segment(&gdt::GDT, DATA_SELECTOR);
    s.cs = code;
    s.ds = data;
    s.es = data;
    s.fs = data;
    s.gs = data;
    s.ss = data;
    s.gdt.base = layout::GDT;
    s.gdt.limit = (std::mem::size_of_val(&gdt::GDT) - 1) as u16;
    // The guest loads its own IDT first thing; until then, none.
    s.idt.base = 0;
    s.idt.limit = 0;
    s.cr0 = CR0;
    s.cr3 = layout::PML4;
    s.cr4 = CR4_PAE;
    s.efer = EFER_LONG_MODE;
    s
}

/// General-purpose registers of vCPU `index` entering at `entry`.
pub fn entry_regs(entry: u64, index: u32) -> kvm_regs {
    kvm_regs {
        rflags: 0x2, // bit 1 is reserved and must be set; IF clear
        rip: entry,
        rsp: layout::stack_top(index),
        rdi: u64::from(index),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sregs_enable_long_mode_with_paging() {
        let s = long_mode_sregs(kvm_sregs::default());
        assert_eq!(s.cr0 & 0x8000_0001, 0x8000_0001, "PG and PE");
        assert_ne!(s.cr4 & CR4_PAE, 0);
        assert_eq!(s.efer & 0x500, 0x500);
        assert_eq!(s.cr3, layout::PML4);
        assert_eq!(s.cs.l, 1);
        assert_eq!(s.gdt.limit, 23);
    }

    #[test]
    fn each_vcpu_gets_its_own_aligned_stack() {
        let a = entry_regs(0x10_0000, 0);
        let b = entry_regs(0x10_0000, 1);
        assert_eq!(a.rsp % 16, 0);
        assert_eq!(b.rsp - a.rsp, layout::STACK_SIZE);
        assert_eq!((a.rdi, b.rdi), (0, 1));
        assert_eq!(a.rflags & (1 << 9), 0, "interrupts off");
    }
}
