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

mod clock;
mod cpu;
mod idt;
mod rt;

use core::ptr::{read_volatile, write_volatile};
use tsc_contract::{
    handoff, layout, ports, progress_word, CommandSlot, Config, HandoffResult, Inject, Op,
    PanicCode, RoundRecord, Variant, CLOCK_KVMCLOCK, CLOCK_RECORD_WRITES, CONFIG_COMMAND_MODE,
    CONFIG_MAGIC, CONTRACT_VERSION, PROGRESS_PAST_LOOP, RECORD_HAS_TSC_ADJUST, RECORD_MAGIC,
    RECORD_NO_TSC_WRITE, RECORD_SYNC_RESULT,
};
use tsc_sync::handoff::{handoff_test, HandoffParams, HandoffShared};
use tsc_sync::linux::{LinuxApResult, LinuxSummary};
use tsc_sync::pvclock::KvmclockCpu;
use tsc_sync::warp::{warp_test, WarpShared};
use tsc_sync::{
    linux_tsc_sync, Cpu, LinuxParams, LinuxShared, LinuxSyncResult, Readings, Shared, XenAlgorithm,
};

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
    let in_loop = matches!(
        inject,
        Inject::Stall | Inject::TripleFault | Inject::Panic | Inject::Gp | Inject::Sse
    );
    if targeted && in_loop && config.inject_iteration >= PROGRESS_PAST_LOOP {
        rt::fail(
            PanicCode::BadConfig,
            b"fault injection iteration out of range",
        );
    }
    let corrupt = if targeted { inject } else { Inject::None };

    let has_adjust = cpu::has_tsc_adjust();
    let kvmclock = config.clock_flags & CLOCK_KVMCLOCK != 0;
    if kvmclock {
        clock::enable(index);
    }
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
        clocked: (kvmclock && config.clock_flags & CLOCK_RECORD_WRITES != 0).then_some(index),
        clock_before: None,
    };
    let windows = (config.sync_first_window_cycles, config.sync_window_cycles);
    if config.flags & CONFIG_COMMAND_MODE != 0 {
        command_loop(&mut ops, index, config.vcpus, has_adjust, windows);
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
            windows,
        );
        let hit = round == config.inject_round;
        if hit && corrupt == Inject::CorruptIndex {
            rec.vcpu = config.vcpus.wrapping_add(1000);
        }
        if hit && corrupt == Inject::CorruptValue {
            rec.tsc_first = u64::MAX;
            rec.written = 1;
        }
        store_record(index, &rec);
        if config.handoff_exchanges > 0 {
            // What the guest sees right after the round: vCPU 0's pairs,
            // read back by the host with this round's state.
            let params = HandoffParams {
                total: config.vcpus,
                exchanges: config.handoff_exchanges,
                all: false,
                tag: round,
            };
            run_handoff(&mut ops, index, params, false);
        }
        match corrupt {
            Inject::CorruptSize if hit => cpu::out16(ports::ROUND_DONE, round as u16),
            Inject::BadPort if hit => cpu::out32(Inject::BAD_PORT, round),
            Inject::WrongRound if hit => cpu::out32(ports::ROUND_DONE, round.wrapping_add(1)),
            Inject::EarlyDone if hit => {
                cpu::out32(ports::DONE, round);
                cpu::halt_forever()
            }
            _ => {}
        }
        cpu::out32(ports::ROUND_DONE, round);
    }

    cpu::out32(ports::DONE, config.rounds);
    cpu::halt_forever()
}

