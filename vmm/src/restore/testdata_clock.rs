//! The clock part of the made-up documented restore of [`super::testdata`]:
//! kvmclock runs at the host's time on both sides (0.5 ns a cycle at 2 GHz,
//! 1 s at host TSC 2,000,000, as the source's KVM_GET_CLOCK says), every
//! page is rewritten by the restored VM, the master clock is off after each
//! restore (unequal offsets) and the pairs' kvmclocks agree; the chained
//! restore repeats the first one 300 M host cycles later.

use tsc_contract::{ClockRecord, HandoffResult, PvclockTimeInfo, CLOCK_MAGIC};

use super::measure::{ChainRun, MethodRun};
use super::offsets::{ClockSample, NEEDED_CLOCK_FLAGS};
use super::reads::{ClockAfter, ClockReads, Reads};
use crate::session::Handoff;
use crate::tsc::TscState;

/// kvmclock (ns) at host TSC `host`.
pub fn kc(host: u64) -> u64 {
    (1_000_000_000 + (host as i64 - 2_000_000) / 2) as u64
}

/// CLOCK_REALTIME (ns) at host TSC `host`.
fn rt(host: u64) -> u64 {
    kc(host) + 4_000_000_000
}

/// KVM_GET_CLOCK at host TSC `host`, with or without the stable flag.
pub fn sample(host: u64, stable: bool) -> ClockSample {
    ClockSample {
        clock_ns: kc(host),
        flags: NEEDED_CLOCK_FLAGS | if stable { 2 } else { 0 },
        realtime_ns: rt(host),
        host_tsc: host,
        host_before: host,
        host_after: host,
    }
}

/// Every vCPU's kvmclock read by a command run between host TSC `host` and
/// `host + 10,000`: the first reading at `host + 4,000` on a page anchored
/// at `anchor` (version `version`), the second at `host + 6,000` on a page
/// re-anchored at `host + 5,000`.
pub fn reads(host: u64, offsets: &[u64], anchor: u64, version: u32) -> ClockReads {
    let records = offsets
        .iter()
        .map(|&o| ClockRecord {
            magic: CLOCK_MAGIC,
            msr: 0x3b,
            version_before: version,
            version_after: version + 2,
            mul_before: 1 << 31,
            mul_after: 1 << 31,
            tsc_timestamp_before: anchor.wrapping_add(o),
            tsc_timestamp_after: (host + 5_000).wrapping_add(o),
            system_time_before: kc(anchor),
            system_time_after: kc(host + 5_000),
            tsc_before: (host + 4_000).wrapping_add(o),
            tsc_after: (host + 6_000).wrapping_add(o),
            kvmclock_before: kc(host + 4_000),
            kvmclock_after: kc(host + 6_000),
            ..ClockRecord::default()
        })
        .collect();
    ClockReads {
        records,
        host_before: host,
        host_after: host + 10_000,
        kvm: Ok(sample(host + 11_000, false)),
    }
}

/// Two vCPUs' pairs agreeing within ±5 us.
pub fn agreeing() -> Handoff {
    let pair = |a, b| HandoffResult {
        a,
        b,
        exchanges: 100,
        min_rtt: 10_000,
        lower: -5_000,
        upper: 5_000,
        ..HandoffResult::default()
    };
    Handoff {
        exchanges: 100,
        all_pairs: true,
        pairs: vec![pair(0, 1), pair(1, 0)],
    }
}

/// The clock after a restore at host TSC `host`, every page anchored there.
pub fn clock_after_at(host: u64, states: &[TscState], stable: bool) -> ClockAfter {
    ClockAfter {
        clock: Ok(sample(host, stable)),
        pages: states
            .iter()
            .map(|s| PvclockTimeInfo {
                version: 10,
                tsc_timestamp: host.wrapping_add(s.offset.unwrap_or(0)),
                system_time: kc(host),
                tsc_to_system_mul: 1 << 31,
                flags: u8::from(stable),
                ..PvclockTimeInfo::default()
            })
            .collect(),
        handoff: Some(agreeing()),
        states: states.to_vec(),
    }
}

fn offsets(states: &[TscState]) -> Vec<u64> {
    states.iter().map(|s| s.offset.unwrap_or(0)).collect()
}

/// Adds the clock part (and the chained restore) to `run`, a documented
/// restore of [`super::testdata::honoured`].
pub fn add(run: &mut MethodRun) {
    let saved: Vec<TscState> = run
        .snapshot
        .iter()
        .flat_map(|s| s.vcpus.iter().map(|v| v.tsc))
        .collect();
    let after = run.after.clone().unwrap_or_default();
    run.clock_last = Some(reads(1_020_000, &offsets(&saved), 1_000_000, 4));
    run.clock_first = Some(reads(200_990_000, &offsets(&after), 200_900_000, 8));
    run.clock_after = Some(clock_after_at(250_000_000, &after, false));
    chain(run);
}

/// Makes `run`'s chained restore repeat its first restore (as measured
/// now: a test may have changed the offsets since [`add`]).
pub fn chain(run: &mut MethodRun) {
    let after = run.after.clone().unwrap_or_default();
    let later = |r: &Reads| Reads {
        tsc: r.tsc.iter().map(|t| t.wrapping_add(300_000_000)).collect(),
        host_before: r.host_before + 300_000_000,
        host_after: r.host_after + 300_000_000,
    };
    let mut snapshot = run.snapshot.clone();
    if let Some(s) = snapshot.as_mut() {
        for (v, a) in s.vcpus.iter_mut().zip(&after) {
            v.tsc = *a;
        }
        s.clock = Some(sample(300_031_000, false));
    }
    let mut trace = run.trace.clone();
    if let Some(super::methods::Trace::Documented(d)) = trace.as_mut() {
        d.set_host_before = 450_000_000;
        d.set_host_after = 450_001_000;
        d.destination = Some(sample(451_000_000, false));
    }
    run.chain = Some(ChainRun {
        last: run.last.as_ref().map(later),
        clock_last: Some(reads(300_020_000, &offsets(&after), 250_000_000, 12)),
        snapshot,
        delay: run.delay,
        created: run.created.clone(),
        trace,
        after: Some(after.clone()),
        clock_first: Some(reads(500_990_000, &offsets(&after), 500_900_000, 2)),
        first: run.first.as_ref().map(later),
        clock_after: Some(clock_after_at(550_000_000, &after, false)),
        not_possible: None,
    });
}
