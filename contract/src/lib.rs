//! The guest/host contract of tsc-rendezvous.
//!
//! Everything both sides must agree on lives here and nowhere else: the guest
//! physical memory layout, the I/O ports the guest talks through, the
//! configuration the host writes before every round and the per-vCPU record the
//! guest writes after every round. Every shared structure is `#[repr(C)]`, made of
//! fixed-width integers only, and its size and field offsets are checked at
//! compile time, so a change on one side that the other does not follow fails to
//! build instead of silently misreading memory.
//!
//! The guest trusts nothing here more than it has to; the host trusts nothing the
//! guest wrote: [`RoundRecord::validate`] checks every record before use.
#![no_std]
#![deny(missing_docs)]

use core::mem::{offset_of, size_of};

/// Guest physical memory layout. Identity-mapped: guest virtual == guest physical.
pub mod layout {
    /// Size of guest RAM, starting at guest physical address 0.
    pub const MEM_SIZE: u64 = 0x100_0000; // 16 MiB
    /// The GDT (null, 64-bit code, data).
    pub const GDT: u64 = 0x1000;
    /// The IDT: 32 gates, one per architectural exception vector.
    pub const IDT: u64 = 0x2000;
    /// PML4 of the identity page tables.
    pub const PML4: u64 = 0x3000;
    /// The one PDPT.
    pub const PDPT: u64 = 0x4000;
    /// The one page directory: 512 x 2 MiB pages identity-map the first GiB.
    pub const PD: u64 = 0x5000;
    /// The [`crate::Config`] the host writes.
    pub const CONFIG: u64 = 0x8000;
    /// The rendezvous' shared state (one cache line, as in Xen).
    pub const RENDEZVOUS: u64 = 0x9000;
    /// Per-vCPU [`crate::RoundRecord`]s, `MAX_VCPUS` of them.
    pub const RECORDS: u64 = 0x10000;
    /// Where the guest image is linked and loaded.
    pub const IMAGE: u64 = 0x10_0000;
    /// End (exclusive) of the space reserved for the guest image.
    pub const IMAGE_END: u64 = 0x20_0000;
    /// Per-vCPU stacks, `STACK_SIZE` each; vCPU i's stack top is
    /// `STACKS + (i + 1) * STACK_SIZE`.
    pub const STACKS: u64 = 0x20_0000;
    /// Stack size of one vCPU.
    pub const STACK_SIZE: u64 = 0x4000;
    /// The most vCPUs this layout holds.
    pub const MAX_VCPUS: u32 = 512;
    /// Per-vCPU progress slots (one `u64` per vCPU, each on its own 64-byte
    /// cache line): where the guest publishes the round and iteration it is
    /// in, so a watchdog can say where a vCPU got stuck. See
    /// [`crate::progress_word`].
    pub const PROGRESS: u64 = 0x2_0000;
    /// Distance between two vCPUs' progress slots: one cache line.
    pub const PROGRESS_STRIDE: u64 = 64;

    /// Guest physical address of vCPU `index`'s progress slot.
    pub const fn progress(index: u32) -> u64 {
        PROGRESS + index as u64 * PROGRESS_STRIDE
    }

    /// Top of vCPU `index`'s stack (16-byte aligned, grows down).
    pub const fn stack_top(index: u32) -> u64 {
        STACKS + (index as u64 + 1) * STACK_SIZE
    }

    /// Guest physical address of vCPU `index`'s record.
    pub const fn record(index: u32) -> u64 {
        RECORDS + index as u64 * crate::RECORD_SIZE as u64
    }

    const _: () = assert!(stack_top(MAX_VCPUS - 1) <= MEM_SIZE);
    /// Per-vCPU [`crate::CommandSlot`]s (command mode), `MAX_VCPUS` of them.
    pub const COMMANDS: u64 = 0x3_0000;
    /// The warp test's shared state (command mode), one page.
    pub const WARP: u64 = 0x3_8000;
    /// Linux's sync: the source/target protocol's shared state, one page.
    pub const SYNC: u64 = 0x3_9000;
    /// Linux's sync: per-vCPU results ([`SYNC_RESULT_SIZE`] bytes each; vCPU
    /// 0's holds the source's summary, every AP's its own pair's result).
    pub const SYNC_RESULTS: u64 = 0x4_0000;
    /// Size of one vCPU's sync result slot.
    pub const SYNC_RESULT_SIZE: u64 = 192;

    /// Guest physical address of vCPU `index`'s sync result slot.
    pub const fn sync_result(index: u32) -> u64 {
        SYNC_RESULTS + index as u64 * SYNC_RESULT_SIZE
    }

    /// The forced hand-off test's shared state ([`crate::handoff`]), one
    /// page: the pair running and the two exchange lines.
    pub const HANDOFF: u64 = 0x5_8000;
    /// The forced hand-off test's results: one [`crate::HandoffResult`] per
    /// ordered pair of vCPUs, [`crate::handoff::MAX_PAIRS`] of them.
    pub const HANDOFF_RESULTS: u64 = 0x6_0000;

    /// Guest physical address of ordered pair `pair`'s hand-off result.
    pub const fn handoff_result(pair: u32) -> u64 {
        HANDOFF_RESULTS + pair as u64 * crate::HANDOFF_RESULT_SIZE as u64
    }

    /// Per-vCPU kvmclock pages (`pvclock_vcpu_time_info`, 32 bytes each,
    /// 32-byte aligned) that the guest registers with
    /// [`crate::MSR_KVM_SYSTEM_TIME_NEW`].
    pub const PVCLOCK: u64 = 0xE_0000;
    /// Size of one vCPU's kvmclock page.
    pub const PVCLOCK_SIZE: u64 = 32;
    /// Per-vCPU [`crate::ClockRecord`]s: what the vCPU's kvmclock did
    /// around its last TSC write.
    pub const CLOCK_RECORDS: u64 = 0xE_4000;

    /// Guest physical address of vCPU `index`'s kvmclock page.
    pub const fn pvclock(index: u32) -> u64 {
        PVCLOCK + index as u64 * PVCLOCK_SIZE
    }

    /// Guest physical address of vCPU `index`'s clock record.
    pub const fn clock_record(index: u32) -> u64 {
        CLOCK_RECORDS + index as u64 * crate::CLOCK_RECORD_SIZE as u64
    }

    const _: () = assert!(handoff_result(crate::handoff::MAX_PAIRS) <= PVCLOCK);
    const _: () = assert!(pvclock(MAX_VCPUS) <= CLOCK_RECORDS);
    const _: () = assert!(clock_record(MAX_VCPUS) <= IMAGE);
    const _: () = assert!(PVCLOCK.is_multiple_of(32));
    const _: () = assert!(sync_result(MAX_VCPUS) <= HANDOFF);
    const _: () = assert!(HANDOFF + 0x1000 <= HANDOFF_RESULTS);
    const _: () = assert!(WARP + 0x1000 <= SYNC);
    const _: () = assert!(SYNC + 0x1000 <= SYNC_RESULTS);
    const _: () = assert!(sync_result(MAX_VCPUS) <= IMAGE);
    const _: () = assert!(SYNC_RESULT_SIZE.is_multiple_of(64));

    /// Guest physical address of vCPU `index`'s command slot.
    pub const fn command(index: u32) -> u64 {
        COMMANDS + index as u64 * crate::COMMAND_SLOT_SIZE as u64
    }

    const _: () = assert!(progress(MAX_VCPUS) <= COMMANDS);
    const _: () = assert!(command(MAX_VCPUS) <= WARP);

    const _: () = assert!(RECORDS >= RENDEZVOUS + 0x1000);
    const _: () = assert!(IMAGE_END <= STACKS);
    const _: () = assert!(PROGRESS >= record(MAX_VCPUS));
    const _: () = assert!(progress(MAX_VCPUS) <= IMAGE);
    const _: () = assert!(STACK_SIZE.is_multiple_of(16));
}