/// Writes vCPU `index`'s record for the host, one volatile store per field:
/// a volatile copy of the whole struct may be compiled into SSE moves, which
/// the guest must not contain.
fn store_record(index: u32, r: &RoundRecord) {
    let p = layout::record(index) as *mut RoundRecord;
    // SAFETY: vCPU `index`'s record slot is inside guest RAM (the layout holds
    // MAX_VCPUS records, 8-byte aligned) and written by this vCPU only; each
    // store writes one field of it.
    unsafe {
        write_volatile(&raw mut (*p).magic, r.magic);
        write_volatile(&raw mut (*p).vcpu, r.vcpu);
        write_volatile(&raw mut (*p).round, r.round);
        write_volatile(&raw mut (*p).variant, r.variant);
        write_volatile(&raw mut (*p).flags, r.flags);
        write_volatile(&raw mut (*p).reserved, r.reserved);
        write_volatile(&raw mut (*p).tsc_first, r.tsc_first);
        write_volatile(&raw mut (*p).written, r.written);
        write_volatile(&raw mut (*p).tsc_before_write, r.tsc_before_write);
        write_volatile(&raw mut (*p).tsc_after_loop, r.tsc_after_loop);
        write_volatile(&raw mut (*p).adjust_before, r.adjust_before);
        write_volatile(&raw mut (*p).adjust_after, r.adjust_after);
    }
}

/// Runs the forced hand-off test on this vCPU; the pairs it initiates go to
/// their result slots. With `kvmclock` the vCPUs exchange kvmclock readings.
fn run_handoff(ops: &mut cpu::Hw, index: u32, params: HandoffParams, kvmclock: bool) {
    // SAFETY: the hand-off page is guest RAM reserved for it, zeroed by the
    // VMM before every round and every test while all vCPUs are parked;
    // HandoffShared is made of atomics, so shared access is sound.
    let shared: &HandoffShared = unsafe { &*(layout::HANDOFF as *const HandoffShared) };
    if kvmclock {
        let mut k = KvmclockCpu {
            inner: ops,
            page: clock::page(index),
        };
        handoff_test(shared, index, params, &mut k, store_handoff);
    } else {
        handoff_test(shared, index, params, ops, store_handoff);
    }
}

/// Writes pair `pair`'s hand-off result, one volatile store per field (no
/// SSE moves: see [`store_record`]).
fn store_handoff(pair: u32, r: &HandoffResult) {
    if pair >= handoff::MAX_PAIRS {
        return;
    }
    let p = layout::handoff_result(pair) as *mut HandoffResult;
    // SAFETY: pair < MAX_PAIRS, so the slot is inside the results area of
    // guest RAM (checked by the layout's assertions); each pair's slot is
    // written by its initiator only.
    unsafe {
        write_volatile(&raw mut (*p).magic, r.magic);
        write_volatile(&raw mut (*p).tag, r.tag);
        write_volatile(&raw mut (*p).a, r.a);
        write_volatile(&raw mut (*p).b, r.b);
        write_volatile(&raw mut (*p).exchanges, r.exchanges);
        write_volatile(&raw mut (*p).reserved, r.reserved);
        write_volatile(&raw mut (*p).min_rtt, r.min_rtt);
        write_volatile(&raw mut (*p).max_rtt, r.max_rtt);
        write_volatile(&raw mut (*p).lower, r.lower);
        write_volatile(&raw mut (*p).upper, r.upper);
        write_volatile(&raw mut (*p).best_mid, r.best_mid);
    }
}

/// The rendezvous' shared state.
fn shared() -> &'static Shared {
    // SAFETY: the rendezvous page is guest RAM reserved for it, 64-byte aligned,
    // zeroed by the VMM before every round while all vCPUs are parked; `Shared`
    // is made of atomics, so shared access from every vCPU is sound.
    unsafe { &*(layout::RENDEZVOUS as *const Shared) }
}

/// Linux's sync's shared state.
fn sync_shared() -> &'static LinuxShared {
    // SAFETY: the sync page is guest RAM reserved for it, zeroed by the VMM
    // before every round while all vCPUs are parked; `LinuxShared` is made of
    // atomics, so shared access from every vCPU is sound.
    unsafe { &*(layout::SYNC as *const LinuxShared) }
}

