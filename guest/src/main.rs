//! The tsc-rendezvous guest.
//!
//! Every vCPU enters `_start` in 64-bit mode with its index in `rdi` and its
//! stack in `rsp` (the VMM sets both). Each runs `Config::rounds` rendezvous,
//! writes its [`RoundRecord`] after each and reports it with an `out` to
//! [`ports::ROUND_DONE`], which parks it in the VMM until every vCPU has finished
//! the round and the VMM has read their TSC state back. At the end it reports
//! [`ports::DONE`] and halts. In command mode ([`CONFIG_COMMAND_MODE`]) it
//! instead executes the host's commands one at a time (see [`Op`]).
//!
//! No SSE/x87/AVX instruction may appear anywhere in this binary (the VMM's
//! tests disassemble it), so nothing here formats text or uses floats.
#![no_std]
#![no_main]

mod cpu;
mod idt;
mod rt;

use core::ptr::{read_volatile, write_volatile};
use tsc_contract::{
    layout, ports, progress_word, CommandSlot, Config, Inject, Op, PanicCode, RoundRecord, Variant,
    CONFIG_COMMAND_MODE, CONFIG_MAGIC, CONTRACT_VERSION, PROGRESS_PAST_LOOP, RECORD_HAS_TSC_ADJUST,
    RECORD_MAGIC,
};
use tsc_sync::warp::{warp_test, WarpShared};
use tsc_sync::{rendezvous, Cpu, Shared};

core::arch::global_asm!(
    ".section .text._start, \"ax\"",
    ".global _start",
    "_start:",
    "    and rsp, -16",
    "    call {main}",
    "2:  cli",
    "    hlt",
    "    jmp 2b",
    main = sym guest_main,
);

/// The guest's main function; `index` is the vCPU's index, from `rdi`.
extern "C" fn guest_main(index: u64) -> ! {
    idt::install();

    let config_ptr = layout::CONFIG as *const Config;
    // SAFETY: the VMM maps guest RAM over the whole layout and writes the
    // config before starting any vCPU; a volatile read because the VMM changes
    // it between rounds.
    let config = unsafe { read_volatile(config_ptr) };
    if config.magic != CONFIG_MAGIC || config.version != CONTRACT_VERSION {
        rt::fail(
            PanicCode::BadConfig,
            b"config magic or contract version mismatch",
        );
    }
    if config.vcpus == 0 || config.vcpus > layout::MAX_VCPUS || index >= u64::from(config.vcpus) {
        rt::fail(PanicCode::BadConfig, b"vCPU index or count out of range");
    }
    let index = index as u32;
    let Some(inject) = Inject::from_raw(config.inject_kind) else {
        rt::fail(PanicCode::BadConfig, b"unknown fault injection kind");
    };
    let targeted = inject != Inject::None && config.inject_vcpu == index;
    let in_loop = matches!(inject, Inject::Stall | Inject::TripleFault | Inject::Panic);
    if targeted && in_loop && config.inject_iteration >= PROGRESS_PAST_LOOP {
        rt::fail(
            PanicCode::BadConfig,
            b"fault injection iteration out of range",
        );
    }
    let corrupt = if targeted { inject } else { Inject::None };

    let has_adjust = cpu::has_tsc_adjust();
    let mut ops = cpu::Hw {
        progress: layout::progress(index) as *mut u64,
        round: 0,
        fire_at: if targeted && in_loop {
            progress_word(config.inject_round, config.inject_iteration)
        } else {
            0
        },
        fire: inject,
        delay_round: if targeted && inject == Inject::Delay {
            config.inject_round
        } else {
            u32::MAX
        },
        delay_cycles: config.inject_cycles,
    };
    if config.flags & CONFIG_COMMAND_MODE != 0 {
        command_loop(&mut ops, index, config.vcpus, has_adjust);
    }

    for round in 0..config.rounds {
        // SAFETY: as above; the VMM may set another variant between rounds.
        let raw_variant = unsafe { read_volatile(&(*config_ptr).variant) };
        let mut rec = one_round(
            &mut ops,
            index,
            config.vcpus,
            raw_variant,
            round,
            has_adjust,
        );
        let hit = round == config.inject_round;
        if hit && corrupt == Inject::CorruptIndex {
            rec.vcpu = config.vcpus.wrapping_add(1000);
        }
        if hit && corrupt == Inject::CorruptValue {
            rec.tsc_first = u64::MAX;
            rec.written = 1;
        }
        // SAFETY: vCPU `index`'s record slot is inside guest RAM (the layout
        // holds MAX_VCPUS records) and written by this vCPU only.
        unsafe { write_volatile(layout::record(index) as *mut RoundRecord, rec) };
        if hit && corrupt == Inject::CorruptSize {
            cpu::out16(ports::ROUND_DONE, round as u16);
        }
        cpu::out32(ports::ROUND_DONE, round);
    }

    cpu::out32(ports::DONE, config.rounds);
    cpu::halt_forever()
}

