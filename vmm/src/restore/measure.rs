//! One method's measurement: the source VM and its rendezvous, the guests'
//! last TSC and kvmclock reads, a snapshot, the restore into a fresh VM
//! (by the method), the restored guest's first reads, its warp test and
//! its clock once it ran again, and the chained restore (the restored guest
//! snapshotted and restored again); and the probe VM of a `restore` run.
//! Everything here drives a session; what it records is [`MethodRun`].
//!
//! Every VM is freed on every path: the source when its [`Session`] is
//! dropped (its vCPU threads joined first), a destination likewise, or,
//! before its threads start, with its `Vm`.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tsc_contract::{RoundRecord, MSR_KVM_SYSTEM_TIME_NEW};

use super::error::RestoreError;
use super::methods::{self, Support, Trace};
use super::options::{scaled_chain_delay, ChainDelay, Method, MethodOptions, Step};
pub use super::reads::Reads;
use super::reads::{ClockAfter, ClockReads, CLOCK_EXCHANGES};
pub use super::record::{ChainRun, Failed, MethodRun};
use super::snapshot::{byte, get_clock, save_memory, Snapshot};
use crate::error::RunError;
use crate::host::HostInfo;
use crate::session::Session;
use crate::stop;
use crate::stop::Signal;
use crate::tsc::frequency::{FrequencySetting, TscRequest};
use crate::tsc::{self, debugfs, host_rdtsc, OffsetReader, MSR_IA32_TSC_ADJUST};
use crate::vstate::vcpu::state::restore_vcpu;
use crate::vstate::vm::{self, Vm, VmSpec};
use crate::vstate::PioState;

/// Why the guests cannot read their kvmclock here, if they cannot.
fn why_no_reads(s: &Session) -> Option<String> {
    if !s.kvmclock() {
        Some(
            "no kvmclock: KVM does not offer it to this guest (CPUID lacks \
             KVM_FEATURE_CLOCKSOURCE2)"
                .into(),
        )
    } else if !s.guest_tsc_adjust() {
        Some(
            "the guest has no IA32_TSC_ADJUST, whose write of +0 is the guest's read of \
             kvmclock that moves no TSC"
                .into(),
        )
    } else {
        None
    }
}

/// Every guest reads its kvmclock now (how: [`super::reads`]).
fn guest_reads(s: &mut Session) -> Result<ClockReads, RunError> {
    let host_before = host_rdtsc();
    let records = s.clock_write_all(MSR_IA32_TSC_ADJUST, 0)?;
    let host_after = host_rdtsc();
    Ok(ClockReads {
        records,
        host_before,
        host_after,
        kvm: s.clock(),
    })
}

/// KVM_GET_CLOCK, the pages and the kvmclock hand-off test now.
fn clock_after(s: &mut Session) -> Result<ClockAfter, RunError> {
    let handoff = if s.kvmclock() && s.vcpus() >= 2 {
        Some(s.kvmclock_handoff(CLOCK_EXCHANGES, true)?)
    } else {
        None
    };
    let states = s.readback()?;
    let pages = if s.kvmclock() {
        s.pvclock_pages()?
    } else {
        Vec::new()
    };
    Ok(ClockAfter {
        clock: s.clock(),
        pages,
        handoff,
        states,
    })
}

/// Every (parked) vCPU's MSR_KVM_SYSTEM_TIME_NEW, for a snapshot (`None`
/// per vCPU without kvmclock): KVM keeps a vCPU's kvmclock page only while
/// that MSR is set, so a restore must write it back.
fn save_msrs(s: &mut Session) -> Result<Vec<Option<u64>>, RunError> {
    (0..s.vcpus())
        .map(|v| {
            if s.kvmclock() {
                s.host_get_msr(v, MSR_KVM_SYSTEM_TIME_NEW).map(Some)
            } else {
                Ok(None)
            }
        })
        .collect()
}
/// Every guest reads its TSC, between two host TSC reads.
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
    let kvmclock_msrs = save_msrs(s)?;
    let mut vcpus = Vec::with_capacity(saved.len());
    for (i, r) in saved.into_iter().enumerate() {
        let vcpu = i as u32;
        vcpus.push(*r.map_err(|error| RestoreError::Save { vcpu, error })?);
    }
    let mem_len = usize::try_from(tsc_contract::layout::MEM_SIZE)
        .map_err(|e| RestoreError::Memory(e.to_string()))?;
    let (mem, pages) = save_memory(s.mem(), mem_len).map_err(|e| RestoreError::Memory(e.0))?;
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
        pages,
        clock,
        next_command: s.next_command(),
        kvmclock_msrs,
    })
}

