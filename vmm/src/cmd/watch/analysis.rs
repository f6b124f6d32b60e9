//! `kvmclock-watch`'s analysis, pure: from one vCPU's kvmclock samples (each
//! a guest read of kvmclock between two host reads of CLOCK_MONOTONIC_RAW,
//! with the pvclock page and the exact TSC offset right after), how far its
//! kvmclock was off real time at each sample, when the page's version
//! changed, and when kvmclock came back to real time after the write.
//!
//! Every interval here is sound, not an estimate: a guest read happened
//! somewhere inside its host bracket, so kvmclock's offset from real time
//! since the baseline lies in `[advance - longest elapsed, advance -
//! shortest elapsed]`, and an event between two samples lies between the
//! first one's start and the second one's end. A sample counts as on real
//! time, or as off by the write's move, when that interval comes within the
//! tolerance of 0, or of the move: [`TOLERANCE_FLOOR_NS`] plus
//! [`NTP_MAX_PPM`] of the time since the baseline and of the move (how far
//! KVM's clocks may legitimately run off each other). A leaf but for the
//! units.

use serde::Serialize;

use crate::units::{cycles_to_ns_at, NTP_MAX_PPM};

/// The tolerance's floor, ns: kvmclock's own rounding (the scale's
/// fixed-point product) and the host clock's granularity.
pub const TOLERANCE_FLOOR_NS: i64 = 1_000;

/// Host CLOCK_MONOTONIC_RAW just before and just after an event, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Bracket {
    /// Before.
    pub before_ns: u64,
    /// After.
    pub after_ns: u64,
}

/// One guest read of one vCPU's kvmclock, with what the host saw around it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Host CLOCK_MONOTONIC_RAW around the read (the vCPU resumed, the
    /// vCPU reported).
    pub host: Bracket,
    /// The guest's kvmclock, ns.
    pub kvmclock_ns: u64,
    /// The guest's TSC inside that read.
    pub tsc: u64,
    /// The page's version the read used.
    pub version: u32,
    /// The page's flags the read used.
    pub flags: u8,
    /// The page's version as the host read it right after (the vCPU
    /// parked; KVM rewrites a page only when it enters the vCPU).
    pub page_version: u32,
    /// The page's `tsc_timestamp` then.
    pub tsc_timestamp: u64,
    /// The page's `system_time` then, ns.
    pub system_time: u64,
    /// The vCPU's exact TSC offset right after (`None`: this kernel does
    /// not show it).
    pub tsc_offset: Option<u64>,
}

/// An interval of ns in which a quantity lies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Interval {
    /// Its lower end.
    pub lo_ns: i64,
    /// Its upper end.
    pub hi_ns: i64,
}

impl Interval {
    fn of(lo: i128, hi: i128) -> Interval {
        let c = |x: i128| x.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        Interval {
            lo_ns: c(lo.min(hi)),
            hi_ns: c(hi.max(lo)),
        }
    }

    /// The midpoint.
    pub fn mid(&self) -> i64 {
        ((i128::from(self.lo_ns) + i128::from(self.hi_ns)) / 2) as i64
    }

    /// Half its width: the error bar around [`Interval::mid`].
    pub fn half(&self) -> i64 {
        ((i128::from(self.hi_ns) - i128::from(self.lo_ns) + 1) / 2) as i64
    }

    /// Whether `x` is within `tol` of the interval.
    fn reaches(&self, x: i128, tol: i128) -> bool {
        i128::from(self.lo_ns) - tol <= x && x <= i128::from(self.hi_ns) + tol
    }

    /// `self - other`, soundly: every difference of a point of each.
    pub fn minus(&self, other: &Interval) -> Interval {
        Interval::of(
            i128::from(self.lo_ns) - i128::from(other.hi_ns),
            i128::from(self.hi_ns) - i128::from(other.lo_ns),
        )
    }
}

/// When `later` happened after `earlier`, ns: between the end of the
/// first and the start of the second at the least, between the start of
/// the first and the end of the second at the most.
pub fn between(earlier: &Bracket, later: &Bracket) -> Interval {
    Interval::of(
        i128::from(later.before_ns) - i128::from(earlier.after_ns),
        i128::from(later.after_ns) - i128::from(earlier.before_ns),
    )
}

/// kvmclock's offset from real time at `s` since `base`: its advance minus
/// the host time that passed, with the brackets' error.
pub fn offset(base: &Sample, s: &Sample) -> Interval {
    let advance = i128::from(s.kvmclock_ns) - i128::from(base.kvmclock_ns);
    let elapsed = between(&base.host, &s.host);
    Interval::of(
        advance - i128::from(elapsed.hi_ns),
        advance - i128::from(elapsed.lo_ns),
    )
}

/// How one sample's offset reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Within the tolerance of 0: kvmclock on real time.
    RealTime,
    /// Within the tolerance of the write's move (and not of 0): kvmclock
    /// off by what the TSC moved, the page stale.
    OffByTheWrite,
    /// Neither.
    Other,
}

