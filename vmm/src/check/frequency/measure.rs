//! Measuring what checks 10-13 judge, on one-vCPU VMs (one per rate tried),
//! a two-vCPU VM whose vCPUs run at different rates, and, where KVM can
//! scale, a two-vCPU VM at half the host's rate running the rendezvous. A
//! VM that cannot be had is said in [`FrequencyEvidence::errors`] and its
//! checks judge without it; only a stop request ends the measurement.

use std::time::{Duration, Instant};

use tsc_contract::RoundRecord;

use super::{FrequencyEvidence, Mixed, Probe, ScaledRounds};
use crate::analysis::RoundAccumulator;
use crate::check::measure::clock_view;
use crate::check::report::CheckOptions;
use crate::check::tally::RoundTally;
use crate::error::RunError;
use crate::session::{GuestRead, Session};
use crate::tsc::frequency::{Scaling, SetVia, TscRequest};
use crate::tsc::TscState;
use crate::vstate::vm::VmSpec;
use crate::vstate::VmError;

/// The pause between a probe's first and last reads: long enough that a
/// bracket of ~100 us bounds the rate to ~1 %, which tells 0.5x and 2x
/// from 1x with room to spare.
pub const PAUSE: Duration = Duration::from_millis(20);

/// Guest reads at each end of the pause (the tightest bracket is used).
const READS: usize = 3;

/// The rates tried, in millionths of the host's: half, double, and half
/// KVM's tolerance above (a rate KVM takes unscaled).
pub fn ratios(scaling: &Scaling) -> [u64; 3] {
    [
        500_000,
        2_000_000,
        1_000_000 + u64::from(scaling.tolerance_ppm / 2).max(1),
    ]
}

/// The rendezvous rounds of check 13.
pub const SCALED_ROUNDS: u32 = 20;

/// Measures the family's evidence. Fails only on a stop request (with what
/// was measured before it lost).
pub fn measure(opts: &CheckOptions) -> Result<FrequencyEvidence, RunError> {
    let mut ev = FrequencyEvidence::default();
    let (scaling, vm_control) = match Session::start(1, opts.timeout) {
        Ok(s) => {
            let vm_control = s.kvm().is_some_and(|k| {
                k.check_extension_raw(u64::from(kvm_bindings::KVM_CAP_VM_TSC_CONTROL)) > 0
            });
            (s.scaling().0, vm_control)
        }
        Err(e) => return stop_or(e, ev, "a VM to read KVM's scaling from"),
    };
    ev.scaling = scaling;
    ev.vm_control = vm_control;
    // Every probe's VM takes its first reads, waits out one pause shared by
    // all (each one's span is at least PAUSE), then takes its last reads.
    let mut pending = Vec::new();
    for ppm in ratios(&scaling) {
        let khz = TscRequest::RatioPpm(ppm).resolve(scaling.host_khz);
        let t = Instant::now();
        let what = format!("the per-vCPU probe of {khz} kHz");
        match vcpu_probe(opts.timeout, ppm, khz) {
            Ok(p) => pending.push((p, what)),
            Err(e) => ev = stop_or(e, ev, &what)?,
        }
        ev.seconds
            .push((format!("per-vCPU {khz} kHz"), t.elapsed().as_secs_f64()));
    }
    if vm_control {
        for ppm in &ratios(&scaling)[..2] {
            let khz = TscRequest::RatioPpm(*ppm).resolve(scaling.host_khz);
            let t = Instant::now();
            let what = format!("the per-VM probe of {khz} kHz");
            match vm_probe(opts.timeout, *ppm, khz) {
                Ok(p) => pending.push((p, what)),
                Err(e) => ev = stop_or(e, ev, &what)?,
            }
            ev.seconds
                .push((format!("per-VM {khz} kHz"), t.elapsed().as_secs_f64()));
        }
    }
    let t = Instant::now();
    if pending.iter().any(|(p, _)| p.session.is_some()) {
        std::thread::sleep(PAUSE);
    }
    for (p, what) in pending {
        match p.finish() {
            Ok(p) => ev.probes.push(p),
            Err(e) => ev = stop_or(e, ev, &what)?,
        }
    }
    ev.seconds.push((
        "the probes' pause and last reads".into(),
        t.elapsed().as_secs_f64(),
    ));
    let t = Instant::now();
    match mixed(opts.timeout, &scaling) {
        Ok(m) => ev.mixed = Some(m),
        Err(e) => ev = stop_or(e, ev, "the mixed-rate VM")?,
    }
    ev.seconds
        .push(("mixed-rate VM".into(), t.elapsed().as_secs_f64()));
    if scaling.tsc_control {
        let t = Instant::now();
        match scaled(opts) {
            Ok(s) => ev.scaled = Some(s),
            Err(e) => ev = stop_or(e, ev, "the scaled rendezvous")?,
        }
        ev.seconds
            .push(("scaled rendezvous".into(), t.elapsed().as_secs_f64()));
    }
    Ok(ev)
}