/// Where one restore keeps what it measured before the guest resumes.
struct Slots<'a> {
    /// From destroying the source VM to creating the destination.
    delay: &'a mut Option<Duration>,
    /// Every destination vCPU's offset at its creation.
    created: &'a mut Option<Vec<Option<u64>>>,
    /// What the method wrote.
    trace: &'a mut Option<Trace>,
    /// How the destination's rate was set, where that is recorded.
    frequency: Option<&'a mut Option<FrequencySetting>>,
}

/// Which step a restore is in, and the test-only failure injection: the
/// first restore tracks its steps; the chained one runs in step `chain`
/// throughout and injects nothing.
struct Progress<'a> {
    /// The step to keep up to date (`None`: do not track).
    step: Option<&'a mut Step>,
    /// Fail on purpose in this step.
    fail_at: Option<Step>,
}

impl Progress<'_> {
    fn enter(&mut self, s: Step) {
        if let Some(step) = self.step.as_deref_mut() {
            *step = s;
        }
    }

    fn inject(&self, s: Step) -> Result<(), RestoreError> {
        match self.fail_at {
            Some(f) if f == s && self.step.is_some() => Err(RestoreError::Injected(s)),
            _ => Ok(()),
        }
    }
}

/// The destination of `snap`: a command-mode VM of `opts.vcpus` vCPUs, set
/// to the saved rate (the snapshot's KVM_GET_TSC_KHZ, as a VMM must on a
/// host of another rate) when `--tsc-khz` set the source's; else at the
/// host's rate, as the source.
fn destination_spec(
    opts: &MethodOptions,
    snap: &Snapshot,
) -> Result<VmSpec<'static>, RestoreError> {
    let tsc = match opts.tsc {
        Some(_) => Some(TscRequest::Khz(methods::common_khz(snap)?)),
        None => None,
    };
    Ok(VmSpec {
        tsc,
        ..VmSpec::command_mode(opts.vcpus)
    })
}

/// Destroys `src`, waits `opts.delay`, creates a fresh VM (at the saved
/// rate: [`destination_spec`]), restores `snap` into it (memory, registers,
/// every vCPU's MSR_KVM_SYSTEM_TIME_NEW, the TSC state by `method`) and
/// starts its session without running the guest.
fn restore_into(
    src: Session,
    snap: &Snapshot,
    method: Method,
    opts: &MethodOptions,
    slots: Slots<'_>,
    progress: &mut Progress<'_>,
) -> Result<Session, RestoreError> {
    progress.enter(Step::Create);
    drop(src);
    let destroyed = Instant::now();
    log::info!(
        "restore ({}): source VM destroyed; waiting {} ms",
        method.name(),
        opts.delay.as_millis()
    );
    wait(opts.delay)?;
    progress.inject(Step::Create)?;
    let spec = destination_spec(opts, snap)?;
    let machine = Vm::new(vm::open_kvm()?, &spec)?;
    *slots.delay = Some(destroyed.elapsed());
    if let Some(f) = slots.frequency {
        *f = machine.frequency;
    }
    *slots.created = Some(offsets_now(&machine));

    progress.enter(Step::Memory);
    progress.inject(Step::Memory)?;
    snap.restore_memory(&machine.mem)
        .map_err(|e| RestoreError::Memory(e.0))?;

    progress.enter(Step::Registers);
    progress.inject(Step::Registers)?;
    for (i, (fd, v)) in machine.vcpus.iter().zip(&snap.vcpus).enumerate() {
        let vcpu = i as u32;
        restore_vcpu(fd, v).map_err(|error| RestoreError::Vcpu { vcpu, error })?;
    }
    for (i, (fd, msr)) in machine.vcpus.iter().zip(&snap.kvmclock_msrs).enumerate() {
        if let Some(value) = *msr {
            tsc::set_msr(fd, MSR_KVM_SYSTEM_TIME_NEW, value).map_err(|error| {
                RestoreError::Kvmclock {
                    vcpu: i as u32,
                    error,
                }
            })?;
        }
    }

    progress.enter(Step::Tsc);
    methods::apply(method, &machine, snap, slots.trace, &mut || {
        progress.inject(Step::Tsc)
    })?;

    progress.enter(Step::Resume);
    let dst = Session::restored(machine, opts.timeout, snap.next_command)?;
    progress.inject(Step::Resume)?;
    Ok(dst)
}
/// Measures `method` once: source VM, rendezvous, last reads, snapshot,
/// destroy, delay, destination VM, restore, first reads, warp test, the
/// clock after it and, when asked, the chained restore.
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
    let mut src = Session::start_at(opts.vcpus, opts.tsc, opts.timeout)?;
    let initial = src.readback()?;
    run.offset_source = Some(src.facts(&initial).offset_source);
    let (scaling, frequency) = src.scaling();
    run.scaling = Some(scaling);
    run.source_frequency = frequency;
    run.initial = Some(initial);
    let mut records: Vec<RoundRecord> = Vec::with_capacity(opts.vcpus as usize);
    src.rendezvous(opts.variant, 0, &mut records)?;
    run.last = Some(timed_reads(&mut src)?);
    run.clock_why_not = why_no_reads(&src);
    let reads = run.clock_why_not.is_none();
    if reads {
        run.clock_last = Some(guest_reads(&mut src)?);
    }

    *step = Step::Snapshot;
    let snap = take_snapshot(&mut src)?;
    run.snapshot = Some(snap.info());
    inject(Step::Snapshot)?;

    let slots = Slots {
        delay: &mut run.delay,
        created: &mut run.created,
        trace: &mut run.trace,
        frequency: Some(&mut run.destination_frequency),
    };
    let mut progress = Progress {
        step: Some(&mut *step),
        fail_at: opts.fail_at,
    };
    let mut dst = restore_into(src, &snap, run.method, opts, slots, &mut progress)?;
    let restored = Instant::now();
    run.after = Some(dst.readback()?);
    if reads {
        run.clock_first = Some(guest_reads(&mut dst)?);
    }
    run.first = Some(timed_reads(&mut dst)?);

    *step = Step::Measure;
    inject(Step::Measure)?;
    run.warp = Some(dst.warp(opts.warp_iterations)?);
    run.after_warp = Some(dst.readback()?);
    run.clock_after = Some(clock_after(&mut dst)?);

    if opts.chain {
        *step = Step::Chain;
        let out = run.chain.insert(ChainRun::default());
        let chained = match opts.chain_delay {
            ChainDelay::Same => opts.clone(),
            ChainDelay::Scaled => MethodOptions {
                delay: scaled_chain_delay(opts.delay, restored.elapsed()),
                ..opts.clone()
            },
        };
        chain(&chained, run.method, dst, reads, out)?;
    }
    Ok(())
}

