//! A minimal IDT: every architectural exception (vectors 0..32) is reported to
//! the VMM with its vector, RIP and error code instead of escalating to a
//! triple fault that would tell the VMM nothing.

use core::arch::{asm, global_asm};
use tsc_contract::layout;

const VECTORS: usize = 32;
const KERNEL_CS: u16 = 0x08;

// Vectors that push an error code; the others get a 0 pushed in its place.
macro_rules! stubs {
    ($($n:literal $kind:ident),* $(,)?) => {
        global_asm!(
            $( concat!(".global exc_stub_", stringify!($n)), concat!("exc_stub_", stringify!($n), ":"),
               stubs!(@push $kind), concat!("    push ", stringify!($n)), "    jmp exc_common", )*
            "exc_common:",
            "    pop rax",           // vector
            "    pop rcx",           // error code
            "    mov rbx, [rsp]",    // faulting RIP
            concat!("    mov dx, ", "0x0513"), // tsc_contract::ports::EXCEPTION
            "    out dx, eax",
            "5:  cli",
            "    hlt",
            "    jmp 5b",
            ".section .rodata",
            ".balign 8",
            ".global exc_stub_table",
            "exc_stub_table:",
            $( concat!("    .quad exc_stub_", stringify!($n)), )*
            ".text",
        );
    };
    (@push noerr) => { "    push 0" };
    (@push err) => { "    nop" };
}

stubs!(
    0 noerr, 1 noerr, 2 noerr, 3 noerr, 4 noerr, 5 noerr, 6 noerr, 7 noerr,
    8 err, 9 noerr, 10 err, 11 err, 12 err, 13 err, 14 err, 15 noerr,
    16 noerr, 17 err, 18 noerr, 19 noerr, 20 noerr, 21 err, 22 noerr, 23 noerr,
    24 noerr, 25 noerr, 26 noerr, 27 noerr, 28 noerr, 29 err, 30 err, 31 noerr,
);

const _: () = assert!(tsc_contract::ports::EXCEPTION == 0x0513);

extern "C" {
    static exc_stub_table: [u64; VECTORS];
}

#[repr(C, packed)]
struct IdtPointer {
    limit: u16,
    base: u64,
}

/// Fills the IDT (every vCPU writes the same bytes) and loads it.
pub fn install() {
    let idt = layout::IDT as *mut [u64; 2];
    // SAFETY: the table is defined in the assembly above with VECTORS entries
    // and never written.
    let table: [u64; VECTORS] = unsafe { core::ptr::addr_of!(exc_stub_table).read() };
    for (v, &handler) in table.iter().enumerate() {
        let low = (handler & 0xffff)
            | (u64::from(KERNEL_CS) << 16)
            | (0x8e << 40) // present, DPL 0, 64-bit interrupt gate
            | ((handler >> 16) & 0xffff) << 48;
        let high = handler >> 32;
        // SAFETY: the IDT page is guest RAM reserved for it; every vCPU stores
        // identical values, so concurrent stores are benign.
        unsafe { core::ptr::write_volatile(idt.add(v), [low, high]) };
    }
    let ptr = IdtPointer {
        limit: (VECTORS * 16 - 1) as u16,
        base: layout::IDT,
    };
    // SAFETY: `ptr` describes the table just written, which stays in place.
    unsafe { asm!("lidt [{}]", in(reg) &ptr, options(readonly, nostack, preserves_flags)) };
}