/// A stop request ends the measurement; any other error is said in the
/// evidence, which goes on.
fn stop_or(
    e: RunError,
    mut ev: FrequencyEvidence,
    what: &str,
) -> Result<FrequencyEvidence, RunError> {
    if e.signal().is_some() {
        return Err(e);
    }
    ev.errors.push(format!("{what}: {e}"));
    Ok(ev)
}

/// `READS` guest reads on vCPU 0 into `out`.
fn reads_into(s: &mut Session, out: &mut Vec<GuestRead>) -> Result<(), RunError> {
    for _ in 0..READS {
        out.push(s.guest_clock_read(0)?);
    }
    Ok(())
}

/// A probe with its first reads taken; its VM, when the rate was taken,
/// waits for the pause and the last reads.
struct Pending {
    probe: Probe,
    session: Option<Session>,
}

impl Pending {
    /// A probe whose VM runs at the rate asked: its first reads now.
    fn reading(mut probe: Probe, mut s: Session) -> Result<Pending, RunError> {
        probe.reads.reserve(2 * READS);
        reads_into(&mut s, &mut probe.reads)?;
        Ok(Pending {
            probe,
            session: Some(s),
        })
    }

    /// The last reads, after the pause.
    fn finish(mut self) -> Result<Probe, RunError> {
        if let Some(s) = self.session.as_mut() {
            reads_into(s, &mut self.probe.reads)?;
        }
        Ok(self.probe)
    }
}

fn first(states: Vec<TscState>) -> Option<TscState> {
    states.into_iter().next()
}

/// KVM_SET_TSC_KHZ on the vCPU of a fresh VM that has run (its kvmclock
/// registered, read once), and the first reads after.
fn vcpu_probe(timeout: Duration, ratio_ppm: u64, khz: u32) -> Result<Pending, RunError> {
    let mut s = Session::start(1, timeout)?;
    let before = first(s.readback()?);
    let pre = s.guest_clock_read(0)?;
    let set = s.host_set_tsc_khz(0, khz)?;
    let after = first(s.readback()?);
    let taken = set.is_ok();
    let probe = Probe {
        scope: SetVia::Vcpu,
        ratio_ppm,
        khz,
        set,
        reported: after.map(|a| a.tsc_khz),
        before,
        after,
        pre: Some(pre),
        reads: Vec::new(),
    };
    if taken {
        Pending::reading(probe, s)
    } else {
        Ok(Pending {
            probe,
            session: None,
        })
    }
}

