//! The instructions the guest needs, one small function each.

use core::arch::asm;
use tsc_contract::{progress_word, Inject};
use tsc_sync::pvclock::PvclockReading;
use tsc_sync::Cpu;

const IA32_TSC: u32 = 0x10;
const IA32_TSC_ADJUST: u32 = 0x3b;

/// The rendezvous' CPU operations on real instructions, plus this vCPU's
/// progress slot and the fault it was asked to inject, if any.
pub struct Hw {
    /// This vCPU's progress slot (its own cache line).
    pub progress: *mut u64,
    /// The round running.
    pub round: u32,
    /// The progress word at which to fire an in-loop fault (stall, triple
    /// fault, panic); 0 (never a progress word) when none targets this vCPU.
    pub fire_at: u64,
    /// The kind fired at `fire_at`.
    pub fire: Inject,
    /// The round whose final write is delayed; `u32::MAX` for none.
    pub delay_round: u32,
    /// How many TSC cycles the delay lasts.
    pub delay_cycles: u64,
    /// Round mode with kvmclock recording: this vCPU's index; kvmclock is
    /// read just before the TSC read that precedes the final write (outside
    /// the measured write latency) and again after the loop
    /// ([`crate::clock`]). `None`: no kvmclock reads.
    pub clocked: Option<u32>,
    /// The kvmclock reading taken before this round's write, if any.
    pub clock_before: Option<PvclockReading>,
}

impl Hw {
    /// Publishes this vCPU's progress: one plain store to its own slot.
    #[inline(always)]
    pub fn publish(&mut self, word: u64) {
        // SAFETY: the slot is guest RAM reserved for this vCPU's progress
        // (layout::progress), written by this vCPU only; volatile so that the
        // store is not elided (the VMM reads it).
        unsafe { core::ptr::write_volatile(self.progress, word) };
    }

    /// The injected delay: spin `delay_cycles` TSC cycles.
    #[cold]
    #[inline(never)]
    fn delay(&mut self) {
        let start = self.rdtsc_ordered();
        while self.rdtsc_ordered().wrapping_sub(start) < self.delay_cycles {
            self.relax();
        }
    }

    #[cold]
    #[inline(never)]
    fn fire(&mut self) {
        match self.fire {
            Inject::Stall => loop {
                self.relax();
            },
            Inject::TripleFault => triple_fault(),
            Inject::Panic => panic!("injected fault: guest panic"),
            Inject::Gp => {
                read_missing_msr();
                panic!("injected fault: rdmsr of a non-existent MSR did not fault (kvm.ignore_msrs set?)");
            }
            Inject::Sse => {
                call_sse_from_the_stack();
                panic!("injected fault: an SSE instruction ran with CR4.OSFXSR clear");
            }
            _ => {}
        }
    }
}

impl Cpu for Hw {
    #[inline(always)]
    fn iteration_start(&mut self, iteration: u32) {
        let word = progress_word(self.round, iteration);
        self.publish(word);
        if word == self.fire_at {
            self.fire();
        }
    }

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
    fn before_write(&mut self) {
        if let Some(index) = self.clocked {
            self.clock_before = Some(crate::clock::now(self, index));
        }
        if self.round == self.delay_round {
            self.delay();
        }
    }

    /// `pause`, as Xen's cpu_relax(). Each one's address is listed in the
    /// non-loaded section `.tsc_pause_sites` (one u64 per site): with more
    /// vCPUs than host cores the VMM rewrites these two bytes into
    /// `out 0xea, al` (ports::YIELD), an exit it turns into a yield of the
    /// host thread, and otherwise leaves them as they are.
    #[inline(always)]
    fn relax(&mut self) {
        // SAFETY: pause has no effect on memory; the asm is a compiler barrier
        // (no `nomem`), as Xen's cpu_relax(). The section directives only
        // record the instruction's address in a section that is not loaded;
        // `out 0xea, al` in its place (by the VMM) touches only AL's port.
        unsafe {
            asm!(
                "2: pause",
                ".pushsection .tsc_pause_sites, \"\", @progbits",
                ".quad 2b",
                ".popsection",
                options(nostack, preserves_flags)
            )
        };
    }

