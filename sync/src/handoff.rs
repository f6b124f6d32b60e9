//! The forced hand-off test: what the CPUs' TSCs say of each other when one
//! CPU's reading is handed to another, pair by pair, in both directions.
//!
//! For every ordered pair (a, b) of the test ([`tsc_contract::handoff`]),
//! `exchanges` times: `a` reads its TSC (t1) and publishes it on one cache
//! line; `b` waits for it, reads its own TSC (t2) and replies on another; `a`
//! waits for the reply and reads again (t3). The pairs run one after another:
//! every CPU walks the same list, and one that is in neither role of a pair
//! waits until the pair is done. Unlike a lock-ordered warp test, every
//! ordered pair is exercised, whatever the scheduler does.
//!
//! What an exchange proves, and what it rests on: `b` reads after it has
//! seen t1 and `a` reads after it has seen t2 (each read is ordered after the
//! load before it, as `lfence; rdtsc` is), so `b`'s read happened between
//! `a`'s two reads. If both TSCs tick at one rate during the test, `b`'s TSC
//! minus `a`'s, their relative offset, is then in `(t2 - t3, t2 - t1)`; over
//! all exchanges in `[max(t2 - t3), min(t2 - t1)]` ([`HandoffResult`]), at
//! most the shortest round trip wide. A relative offset outside it is
//! impossible under those assumptions; an empty interval means no constant
//! offset fits what the CPUs read.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tsc_contract::{handoff, HandoffResult, HANDOFF_MAGIC};

use crate::Cpu;

/// Keeps a value on a cache line of its own.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Line<T>(pub T);

/// Shared state of one hand-off test; all zero at the start.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct HandoffShared {
    /// The pair running (every earlier pair is done).
    pub pair: Line<AtomicU32>,
    /// The initiator's line: the number of its last exchange.
    pub ping: Line<AtomicU64>,
    /// The responder's line: the number of the exchange it answered.
    pub pong: Line<AtomicU64>,
    /// The TSC the responder read for it (t2).
    pub pong_tsc: Line<AtomicU64>,
}

/// Size of [`HandoffShared`]: four cache lines.
pub const HANDOFF_SHARED_SIZE: usize = 256;
const _: () = assert!(core::mem::size_of::<HandoffShared>() == HANDOFF_SHARED_SIZE);
const _: () = assert!(core::mem::offset_of!(HandoffShared, ping) == 64);

/// What one test is asked to do; every CPU taking part passes the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandoffParams {
    /// CPUs taking part.
    pub total: u32,
    /// Exchanges per ordered pair.
    pub exchanges: u32,
    /// Every ordered pair ([`handoff::ALL_PAIRS`]), or vCPU 0's pairs.
    pub all: bool,
    /// What the results are tagged with (a round, a command's number).
    pub tag: u32,
}

/// Runs the test on CPU `cpu`; every CPU of `params.total` must call this
/// with the same zeroed `shared` state and `params`. Every pair's result is
/// handed to `store(pair index, result)` by its initiator. Returns how many
/// pairs this CPU initiated.
pub fn handoff_test<C: Cpu>(
    shared: &HandoffShared,
    cpu: u32,
    params: HandoffParams,
    ops: &mut C,
    mut store: impl FnMut(u32, &HandoffResult),
) -> u32 {
    let HandoffParams {
        total,
        exchanges,
        all,
        tag,
    } = params;
    let Some(pairs) = handoff::pairs(total, all) else {
        return 0;
    };
    let mut initiated = 0;
    for p in 0..pairs {
        let Some((a, b)) = handoff::pair(p, total, all) else {
            break;
        };
        // Every exchange of the test has its own number, never 0.
        let base = u64::from(p) * u64::from(exchanges);
        if cpu == a {
            while shared.pair.0.load(Ordering::Acquire) != p {
                ops.relax();
            }
            let r = initiate(shared, a, b, base, exchanges, tag, ops);
            store(p, &r);
            initiated += 1;
            shared.pair.0.store(p + 1, Ordering::Release);
        } else if cpu == b {
            respond(shared, base, exchanges, ops);
        }
        // Everyone moves on together: pair p is done when its initiator
        // says so.
        while shared.pair.0.load(Ordering::Acquire) <= p {
            ops.relax();
        }
    }
    initiated
}

/// The initiator's side of one pair's `exchanges` exchanges.
fn initiate<C: Cpu>(
    shared: &HandoffShared,
    a: u32,
    b: u32,
    base: u64,
    exchanges: u32,
    tag: u32,
    ops: &mut C,
) -> HandoffResult {
    let mut r = HandoffResult {
        magic: HANDOFF_MAGIC,
        tag,
        a,
        b,
        exchanges,
        reserved: 0,
        min_rtt: u64::MAX,
        max_rtt: 0,
        lower: i64::MIN,
        upper: i64::MAX,
        best_mid: 0,
    };
    for k in 0..exchanges {
        let n = base + u64::from(k) + 1;
        let t1 = ops.rdtsc_ordered();
        shared.ping.0.store(n, Ordering::Release);
        while shared.pong.0.load(Ordering::Acquire) != n {
            ops.relax();
        }
        let t3 = ops.rdtsc_ordered();
        let t2 = shared.pong_tsc.0.load(Ordering::Relaxed);
        let rtt = t3.wrapping_sub(t1);
        let there = t2.wrapping_sub(t1) as i64;
        let back = t2.wrapping_sub(t3) as i64;
        r.upper = r.upper.min(there);
        r.lower = r.lower.max(back);
        r.max_rtt = r.max_rtt.max(rtt);
        if rtt < r.min_rtt {
            r.min_rtt = rtt;
            r.best_mid = there.wrapping_sub((rtt / 2) as i64);
        }
    }
    if exchanges == 0 {
        r.min_rtt = 0;
        r.lower = 0;
        r.upper = 0;
    }
    r
}

/// The responder's side of one pair's `exchanges` exchanges.
fn respond<C: Cpu>(shared: &HandoffShared, base: u64, exchanges: u32, ops: &mut C) {
    for k in 0..exchanges {
        let n = base + u64::from(k) + 1;
        while shared.ping.0.load(Ordering::Acquire) != n {
            ops.relax();
        }
        let t2 = ops.rdtsc_ordered();
        shared.pong_tsc.0.store(t2, Ordering::Relaxed);
        shared.pong.0.store(n, Ordering::Release);
    }
}
