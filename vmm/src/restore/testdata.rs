//! Measurements made up for the unit tests of the report and of check 7: a
//! two-vCPU documented restore on a host that honours offsets, consistent
//! in every number (guest TSC = host TSC + offset, no scaling, 2 GHz; or,
//! [`honoured_at`], a guest rate KVM scales to: guest TSC = host TSC x
//! ratio + offset), and ways to spoil it.

use std::time::Duration;

use tsc_contract::Variant;

use super::measure::{MethodRun, Reads};
use super::methods::{Documented, MsrWrites, Trace, TscWrite};
use super::offsets::{self, ClockSample, NEEDED_CLOCK_FLAGS};
use super::options::{ChainDelay, Method, MethodOptions};
use super::report::MethodReport;
use super::snapshot::{SnapshotInfo, VcpuSaved};
use crate::session::WarpSeen;
use crate::tsc::frequency::{Ratio, Scaling};
use crate::tsc::{OffsetSource, TscState};
use crate::vstate::{PioCompletion, PioState};

/// 2 GHz.
pub const KHZ: u32 = 2_000_000;
/// The offset every source vCPU was created with ("negative").
pub const CREATED: u64 = (-5_000_000_000i64) as u64;
/// The destination's creation offset.
pub const DST_CREATED: u64 = (-9_000_000_000i64) as u64;
/// What the rendezvous' writes moved each vCPU by.
pub const MOVED: [i64; 2] = [-100, -400];

/// The options the made-up runs were "measured" with.
pub fn options() -> MethodOptions {
    MethodOptions {
        vcpus: 2,
        variant: Variant::XenHead,
        delay: Duration::from_millis(100),
        warp_iterations: 1_000,
        timeout: Duration::from_secs(10),
        fail_at: None,
        chain: true,
        tsc: None,
        chain_delay: ChainDelay::Same,
    }
}

/// The host, as KVM knows it: 2 GHz, TSC scaling.
pub fn scaling() -> Scaling {
    Scaling {
        host_khz: KHZ,
        tsc_control: true,
        tolerance_ppm: 250,
    }
}

fn state(offset: u64, adjust: i64, khz: u32, host: &Scaling) -> TscState {
    TscState {
        adjust: adjust as u64,
        tsc: 0,
        host_before: 0,
        host_after: 0,
        offset: Some(offset),
        tsc_khz: khz,
        host_khz: host.host_khz,
        scaled: host.scales(khz),
    }
}

fn clock(clock_ns: u64, realtime_ns: u64, host_tsc: u64) -> ClockSample {
    ClockSample {
        clock_ns,
        flags: NEEDED_CLOCK_FLAGS | 2,
        realtime_ns,
        host_tsc,
        host_before: host_tsc,
        host_after: host_tsc,
    }
}

/// A documented restore that kept everything: saved offsets moved by
/// [`MOVED`] from [`CREATED`], the clock shifted them by `shift` cycles
/// (and the host's real time drifted by as much), the guests read their TSC
/// 200 M host cycles apart.
pub fn honoured(shift: i64) -> MethodRun {
    honoured_at(shift, KHZ)
}

/// [`honoured`] with the guest's TSC at `khz` on the 2 GHz host, which KVM
/// scales to: every guest TSC the host's times the ratio plus its offset,
/// kvmclock's advance `shift` cycles at `khz` beyond the host time.
pub fn honoured_at(shift: i64, khz: u32) -> MethodRun {
    honoured_on(shift, khz, &scaling())
}