/// KVM_SET_TSC_KHZ on a VM before its vCPU exists, and the first reads
/// after.
fn vm_probe(timeout: Duration, ratio_ppm: u64, khz: u32) -> Result<Pending, RunError> {
    let spec = VmSpec {
        tsc: Some(TscRequest::Khz(khz)),
        ..VmSpec::command_mode(1)
    };
    let mut probe = Probe {
        scope: SetVia::Vm,
        ratio_ppm,
        khz,
        set: Ok(()),
        reported: None,
        before: None,
        after: None,
        pre: None,
        reads: Vec::new(),
    };
    let mut s = match Session::start_spec(&spec, timeout) {
        Ok(s) => s,
        Err(RunError::Vm(VmError::SetTscKhz { errno, why, .. })) => {
            probe.set = Err(format!("{errno}: {why}"));
            return Ok(Pending {
                probe,
                session: None,
            });
        }
        Err(e) => return Err(e),
    };
    probe.after = first(s.readback()?);
    probe.reported = probe.after.map(|a| a.tsc_khz);
    Pending::reading(probe, s)
}

/// Two vCPUs, vCPU 1 set to twice the host's rate (which KVM takes with or
/// without scaling) before either first runs, as a VMM sets up vCPUs of
/// different rates (a rate changed on a vCPU that has run leaves its page
/// behind: check 11's finding, which check 12 must not measure again), each
/// reading its kvmclock once, then kvmclock's view.
fn mixed(timeout: Duration, scaling: &Scaling) -> Result<Mixed, RunError> {
    let khz = TscRequest::RatioPpm(2_000_000).resolve(scaling.host_khz);
    let (mut s, set) = Session::start_prepared(&VmSpec::command_mode(2), timeout, |vm| {
        match vm.vcpus.get(1) {
            Some(v) => v.set_tsc_khz(khz).map_err(|e| e.to_string()),
            None => Err("the VM has no vCPU 1".to_string()),
        }
    })?;
    let set = vec![set];
    for v in 0..2 {
        s.guest_clock_read(v)?;
    }
    let view = clock_view(&mut s)?;
    Ok(Mixed {
        khz: view.states.iter().map(|st| st.tsc_khz).collect(),
        set,
        view,
    })
}

/// The rendezvous on two vCPUs at half the host's rate.
fn scaled(opts: &CheckOptions) -> Result<ScaledRounds, RunError> {
    let mut s = Session::start_at(2, Some(TscRequest::RatioPpm(500_000)), opts.timeout)?;
    let mut out = ScaledRounds {
        setting: s.scaling().1,
        ..ScaledRounds::default()
    };
    let mut before = s.readback()?;
    let mut acc = RoundAccumulator::new(&before);
    let mut records: Vec<RoundRecord> = Vec::with_capacity(2);
    let mut after: Vec<TscState> = Vec::with_capacity(2);
    for round in 0..SCALED_ROUNDS {
        s.rendezvous(opts.variant, round, &mut records)?;
        s.readback_into(&mut after)?;
        let r = acc.add(round, opts.variant, &records, &after, None);
        let mut t = RoundTally::default();
        t.add(&r);
        out.rounds += 1;
        out.vcpu_rounds += t.vcpu_rounds;
        out.mismatches += t.mismatches;
        out.wrote += t.wrote;
        out.honoured += t.honoured;
        for d in r
            .disagreements
            .iter()
            .take(3 - out.disagreements.len().min(3))
        {
            out.disagreements.push(format!("round {round}: {d}"));
        }
        for (b, a) in before.iter().zip(&after) {
            let (Some(ob), Some(oa)) = (b.offset, a.offset) else {
                continue;
            };
            let exact = oa.wrapping_sub(ob) as i64;
            let (scaled, err) = a.offset_minus(b);
            let unscaled = |x: &TscState| TscState {
                scaled: false,
                ..*x
            };
            let (raw, _) = unscaled(a).offset_minus(&unscaled(b));
            let miss = raw.wrapping_sub(exact);
            if out
                .control
                .is_none_or(|(m, _, _)| miss.unsigned_abs() > m.unsigned_abs())
            {
                out.control = Some((miss, scaled.wrapping_sub(exact), err));
            }
        }
        std::mem::swap(&mut before, &mut after);
    }
    Ok(out)
}