/// One sample, analysed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Point {
    /// When it was taken, since the write (ns).
    pub since_write: Interval,
    /// kvmclock's offset from real time since the baseline (ns).
    pub offset: Interval,
    /// The tolerance the state was judged with (ns).
    pub tolerance_ns: i64,
    /// How the offset reads.
    pub state: State,
    /// The page's version the guest read.
    pub version: u32,
    /// The page's `tsc_timestamp`.
    pub tsc_timestamp: u64,
    /// The vCPU's exact TSC offset.
    pub tsc_offset: Option<u64>,
}

/// A change of the page's version between two samples (or between the
/// baseline and the first sample).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct VersionChange {
    /// The version before.
    pub from: u32,
    /// The version after.
    pub to: u32,
    /// When KVM rewrote the page, since the write: after the earlier
    /// sample started, before the later one ended.
    pub since_write: Interval,
    /// The same since the VM was created.
    pub since_vm: Interval,
    /// kvmclock's offset from real time before the change and after it.
    pub offset_before: Interval,
    /// And after.
    pub offset_after: Interval,
    /// The page's `tsc_timestamp` before and after.
    pub tsc_timestamp: (u64, u64),
}

/// A change of the page's version before the write, while the VM settled
/// (KVM's own updates after the guest enabled kvmclock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct EarlyChange {
    /// The version before.
    pub from: u32,
    /// The version after.
    pub to: u32,
    /// When KVM rewrote the page, since the VM was created.
    pub since_vm: Interval,
}

/// kvmclock's coming back to real time after being off by the write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Refresh {
    /// When, since the write (between the last stale sample's start and the
    /// first sample back on real time's end).
    pub since_write: Interval,
    /// The same since the VM was created.
    pub since_vm: Interval,
    /// kvmclock's step there: the offset after minus the offset before.
    pub step: Interval,
    /// The page's version before and after.
    pub version: (u32, u32),
}

/// What the watch found for one vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// No sample after the write.
    NothingSampled,
    /// No exact offsets: how far the TSC moved is unknown.
    MoveUnknown,
    /// The vCPU wrote, and its exact TSC offset did not move (a hypervisor
    /// that ignores the write, such as PVM): nothing could go stale.
    NotMoved,
    /// On real time at every sample: the page was right after the write
    /// (or the vCPU did not write).
    RanOn,
    /// Off by the write's move from the first sample, back on real time
    /// later ([`Watched::refresh`]).
    StaleThenRefreshed,
    /// Off by the write's move at every sample: the page was still stale
    /// at the last one.
    StaleThroughout,
    /// Anything else (the offsets say what).
    Other,
}

/// One vCPU's watch, to analyse.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    /// The vCPU.
    pub vcpu: u32,
    /// Whether it wrote IA32_TSC.
    pub wrote: bool,
    /// Host time around the VM's creation (KVM starts its periodic
    /// kvmclock sync there).
    pub vm_created: Bracket,
    /// Host time around the write.
    pub write: Bracket,
    /// How far the write moved this vCPU's TSC, from its exact offsets
    /// (`None`: unknown).
    pub moved_cycles: Option<i64>,
    /// The vCPU's TSC rate, kHz (0: unknown).
    pub khz: u32,
    /// The samples taken while the VM settled, before the baseline.
    pub settling: &'a [Sample],
    /// The sample before the write.
    pub baseline: &'a Sample,
    /// The samples after it, in order.
    pub samples: &'a [Sample],
}

/// One vCPU's watch, analysed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Watched {
    /// The vCPU.
    pub vcpu: u32,
    /// Whether it wrote IA32_TSC.
    pub wrote: bool,
    /// How far the write moved its TSC, cycles (exact offsets).
    pub tsc_moved_cycles: Option<i64>,
    /// That in ns.
    pub tsc_moved_ns: Option<i64>,
    /// The page's version changes before the write (the baseline included).
    pub before_write: Vec<EarlyChange>,
    /// Every sample after the write.
    pub points: Vec<Point>,
    /// The offset at the first sample after the write: the jump.
    pub at_write: Option<Interval>,
    /// Every change of the page's version, in order.
    pub version_changes: Vec<VersionChange>,
    /// When kvmclock came back to real time, if it did.
    pub refresh: Option<Refresh>,
    /// The last sample's time since the write: how long was watched.
    pub watched_for: Option<Interval>,
    /// What it adds up to.
    pub outcome: Outcome,
}

/// The tolerance at `s`: the floor plus [`NTP_MAX_PPM`] of the time since
/// the baseline and of the move.
fn tolerance(base: &Sample, s: &Sample, moved_ns: i128) -> i128 {
    let elapsed = i128::from(s.host.after_ns) - i128::from(base.host.before_ns);
    let ppm = i128::from(NTP_MAX_PPM);
    i128::from(TOLERANCE_FLOOR_NS) + (elapsed.abs() + moved_ns.abs()) * ppm / 1_000_000
}