/// I/O ports the guest writes to. Every access is an `out` of the size stated;
/// anything else is a protocol violation the host reports.
pub mod ports {
    /// One byte of console text (log and panic messages), `out dx, al`.
    pub const CONSOLE: u16 = 0x00e9;
    /// The vCPU finished round `eax` and wrote its record, `out dx, eax`.
    /// The host reads back every vCPU's TSC state once all of them are here.
    pub const ROUND_DONE: u16 = 0x0510;
    /// The vCPU finished every round, `out dx, eax` (eax = rounds done); it halts next.
    pub const DONE: u16 = 0x0511;
    /// The guest panicked, `out dx, eax` (eax = a [`crate::PanicCode`]); the text
    /// went to [`CONSOLE`] before.
    pub const PANIC: u16 = 0x0512;
    /// A CPU exception reached the guest's IDT, `out dx, eax` (eax = vector).
    /// The handler leaves the faulting RIP in `rbx` and the error code in `rcx`.
    pub const EXCEPTION: u16 = 0x0513;
    /// Command mode: the vCPU finished command number `eax` (0 = none yet),
    /// wrote its result into its [`crate::CommandSlot`] and waits for the next.
    pub const COMMAND_DONE: u16 = 0x0520;
    /// A spin-wait's `pause` as the host rewrote it, `out 0xea, al` (the same
    /// two bytes; any value): only with more vCPUs than host cores, the host
    /// rewrites the `pause` instructions the guest lists in its section
    /// `.tsc_pause_sites`, and turns this exit into a yield of the vCPU's
    /// host thread. The guest itself never writes it. Below 0x100: the
    /// `out imm8, al` form.
    pub const YIELD: u16 = 0x00ea;
}

/// Written into [`Config::magic`] by the host.
pub const CONFIG_MAGIC: u32 = 0x5453_4352; // "RCST" little-endian
/// Written into [`RoundRecord::magic`] by the guest.
pub const RECORD_MAGIC: u32 = 0x4443_5254; // "TRCD"
/// Version of this contract; host and guest refuse to work with another.
pub const CONTRACT_VERSION: u32 = 5;

/// The rendezvous variants, by their Xen state. The discriminants travel in
/// [`Config::variant`] and [`RoundRecord::variant`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// Before the seed (Xen 4.15, 76aff7f6): the final write reads
    /// `r->master_tsc_stamp` from shared memory right after the release.
    Xen415 = 1,
    /// The seed, 6ca022a1 (Xen 4.16): the value is latched into a local at the end
    /// of every iteration.
    Xen6ca022a1 = 2,
    /// Xen HEAD (f1a042b9): as the seed, plus one PAUSE right after the write.
    XenHead = 3,
    /// Jan Beulich's RFC v3 4/4 (Feb 2021, not merged): `master_tsc_stamp` on
    /// a cache line of its own, prefetched on the non-final iterations; the
    /// final write reads it right after the release, as before the seed.
    XenRfcV3 = 4,
    /// `time_calibration_std_rendezvous()`: one pass, no TSC write; the
    /// no-write baseline.
    XenStd = 5,
    /// Linux's `tsc_sync.c`: CPU 0 as source against each AP in turn, a
    /// lock-ordered warp test, TSC_ADJUST compensations on the AP.
    LinuxTscSync = 6,
}

impl Variant {
    /// Every variant: Xen's three states first (oldest first), then the
    /// other members of the family.
    pub const ALL: [Variant; 6] = [
        Variant::Xen415,
        Variant::Xen6ca022a1,
        Variant::XenHead,
        Variant::XenRfcV3,
        Variant::XenStd,
        Variant::LinuxTscSync,
    ];

    /// The variant's user-facing name.
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Xen415 => "xen-4.15",
            Variant::Xen6ca022a1 => "xen-6ca022a1",
            Variant::XenHead => "xen-head",
            Variant::XenRfcV3 => "xen-rfc-v3",
            Variant::XenStd => "xen-std",
            Variant::LinuxTscSync => "linux-tsc-sync",
        }
    }

    /// Decodes a raw discriminant, `None` for anything unknown.
    pub const fn from_raw(raw: u32) -> Option<Variant> {
        match raw {
            1 => Some(Variant::Xen415),
            2 => Some(Variant::Xen6ca022a1),
            3 => Some(Variant::XenHead),
            4 => Some(Variant::XenRfcV3),
            5 => Some(Variant::XenStd),
            6 => Some(Variant::LinuxTscSync),
            _ => None,
        }
    }

    /// Whether every vCPU writes IA32_TSC with one common value (Xen's TSC
    /// rendezvous); `false` for the std rendezvous (no write) and Linux's
    /// sync (TSC_ADJUST compensations on the APs).
    pub const fn writes_common_tsc(self) -> bool {
        matches!(
            self,
            Variant::Xen415 | Variant::Xen6ca022a1 | Variant::XenHead | Variant::XenRfcV3
        )
    }

    /// Looks a variant up by its name.
    pub fn from_name(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name)
    }
}

/// Why the guest gave up, reported through [`ports::PANIC`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanicCode {
    /// A Rust panic (a bug in the guest); the text is on the console.
    RustPanic = 1,
    /// The config the host wrote is not one this guest understands.
    BadConfig = 2,
}

impl PanicCode {
    /// Decodes a raw code, `None` for anything unknown.
    pub const fn from_raw(raw: u32) -> Option<PanicCode> {
        match raw {
            1 => Some(PanicCode::RustPanic),
            2 => Some(PanicCode::BadConfig),
            _ => None,
        }
    }

    /// What the code means, in words.
    pub const fn describe(self) -> &'static str {
        match self {
            PanicCode::RustPanic => "the guest panicked",
            PanicCode::BadConfig => "the guest rejected the host's config",
        }
    }
}

/// What the host tells the guest. Written before the first vCPU runs and again
/// (the `variant` only) between rounds, while every vCPU is parked.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// [`CONFIG_MAGIC`].
    pub magic: u32,
    /// [`CONTRACT_VERSION`].
    pub version: u32,
    /// Number of vCPUs taking part, 1..=[`layout::MAX_VCPUS`].
    pub vcpus: u32,
    /// Number of rounds to run.
    pub rounds: u32,
    /// The [`Variant`] of the next round (raw).
    pub variant: u32,
    /// `CONFIG_*` flags.
    pub flags: u32,
    // --- Fault injection (appended; the fields above keep their offsets). ---
    /// The [`Inject`] kind (raw); [`Inject::None`] (0) in a normal run.
    pub inject_kind: u32,
    /// The vCPU the fault hits.
    pub inject_vcpu: u32,
    /// The round the fault hits (0-based).
    pub inject_round: u32,
    /// The rendezvous iteration the fault hits (0-based, in execution order:
    /// 0 is Xen's `i == 4`, the last is `i == 0`); used by the kinds that fire
    /// inside the loop (stall, triple fault, panic, gp, sse).
    pub inject_iteration: u32,
    /// [`Inject::Delay`]: cycles to spin before the final TSC write.
    pub inject_cycles: u64,
    // --- Linux's tsc_sync (appended). ---
    /// [`Variant::LinuxTscSync`]: the window of an AP that is the first CPU
    /// of its package (Linux: 20 ms), in TSC cycles.
    pub sync_first_window_cycles: u64,
    /// [`Variant::LinuxTscSync`]: the window of any other AP (Linux: 2 ms),
    /// in TSC cycles.
    pub sync_window_cycles: u64,
    // --- What the guest sees (appended). ---
    /// Round mode: after every rendezvous, this many forced hand-off
    /// exchanges per ordered pair of vCPU 0 with every other vCPU
    /// ([`crate::handoff`]; results tagged with the round); 0: none.
    pub handoff_exchanges: u32,
    /// `CLOCK_*` flags: what the guest does with kvmclock.
    pub clock_flags: u32,
}

/// [`Config::flags`]: instead of `rounds` rendezvous, execute the host's
/// commands one at a time (see [`CommandSlot`]).
pub const CONFIG_COMMAND_MODE: u32 = 1 << 0;