/// The rendezvous' shared state.
fn shared() -> &'static Shared {
    // SAFETY: the rendezvous page is guest RAM reserved for it, 64-byte aligned,
    // zeroed by the VMM before every round while all vCPUs are parked; `Shared`
    // is made of atomics, so shared access from every vCPU is sound.
    unsafe { &*(layout::RENDEZVOUS as *const Shared) }
}

/// Runs one rendezvous of `raw_variant` as round `round` and returns this
/// vCPU's record (not yet written).
fn one_round(
    ops: &mut cpu::Hw,
    index: u32,
    vcpus: u32,
    raw_variant: u32,
    round: u32,
    has_adjust: bool,
) -> RoundRecord {
    let Some(variant) = Variant::from_raw(raw_variant) else {
        rt::fail(PanicCode::BadConfig, b"unknown variant in config");
    };
    ops.round = round;
    let adjust_before = if has_adjust {
        cpu::read_tsc_adjust()
    } else {
        0
    };
    let out = rendezvous(variant, shared(), index, vcpus, ops);
    ops.publish(progress_word(round, PROGRESS_PAST_LOOP));
    let adjust_after = if has_adjust {
        cpu::read_tsc_adjust()
    } else {
        0
    };
    RoundRecord {
        magic: RECORD_MAGIC,
        vcpu: index,
        round,
        variant: raw_variant,
        flags: if has_adjust { RECORD_HAS_TSC_ADJUST } else { 0 },
        reserved: 0,
        tsc_first: out.tsc_first,
        written: out.written,
        tsc_before_write: out.tsc_before_write,
        tsc_after_loop: out.tsc_after_loop,
        adjust_before,
        adjust_after,
    }
}

/// Command mode: report, wait to be resumed, execute the host's next command.
fn command_loop(ops: &mut cpu::Hw, index: u32, vcpus: u32, has_adjust: bool) -> ! {
    let slot = layout::command(index) as *mut CommandSlot;
    let mut seq: u32 = 0;
    loop {
        cpu::out32(ports::COMMAND_DONE, seq);
        seq = seq.wrapping_add(1);
        // SAFETY: vCPU `index`'s command slot is guest RAM reserved for it;
        // the VMM writes it only while this vCPU is parked.
        let cmd = unsafe { read_volatile(slot) };
        let (a, b, c, d) = match Op::from_raw(cmd.op) {
            Some(Op::Nop) => (0, 0, 0, 0),
            Some(Op::Rdtsc) => (ops.rdtsc_ordered(), 0, 0, 0),
            Some(Op::Rdmsr) => {
                let v = cpu::rdmsr(cmd.arg);
                (v, ops.rdtsc_ordered(), 0, 0)
            }
            Some(Op::Wrmsr) => {
                cpu::wrmsr(cmd.arg, cmd.value);
                (0, ops.rdtsc_ordered(), 0, 0)
            }
            Some(Op::Rendezvous) => {
                let rec = one_round(ops, index, vcpus, cmd.arg, cmd.value as u32, has_adjust);
                // SAFETY: as in the rounds loop of guest_main.
                unsafe { write_volatile(layout::record(index) as *mut RoundRecord, rec) };
                (0, 0, 0, 0)
            }
            Some(Op::Warp) => {
                // SAFETY: the warp page is guest RAM reserved for it, zeroed by
                // the VMM before every test; WarpShared is made of atomics.
                let w: &WarpShared = unsafe { &*(layout::WARP as *const WarpShared) };
                let out = warp_test(w, index, vcpus, cmd.value, ops);
                (out.max_warp, out.warps, out.handoffs, out.shortest_handoff)
            }
            Some(Op::Halt) => {
                cpu::out32(ports::DONE, seq);
                cpu::halt_forever()
            }
            None => rt::fail(PanicCode::BadConfig, b"unknown command op"),
        };
        // SAFETY: as above; only the result fields are written.
        unsafe {
            write_volatile(&raw mut (*slot).result_a, a);
            write_volatile(&raw mut (*slot).result_b, b);
            write_volatile(&raw mut (*slot).result_c, c);
            write_volatile(&raw mut (*slot).result_d, d);
        }
    }
}
