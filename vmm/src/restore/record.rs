//! What one method's measurement records, each part filled in when
//! measured, so a failure or a stop request in any step leaves what the
//! steps before it measured: the first restore ([`MethodRun`]) and the
//! chained one ([`ChainRun`]).

use std::time::Duration;

use super::methods::Trace;
use super::options::{Method, Step};
use super::reads::{ClockAfter, ClockReads, Reads};
use super::snapshot::SnapshotInfo;
use crate::session::WarpSeen;
use crate::tsc::frequency::{FrequencySetting, Scaling};
use crate::tsc::{OffsetSource, TscState};

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
    /// What decides how KVM scales the guest's TSC on this host (the
    /// source VM's: the host's rate, KVM_CAP_TSC_CONTROL, the tolerance).
    pub scaling: Option<Scaling>,
    /// How the source's rate was set (`--tsc-khz`), if it was.
    pub source_frequency: Option<FrequencySetting>,
    /// How the destination's rate was set (to the saved rate), if it was.
    pub destination_frequency: Option<FrequencySetting>,
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
    /// Why the guests cannot read their kvmclock here (then the clock reads
    /// are absent).
    pub clock_why_not: Option<String>,
    /// The guests' last kvmclock reads before the snapshot.
    pub clock_last: Option<ClockReads>,
    /// Their first kvmclock reads after the restore.
    pub clock_first: Option<ClockReads>,
    /// The clock once the restored guest ran again (after the warp test).
    pub clock_after: Option<ClockAfter>,
    /// The chained restore (when asked for).
    pub chain: Option<ChainRun>,
    /// Why it ended early.
    pub failed: Option<Failed>,
}

impl MethodRun {
    /// Nothing measured yet.
    pub fn new(method: Method) -> MethodRun {
        MethodRun {
            method,
            offset_source: None,
            scaling: None,
            source_frequency: None,
            destination_frequency: None,
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
            clock_why_not: None,
            clock_last: None,
            clock_first: None,
            clock_after: None,
            chain: None,
            failed: None,
        }
    }
}

/// What the chained restore saw, each part filled in when measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChainRun {
    /// The guests' last TSC reads before the second snapshot.
    pub last: Option<Reads>,
    /// Their last kvmclock reads before it.
    pub clock_last: Option<ClockReads>,
    /// The second snapshot.
    pub snapshot: Option<SnapshotInfo>,
    /// From destroying the first destination to creating the second.
    pub delay: Option<Duration>,
    /// Every vCPU's offset at the second destination's creation.
    pub created: Option<Vec<Option<u64>>>,
    /// What the method wrote the second time.
    pub trace: Option<Trace>,
    /// Every vCPU's TSC state after the second restore, before the guest
    /// ran.
    pub after: Option<Vec<TscState>>,
    /// The guests' first kvmclock reads after it.
    pub clock_first: Option<ClockReads>,
    /// Their first TSC reads after it.
    pub first: Option<Reads>,
    /// The clock once the guest ran again.
    pub clock_after: Option<ClockAfter>,
    /// Why the method could not restore the restored VM again (then the
    /// second restore did not run): what the second snapshot lacks.
    pub not_possible: Option<String>,
}