/// [`Config::clock_flags`]: every vCPU registers its kvmclock page
/// ([`layout::pvclock`]) with [`MSR_KVM_SYSTEM_TIME_NEW`] before anything
/// else.
pub const CLOCK_KVMCLOCK: u32 = 1 << 0;
/// [`Config::clock_flags`]: round mode, with [`CLOCK_KVMCLOCK`]: around
/// every TSC write of the rendezvous the vCPU reads its kvmclock and keeps
/// what it saw in its [`ClockRecord`] (tagged with the round).
pub const CLOCK_RECORD_WRITES: u32 = 1 << 1;

/// KVM's MSR_KVM_SYSTEM_TIME_NEW: the guest physical address of the
/// vCPU's `pvclock_vcpu_time_info`, bit 0 = enable.
pub const MSR_KVM_SYSTEM_TIME_NEW: u32 = 0x4b56_4d01;

/// Size of [`Config`] in bytes.
pub const CONFIG_SIZE: usize = 72;
const _: () = assert!(size_of::<Config>() == CONFIG_SIZE);
const _: () = assert!(offset_of!(Config, vcpus) == 8);
const _: () = assert!(offset_of!(Config, variant) == 16);
const _: () = assert!(offset_of!(Config, flags) == 20);
const _: () = assert!(offset_of!(Config, inject_kind) == 24);
const _: () = assert!(offset_of!(Config, inject_vcpu) == 28);
const _: () = assert!(offset_of!(Config, inject_round) == 32);
const _: () = assert!(offset_of!(Config, inject_iteration) == 36);
const _: () = assert!(offset_of!(Config, inject_cycles) == 40);
const _: () = assert!(offset_of!(Config, sync_first_window_cycles) == 48);
const _: () = assert!(offset_of!(Config, sync_window_cycles) == 56);
const _: () = assert!(offset_of!(Config, handoff_exchanges) == 64);
const _: () = assert!(offset_of!(Config, clock_flags) == 68);

impl Config {
    /// The bytes the host writes at [`layout::CONFIG`] (little-endian, x86).
    pub fn to_bytes(&self) -> [u8; CONFIG_SIZE] {
        let mut b = [0u8; CONFIG_SIZE];
        let words = [
            self.magic,
            self.version,
            self.vcpus,
            self.rounds,
            self.variant,
            self.flags,
            self.inject_kind,
            self.inject_vcpu,
            self.inject_round,
            self.inject_iteration,
        ];
        for (i, w) in words.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        b[40..48].copy_from_slice(&self.inject_cycles.to_le_bytes());
        b[48..56].copy_from_slice(&self.sync_first_window_cycles.to_le_bytes());
        b[56..64].copy_from_slice(&self.sync_window_cycles.to_le_bytes());
        b[64..68].copy_from_slice(&self.handoff_exchanges.to_le_bytes());
        b[68..72].copy_from_slice(&self.clock_flags.to_le_bytes());
        b
    }
}

/// Faults the host can ask the guest to inject (for testing the VMM's error
/// handling), in [`Config::inject_kind`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Inject {
    /// No fault: a normal run.
    None = 0,
    /// The vCPU spins forever at the start of the given round and iteration.
    Stall = 1,
    /// The vCPU spins `inject_cycles` TSC cycles just before its final TSC write.
    Delay = 2,
    /// The vCPU triple-faults at the start of the given round and iteration.
    TripleFault = 3,
    /// The guest panics at the start of the given round and iteration.
    Panic = 4,
    /// The vCPU reports the end of the round with a 2-byte `out` instead of 4.
    CorruptSize = 5,
    /// The vCPU's record names a vCPU index out of range.
    CorruptIndex = 6,
    /// The vCPU's record holds impossible values (written below its first TSC).
    CorruptValue = 7,
    /// The vCPU reads an MSR no CPU has ([`Inject::GP_MSR`]) at the start of
    /// the given round and iteration: a #GP that reaches the guest's IDT.
    Gp = 8,
    /// The vCPU copies an SSE instruction (`xorps xmm0, xmm0`; `ret`) onto
    /// its stack and calls it at the start of the given round and iteration:
    /// the bytes are in no executable segment of the image. PVM's emulator
    /// cannot emulate it (KVM internal error); on VMX/SVM, with CR4.OSFXSR
    /// clear, the CPU raises #UD.
    Sse = 9,
    /// The vCPU reports the end of the round to a port of no meaning
    /// ([`Inject::BAD_PORT`]) instead of [`ports::ROUND_DONE`].
    BadPort = 10,
    /// The vCPU reports the end of the round as the end of the next one.
    WrongRound = 11,
    /// The vCPU reports that it finished every round at the end of the
    /// round, and halts.
    EarlyDone = 12,
}

const _: () = assert!(!matches!(
    Inject::BAD_PORT,
    ports::CONSOLE
        | ports::ROUND_DONE
        | ports::DONE
        | ports::PANIC
        | ports::EXCEPTION
        | ports::COMMAND_DONE
));

impl Inject {
    /// [`Inject::Gp`]: the MSR read, outside every range Intel, AMD or KVM
    /// define.
    pub const GP_MSR: u32 = 0x0bad_0000;
    /// [`Inject::BadPort`]: the port written, which the contract gives no
    /// meaning (see [`ports`]).
    pub const BAD_PORT: u16 = 0x05ff;

    /// Every kind, [`Inject::None`] first.
    pub const ALL: [Inject; 13] = [
        Inject::None,
        Inject::Stall,
        Inject::Delay,
        Inject::TripleFault,
        Inject::Panic,
        Inject::CorruptSize,
        Inject::CorruptIndex,
        Inject::CorruptValue,
        Inject::Gp,
        Inject::Sse,
        Inject::BadPort,
        Inject::WrongRound,
        Inject::EarlyDone,
    ];

    /// Decodes a raw kind, `None` for anything unknown.
    pub const fn from_raw(raw: u32) -> Option<Inject> {
        match raw {
            0 => Some(Inject::None),
            1 => Some(Inject::Stall),
            2 => Some(Inject::Delay),
            3 => Some(Inject::TripleFault),
            4 => Some(Inject::Panic),
            5 => Some(Inject::CorruptSize),
            6 => Some(Inject::CorruptIndex),
            7 => Some(Inject::CorruptValue),
            8 => Some(Inject::Gp),
            9 => Some(Inject::Sse),
            10 => Some(Inject::BadPort),
            11 => Some(Inject::WrongRound),
            12 => Some(Inject::EarlyDone),
            _ => None,
        }
    }

    /// The kind's user-facing name (as in `--inject`).
    pub const fn name(self) -> &'static str {
        match self {
            Inject::None => "none",
            Inject::Stall => "stall",
            Inject::Delay => "delay",
            Inject::TripleFault => "triple-fault",
            Inject::Panic => "panic",
            Inject::CorruptSize => "corrupt-size",
            Inject::CorruptIndex => "corrupt-index",
            Inject::CorruptValue => "corrupt-value",
            Inject::Gp => "gp",
            Inject::Sse => "sse",
            Inject::BadPort => "bad-port",
            Inject::WrongRound => "wrong-round",
            Inject::EarlyDone => "early-done",
        }
    }

    /// Looks a kind up by its name.
    pub fn from_name(name: &str) -> Option<Inject> {
        Inject::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// The value a vCPU stores in its progress slot ([`layout::progress`]) when it
/// starts `iteration` (0-based, in execution order) of `round`;
/// `iteration == ITERATIONS` (5) means it has left the rendezvous loop of that
/// round. 0 means the vCPU has not started any round.
pub const fn progress_word(round: u32, iteration: u32) -> u64 {
    ((round as u64) << 32) | (iteration as u64 + 1)
}

/// Where a vCPU said it was, decoded from its progress slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The slot is 0: the vCPU has not started a round.
    NotStarted,
    /// In `round`, at the start of `iteration` (0-based), or past the loop when
    /// `iteration` is [`PROGRESS_PAST_LOOP`].
    At {
        /// The round.
        round: u32,
        /// The iteration.
        iteration: u32,
    },
    /// A value the guest should never have written (raw).
    Invalid(u64),
}