fn state(offset: &Interval, moved_ns: Option<i128>, tol: i128) -> State {
    if offset.reaches(0, tol) {
        State::RealTime
    } else if moved_ns.is_some_and(|m| offset.reaches(m, tol)) {
        State::OffByTheWrite
    } else {
        State::Other
    }
}

/// Analyses one vCPU's watch.
pub fn analyse(i: &Input<'_>) -> Watched {
    let moved_ns = i
        .moved_cycles
        .and_then(|m| cycles_to_ns_at(i128::from(m), i.khz))
        .map(|ns| ns.round() as i128);
    let points: Vec<Point> = i
        .samples
        .iter()
        .map(|s| {
            let off = offset(i.baseline, s);
            let tol = tolerance(i.baseline, s, moved_ns.unwrap_or(0));
            Point {
                since_write: between(&i.write, &s.host),
                offset: off,
                tolerance_ns: tol.min(i128::from(i64::MAX)) as i64,
                state: state(&off, moved_ns, tol),
                version: s.version,
                tsc_timestamp: s.tsc_timestamp,
                tsc_offset: s.tsc_offset,
            }
        })
        .collect();
    let version_changes = version_changes(i, &points);
    let refresh = refresh(i, &points);
    Watched {
        vcpu: i.vcpu,
        wrote: i.wrote,
        tsc_moved_cycles: i.moved_cycles,
        tsc_moved_ns: moved_ns.map(|m| m.clamp(i64::MIN.into(), i64::MAX.into()) as i64),
        at_write: points.first().map(|p| p.offset),
        watched_for: points.last().map(|p| p.since_write),
        outcome: outcome(i, moved_ns, &points, refresh.is_some()),
        before_write: early_changes(i),
        points,
        version_changes,
        refresh,
    }
}

fn early_changes(i: &Input<'_>) -> Vec<EarlyChange> {
    let all: Vec<&Sample> = i.settling.iter().chain([i.baseline]).collect();
    all.windows(2)
        .filter(|w| w[0].version != w[1].version)
        .map(|w| EarlyChange {
            from: w[0].version,
            to: w[1].version,
            since_vm: window(&i.vm_created, &w[0].host, &w[1].host),
        })
        .collect()
}

/// The baseline as a point (offset 0 by definition, before the write).
fn baseline_point(i: &Input<'_>) -> (Bracket, Interval, u32, u64) {
    (
        i.baseline.host,
        Interval::default(),
        i.baseline.version,
        i.baseline.tsc_timestamp,
    )
}

fn version_changes(i: &Input<'_>, points: &[Point]) -> Vec<VersionChange> {
    let mut out = Vec::new();
    let (mut host, mut off, mut version, mut stamp) = baseline_point(i);
    for (s, p) in i.samples.iter().zip(points) {
        if p.version != version {
            out.push(VersionChange {
                from: version,
                to: p.version,
                since_write: window(&i.write, &host, &s.host),
                since_vm: window(&i.vm_created, &host, &s.host),
                offset_before: off,
                offset_after: p.offset,
                tsc_timestamp: (stamp, p.tsc_timestamp),
            });
        }
        (host, off, version, stamp) = (s.host, p.offset, p.version, p.tsc_timestamp);
    }
    out
}

/// When something between two samples happened, since `origin`: after
/// the earlier one started, before the later one ended.
fn window(origin: &Bracket, earlier: &Bracket, later: &Bracket) -> Interval {
    Interval::of(
        i128::from(earlier.before_ns) - i128::from(origin.after_ns),
        i128::from(later.after_ns) - i128::from(origin.before_ns),
    )
}

fn refresh(i: &Input<'_>, points: &[Point]) -> Option<Refresh> {
    let k = points
        .windows(2)
        .position(|w| w[0].state == State::OffByTheWrite && w[1].state == State::RealTime)?;
    let (before, after) = (points.get(k)?, points.get(k + 1)?);
    let (sb, sa) = (i.samples.get(k)?, i.samples.get(k + 1)?);
    Some(Refresh {
        since_write: window(&i.write, &sb.host, &sa.host),
        since_vm: window(&i.vm_created, &sb.host, &sa.host),
        step: after.offset.minus(&before.offset),
        version: (before.version, after.version),
    })
}

fn outcome(i: &Input<'_>, moved_ns: Option<i128>, points: &[Point], refreshed: bool) -> Outcome {
    let Some(first) = points.first() else {
        return Outcome::NothingSampled;
    };
    let all = |s: State| points.iter().all(|p| p.state == s);
    if i.wrote {
        match moved_ns {
            None => return Outcome::MoveUnknown,
            Some(0) => return Outcome::NotMoved,
            Some(_) => {}
        }
    }
    if all(State::RealTime) {
        Outcome::RanOn
    } else if first.state == State::OffByTheWrite && refreshed {
        Outcome::StaleThenRefreshed
    } else if all(State::OffByTheWrite) {
        Outcome::StaleThroughout
    } else {
        Outcome::Other
    }
}
