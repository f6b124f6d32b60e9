//! `kvmclock-watch`'s measurement on one command-mode VM: samples while
//! the VM settles ([`Plan::settle_ms`]), a baseline sample of every vCPU's
//! kvmclock against the host's CLOCK_MONOTONIC_RAW, one guest IA32_TSC
//! write on vCPU 0 moving its TSC by [`WRITE_SECONDS`] of cycles (check 8's
//! write: kvmclock read, `wrmsr`, kvmclock read, in the guest), then a
//! sample every interval until the duration has passed since the write. A
//! sample is every vCPU's guest kvmclock read, all resumed together between
//! two host clock reads, the pvclock pages as the host reads them right
//! after, the exact TSC offsets, and KVM_GET_CLOCK's flags. A stop request
//! (SIGINT, SIGTERM) or an error ends the watch with what it had.

use std::time::{Duration, Instant};

use serde::Serialize;
use tsc_contract::{CommandSlot, Op};

use super::analysis::{Bracket, Sample};
use crate::analysis::clock_jump::{across_write, ClockJump};
use crate::error::RunError;
use crate::host::HostInfo;
use crate::session::{monotonic_raw_ns, Session};
use crate::stop;
use crate::tsc::{TscState, MSR_IA32_TSC};
use crate::vstate::memory;

/// The write's move, in seconds of the vCPU's TSC (as check 8's).
pub const WRITE_SECONDS: u64 = 4;

/// The vCPU that writes.
pub const WRITER: u32 = 0;

/// What the watch is asked to do.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Plan {
    /// vCPUs of the VM (vCPU 0 writes; the others are the control).
    pub vcpus: u32,
    /// How long to sample after the write.
    pub seconds: u64,
    /// How long after the VM's creation the write comes, ms (sampling
    /// meanwhile): KVM updates every page 100 ms after a vCPU enables
    /// kvmclock (KVMCLOCK_UPDATE_DELAY), which would end a stale page
    /// written before it.
    pub settle_ms: u64,
    /// Between samples, ms.
    pub interval_ms: u64,
    /// The VM's deadline, s.
    pub timeout_s: u64,
}

/// The write: what the guest saw across it and what KVM reported around it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Write {
    /// The vCPU that wrote.
    pub vcpu: u32,
    /// Host CLOCK_MONOTONIC_RAW around the command.
    pub host: Bracket,
    /// What it asked: the TSC moved by this many cycles.
    pub delta_cycles: u64,
    /// The value written to IA32_TSC.
    pub written: u64,
    /// Its exact TSC offset before and after (`None`: not shown).
    pub offset: (Option<u64>, Option<u64>),
    /// Its IA32_TSC_ADJUST before and after (KVM adds every guest write's
    /// move to it; PVM records the move it ignored there).
    pub adjust: (u64, u64),
    /// kvmclock across the write, from the guest's two reads around it
    /// (check 8's arithmetic).
    pub across: ClockJump,
}

/// One sampling of every vCPU.
#[derive(Clone, Debug, Serialize)]
pub struct Tick {
    /// Each vCPU's sample, by vCPU.
    pub vcpus: Vec<Sample>,
    /// KVM_GET_CLOCK's flags right after (`None`: it failed).
    pub clock_flags: Option<u32>,
}

/// Everything measured.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// The host.
    pub host: HostInfo,
    /// The vCPUs' TSC rate, kHz (0: unknown).
    pub khz: u32,
    /// Host time around the VM's creation.
    pub vm_created: Bracket,
    /// The samplings while the VM settled, before the baseline.
    pub settling: Vec<Tick>,
    /// The sampling right before the write.
    pub baseline: Option<Tick>,
    /// The write.
    pub write: Option<Write>,
    /// The samplings after it.
    pub ticks: Vec<Tick>,
}

/// Why the watch could not start.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum StartError {
    /// {0}
    Run(#[from] RunError),
    /// this KVM offers no kvmclock (its CPUID has no KVM_FEATURE_CLOCKSOURCE2): nothing to watch
    NoKvmclock,
}

/// Runs the watch. Fails only when the VM could not start; an error later
/// (a stop request, a vCPU failure) is returned beside what was measured.
/// `on_tick` sees every sampling as it is taken.
pub fn measure(
    plan: &Plan,
    mut on_tick: impl FnMut(&Measured),
) -> Result<(Measured, Option<RunError>), StartError> {
    let before = monotonic_raw_ns();
    let created = Instant::now();
    let mut s = Session::start(plan.vcpus, Duration::from_secs(plan.timeout_s))?;
    let vm_created = Bracket {
        before_ns: before,
        after_ns: monotonic_raw_ns(),
    };
    if !s.kvmclock() {
        return Err(StartError::NoKvmclock);
    }
    let initial = s.readback()?;
    let khz = initial.first().map_or(0, TscState::running_khz);
    let mut m = Measured {
        host: HostInfo::collect(s.facts(&initial)),
        khz,
        vm_created,
        settling: Vec::new(),
        baseline: None,
        write: None,
        ticks: Vec::new(),
    };
    let error = settle(&mut s, plan, created, &mut m)
        .and_then(|()| watch(&mut s, plan, &mut m, &mut on_tick))
        .err();
    Ok((m, error))
}