/// [`Progress::At::iteration`] of a vCPU that has left the rendezvous loop.
pub const PROGRESS_PAST_LOOP: u32 = 5;

impl Progress {
    /// Decodes a progress slot, checking it against the number of rounds the
    /// run has (the value is untrusted guest data).
    pub const fn decode(word: u64, rounds: u32) -> Progress {
        if word == 0 {
            return Progress::NotStarted;
        }
        let round = (word >> 32) as u32;
        let low = word as u32;
        if low == 0 || low - 1 > PROGRESS_PAST_LOOP || round >= rounds {
            return Progress::Invalid(word);
        }
        Progress::At {
            round,
            iteration: low - 1,
        }
    }
}

impl core::fmt::Display for Progress {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Progress::NotStarted => f.write_str("had not started round 0"),
            Progress::At { round, iteration } if *iteration == PROGRESS_PAST_LOOP => {
                write!(f, "was in round {round}, past the rendezvous loop")
            }
            Progress::At { round, iteration } => {
                write!(f, "was in round {round} iteration {iteration}")
            }
            Progress::Invalid(w) => write!(f, "wrote an invalid progress value {w:#x}"),
        }
    }
}

/// What a vCPU does in command mode, written by the host into
/// [`CommandSlot::op`] while the vCPU is parked.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Nothing; just report back.
    Nop = 0,
    /// `result_a` = ordered TSC read.
    Rdtsc = 1,
    /// `result_a` = rdmsr(`arg`), `result_b` = TSC read right after.
    Rdmsr = 2,
    /// wrmsr(`arg`, `value`); `result_b` = TSC read right after.
    Wrmsr = 3,
    /// One rendezvous of variant `arg` on every vCPU; the record goes to the
    /// vCPU's [`RoundRecord`] slot with `round` = `value`.
    Rendezvous = 4,
    /// The lock-ordered warp test on every vCPU for `value` iterations:
    /// `result_a` = largest backwards step seen, `result_b` = how many,
    /// `result_c` = lock hand-offs from another vCPU, `result_d` = the
    /// shortest forward step across one (`u64::MAX`: none).
    Warp = 5,
    /// Report [`ports::DONE`] and halt.
    Halt = 6,
    /// The forced hand-off test on every vCPU ([`crate::handoff`]): `value`
    /// exchanges per ordered pair, over every ordered pair when `arg` is
    /// [`handoff::ALL_PAIRS`] (else the pairs of vCPU 0 with every other);
    /// each pair's [`HandoffResult`], tagged with the command's number, goes
    /// to [`layout::handoff_result`]. With [`handoff::KVMCLOCK`] in `arg` the
    /// vCPUs exchange their kvmclock readings (ns) instead of their TSCs.
    Handoff = 7,
    /// Reads kvmclock, writes MSR `arg` ([`ClockRecord::msr`]: IA32_TSC or
    /// IA32_TSC_ADJUST) with its current value plus `value` (wrapping),
    /// reads kvmclock again; what it saw goes to the vCPU's [`ClockRecord`],
    /// tagged with the command's number.
    ClockWrite = 8,
    /// Reads kvmclock once (the version protocol): `result_a` = the TSC read
    /// inside the read, `result_b` = kvmclock at it (ns), `result_c` = the
    /// page's version (bits 0-31) and flags (bits 32-39), `result_d` = its
    /// multiplier (bits 0-31) and shift (bits 32-39, an i8). A page never
    /// registered reads version 0.
    ReadClock = 9,
}

impl Op {
    /// Decodes a raw op, `None` for anything unknown.
    pub const fn from_raw(raw: u32) -> Option<Op> {
        match raw {
            0 => Some(Op::Nop),
            1 => Some(Op::Rdtsc),
            2 => Some(Op::Rdmsr),
            3 => Some(Op::Wrmsr),
            4 => Some(Op::Rendezvous),
            5 => Some(Op::Warp),
            6 => Some(Op::Halt),
            7 => Some(Op::Handoff),
            8 => Some(Op::ClockWrite),
            9 => Some(Op::ReadClock),
            _ => None,
        }
    }
}

/// One vCPU's command and its result (command mode).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandSlot {
    /// The [`Op`] (raw), written by the host.
    pub op: u32,
    /// Its first argument (an MSR index, a variant), written by the host.
    pub arg: u32,
    /// Its second argument, written by the host.
    pub value: u64,
    /// First result, written by the guest.
    pub result_a: u64,
    /// Second result, written by the guest.
    pub result_b: u64,
    /// Third result, written by the guest.
    pub result_c: u64,
    /// Fourth result, written by the guest.
    pub result_d: u64,
}

/// Size of [`CommandSlot`] in bytes.
pub const COMMAND_SLOT_SIZE: usize = 48;
const _: () = assert!(size_of::<CommandSlot>() == COMMAND_SLOT_SIZE);
const _: () = assert!(offset_of!(CommandSlot, result_a) == 16);
const _: () = assert!(offset_of!(CommandSlot, result_d) == 40);

impl CommandSlot {
    /// The slot's bytes in guest memory (little-endian, x86).
    pub fn to_bytes(&self) -> [u8; COMMAND_SLOT_SIZE] {
        let mut b = [0u8; COMMAND_SLOT_SIZE];
        b[0..4].copy_from_slice(&self.op.to_le_bytes());
        b[4..8].copy_from_slice(&self.arg.to_le_bytes());
        b[8..16].copy_from_slice(&self.value.to_le_bytes());
        b[16..24].copy_from_slice(&self.result_a.to_le_bytes());
        b[24..32].copy_from_slice(&self.result_b.to_le_bytes());
        b[32..40].copy_from_slice(&self.result_c.to_le_bytes());
        b[40..48].copy_from_slice(&self.result_d.to_le_bytes());
        b
    }

    /// Decodes a slot; `None` when `bytes` is shorter than [`COMMAND_SLOT_SIZE`].
    pub fn from_bytes(bytes: &[u8]) -> Option<CommandSlot> {
        let b = bytes.get(..COMMAND_SLOT_SIZE)?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        Some(CommandSlot {
            op: u32_at(0),
            arg: u32_at(4),
            value: u64_at(8),
            result_a: u64_at(16),
            result_b: u64_at(24),
            result_c: u64_at(32),
            result_d: u64_at(40),
        })
    }
}

/// The forced hand-off test: which ordered pairs of vCPUs exchange, in
/// which order. Pair `p` is run by its initiator `a`, which reads its TSC
/// (t1) and publishes it; the responder `b` waits for it, reads its own TSC
/// (t2) and replies; `a` reads again (t3). The pairs run one after another,
/// every vCPU walking the same list.
pub mod handoff {
    /// [`crate::Op::Handoff`]'s `arg`: every ordered pair of vCPUs.
    pub const ALL_PAIRS: u32 = 1;
    /// [`crate::Op::Handoff`]'s `arg`: exchange kvmclock readings (ns)
    /// instead of TSC readings.
    pub const KVMCLOCK: u32 = 2;
    /// The most ordered pairs one test can have (every ordered pair of up
    /// to 91 vCPUs; the pairs of vCPU 0 with up to 512).
    pub const MAX_PAIRS: u32 = 8192;

    /// How many ordered pairs a test of `vcpus` vCPUs has: every ordered
    /// pair (`all`) or vCPU 0 with every other vCPU in both directions;
    /// `None` when that is more than [`MAX_PAIRS`].
    pub const fn pairs(vcpus: u32, all: bool) -> Option<u32> {
        let n = vcpus as u64;
        let count = if n < 2 {
            0
        } else if all {
            n * (n - 1)
        } else {
            2 * (n - 1)
        };
        if count > MAX_PAIRS as u64 {
            None
        } else {
            Some(count as u32)
        }
    }

