//! The instructions the guest needs, one small function each.

use core::arch::asm;
use tsc_rendezvous_algo::Cpu;

const IA32_TSC: u32 = 0x10;
const IA32_TSC_ADJUST: u32 = 0x3b;

/// The rendezvous' CPU operations on real instructions.
pub struct Hw;

impl Cpu for Hw {
    #[inline(always)]
    fn rdtsc_ordered(&mut self) -> u64 {
        let (lo, hi): (u32, u32);
        // SAFETY: lfence and rdtsc have no memory effects; CR4.TSD is clear.
        unsafe {
            asm!("lfence", "rdtsc", out("eax") lo, out("edx") hi, options(nostack, preserves_flags));
        }
        (u64::from(hi) << 32) | u64::from(lo)
    }

    #[inline(always)]
    fn write_tsc(&mut self, value: u64) {
        wrmsr(IA32_TSC, value);
    }

    #[inline(always)]
    fn relax(&mut self) {
        // SAFETY: pause has no effect on memory; the asm is a compiler barrier
        // (no `nomem`), as Xen's cpu_relax().
        unsafe { asm!("pause", options(nostack, preserves_flags)) };
    }
}

/// `wrmsr`.
#[inline(always)]
pub fn wrmsr(msr: u32, value: u64) {
    // SAFETY: the guest runs at CPL0; the MSRs written here exist on every x86-64
    // CPU, and a fault would reach the IDT and be reported to the VMM.
    unsafe {
        asm!("wrmsr", in("ecx") msr, in("eax") value as u32, in("edx") (value >> 32) as u32,
             options(nostack, preserves_flags));
    }
}

/// `rdmsr`.
#[inline(always)]
pub fn rdmsr(msr: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: as for wrmsr; callers check CPUID for the MSR first.
    unsafe {
        asm!("rdmsr", in("ecx") msr, out("eax") lo, out("edx") hi, options(nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// IA32_TSC_ADJUST; only call when [`has_tsc_adjust`] is true.
pub fn read_tsc_adjust() -> u64 {
    rdmsr(IA32_TSC_ADJUST)
}

/// CPUID.(EAX=7,ECX=0):EBX[1], the TSC_ADJUST MSR.
pub fn has_tsc_adjust() -> bool {
    let max_leaf = core::arch::x86_64::__cpuid(0).eax;
    if max_leaf < 7 {
        return false;
    }
    let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
    leaf7.ebx & (1 << 1) != 0
}

/// `out dx, eax`.
#[inline(always)]
pub fn out32(port: u16, value: u32) {
    // SAFETY: port I/O to the VMM; it has no effect on guest memory.
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") value, options(nostack, preserves_flags))
    };
}

/// `out dx, al`.
#[inline(always)]
pub fn out8(port: u16, value: u8) {
    // SAFETY: as for out32.
    unsafe { asm!("out dx, al", in("dx") port, in("al") value, options(nostack, preserves_flags)) };
}

/// Stops this vCPU for good: the VMM sees the HLT exit.
pub fn halt_forever() -> ! {
    loop {
        // SAFETY: interrupts are off (the VMM starts vCPUs with IF clear and no
        // interrupt controller exists), so hlt exits to the VMM.
        unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
    }
}