/// [`honoured_at`] on a host `host` describes (one without TSC scaling
/// serves a rate above its own by catch-up: the TSC runs 1:1, the shift is
/// `extra` plus the host time at the rate's excess): kvmclock's advance
/// `extra` cycles at `khz` beyond the host time, the shift the documented
/// formula's for it.
pub fn honoured_on(extra: i64, khz: u32, host: &Scaling) -> MethodRun {
    let ratio = host.ratio(khz);
    // Source sample at host TSC 2 M; the destination's 149 M cycles
    // (74.5 ms) later, kvmclock and real time moved by as much plus `extra`.
    let src = clock(1_000_000_000, 5_000_000_000, 2_000_000);
    let ns = 74_500_000 + (extra * 1_000_000 / i64::from(khz)) as u64;
    let dst = clock(1_000_000_000 + ns, 5_000_000_000 + ns, 151_000_000);
    let shift = offsets::documented_shift(&src, &dst, khz, ratio).unwrap_or(0) as i64;
    let before: Vec<u64> = MOVED
        .iter()
        .map(|&m| CREATED.wrapping_add(m as u64))
        .collect();
    let after: Vec<u64> = before
        .iter()
        .map(|&o| o.wrapping_add(shift as u64))
        .collect();
    let state = |offset: u64, adjust: i64| state(offset, adjust, khz, host);
    let saved = |i: usize| VcpuSaved {
        tsc: state(before[i], MOVED[i]),
        pio: PioCompletion {
            rip_at_exit: 0x1000,
            rip_after: 0x1001,
        },
        pio_state: PioState::Completed,
        kvmclock_msr: Some(tsc_contract::layout::pvclock(i as u32) | 1),
    };
    let reads = |host: u64, offsets: &[u64]| Reads {
        tsc: offsets
            .iter()
            .map(|&o| guest(ratio, host + 5_000, o))
            .collect(),
        host_before: host,
        host_after: host + 10_000,
    };
    let warp = WarpSeen {
        max_warp: 0,
        warps: 0,
        handoffs: 10,
        shortest_handoff: Some(50),
    };
    let mut run = MethodRun::new(Method::Documented);
    run.offset_source = Some(OffsetSource::KvmVcpuTscOffset);
    run.scaling = Some(*host);
    run.initial = Some(vec![state(CREATED, 0), state(CREATED, 0)]);
    run.last = Some(reads(1_000_000, &before));
    run.snapshot = Some(SnapshotInfo {
        vcpus: vec![saved(0), saved(1)],
        clock: Some(src),
        clock_error: None,
        memory_bytes: 16 << 20,
        next_command: 3,
    });
    run.delay = Some(Duration::from_millis(101));
    run.created = Some(vec![Some(DST_CREATED), Some(DST_CREATED)]);
    let literal = offsets::literal_shift(&src, &dst, khz).unwrap_or(0) as i64;
    run.trace = Some(Trace::Documented(Documented {
        tsc_khz: khz,
        host_khz: host.host_khz,
        ratio,
        set_clock_ns: src.clock_ns,
        set_realtime_ns: src.realtime_ns,
        set_flags: 4,
        set_host_before: 150_000_000,
        set_host_after: 150_001_000,
        destination: Some(dst),
        shift_cycles: Some(shift),
        literal_shift_cycles: Some(literal),
        offsets_written: after.clone(),
        adjust_written: MOVED.iter().map(|&m| m as u64).collect(),
    }));
    run.after = Some(vec![state(after[0], MOVED[0]), state(after[1], MOVED[1])]);
    run.first = Some(reads(201_000_000, &after));
    run.warp = Some(vec![warp, warp]);
    run.after_warp = run.after.clone();
    super::testdata_clock::add(&mut run);
    run
}

/// The report of `run`, its chained restore (if any) made to repeat its
/// first restore as the test left it.
pub fn report(run: &MethodRun) -> MethodReport {
    let mut run = run.clone();
    if run.chain.is_some() {
        super::testdata_clock::chain(&mut run);
    }
    MethodReport::from_run(&run, &options())
}

/// The guest TSC at host TSC `host` of a vCPU of offset `offset` at `ratio`.
pub fn guest(ratio: Ratio, host: u64, offset: u64) -> u64 {
    offsets::shifted(offset, ratio.scale(i128::from(host)))
}

/// Sets vCPU `i`'s offset after the restore (and after the warp test) and
/// makes its first read follow it.
pub fn set_after(run: &mut MethodRun, i: usize, offset: u64) {
    let ratio = run
        .after
        .as_ref()
        .and_then(|a| a.get(i))
        .map_or(Ratio::ONE, TscState::ratio);
    for states in [run.after.as_mut(), run.after_warp.as_mut()]
        .into_iter()
        .flatten()
    {
        if let Some(s) = states.get_mut(i) {
            s.offset = Some(offset);
        }
    }
    if let Some(r) = run.first.as_mut() {
        let host = r.host_before + 5_000;
        if let Some(t) = r.tsc.get_mut(i) {
            *t = guest(ratio, host, offset);
        }
    }
}

/// The same measurement as an msr restore whose IA32_TSC writes asked for
/// the saved offsets.
pub fn msr(run: &MethodRun) -> MethodRun {
    let mut m = run.clone();
    m.method = Method::Msr;
    let writes = run
        .after
        .iter()
        .flatten()
        .map(|s| TscWrite {
            value: guest(s.ratio(), 150_000_000, s.offset.unwrap_or(0)),
            host_before: 150_000_000,
            host_after: 150_000_000,
        })
        .collect();
    m.trace = Some(Trace::Msr(MsrWrites {
        ratio: run
            .after
            .as_ref()
            .and_then(|a| a.first())
            .map_or(Ratio::ONE, TscState::ratio),
        adjust_written: MOVED.iter().map(|&v| v as u64).collect(),
        passes: vec![writes],
    }));
    m
}