    /// Pair `index`: (initiator, responder). Every ordered pair: initiator
    /// `index / (N - 1)`, responders in increasing order; vCPU 0's pairs:
    /// first (0, k) for k = 1..N, then (k, 0).
    pub const fn pair(index: u32, vcpus: u32, all: bool) -> Option<(u32, u32)> {
        let Some(count) = pairs(vcpus, all) else {
            return None;
        };
        if index >= count {
            return None;
        }
        let others = vcpus - 1;
        if all {
            let a = index / others;
            let j = index % others;
            Some((a, if j < a { j } else { j + 1 }))
        } else if index < others {
            Some((0, index + 1))
        } else {
            Some((index - others + 1, 0))
        }
    }
}

/// Written into [`HandoffResult::magic`] by the guest.
pub const HANDOFF_MAGIC: u32 = 0x4648_4e48; // "HNHF"

/// What one ordered pair (`a`, `b`) of the forced hand-off test saw,
/// written by the initiator `a`. In each exchange `a` read t1, `b` read t2
/// after seeing t1, `a` read t3 after seeing t2; all signed differences are
/// wrapping. `b`'s TSC minus `a`'s (their relative offset) lies in
/// `[lower, upper]` when each read is ordered after the load before it and
/// both TSCs tick at one rate during the test.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandoffResult {
    /// [`HANDOFF_MAGIC`].
    pub magic: u32,
    /// The round (round mode) or the command's number (command mode).
    pub tag: u32,
    /// The initiator.
    pub a: u32,
    /// The responder.
    pub b: u32,
    /// Exchanges done.
    pub exchanges: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// The shortest round trip t3 - t1, `a`'s cycles.
    pub min_rtt: u64,
    /// The longest round trip.
    pub max_rtt: u64,
    /// The largest t2 - t3 (as i64): the relative offset is at least this.
    /// Positive: `a` read a TSC below the one `b` had read before (a
    /// backwards step from `b` to `a`, by this much).
    pub lower: i64,
    /// The smallest t2 - t1 (as i64): the relative offset is at most this.
    /// Negative: `b` read a TSC below the one `a` had read before (a
    /// backwards step from `a` to `b`, by `-upper`).
    pub upper: i64,
    /// t2 - (t1 + t3) / 2 of the exchange with the shortest round trip.
    pub best_mid: i64,
}

/// Size of [`HandoffResult`] in bytes: one cache line.
pub const HANDOFF_RESULT_SIZE: usize = 64;
const _: () = assert!(size_of::<HandoffResult>() == HANDOFF_RESULT_SIZE);
const _: () = assert!(offset_of!(HandoffResult, exchanges) == 16);
const _: () = assert!(offset_of!(HandoffResult, min_rtt) == 24);
const _: () = assert!(offset_of!(HandoffResult, lower) == 40);
const _: () = assert!(offset_of!(HandoffResult, best_mid) == 56);

/// Why a [`HandoffResult`] the guest wrote cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandoffError {
    /// Not [`HANDOFF_MAGIC`] (raw): the pair's result was not written.
    BadMagic(u32),
    /// Written for another test (its tag, the one expected).
    WrongTag(u32, u32),
    /// Names another pair (its initiator and responder).
    WrongPair(u32, u32),
    /// Fewer exchanges than asked (done, asked).
    Exchanges(u32, u32),
    /// Its numbers contradict themselves (a round trip below its
    /// shortest, or an interval narrower than the round trip allows).
    Impossible(&'static str),
}

impl core::fmt::Display for HandoffError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            HandoffError::BadMagic(m) => write!(f, "bad magic {m:#x} (not written)"),
            HandoffError::WrongTag(got, want) => {
                write!(f, "written for test {got}, not {want} (stale)")
            }
            HandoffError::WrongPair(a, b) => write!(f, "names the pair ({a}, {b})"),
            HandoffError::Exchanges(done, asked) => {
                write!(f, "{done} of {asked} exchanges done")
            }
            HandoffError::Impossible(what) => write!(f, "impossible values: {what}"),
        }
    }
}

impl HandoffResult {
    /// Decodes a result; `None` when `bytes` is shorter than
    /// [`HANDOFF_RESULT_SIZE`].
    pub fn from_bytes(bytes: &[u8]) -> Option<HandoffResult> {
        let b = bytes.get(..HANDOFF_RESULT_SIZE)?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        Some(HandoffResult {
            magic: u32_at(0),
            tag: u32_at(4),
            a: u32_at(8),
            b: u32_at(12),
            exchanges: u32_at(16),
            reserved: u32_at(20),
            min_rtt: u64_at(24),
            max_rtt: u64_at(32),
            lower: u64_at(40) as i64,
            upper: u64_at(48) as i64,
            best_mid: u64_at(56) as i64,
        })
    }

    /// Checks a result the guest wrote for pair (`a`, `b`) of test `tag`
    /// with `exchanges` exchanges asked. Every exchange's round trip is at
    /// least the shortest, so `upper - lower` (the width of the offset's
    /// interval) can be no more than the shortest round trip. A negative
    /// width is not an error of the data: no constant offset fits the
    /// exchanges, which is a finding.
    pub fn validate(&self, a: u32, b: u32, tag: u32, exchanges: u32) -> Result<(), HandoffError> {
        if self.magic != HANDOFF_MAGIC {
            return Err(HandoffError::BadMagic(self.magic));
        }
        if self.tag != tag {
            return Err(HandoffError::WrongTag(self.tag, tag));
        }
        if (self.a, self.b) != (a, b) {
            return Err(HandoffError::WrongPair(self.a, self.b));
        }
        if self.exchanges != exchanges {
            return Err(HandoffError::Exchanges(self.exchanges, exchanges));
        }
        if exchanges == 0 {
            return Ok(());
        }
        if self.max_rtt < self.min_rtt {
            return Err(HandoffError::Impossible(
                "longest round trip below the shortest",
            ));
        }
        let width = i128::from(self.upper) - i128::from(self.lower);
        if width > i128::from(self.min_rtt) {
            return Err(HandoffError::Impossible(
                "offset interval wider than the shortest round trip",
            ));
        }
        Ok(())
    }
}

/// `struct pvclock_vcpu_time_info` (kvmclock's per-vCPU page, written by
/// the hypervisor at [`layout::pvclock`]), as the host decodes it. The guest
/// reads the same bytes through atomics (`tsc_sync::pvclock::PvclockPage`,
/// whose offsets are checked against these).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PvclockTimeInfo {
    /// Odd while the hypervisor updates the page.
    pub version: u32,
    /// Padding.
    pub pad0: u32,
    /// The guest TSC at which `system_time` was true.
    pub tsc_timestamp: u64,
    /// kvmclock at `tsc_timestamp`, ns.
    pub system_time: u64,
    /// The TSC-to-ns multiplier.
    pub tsc_to_system_mul: u32,
    /// The shift before the multiplication.
    pub tsc_shift: i8,
    /// `PVCLOCK_*` flags (bit 0: PVCLOCK_TSC_STABLE_BIT).
    pub flags: u8,
    /// Padding.
    pub pad: [u8; 2],
}

/// Size of [`PvclockTimeInfo`]: 32 bytes.
pub const PVCLOCK_TIME_INFO_SIZE: usize = 32;
const _: () = assert!(size_of::<PvclockTimeInfo>() == PVCLOCK_TIME_INFO_SIZE);
const _: () = assert!(offset_of!(PvclockTimeInfo, tsc_timestamp) == 8);
const _: () = assert!(offset_of!(PvclockTimeInfo, system_time) == 16);
const _: () = assert!(offset_of!(PvclockTimeInfo, tsc_to_system_mul) == 24);
const _: () = assert!(offset_of!(PvclockTimeInfo, tsc_shift) == 28);
const _: () = assert!(offset_of!(PvclockTimeInfo, flags) == 29);

/// [`PvclockTimeInfo::flags`]: the master clock is on (every vCPU's kvmclock
/// comes from one snapshot).
pub const PVCLOCK_TSC_STABLE_BIT: u8 = 1 << 0;