/// Snapshots `s` (the first restore's session, its guest parked) and
/// restores it again by `method`, filling `out` as it goes; `reads`: the
/// guests can read their kvmclock. The test-only failure injection of step
/// `chain` fails it after the second snapshot.
fn chain(
    opts: &MethodOptions,
    method: Method,
    mut s: Session,
    reads: bool,
    out: &mut ChainRun,
) -> Result<(), RestoreError> {
    out.last = Some(timed_reads(&mut s)?);
    if reads {
        out.clock_last = Some(guest_reads(&mut s)?);
    }
    let snap = take_snapshot(&mut s)?;
    out.snapshot = Some(snap.info());
    if opts.fail_at == Some(Step::Chain) {
        return Err(RestoreError::Injected(Step::Chain));
    }
    if let Some(why) = not_again(method, &snap) {
        out.not_possible = Some(why);
        return Ok(());
    }
    let slots = Slots {
        delay: &mut out.delay,
        created: &mut out.created,
        trace: &mut out.trace,
        frequency: None,
    };
    let mut progress = Progress {
        step: None,
        fail_at: None,
    };
    let mut dst = restore_into(s, &snap, method, opts, slots, &mut progress)?;
    out.after = Some(dst.readback()?);
    if reads {
        out.clock_first = Some(guest_reads(&mut dst)?);
    }
    out.first = Some(timed_reads(&mut dst)?);
    out.clock_after = Some(clock_after(&mut dst)?);
    Ok(())
}
/// Why `method` cannot restore `snap` (a restored VM's snapshot), if it
/// cannot: the documented method needs KVM_GET_CLOCK's real time and host
/// TSC, which KVM reports only while the master clock is on.
fn not_again(method: Method, snap: &Snapshot) -> Option<String> {
    if method != Method::Documented {
        return None;
    }
    match &snap.clock {
        Ok(c) => {
            let missing = super::offsets::missing_flags(c.flags);
            (!missing.is_empty()).then(|| {
                format!(
                    "KVM_GET_CLOCK on the restored VM returned flags {:#x}, without {}: KVM \
                     reports real time and the host TSC only while the master clock is on (and \
                     the host clocksource is the TSC), so the documented method cannot restore \
                     the VM it restored",
                    c.flags,
                    missing.join(" and ")
                )
            })
        }
        Err(e) => Some(format!("KVM_GET_CLOCK of the restored VM: {e}")),
    }
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

/// Creates a 1-vCPU command-mode VM, its guest's TSC at `tsc` (the rate
/// the methods' source VMs get: one KVM refuses is refused here, before any
/// method), to learn the host's facts and what the methods can use; frees
/// it before returning.
pub fn probe(timeout: Duration, tsc: Option<TscRequest>) -> Result<Probe, RestoreError> {
    let mut s = Session::start_at(1, tsc, timeout)?;
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