/// One round of Linux's sync on this vCPU: its result goes to its sync
/// result slot; returns the TSC at the start and the end.
fn linux_round(
    ops: &mut cpu::Hw,
    index: u32,
    vcpus: u32,
    has_adjust: bool,
    (first, rest): (u64, u64),
) -> Readings {
    let start = ops.rdtsc_ordered();
    let params = LinuxParams::new(has_adjust, first, rest);
    let slot = layout::sync_result(index);
    match linux_tsc_sync(sync_shared(), index, vcpus, params, ops) {
        // SAFETY: vCPU `index`'s slot is guest RAM reserved for it
        // (layout::sync_result, 192 bytes, 64-byte aligned), written by this
        // vCPU only; both result types fit it.
        LinuxSyncResult::Source(summary) => unsafe {
            summary.write_volatile_to(slot as *mut LinuxSummary)
        },
        // SAFETY: as above.
        LinuxSyncResult::Target(result) => unsafe {
            result.write_volatile_to(slot as *mut LinuxApResult)
        },
    }
    let end = ops.rdtsc_ordered();
    Readings {
        tsc_first: start,
        written: 0,
        tsc_before_write: 0,
        tsc_after_loop: end,
        wrote: false,
    }
}

/// Runs one round of `raw_variant` as round `round` and returns this vCPU's
/// record (not yet written).
fn one_round(
    ops: &mut cpu::Hw,
    index: u32,
    vcpus: u32,
    raw_variant: u32,
    round: u32,
    has_adjust: bool,
    windows: (u64, u64),
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
    let (out, kind) = match XenAlgorithm::for_variant(variant) {
        Some(alg) => {
            let r = alg.run(shared(), index, vcpus, ops);
            (r, if r.wrote { 0 } else { RECORD_NO_TSC_WRITE })
        }
        None => (
            linux_round(ops, index, vcpus, has_adjust, windows),
            RECORD_NO_TSC_WRITE | RECORD_SYNC_RESULT,
        ),
    };
    if let (Some(i), Some(before)) = (ops.clocked, ops.clock_before.take()) {
        clock::after_round(ops, i, out.written, round, &before);
    }
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
        flags: kind | if has_adjust { RECORD_HAS_TSC_ADJUST } else { 0 },
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
fn command_loop(
    ops: &mut cpu::Hw,
    index: u32,
    vcpus: u32,
    has_adjust: bool,
    windows: (u64, u64),
) -> ! {
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
                let rec = one_round(
                    ops,
                    index,
                    vcpus,
                    cmd.arg,
                    cmd.value as u32,
                    has_adjust,
                    windows,
                );
                store_record(index, &rec);
                (0, 0, 0, 0)
            }
            Some(Op::Warp) => {
                // SAFETY: the warp page is guest RAM reserved for it, zeroed by
                // the VMM before every test; WarpShared is made of atomics.
                let w: &WarpShared = unsafe { &*(layout::WARP as *const WarpShared) };
                let out = warp_test(w, index, vcpus, cmd.value, ops);
                (out.max_warp, out.warps, out.handoffs, out.shortest_handoff)
            }
            Some(Op::Handoff) => {
                let params = HandoffParams {
                    total: vcpus,
                    exchanges: u32::try_from(cmd.value).unwrap_or(u32::MAX),
                    all: cmd.arg & handoff::ALL_PAIRS != 0,
                    tag: seq,
                };
                run_handoff(ops, index, params, cmd.arg & handoff::KVMCLOCK != 0);
                (0, 0, 0, 0)
            }
            Some(Op::ClockWrite) => {
                // The MSR's value now, moved by `value`.
                let now = if cmd.arg == 0x10 {
                    ops.rdtsc_ordered()
                } else {
                    cpu::rdmsr(cmd.arg)
                };
                clock::clocked_write(ops, index, cmd.arg, now.wrapping_add(cmd.value), seq);
                (0, 0, 0, 0)
            }
            Some(Op::ReadClock) => {
                let r = clock::now(ops, index);
                (
                    r.tsc,
                    r.ns,
                    u64::from(r.version) | (u64::from(r.flags) << 32),
                    u64::from(r.mul) | (u64::from(r.shift as u8) << 32),
                )
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