impl PvclockTimeInfo {
    /// Decodes a page; `None` when `bytes` is shorter than 32.
    pub fn from_bytes(bytes: &[u8]) -> Option<PvclockTimeInfo> {
        let b = bytes.get(..PVCLOCK_TIME_INFO_SIZE)?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        Some(PvclockTimeInfo {
            version: u32_at(0),
            pad0: u32_at(4),
            tsc_timestamp: u64_at(8),
            system_time: u64_at(16),
            tsc_to_system_mul: u32_at(24),
            tsc_shift: b[28] as i8,
            flags: b[29],
            pad: [b[30], b[31]],
        })
    }
}

/// Written into [`ClockRecord::magic`] by the guest.
pub const CLOCK_MAGIC: u32 = 0x4b4c_4343; // "CCLK"

/// What one vCPU's kvmclock did around one write of a TSC MSR: the page's
/// fields and kvmclock just before and just after the write, and the raw
/// TSC at both points. Written by the vCPU; untrusted on the host.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockRecord {
    /// [`CLOCK_MAGIC`].
    pub magic: u32,
    /// The round (round mode) or the command's number (command mode).
    pub tag: u32,
    /// The MSR written (0x10 IA32_TSC, 0x3b IA32_TSC_ADJUST).
    pub msr: u32,
    /// The page's version before the write.
    pub version_before: u32,
    /// The page's version after the write.
    pub version_after: u32,
    /// The page's flags before (low byte) and after (second byte).
    pub flags: u32,
    /// The page's multiplier before.
    pub mul_before: u32,
    /// The page's multiplier after.
    pub mul_after: u32,
    /// The page's shift before (low byte) and after (second byte), as i8.
    pub shifts: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// The value written.
    pub written: u64,
    /// The page's TSC timestamp before.
    pub tsc_timestamp_before: u64,
    /// The page's TSC timestamp after.
    pub tsc_timestamp_after: u64,
    /// The page's system time before, ns.
    pub system_time_before: u64,
    /// The page's system time after, ns.
    pub system_time_after: u64,
    /// The raw TSC just before the write (inside the kvmclock read).
    pub tsc_before: u64,
    /// The raw TSC just after the write.
    pub tsc_after: u64,
    /// kvmclock just before the write, ns.
    pub kvmclock_before: u64,
    /// kvmclock just after the write, ns.
    pub kvmclock_after: u64,
}

/// Size of [`ClockRecord`] in bytes.
pub const CLOCK_RECORD_SIZE: usize = 112;
const _: () = assert!(size_of::<ClockRecord>() == CLOCK_RECORD_SIZE);
const _: () = assert!(offset_of!(ClockRecord, written) == 40);
const _: () = assert!(offset_of!(ClockRecord, kvmclock_after) == 104);

impl ClockRecord {
    /// Decodes a record; `None` when `bytes` is shorter than
    /// [`CLOCK_RECORD_SIZE`].
    pub fn from_bytes(bytes: &[u8]) -> Option<ClockRecord> {
        let b = bytes.get(..CLOCK_RECORD_SIZE)?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        Some(ClockRecord {
            magic: u32_at(0),
            tag: u32_at(4),
            msr: u32_at(8),
            version_before: u32_at(12),
            version_after: u32_at(16),
            flags: u32_at(20),
            mul_before: u32_at(24),
            mul_after: u32_at(28),
            shifts: u32_at(32),
            reserved: u32_at(36),
            written: u64_at(40),
            tsc_timestamp_before: u64_at(48),
            tsc_timestamp_after: u64_at(56),
            system_time_before: u64_at(64),
            system_time_after: u64_at(72),
            tsc_before: u64_at(80),
            tsc_after: u64_at(88),
            kvmclock_before: u64_at(96),
            kvmclock_after: u64_at(104),
        })
    }

    /// The page's flags before and after the write.
    pub fn flags_before_after(&self) -> (u8, u8) {
        (self.flags as u8, (self.flags >> 8) as u8)
    }

    /// The page's shift before and after the write.
    pub fn shifts_before_after(&self) -> (i8, i8) {
        (self.shifts as u8 as i8, (self.shifts >> 8) as u8 as i8)
    }

    /// Whether the record is the one the host asked for: the magic, the tag
    /// and the MSR.
    pub fn is_for(&self, tag: u32, msr: u32) -> bool {
        self.magic == CLOCK_MAGIC && self.tag == tag && self.msr == msr
    }
}

/// [`RoundRecord::flags`]: the guest has IA32_TSC_ADJUST (CPUID.(7,0):EBX\[1\]) and
/// the `adjust_*` fields are real readings.
pub const RECORD_HAS_TSC_ADJUST: u32 = 1 << 0;
/// [`RoundRecord::flags`]: the vCPU wrote no common value to IA32_TSC this
/// round (the std rendezvous, Linux's sync): `written` and
/// `tsc_before_write` are 0; `tsc_first` and `tsc_after_loop` are the TSC at
/// the start and the end of the round.
pub const RECORD_NO_TSC_WRITE: u32 = 1 << 1;
/// [`RoundRecord::flags`]: the round ran Linux's sync; this vCPU's result is
/// in its [`layout::sync_result`] slot.
pub const RECORD_SYNC_RESULT: u32 = 1 << 2;

/// What one vCPU measured in one round. The guest writes it before reporting
/// [`ports::ROUND_DONE`]; all TSC values are raw guest `rdtsc` readings.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundRecord {
    /// [`RECORD_MAGIC`].
    pub magic: u32,
    /// The vCPU that wrote it.
    pub vcpu: u32,
    /// The round (0-based).
    pub round: u32,
    /// The [`Variant`] that ran (raw).
    pub variant: u32,
    /// `RECORD_*` flags.
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// The vCPU's first-iteration TSC (Xen's `tsc` local).
    pub tsc_first: u64,
    /// The value the vCPU wrote to IA32_TSC on the last iteration.
    pub written: u64,
    /// The TSC read just before that write.
    pub tsc_before_write: u64,
    /// The TSC read just after the rendezvous loop.
    pub tsc_after_loop: u64,
    /// IA32_TSC_ADJUST read by the guest before the round (outside the timed part).
    pub adjust_before: u64,
    /// IA32_TSC_ADJUST read by the guest after the round (outside the timed part).
    pub adjust_after: u64,
}

/// Size of [`RoundRecord`] in bytes.
pub const RECORD_SIZE: usize = 72;
const _: () = assert!(size_of::<RoundRecord>() == RECORD_SIZE);
const _: () = assert!(offset_of!(RoundRecord, tsc_first) == 24);
const _: () = assert!(offset_of!(RoundRecord, adjust_after) == 64);

/// Why a guest record was rejected by the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The magic number is wrong: the guest never wrote this record, or corrupted it.
    BadMagic(u32),
    /// The record names another vCPU than the slot it sits in.
    WrongVcpu {
        /// The slot's vCPU.
        expected: u32,
        /// What the record says.
        found: u32,
    },
    /// The record is for another round than the one that just finished.
    WrongRound {
        /// The round that finished.
        expected: u32,
        /// What the record says.
        found: u32,
    },
    /// The record's variant is not the one the host asked for.
    WrongVariant {
        /// The variant asked for (raw).
        expected: u32,
        /// What the record says.
        found: u32,
    },
    /// Unknown flag bits or a non-zero reserved field.
    BadFlags(u32),
    /// The value written is below the vCPU's own first-iteration TSC, which the
    /// max-TSC rule makes impossible.
    WrittenBelowFirst,
    /// The TSC before the final write is below the first-iteration TSC: time ran
    /// backwards inside one round, or the record is corrupt.
    TimeWentBackwards,
    /// A record of a variant that writes no common TSC value names one.
    WrittenWithoutWrite,
}

