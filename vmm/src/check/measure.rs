//! Measuring what checks 1 and 3-6 judge, once, on one command-mode VM:
//! every vCPU's state at the start, the rendezvous rounds, a later guest TSC
//! read, and the warp test. A stop request (SIGINT, SIGTERM) ends the
//! measurement early with what it had; the checks then judge what is there.

use tsc_contract::{RoundRecord, Variant};

use super::evidence::{Evidence, LaterRead, WarpEvidence};
use super::report::{CheckOptions, Environment};
use super::tally::RoundTally;
use crate::analysis::RoundAccumulator;
use crate::error::RunError;
use crate::host::HostInfo;
use crate::session::Session;
use crate::tsc::{host_rdtsc, TscState};
use crate::vstate::vm;

/// Measures the evidence. Fails only when not even the environment could be
/// read; an error later (a stop request, a vCPU failure) is returned beside
/// what was measured before it.
pub fn measure(opts: &CheckOptions) -> Result<(Evidence, Option<RunError>), RunError> {
    let mut s = Session::start(opts.vcpus, opts.timeout)?;
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
        initial,
    };
    let stopped = rounds_and_warp(&mut s, &mut ev).err();
    Ok((ev, stopped))
}

fn rounds_and_warp(s: &mut Session, ev: &mut Evidence) -> Result<(), RunError> {
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
    Ok(())
}
