//! One method's measurement, from the source VM to the restored guest's
//! warp test, and the whole `restore` run over the methods asked for.
//!
//! Everything measured is kept as it comes in ([`MethodRun`]), so a failure
//! or a stop request in any step leaves what the steps before it measured.
//! Both VMs are freed on every path: the source when its [`Session`] is
//! dropped (its vCPU threads joined first), the destination likewise, or,
//! before its threads start, with its [`Vm`].

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tsc_contract::RoundRecord;

use super::error::RestoreError;
use super::methods::{self, Support, Trace};
use super::options::{Method, MethodOptions, Step};
use super::snapshot::{byte, get_clock, Snapshot, SnapshotInfo};
use crate::error::RunError;
use crate::host::HostInfo;
use crate::session::{Session, WarpSeen};
use crate::stop;
use crate::stop::Signal;
use crate::tsc::{debugfs, host_rdtsc, OffsetReader, OffsetSource, TscState};
use crate::vstate::vcpu::state::restore_vcpu;
use crate::vstate::vm::{self, Vm, VmSpec};
use crate::vstate::PioState;
use vm_memory::{Bytes, GuestAddress};

/// Every guest's TSC read once (Op::Rdtsc), between two host TSC reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reads {
    /// What each vCPU read, index = vCPU.
    pub tsc: Vec<u64>,
    /// Host TSC just before the vCPUs were resumed for the read.
    pub host_before: u64,
    /// Host TSC just after every vCPU had reported it.
    pub host_after: u64,
}

/// A failure, and the step it happened in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed {
    /// The step.
    pub step: Step,
    /// The error, as printed.
    pub error: String,
}

/// What one method's measurement saw, each part filled in when measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodRun {
    /// The method.
    pub method: Method,
    /// Where the exact offsets came from (the source VM's readback).
    pub offset_source: Option<OffsetSource>,
    /// Every source vCPU's TSC state when the guest first parked.
    pub initial: Option<Vec<TscState>>,
    /// The guests' last TSC reads before the snapshot.
    pub last: Option<Reads>,
    /// The snapshot (the TSC state saved, the pending I/O, the clock).
    pub snapshot: Option<SnapshotInfo>,
    /// From destroying the source VM to creating the destination.
    pub delay: Option<Duration>,
    /// Every destination vCPU's offset at its creation (before the method).
    pub created: Option<Vec<Option<u64>>>,
    /// What the method wrote.
    pub trace: Option<Trace>,
    /// Every destination vCPU's TSC state after the method, before the
    /// guest ran.
    pub after: Option<Vec<TscState>>,
    /// The guests' first TSC reads after the restore.
    pub first: Option<Reads>,
    /// The warp test after the restore.
    pub warp: Option<Vec<WarpSeen>>,
    /// Every vCPU's TSC state after the warp test.
    pub after_warp: Option<Vec<TscState>>,
    /// Why it ended early.
    pub failed: Option<Failed>,
}

impl MethodRun {
    /// Nothing measured yet.
    pub fn new(method: Method) -> MethodRun {
        MethodRun {
            method,
            offset_source: None,
            initial: None,
            last: None,
            snapshot: None,
            delay: None,
            created: None,
            trace: None,
            after: None,
            first: None,
            warp: None,
            after_warp: None,
            failed: None,
        }
    }
}

fn timed_reads(s: &mut Session) -> Result<Reads, RunError> {
    let host_before = host_rdtsc();
    let tsc = s.guest_rdtsc_all()?;
    let host_after = host_rdtsc();
    Ok(Reads {
        tsc,
        host_before,
        host_after,
    })
}