impl core::fmt::Display for RecordError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RecordError::BadMagic(m) => write!(f, "bad magic {m:#x}"),
            RecordError::WrongVcpu { expected, found } => {
                write!(f, "record of vCPU {found} in vCPU {expected}'s slot")
            }
            RecordError::WrongRound { expected, found } => {
                write!(f, "record of round {found}, expected round {expected}")
            }
            RecordError::WrongVariant { expected, found } => {
                write!(f, "record of variant {found}, expected variant {expected}")
            }
            RecordError::BadFlags(v) => write!(f, "unknown flags or reserved bits {v:#x}"),
            RecordError::WrittenBelowFirst => {
                f.write_str("value written is below the vCPU's first-iteration TSC")
            }
            RecordError::TimeWentBackwards => {
                f.write_str("TSC before the write is below the first-iteration TSC")
            }
            RecordError::WrittenWithoutWrite => {
                f.write_str("a variant that writes no common TSC value recorded one")
            }
        }
    }
}

impl core::error::Error for RecordError {}

impl RoundRecord {
    /// Decodes a record from the bytes the guest wrote (little-endian, x86).
    /// `None` when `bytes` is shorter than [`RECORD_SIZE`].
    pub fn from_bytes(bytes: &[u8]) -> Option<RoundRecord> {
        let b = bytes.get(..RECORD_SIZE)?;
        let u32_at = |o: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[o..o + 4]);
            u32::from_le_bytes(a)
        };
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        Some(RoundRecord {
            magic: u32_at(0),
            vcpu: u32_at(4),
            round: u32_at(8),
            variant: u32_at(12),
            flags: u32_at(16),
            reserved: u32_at(20),
            tsc_first: u64_at(24),
            written: u64_at(32),
            tsc_before_write: u64_at(40),
            tsc_after_loop: u64_at(48),
            adjust_before: u64_at(56),
            adjust_after: u64_at(64),
        })
    }

    /// Checks everything the host can check about a record on its own: that it
    /// is the record of `vcpu` for `round` and `variant`, and internally
    /// consistent. It does not check it against the host's own readings.
    pub fn validate(&self, vcpu: u32, round: u32, variant: u32) -> Result<(), RecordError> {
        if self.magic != RECORD_MAGIC {
            return Err(RecordError::BadMagic(self.magic));
        }
        if self.vcpu != vcpu {
            return Err(RecordError::WrongVcpu {
                expected: vcpu,
                found: self.vcpu,
            });
        }
        if self.round != round {
            return Err(RecordError::WrongRound {
                expected: round,
                found: self.round,
            });
        }
        if self.variant != variant {
            return Err(RecordError::WrongVariant {
                expected: variant,
                found: self.variant,
            });
        }
        let known = RECORD_HAS_TSC_ADJUST | RECORD_NO_TSC_WRITE | RECORD_SYNC_RESULT;
        if self.flags & !known != 0 || self.reserved != 0 {
            return Err(RecordError::BadFlags(self.flags | self.reserved));
        }
        // Which kind of record the variant must give.
        let writes = Variant::from_raw(variant).is_some_and(Variant::writes_common_tsc);
        let sync = variant == Variant::LinuxTscSync as u32;
        if (self.flags & RECORD_NO_TSC_WRITE == 0) != writes
            || (self.flags & RECORD_SYNC_RESULT != 0) != sync
        {
            return Err(RecordError::BadFlags(self.flags));
        }
        if !writes {
            if self.written != 0 || self.tsc_before_write != 0 {
                return Err(RecordError::WrittenWithoutWrite);
            }
            return Ok(());
        }
        if self.written < self.tsc_first {
            return Err(RecordError::WrittenBelowFirst);
        }
        if self.tsc_before_write < self.tsc_first {
            return Err(RecordError::TimeWentBackwards);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RoundRecord {
        RoundRecord {
            magic: RECORD_MAGIC,
            vcpu: 3,
            round: 7,
            variant: Variant::XenHead as u32,
            flags: RECORD_HAS_TSC_ADJUST,
            reserved: 0,
            tsc_first: 1000,
            written: 1200,
            tsc_before_write: 5000,
            tsc_after_loop: 6000,
            adjust_before: u64::MAX,
            adjust_after: 42,
        }
    }

    fn to_bytes(r: &RoundRecord) -> [u8; RECORD_SIZE] {
        // SAFETY: RoundRecord is repr(C), made of integers only, with no padding
        // (its size is the sum of its fields, checked at compile time), so every
        // byte is initialised.
        unsafe { core::mem::transmute_copy(r) }
    }

    #[test]
    fn config_and_command_encodings_match_the_in_memory_layout() {
        let c = Config {
            magic: CONFIG_MAGIC,
            version: CONTRACT_VERSION,
            vcpus: 3,
            rounds: 9,
            variant: 2,
            flags: CONFIG_COMMAND_MODE,
            inject_kind: 4,
            inject_vcpu: 1,
            inject_round: 7,
            inject_iteration: 2,
            inject_cycles: 0x0102_0304_0506_0708,
            sync_first_window_cycles: 20_000_000,
            sync_window_cycles: 0x1112_1314_1516_1718,
            handoff_exchanges: 0x2122_2324,
            clock_flags: 0x3132_3334,
        };
        // SAFETY: Config is repr(C), integers only, no padding (size checked
        // at compile time), so every byte is initialised.
        let raw: [u8; CONFIG_SIZE] = unsafe { core::mem::transmute_copy(&c) };
        assert_eq!(c.to_bytes(), raw);
        let k = CommandSlot {
            op: Op::Warp as u32,
            arg: 0x3b,
            value: 5,
            result_a: u64::MAX,
            result_b: 1 << 40,
            result_c: 3,
            result_d: 0x0102_0304_0506_0708,
        };
        // SAFETY: as above, for CommandSlot.
        let raw: [u8; COMMAND_SLOT_SIZE] = unsafe { core::mem::transmute_copy(&k) };
        assert_eq!(k.to_bytes(), raw);
        assert_eq!(CommandSlot::from_bytes(&raw), Some(k));
        assert_eq!(CommandSlot::from_bytes(&raw[..COMMAND_SLOT_SIZE - 1]), None);
    }

    #[test]
    fn decoding_matches_the_in_memory_layout() {
        let r = sample();
        assert_eq!(RoundRecord::from_bytes(&to_bytes(&r)), Some(r));
    }

    #[test]
    fn short_input_is_rejected() {
        let r = sample();
        assert_eq!(
            RoundRecord::from_bytes(&to_bytes(&r)[..RECORD_SIZE - 1]),
            None
        );
    }

    #[test]
    fn validation_catches_each_inconsistency() {
        let ok = sample();
        assert_eq!(ok.validate(3, 7, Variant::XenHead as u32), Ok(()));
        assert_eq!(
            ok.validate(2, 7, Variant::XenHead as u32),
            Err(RecordError::WrongVcpu {
                expected: 2,
                found: 3
            })
        );
        assert!(matches!(
            ok.validate(3, 8, 3),
            Err(RecordError::WrongRound { .. })
        ));
        assert!(matches!(
            ok.validate(3, 7, 1),
            Err(RecordError::WrongVariant { .. })
        ));
        let bad = RoundRecord { magic: 0, ..ok };
        assert_eq!(bad.validate(3, 7, 3), Err(RecordError::BadMagic(0)));
        let bad = RoundRecord { flags: 0x80, ..ok };
        assert!(matches!(
            bad.validate(3, 7, 3),
            Err(RecordError::BadFlags(_))
        ));
        let bad = RoundRecord { written: 999, ..ok };
        assert_eq!(bad.validate(3, 7, 3), Err(RecordError::WrittenBelowFirst));
        let bad = RoundRecord {
            tsc_before_write: 10,
            ..ok
        };
        assert_eq!(bad.validate(3, 7, 3), Err(RecordError::TimeWentBackwards));
        // A no-write variant's record: the flag must be there, nothing written.
        let std = Variant::XenStd as u32;
        let none = RoundRecord {
            variant: std,
            flags: RECORD_NO_TSC_WRITE,
            written: 0,
            tsc_before_write: 0,
            ..ok
        };
        assert_eq!(none.validate(3, 7, std), Ok(()));
        assert!(matches!(
            RoundRecord { flags: 0, ..none }.validate(3, 7, std),
            Err(RecordError::BadFlags(_))
        ));
        assert_eq!(
            RoundRecord { written: 5, ..none }.validate(3, 7, std),
            Err(RecordError::WrittenWithoutWrite)
        );
        // A writing variant's record may not claim it wrote nothing.
        assert!(matches!(
            RoundRecord {
                flags: RECORD_NO_TSC_WRITE,
                ..ok
            }
            .validate(3, 7, 3),
            Err(RecordError::BadFlags(_))
        ));
        // Linux's sync: no common write, and its result slot is announced.
        let linux = Variant::LinuxTscSync as u32;
        let sync = RoundRecord {
            variant: linux,
            flags: RECORD_NO_TSC_WRITE | RECORD_SYNC_RESULT,
            ..none
        };
        assert_eq!(sync.validate(3, 7, linux), Ok(()));
        assert!(RoundRecord {
            flags: RECORD_NO_TSC_WRITE,
            ..sync
        }
        .validate(3, 7, linux)
        .is_err());
    }

    #[test]
    fn variants_round_trip_by_name_and_raw_value() {
        for v in Variant::ALL {
            assert_eq!(Variant::from_name(v.name()), Some(v));
            assert_eq!(Variant::from_raw(v as u32), Some(v));
        }
        assert_eq!(Variant::from_name("xen-4.16"), None);
        assert_eq!(Variant::from_raw(0), None);
        assert_eq!(Variant::from_raw(7), None);
        let writes = Variant::ALL.map(Variant::writes_common_tsc);
        assert_eq!(writes, [true, true, true, true, false, false]);
    }

    #[test]
    fn ops_round_trip_and_unknown_ones_are_rejected() {
        for op in [
            Op::Nop,
            Op::Rdtsc,
            Op::Rdmsr,
            Op::Wrmsr,
            Op::Rendezvous,
            Op::Warp,
            Op::Halt,
            Op::Handoff,
            Op::ClockWrite,
            Op::ReadClock,
        ] {
            assert_eq!(Op::from_raw(op as u32), Some(op));
        }
        assert_eq!(Op::from_raw(10), None);
        assert_eq!(
            layout::command(1) - layout::command(0),
            COMMAND_SLOT_SIZE as u64
        );
    }

    #[test]
    fn progress_words_round_trip_and_garbage_is_invalid() {
        assert_eq!(Progress::decode(0, 3), Progress::NotStarted);
        for round in 0..3 {
            for it in 0..=PROGRESS_PAST_LOOP {
                assert_eq!(
                    Progress::decode(progress_word(round, it), 3),
                    Progress::At {
                        round,
                        iteration: it
                    }
                );
            }
        }
        assert!(matches!(
            Progress::decode(progress_word(3, 0), 3),
            Progress::Invalid(_)
        ));
        assert!(matches!(
            Progress::decode(progress_word(0, 6), 3),
            Progress::Invalid(_)
        ));
        assert!(matches!(Progress::decode(1 << 32, 3), Progress::Invalid(_)));
        assert!(matches!(
            Progress::decode(u64::MAX, u32::MAX),
            Progress::Invalid(_)
        ));
    }

    #[test]
    fn inject_kinds_round_trip() {
        for k in Inject::ALL {
            assert_eq!(Inject::from_name(k.name()), Some(k));
            assert_eq!(Inject::from_raw(k as u32), Some(k));
        }
        assert_eq!(Inject::from_raw(Inject::ALL.len() as u32), None);
    }

    #[test]
    fn layout_regions_do_not_overlap() {
        let regions = [
            (layout::GDT, 0x1000),
            (layout::IDT, 0x1000),
            (layout::PML4, 0x1000),
            (layout::PDPT, 0x1000),
            (layout::PD, 0x1000),
            (layout::CONFIG, 0x1000),
            (layout::RENDEZVOUS, 0x1000),
            (
                layout::RECORDS,
                layout::MAX_VCPUS as u64 * RECORD_SIZE as u64,
            ),
            (
                layout::COMMANDS,
                layout::MAX_VCPUS as u64 * COMMAND_SLOT_SIZE as u64,
            ),
            (layout::WARP, 0x1000),
            (layout::SYNC, 0x1000),
            (
                layout::SYNC_RESULTS,
                layout::MAX_VCPUS as u64 * layout::SYNC_RESULT_SIZE,
            ),
            (
                layout::PROGRESS,
                layout::MAX_VCPUS as u64 * layout::PROGRESS_STRIDE,
            ),
            (layout::IMAGE, layout::IMAGE_END - layout::IMAGE),
            (
                layout::STACKS,
                layout::MAX_VCPUS as u64 * layout::STACK_SIZE,
            ),
        ];
        for (i, &(a, alen)) in regions.iter().enumerate() {
            assert!(a + alen <= layout::MEM_SIZE);
            for &(b, blen) in &regions[i + 1..] {
                assert!(a + alen <= b || b + blen <= a, "{a:#x} overlaps {b:#x}");
            }
        }
    }

    #[test]
    fn handoff_pairs_cover_every_ordered_pair_once() {
        for n in [0u32, 1, 2, 3, 5, 91] {
            let all = handoff::pairs(n, true).expect("fits");
            let mut seen = [[false; 91]; 91];
            for p in 0..all {
                let (a, b) = handoff::pair(p, n, true).expect("in range");
                assert!(a != b && a < n && b < n);
                assert!(!seen[a as usize][b as usize], "({a}, {b}) twice");
                seen[a as usize][b as usize] = true;
            }
            assert_eq!(
                u64::from(all),
                u64::from(n) * u64::from(n.saturating_sub(1))
            );
            assert_eq!(handoff::pair(all, n, true), None);
            let zero = handoff::pairs(n, false).expect("fits");
            for p in 0..zero {
                let (a, b) = handoff::pair(p, n, false).expect("in range");
                assert!((a == 0) != (b == 0), "({a}, {b}) has vCPU 0 once");
            }
            assert_eq!(zero, 2 * n.saturating_sub(1));
        }
        assert_eq!(handoff::pairs(92, true), None, "92 * 91 > MAX_PAIRS");
        assert_eq!(handoff::pairs(512, false), Some(1022));
        assert_eq!(handoff::pair(0, 3, false), Some((0, 1)));
        assert_eq!(handoff::pair(2, 3, false), Some((1, 0)));
    }

    #[test]
    fn handoff_results_decode_and_validate() {
        let r = HandoffResult {
            magic: HANDOFF_MAGIC,
            tag: 7,
            a: 1,
            b: 0,
            exchanges: 4,
            reserved: 0,
            min_rtt: 100,
            max_rtt: 300,
            lower: -40,
            upper: 50,
            best_mid: 5,
        };
        // SAFETY: HandoffResult is repr(C) of integers only, no padding
        // (its size is checked above): its bytes are a plain copy.
        let raw: [u8; HANDOFF_RESULT_SIZE] = unsafe { core::mem::transmute_copy(&r) };
        assert_eq!(HandoffResult::from_bytes(&raw), Some(r));
        assert_eq!(
            HandoffResult::from_bytes(&raw[..HANDOFF_RESULT_SIZE - 1]),
            None
        );
        assert_eq!(r.validate(1, 0, 7, 4), Ok(()));
        assert_eq!(r.validate(1, 0, 8, 4), Err(HandoffError::WrongTag(7, 8)));
        assert_eq!(r.validate(0, 1, 7, 4), Err(HandoffError::WrongPair(1, 0)));
        assert_eq!(r.validate(1, 0, 7, 5), Err(HandoffError::Exchanges(4, 5)));
        let wide = HandoffResult { upper: 61, ..r };
        assert!(matches!(
            wide.validate(1, 0, 7, 4),
            Err(HandoffError::Impossible(_))
        ));
        // No constant offset fits: a finding, not corrupt data.
        let inverted = HandoffResult {
            lower: 500,
            upper: -500,
            ..r
        };
        assert_eq!(inverted.validate(1, 0, 7, 4), Ok(()));
        let blank = HandoffResult::default();
        assert_eq!(blank.validate(1, 0, 7, 4), Err(HandoffError::BadMagic(0)));
    }
}
