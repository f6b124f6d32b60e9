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

use super::methods::{self, Support, Trace};
use super::report::{MethodReport, RestoreReport};
use super::snapshot::{Snapshot, SnapshotInfo};
use super::{Method, MethodOptions, RestoreError, Step};
use crate::error::RunError;
use crate::host::HostInfo;
use crate::session::{Session, WarpSeen};
use crate::stop;
use crate::stop::Signal;
use crate::tsc::{debugfs, host_rdtsc, OffsetReader, OffsetSource, TscState};
use crate::vstate::vcpu::state::restore_vcpu;
use crate::vstate::vm::{self, Vm, VmSpec};

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
    let snap = Snapshot::take(&mut src)?;
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
    snap.restore_memory(&machine.mem)?;

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

/// How a whole `restore` run ended.
pub struct Outcome {
    /// The report (absent when not even the probe VM could run).
    pub report: Option<RestoreReport>,
    /// The error that ended it early, with the method it happened in
    /// (`None`: before any method).
    pub error: Option<(Option<Method>, RestoreError)>,
    /// Whether any method was measured (in part or in full).
    pub measured: bool,
}

/// Runs every method of `methods` the kernel supports (the others are
/// reported as not run, with why), one after another, stopping at the first
/// failure or stop request; `on_method` sees each method's report as it
/// completes.
pub fn run(
    opts: &MethodOptions,
    methods: &[Method],
    mut on_method: impl FnMut(&MethodReport),
) -> Outcome {
    let probe = match probe(opts.timeout) {
        Ok(p) => p,
        Err(e) => {
            return Outcome {
                report: None,
                error: Some((None, e)),
                measured: false,
            }
        }
    };
    let mut report = RestoreReport::new(&probe, opts, methods);
    let mut error = None;
    let mut measured = false;
    for &m in methods {
        if let Some(signal) = stop::requested() {
            let e = RestoreError::Interrupted(Signal(signal));
            report.incomplete = Some(format!("{e}; {} and later not measured", m.name()));
            error = Some((Some(m), e));
            break;
        }
        if let Some(why) = probe.support.why_not(m) {
            let r = MethodReport::not_run(m, why);
            on_method(&r);
            report.methods.push(r);
            continue;
        }
        let (run, e) = measure_method(opts, m);
        measured = true;
        let r = MethodReport::from_run(&run, opts);
        on_method(&r);
        report.methods.push(r);
        if let Some(e) = e {
            let (step, what) = run
                .failed
                .as_ref()
                .map_or(("?", "?"), |f| (f.step.name(), f.step.describe()));
            report.incomplete = Some(match e.signal() {
                Some(_) => format!("{e} (in {}'s step '{step}', {what})", m.name()),
                None => format!("{} failed in step '{step}' ({what}): {e}", m.name()),
            });
            error = Some((Some(m), e));
            break;
        }
    }
    Outcome {
        report: Some(report),
        error,
        measured,
    }
}