/// Waits `delay`, looking for a stop request every 50 ms.
fn wait(delay: Duration) -> Result<(), RestoreError> {
    let until = Instant::now() + delay;
    loop {
        if let Some(signal) = stop::requested() {
            return Err(RestoreError::Interrupted(Signal(signal)));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Every vCPU's offset now, from wherever this kernel shows it.
fn offsets_now(vm: &Vm) -> Vec<Option<u64>> {
    let dir =
        debugfs::mounted().map(|root| debugfs::vm_dir(&root, vm.creator_tid, vm.fd.as_raw_fd()));
    let readers = OffsetReader::choose(&vm.vcpus, dir.as_deref());
    readers
        .iter()
        .zip(&vm.vcpus)
        .map(|(r, fd)| r.read(fd).ok().flatten())
        .collect()
}

/// Saves every (parked) vCPU of `s` and the VM: each vCPU's pending port
/// I/O is completed first, and must have been (else the restored guest
/// would report its last command again).
fn take_snapshot(s: &mut Session) -> Result<Snapshot, RestoreError> {
    let saved = s.save_vcpus()?;
    let mut vcpus = Vec::with_capacity(saved.len());
    for (i, r) in saved.into_iter().enumerate() {
        let vcpu = i as u32;
        vcpus.push(*r.map_err(|error| RestoreError::Save { vcpu, error })?);
    }
    let mem_len = usize::try_from(tsc_contract::layout::MEM_SIZE)
        .map_err(|e| RestoreError::Memory(e.to_string()))?;
    let mut mem = vec![0u8; mem_len];
    s.mem()
        .read_slice(&mut mem, GuestAddress(0))
        .map_err(|e| RestoreError::Memory(e.to_string()))?;
    for (i, v) in vcpus.iter().enumerate() {
        if v.pio.state(|a| byte(&mem, a)) == PioState::NotCompleted {
            return Err(RestoreError::PioNotCompleted {
                vcpu: i as u32,
                rip_at_exit: v.pio.rip_at_exit,
                rip_after: v.pio.rip_after,
            });
        }
    }
    let clock = match s.vm_fd() {
        Some(fd) => get_clock(fd),
        None => Err("the VM is gone".into()),
    };
    Ok(Snapshot {
        vcpus,
        mem,
        clock,
        next_command: s.next_command(),
    })
}

/// Measures `method` once: source VM, rendezvous, last reads, snapshot,
/// destroy, delay, destination VM, restore, first reads, warp test.
/// Returns what was measured and, if it ended early, why.
pub fn measure_method(opts: &MethodOptions, method: Method) -> (MethodRun, Option<RestoreError>) {
    let mut run = MethodRun::new(method);
    let mut step = Step::Source;
    match steps(opts, &mut run, &mut step) {
        Ok(()) => (run, None),
        Err(e) => {
            run.failed = Some(Failed {
                step,
                error: e.to_string(),
            });
            (run, Some(e))
        }
    }
}

fn steps(opts: &MethodOptions, run: &mut MethodRun, step: &mut Step) -> Result<(), RestoreError> {
    let inject = |s: Step| match opts.fail_at {
        Some(f) if f == s => Err(RestoreError::Injected(s)),
        _ => Ok(()),
    };
    let mut src = Session::start(opts.vcpus, opts.timeout)?;
    let initial = src.readback()?;
    run.offset_source = Some(src.facts(&initial).offset_source);
    run.initial = Some(initial);
    let mut records: Vec<RoundRecord> = Vec::with_capacity(opts.vcpus as usize);
    src.rendezvous(opts.variant, 0, &mut records)?;
    run.last = Some(timed_reads(&mut src)?);

    *step = Step::Snapshot;
    let snap = take_snapshot(&mut src)?;
    run.snapshot = Some(snap.info());
    inject(Step::Snapshot)?;

    *step = Step::Create;
    drop(src);
    let destroyed = Instant::now();
    log::info!(
        "restore ({}): source VM destroyed; waiting {} ms",
        run.method.name(),
        opts.delay.as_millis()
    );
    wait(opts.delay)?;
    inject(Step::Create)?;
    let machine = Vm::new(vm::open_kvm()?, &VmSpec::command_mode(opts.vcpus))?;
    run.delay = Some(destroyed.elapsed());
    run.created = Some(offsets_now(&machine));

    *step = Step::Memory;
    inject(Step::Memory)?;
    snap.restore_memory(&machine.mem)
        .map_err(|e| RestoreError::Memory(e.0))?;

    *step = Step::Registers;
    inject(Step::Registers)?;
    for (i, (fd, v)) in machine.vcpus.iter().zip(&snap.vcpus).enumerate() {
        let vcpu = i as u32;
        restore_vcpu(fd, v).map_err(|error| RestoreError::Vcpu { vcpu, error })?;
    }

    *step = Step::Tsc;
    methods::apply(run.method, &machine, &snap, &mut run.trace, &mut || {
        inject(Step::Tsc)
    })?;

    *step = Step::Resume;
    let mut dst = Session::restored(machine, opts.timeout, snap.next_command)?;
    inject(Step::Resume)?;
    run.after = Some(dst.readback()?);
    run.first = Some(timed_reads(&mut dst)?);

    *step = Step::Measure;
    inject(Step::Measure)?;
    run.warp = Some(dst.warp(opts.warp_iterations)?);
    run.after_warp = Some(dst.readback()?);
    Ok(())
}

/// What a 1-vCPU probe VM says about the host and the methods.
pub struct Probe {
    /// The host.
    pub host: HostInfo,
    /// The KVM capabilities a report states.
    pub capabilities: std::collections::BTreeMap<String, i32>,
    /// What the methods can use.
    pub support: Support,
}

/// Creates a 1-vCPU command-mode VM to learn the host's facts and what the
/// methods can use; frees it before returning.
pub fn probe(timeout: Duration) -> Result<Probe, RestoreError> {
    let mut s = Session::start(1, timeout)?;
    let initial = s.readback()?;
    let host = HostInfo::collect(s.facts(&initial));
    let capabilities = s
        .kvm()
        .map(crate::vstate::vm::capabilities)
        .unwrap_or_default();
    let adjust_clock = capabilities
        .get("KVM_CAP_ADJUST_CLOCK")
        .copied()
        .unwrap_or(0);
    Ok(Probe {
        support: Support::new(s.has_offset_attr(), adjust_clock),
        host,
        capabilities,
    })
}
