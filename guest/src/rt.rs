//! The little runtime a freestanding binary needs: memory functions the
//! compiler may call, the panic handler and fatal-error reporting.

use core::arch::global_asm;
use tsc_contract::{ports, PanicCode};

use crate::cpu;

// memcpy/memmove/memset/memcmp/bcmp in assembly: a Rust loop here could be
// turned back into a call to the very function it implements, or vectorised.
global_asm!(
    ".global memcpy",
    "memcpy:",
    "    mov rax, rdi",
    "    mov rcx, rdx",
    "    rep movsb",
    "    ret",
    ".global memmove",
    "memmove:",
    "    mov rax, rdi",
    "    mov rcx, rdx",
    "    cmp rdi, rsi",
    "    jbe 2f",
    "    lea rsi, [rsi + rdx - 1]",
    "    lea rdi, [rdi + rdx - 1]",
    "    std",
    "    rep movsb",
    "    cld",
    "    ret",
    "2:  rep movsb",
    "    ret",
    ".global memset",
    "memset:",
    "    mov r8, rdi",
    "    mov eax, esi",
    "    mov rcx, rdx",
    "    rep stosb",
    "    mov rax, r8",
    "    ret",
    ".global memcmp",
    ".global bcmp",
    "memcmp:",
    "bcmp:",
    "    xor eax, eax",
    "    test rdx, rdx",
    "    jz 4f",
    "3:  movzx eax, byte ptr [rdi]",
    "    movzx ecx, byte ptr [rsi]",
    "    sub eax, ecx",
    "    jnz 4f",
    "    inc rdi",
    "    inc rsi",
    "    dec rdx",
    "    jnz 3b",
    "4:  ret",
);

/// Writes text to the console port, one byte per `out`.
pub fn console(text: &[u8]) {
    for &b in text {
        cpu::out8(ports::CONSOLE, b);
    }
}

fn console_decimal(mut v: u32) {
    let mut buf = [0u8; 10];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    console(&buf[i..]);
}

/// Reports a fatal error to the VMM and stops this vCPU.
pub fn fail(code: PanicCode, msg: &[u8]) -> ! {
    console(b"guest: ");
    console(msg);
    console(b"\n");
    cpu::out32(ports::PANIC, code as u32);
    cpu::halt_forever()
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    // No formatting: it would pull in code that uses SSE registers.
    console(b"guest panic");
    if let Some(msg) = info.message().as_str() {
        console(b": ");
        console(msg.as_bytes());
    }
    if let Some(loc) = info.location() {
        console(b" at ");
        console(loc.file().as_bytes());
        console(b":");
        console_decimal(loc.line());
    }
    console(b"\n");
    cpu::out32(ports::PANIC, PanicCode::RustPanic as u32);
    cpu::halt_forever()
}