    #[inline(always)]
    fn prefetch(&mut self, addr: *const u8) {
        // SAFETY: prefetcht0 is a hint: it never faults, even on an invalid
        // address, and changes no architectural state (it carries the SSE
        // CPUID bit but touches no SSE register).
        unsafe {
            asm!("prefetcht0 [{}]", in(reg) addr, options(nostack, preserves_flags, readonly))
        };
    }
}

impl tsc_sync::TscAdjust for Hw {
    fn read_tsc_adjust(&mut self) -> u64 {
        rdmsr(IA32_TSC_ADJUST)
    }

    fn write_tsc_adjust(&mut self, value: u64) {
        wrmsr(IA32_TSC_ADJUST, value);
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

/// `out dx, ax`: a 2-byte write (only used to inject a protocol violation).
#[inline(always)]
pub fn out16(port: u16, value: u16) {
    // SAFETY: as for out32.
    unsafe { asm!("out dx, ax", in("dx") port, in("ax") value, options(nostack, preserves_flags)) };
}

/// Makes this vCPU triple-fault: with an empty IDT, the #UD from `ud2` cannot
/// be delivered (#GP), nor can that (#DF), which shuts the vCPU down.
fn triple_fault() -> ! {
    let empty: [u8; 10] = [0; 10];
    // SAFETY: deliberately fatal: loads a zero-limit IDT and raises #UD; the
    // CPU shuts down (KVM_EXIT_SHUTDOWN), nothing after it runs.
    unsafe {
        asm!("lidt [{}]", "ud2", in(reg) empty.as_ptr(), options(noreturn, nostack));
    }
}

/// Reads [`Inject::GP_MSR`], which no CPU has: KVM raises #GP, which the
/// guest's IDT reports. `mov ecx` and `rdmsr` are one asm block, so the
/// faulting instruction is the `rdmsr` right after `mov ecx, GP_MSR`.
#[inline(never)]
fn read_missing_msr() {
    // SAFETY: rdmsr of a missing MSR raises #GP, which the IDT reports to the
    // VMM (the vCPU never returns here); were it ignored, it only clobbers
    // the registers declared.
    unsafe {
        asm!("mov ecx, {msr}", "rdmsr", msr = const Inject::GP_MSR, out("eax") _, out("ecx") _,
             out("edx") _, options(nostack, preserves_flags));
    }
}

/// `xorps xmm0, xmm0` (0f 57 c0), then `ret` (c3): stored byte by byte at
/// run time, so these bytes are in no executable segment of the image.
const SSE_STUB: [u8; 4] = [0x0f, 0x57, 0xc0, 0xc3];

/// Copies [`SSE_STUB`] onto this vCPU's stack and calls it. PVM cannot
/// emulate it (KVM_EXIT_INTERNAL_ERROR); on VMX/SVM, with CR4.OSFXSR clear,
/// it raises #UD, which the IDT reports.
#[inline(never)]
fn call_sse_from_the_stack() {
    let mut code = [0xccu8; 16];
    for (i, b) in SSE_STUB.iter().enumerate() {
        // SAFETY: `i` < 4 <= 16: inside `code`; volatile so that the stores
        // are not elided (the only reader is the instruction fetch).
        unsafe { core::ptr::write_volatile(code.as_mut_ptr().add(i), *b) };
    }
    // SAFETY: the identity map has no NX bit (EFER.NXE is clear), so the
    // stack is executable; the stub is a complete function (ret), so if it
    // runs it returns here. It would clobber xmm0, which the guest never
    // uses; every other register the call may touch is declared clobbered.
    unsafe {
        asm!("call {stub}", stub = in(reg) code.as_ptr(), clobber_abi("C"));
    }
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