/// Samples every interval until [`Plan::settle_ms`] has passed since the
/// VM's creation (`created`).
fn settle(
    s: &mut Session,
    plan: &Plan,
    created: Instant,
    m: &mut Measured,
) -> Result<(), RunError> {
    let end = created + Duration::from_millis(plan.settle_ms);
    let every = Duration::from_millis(plan.interval_ms.max(1));
    while Instant::now() < end {
        m.settling.push(tick(s)?);
        let n = u32::try_from(m.settling.len()).unwrap_or(u32::MAX);
        sleep_until((Instant::now() + every).min(end), n)?;
    }
    Ok(())
}

fn watch(
    s: &mut Session,
    plan: &Plan,
    m: &mut Measured,
    on_tick: &mut impl FnMut(&Measured),
) -> Result<(), RunError> {
    m.baseline = Some(tick(s)?);
    let delta = u64::from(m.khz.max(1)).saturating_mul(WRITE_SECONDS * 1_000);
    m.write = Some(write(s, delta, m.khz)?);
    let start = Instant::now();
    let every = Duration::from_millis(plan.interval_ms.max(1));
    let end = Duration::from_secs(plan.seconds);
    loop {
        m.ticks.push(tick(s)?);
        on_tick(m);
        let n = u32::try_from(m.ticks.len()).unwrap_or(u32::MAX);
        let next = every.saturating_mul(n);
        if next > end {
            return Ok(());
        }
        sleep_until(start + next, n)?;
    }
}

/// Sleeps until `at`, looking for a stop request every 50 ms.
fn sleep_until(at: Instant, tick: u32) -> Result<(), RunError> {
    loop {
        if let Some(signal) = stop::requested() {
            return Err(RunError::interrupted(signal, tick));
        }
        let left = at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// One sampling: every vCPU reads its kvmclock, all resumed together
/// between two host reads of CLOCK_MONOTONIC_RAW; then, the vCPUs parked,
/// the pages, the exact offsets and KVM_GET_CLOCK.
fn tick(s: &mut Session) -> Result<Tick, RunError> {
    let read = CommandSlot {
        op: Op::ReadClock as u32,
        ..Default::default()
    };
    let before_ns = monotonic_raw_ns();
    let reads = s.exec(&vec![read; s.vcpus() as usize])?;
    let host = Bracket {
        before_ns,
        after_ns: monotonic_raw_ns(),
    };
    let pages = s.pvclock_pages()?;
    let states = s.readback()?;
    let clock_flags = s.clock().ok().map(|c| c.flags);
    let vcpus = reads
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let page = pages.get(i).copied().unwrap_or_default();
            Sample {
                host,
                kvmclock_ns: r.result_b,
                tsc: r.result_a,
                // As Session::guest_clock_read decodes Op::ReadClock.
                version: r.result_c as u32,
                flags: (r.result_c >> 32) as u8,
                page_version: page.version,
                tsc_timestamp: page.tsc_timestamp,
                system_time: page.system_time,
                tsc_offset: states.get(i).and_then(|st| st.offset),
            }
        })
        .collect();
    Ok(Tick { vcpus, clock_flags })
}

/// vCPU [`WRITER`] writes IA32_TSC = its TSC + `delta` between two kvmclock
/// reads (the others do nothing); KVM's view of it before and after.
fn write(s: &mut Session, delta: u64, khz: u32) -> Result<Write, RunError> {
    let before = s.readback()?;
    let tag = s.next_command();
    let host_before = monotonic_raw_ns();
    s.exec_one(
        WRITER,
        CommandSlot {
            op: Op::ClockWrite as u32,
            arg: MSR_IA32_TSC,
            value: delta,
            ..Default::default()
        },
    )?;
    let host_after = monotonic_raw_ns();
    let record = memory::read_clock_record(s.mem(), WRITER)?;
    if !record.is_for(tag, MSR_IA32_TSC) {
        return Err(RunError::BadClockRecord { vcpu: WRITER, tag });
    }
    let after = s.readback()?;
    let (b, a) = (
        before.get(WRITER as usize).copied().unwrap_or_default(),
        after.get(WRITER as usize).copied().unwrap_or_default(),
    );
    let moved = match (a.offset, b.offset) {
        (Some(a), Some(b)) => Some(a.wrapping_sub(b) as i64),
        _ => None,
    };
    Ok(Write {
        vcpu: WRITER,
        host: Bracket {
            before_ns: host_before,
            after_ns: host_after,
        },
        delta_cycles: delta,
        written: record.written,
        offset: (b.offset, a.offset),
        adjust: (b.adjust, a.adjust),
        across: across_write(WRITER, &record, moved, khz),
    })
}
