//! Measuring what checks 1 and 3-6 judge, once, on one command-mode VM:
//! every vCPU's state at the start, the rendezvous rounds, a later guest TSC
//! read, and the warp test. A stop request (SIGINT, SIGTERM) ends the
//! measurement early with what it had; the checks then judge what is there.

use tsc_contract::{RoundRecord, Variant};

use super::evidence::{
    ClockEvidence, ClockView, ClockWrites, Control, Evidence, HandoffEvidence, LaterRead,
    WarpEvidence,
};
use super::report::{CheckOptions, Environment};
use super::tally::RoundTally;
use crate::analysis::RoundAccumulator;
use crate::error::RunError;
use crate::host::HostInfo;
use crate::session::{Handoff, Session};
use crate::tsc::host_clock::{ClockDrift, ClockPoint};
use crate::tsc::{host_rdtsc, TscState, MSR_IA32_TSC, MSR_IA32_TSC_ADJUST};
use crate::units::fmt_int;
use crate::vstate::vm;

/// Measures the evidence. Fails only when not even the environment could be
/// read; an error later (a stop request, a vCPU failure) is returned beside
/// what was measured before it.
pub fn measure(opts: &CheckOptions) -> Result<(Evidence, Option<RunError>), RunError> {
    let clock_start = ClockPoint::now();
    let mut s = Session::start_at(opts.vcpus, opts.tsc, opts.timeout)?;
    let initial = s.readback()?;
    let env = Environment {
        host: HostInfo::collect(s.facts(&initial)),
        kvm_capabilities: s.kvm().map(vm::capabilities).unwrap_or_default(),
    };
    let mut ev = Evidence {
        env,
        options: opts.clone(),
        tally: RoundTally::default(),
        later_read: None,
        warp: None,
        handoff: None,
        clock: ClockEvidence {
            kvmclock: s.kvmclock(),
            fresh: None,
            after_rounds: None,
            tsc_write: None,
            adjust_write: None,
            host_clock: None,
        },
        initial,
        frequency: None,
    };
    let mut stopped = rounds_and_warp(&mut s, &mut ev).err();
    // Against KVM's TSC frequency for the host: the rate its pages assume.
    let host_khz = ev.env.host.host_tsc_khz.or(ev.env.host.tsc_khz);
    ev.clock.host_clock = match (clock_start, ClockPoint::now(), host_khz) {
        (Some(a), Some(b), Some(khz)) => ClockDrift::between(a, b, khz),
        _ => None,
    };
    drop(s);
    if stopped.is_none() {
        match super::frequency::measure(opts) {
            Ok(f) => ev.frequency = Some(f),
            Err(e) => stopped = Some(e),
        }
    }
    Ok((ev, stopped))
}

/// Exchanges per pair of the kvmclock hand-off test.
const CLOCK_EXCHANGES: u32 = 200;

/// What kvmclock looks like now: KVM_GET_CLOCK, the pages, the vCPUs' TSC
/// states and their kvmclocks against each other.
pub(super) fn clock_view(s: &mut Session) -> Result<ClockView, RunError> {
    let handoff = s.kvmclock_handoff(CLOCK_EXCHANGES, true)?;
    let states = s.readback()?;
    Ok(ClockView {
        clock: s.clock(),
        pages: s.pvclock_pages()?,
        states,
        handoff,
    })
}

/// Every vCPU writes `msr` moved by `delta` between two kvmclock reads;
/// KVM's view before and after.
fn clock_writes(s: &mut Session, msr: u32, delta: u64) -> Result<ClockWrites, RunError> {
    let before = s.readback()?;
    let records = s.clock_write_all(msr, delta)?;
    let after = s.readback()?;
    Ok(ClockWrites {
        msr,
        delta,
        records,
        before,
        after,
    })
}

/// The size of the continuity test's writes: 4 s of TSC cycles, far beyond
/// any allowance of a kvmclock that ran on (check 8 derives it per write:
/// rounding, the page's rate, NTP over the page's age), so that following
/// the TSC and running on cannot read alike.
pub fn continuity_delta(tsc_khz: Option<u32>) -> u64 {
    u64::from(tsc_khz.unwrap_or(1_000_000)).saturating_mul(4_000)
}

fn rounds_and_warp(s: &mut Session, ev: &mut Evidence) -> Result<(), RunError> {
    if ev.clock.kvmclock {
        ev.clock.fresh = Some(clock_view(s)?);
    }
    let opts = &ev.options;
    let mut acc = RoundAccumulator::new(&ev.initial);
    let mut records: Vec<RoundRecord> = Vec::with_capacity(ev.initial.len());
    let mut after: Vec<TscState> = Vec::with_capacity(ev.initial.len());
    let mut host_before_last = host_rdtsc();
    for round in 0..opts.rounds {
        host_before_last = host_rdtsc();
        s.rendezvous(opts.variant, round, &mut records)?;
        s.readback_into(&mut after)?;
        let sync = (opts.variant == Variant::LinuxTscSync)
            .then(|| s.sync_round())
            .transpose()?;
        let r = acc.add(round, opts.variant, &records, &after, sync);
        ev.tally.add(&r);
    }
    let host_before = host_rdtsc();
    let tsc = s.guest_rdtsc_all()?;
    let host_after = host_rdtsc();
    ev.later_read = Some(LaterRead {
        tsc,
        host_elapsed: host_after.wrapping_sub(host_before_last),
        host_before,
        host_after,
    });
    let seen = s.warp(opts.warp_iterations)?;
    let after = s.readback()?;
    ev.warp = Some(WarpEvidence { seen, after });
    // The master clock after the guests' writes, before a host write of an
    // offset (check 5's control) could turn it off.
    if ev.clock.kvmclock {
        ev.clock.after_rounds = Some(clock_view(s)?);
    }
    if s.vcpus() >= 2 {
        let test = s.handoff(opts.exchanges, true)?;
        let after = s.readback()?;
        let control = control(s, &test, &after)?;
        ev.handoff = Some(HandoffEvidence {
            test,
            after,
            control,
        });
    }
    if ev.clock.kvmclock {
        // The control first: a TSC_ADJUST write requests a clock update, so
        // what the IA32_TSC write is measured against starts from a page
        // KVM has just re-anchored. The other way round, a page the IA32_TSC
        // write left stale would be corrected by the control's update, and
        // the control would see that correction (kvmclock stepping back by
        // the first write's move) instead of its own continuity.
        let delta = continuity_delta(ev.env.host.tsc_khz);
        if s.guest_tsc_adjust() {
            ev.clock.adjust_write = Some(clock_writes(s, MSR_IA32_TSC_ADJUST, delta)?);
        }
        ev.clock.tsc_write = Some(clock_writes(s, MSR_IA32_TSC, delta)?);
    }
    Ok(())
}

