//! The embedded guest must not contain a single SSE/x87/MMX/AVX instruction:
//! PVM's emulator rejects them (KVM_EXIT_INTERNAL_ERROR), and a guest that
//! touches the FPU state would also need it set up. This disassembles every
//! executable segment of the embedded ELF and fails on any such instruction.

use iced_x86::{CpuidFeature, Decoder, DecoderOptions, Instruction, Mnemonic};
use tsc_vmm::EMBEDDED;

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// (virtual address, bytes) of every executable PT_LOAD segment.
fn code_segments(elf: &[u8]) -> Vec<(u64, &[u8])> {
    let phoff = u64_at(elf, 32) as usize;
    let phnum = usize::from(u16_at(elf, 56));
    (0..phnum)
        .map(|i| phoff + i * 56)
        .filter(|&o| u32_at(elf, o) == 1 && u32_at(elf, o + 4) & 1 != 0)
        .map(|o| {
            let off = u64_at(elf, o + 8) as usize;
            let filesz = u64_at(elf, o + 32) as usize;
            (u64_at(elf, o + 16), &elf[off..off + filesz])
        })
        .collect()
}

fn is_forbidden(i: &Instruction) -> bool {
    // Fences, PAUSE and PREFETCHT0 carry the SSE/SSE2 CPUID bit but touch no
    // SSE or x87 state; the rendezvous needs lfence (rdtsc_ordered), pause,
    // and (the RFC v3 variant) prefetcht0.
    if matches!(
        i.mnemonic(),
        Mnemonic::Lfence
            | Mnemonic::Mfence
            | Mnemonic::Sfence
            | Mnemonic::Pause
            | Mnemonic::Prefetcht0
    ) {
        return false;
    }
    let features_bad = i.cpuid_features().iter().any(|f| {
        let name = format!("{f:?}");
        matches!(
            f,
            CpuidFeature::FPU | CpuidFeature::MMX | CpuidFeature::FXSR | CpuidFeature::XSAVE
        ) || name.starts_with("SSE")
            || name.starts_with("SSSE")
            || name.starts_with("AVX")
            || name.starts_with("FMA")
            || name.starts_with("F16C")
            || name.starts_with("D3NOW")
    });
    let regs_bad = (0..i.op_count()).any(|k| {
        let r = i.op_register(k);
        r.is_xmm() || r.is_ymm() || r.is_zmm() || r.is_mm() || r.is_st()
    });
    features_bad || regs_bad || i.mnemonic() == Mnemonic::Xgetbv
}

/// Every forbidden instruction in `code`, as "address: text".
fn forbidden_in(addr: u64, code: &[u8]) -> Vec<String> {
    let mut decoder = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut found = Vec::new();
    for i in &mut decoder {
        if is_forbidden(&i) {
            found.push(format!("{:#x}: {i}", i.ip()));
        }
    }
    found
}

#[test]
fn the_checker_catches_sse_and_x87() {
    // xorps xmm0, xmm0; fld1; pxor xmm1, xmm1; vzeroupper; xgetbv
    let code = [
        0x0f, 0x57, 0xc0, 0xd9, 0xe8, 0x66, 0x0f, 0xef, 0xc9, 0xc5, 0xf8, 0x77, 0x0f, 0x01, 0xd0,
    ];
    assert_eq!(
        forbidden_in(0, &code).len(),
        5,
        "{:?}",
        forbidden_in(0, &code)
    );
    // mov rax, rbx; rdtsc; wrmsr; pause; lock inc dword ptr [rdi];
    // prefetcht0 [rdi]
    let fine = [
        0x48, 0x89, 0xd8, 0x0f, 0x31, 0x0f, 0x30, 0xf3, 0x90, 0xf0, 0xff, 0x07, 0x0f, 0x18, 0x0f,
    ];
    assert!(
        forbidden_in(0, &fine).is_empty(),
        "{:?}",
        forbidden_in(0, &fine)
    );
    // prefetchnta is not needed and stays forbidden with the rest of SSE.
    assert_eq!(forbidden_in(0, &[0x0f, 0x18, 0x07]).len(), 1);
}

#[test]
fn the_embedded_guest_has_no_sse_x87_or_avx_instruction() {
    let segments = code_segments(EMBEDDED);
    assert!(!segments.is_empty(), "the guest has no executable segment");
    let mut decoded = 0;
    let mut found = Vec::new();
    for (addr, code) in segments {
        decoded += code.len();
        found.extend(forbidden_in(addr, code));
    }
    assert!(
        decoded > 256,
        "suspiciously little guest code: {decoded} bytes"
    );
    assert!(
        found.is_empty(),
        "forbidden instructions in the guest:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_guest_contains_the_instructions_the_rendezvous_needs() {
    let mut mnemonics = std::collections::HashSet::new();
    for (addr, code) in code_segments(EMBEDDED) {
        for i in Decoder::with_ip(64, code, addr, DecoderOptions::NONE) {
            mnemonics.insert(i.mnemonic());
        }
    }
    for m in [
        Mnemonic::Rdtsc,
        Mnemonic::Wrmsr,
        Mnemonic::Rdmsr,
        Mnemonic::Pause,
        Mnemonic::Lfence,
        Mnemonic::Cmpxchg,
    ] {
        assert!(mnemonics.contains(&m), "no {m:?} in the guest");
    }
}