/// The control's move: a hundred times the longest of the shortest round
/// trips, at least 2^20 cycles (far beyond any bound the test could have),
/// at most 2^40.
pub fn control_delta(test: &Handoff) -> u64 {
    let rtt = test.pairs.iter().map(|p| p.min_rtt).max().unwrap_or(0);
    rtt.saturating_mul(100).clamp(1 << 20, 1 << 40)
}

/// The positive control: moves the last vCPU's TSC by [`control_delta`]
/// through KVM_VCPU_TSC_OFFSET where KVM has it, else (or when that did not
/// move it) through a guest TSC_ADJUST write where the guest has one, and
/// runs the test again once a move took effect (or cannot be checked, for
/// want of exact offsets). Moves KVM accepted without moving the exact
/// offset are [`Control::Unmoved`], saying which; no way to try one is
/// [`Control::Impossible`].
fn control(s: &mut Session, test: &Handoff, after: &[TscState]) -> Result<Control, RunError> {
    let v = s.vcpus() - 1;
    let delta = control_delta(test);
    let rel = |states: &[TscState]| -> Option<i64> {
        let (o0, ov) = (states.first()?.offset?, states.get(v as usize)?.offset?);
        Some(ov.wrapping_sub(o0) as i64)
    };
    let mut tried = Vec::new();
    let before = rel(after);
    let attempts: [(&'static str, bool); 2] = [
        ("KVM_VCPU_TSC_OFFSET", s.has_offset_attr()),
        ("a guest TSC_ADJUST write", s.guest_tsc_adjust()),
    ];
    for (how, possible) in attempts {
        if !possible {
            continue;
        }
        let now = s.readback()?;
        let Some(state) = now.get(v as usize).copied() else {
            break;
        };
        if how == "KVM_VCPU_TSC_OFFSET" {
            let Some(offset) = state.offset else { continue };
            s.host_set_offset(v, offset.wrapping_add(delta))?;
        } else {
            s.guest_wrmsr(v, MSR_IA32_TSC_ADJUST, state.adjust.wrapping_add(delta))?;
        }
        let moved_to = s.readback()?;
        let exact_change = match (rel(&moved_to), rel(&now)) {
            (Some(a), Some(b)) => Some(a.wrapping_sub(b)),
            _ => None,
        };
        if exact_change == Some(0) {
            tried.push(format!(
                "{how} asked vCPU {v} to move by {} cycles and its exact offset did not move",
                fmt_int(delta)
            ));
            continue;
        }
        let again = s.handoff(test.exchanges, test.all_pairs)?;
        let after_again = s.readback()?;
        // The change against the first test's state.
        let exact_change = match (rel(&after_again), before) {
            (Some(a), Some(b)) => Some(a.wrapping_sub(b)),
            _ => None,
        };
        return Ok(Control::Moved {
            vcpu: v,
            delta,
            how,
            exact_change,
            test: again,
            after: after_again,
        });
    }
    if tried.is_empty() {
        return Ok(Control::Impossible(
            "this KVM has no KVM_VCPU_TSC_OFFSET and the guest no IA32_TSC_ADJUST (or no exact \
             offset to move from)"
                .to_string(),
        ));
    }
    Ok(Control::Unmoved(tried.join("; ")))
}

#[cfg(test)]
mod tests {
    use tsc_contract::HandoffResult;

    use super::*;

    fn with_rtts(rtts: &[u64]) -> Handoff {
        Handoff {
            exchanges: 10,
            all_pairs: true,
            pairs: rtts
                .iter()
                .map(|&min_rtt| HandoffResult {
                    min_rtt,
                    ..HandoffResult::default()
                })
                .collect(),
        }
    }

    #[test]
    fn the_control_is_a_hundred_longest_round_trips_within_its_limits() {
        // 100 x the longest of the pairs' shortest round trips...
        assert_eq!(control_delta(&with_rtts(&[20_000, 50_000])), 5_000_000);
        // ...but never below 2^20 cycles (short trips on fast hardware)...
        assert_eq!(control_delta(&with_rtts(&[800, 808])), 1 << 20);
        assert_eq!(control_delta(&with_rtts(&[])), 1 << 20);
        // ...nor above 2^40, however slow the hand-offs were.
        assert_eq!(control_delta(&with_rtts(&[u64::MAX])), 1 << 40);
    }

    #[test]
    fn the_continuity_writes_are_4_s_of_cycles() {
        assert_eq!(continuity_delta(Some(2_445_431)), 9_781_724_000);
        assert!(
            continuity_delta(None) > 0,
            "a TSC frequency unknown still writes"
        );
    }
}
