//! One run: create the VM, start its vCPU pool, and for every round of the
//! schedule resume every vCPU, wait until all have parked, read their TSC
//! state back and their records out, and analyse the round. Rounds are handed
//! on one at a time as they complete (to a report, a file, a comparison);
//! [`run`] collects them. With [`Backend::Host`] the rounds run on host
//! threads instead ([`crate::native`]), analysed the same way.
//!
//! The rounds come from a [`Schedule`], drawn as they start: a run of any
//! length (a soak of `u32::MAX` rounds, or one that ends when its time is
//! up) allocates nothing in proportion to its rounds.

use std::time::{Duration, Instant};

use serde::Serialize;
use tsc_contract::{Config, RoundRecord, Variant};

use crate::analysis::{RoundAccumulator, RoundResult};
use crate::error::{Failure, RunError};
use crate::host::HostInfo;
use crate::options::{Backend, RunOptions};
use crate::pool::VcpuPool;
use crate::tsc::TscState;
use crate::vstate::sync_area::{self, Windows};
use crate::vstate::vm::{self, Vm};

/// What a run says about itself, apart from its rounds.
#[derive(Clone, Debug, Serialize)]
pub struct RunFacts {
    /// Host facts.
    pub host: HostInfo,
    /// vCPU count.
    pub vcpus: u32,
    /// KVM's view of every vCPU before the first round.
    pub initial: Vec<TscState>,
    /// Observations about the run as a whole, in words.
    pub notes: Vec<String>,
    /// Whether the vCPUs outnumbered the host's cores, so that guest
    /// spin-waits were broken up from the host (see [`crate::vstate::spin`]).
    pub spin_breaker: bool,
}

/// A whole run: its facts and every round, in order.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutput {
    /// What the run says about itself.
    pub facts: RunFacts,
    /// Every round, in order.
    pub rounds: Vec<RoundResult>,
}

/// The variants of a run's rounds, drawn one at a time as the rounds start,
/// so that nothing is allocated in proportion to how many there are (a soak
/// asks for up to `u32::MAX`).
pub trait Schedule {
    /// The most rounds the run may have (a guest is configured for this
    /// many); 0: nothing to run.
    fn max_rounds(&self) -> u32;

    /// The variant of the next round: asked once per round, in order, at
    /// most [`Schedule::max_rounds`] times (and possibly a few rounds ahead
    /// of the one running; see [`Schedule::ends_after`]).
    fn next_variant(&mut self) -> Variant;

    /// Whether the run ends after its first `completed` rounds although
    /// fewer than [`Schedule::max_rounds`] ran (its time is up); asked
    /// before every round and after every round, cheap.
    fn ends_after(&self, completed: u32) -> bool {
        let _ = completed;
        false
    }
}

/// A schedule given as a list: exactly its rounds, in order.
pub struct Listed<'a> {
    variants: &'a [Variant],
    next: usize,
}

impl<'a> Listed<'a> {
    /// The rounds of `variants`, at most `u32::MAX` of them.
    pub fn new(variants: &'a [Variant]) -> Listed<'a> {
        let n = variants.len().min(u32::MAX as usize);
        Listed {
            variants: &variants[..n],
            next: 0,
        }
    }
}

impl Schedule for Listed<'_> {
    fn max_rounds(&self) -> u32 {
        self.variants.len() as u32
    }

    fn next_variant(&mut self) -> Variant {
        let v = self
            .variants
            .get(self.next)
            .or(self.variants.last())
            .copied()
            .unwrap_or(Variant::XenHead);
        self.next += 1;
        v
    }
}

/// One variant for `rounds` rounds, or until `until` (then at most
/// `rounds`): `run`'s schedule.
#[derive(Clone, Copy, Debug)]
pub struct Repeat {
    /// The variant of every round.
    pub variant: Variant,
    /// Rounds at most.
    pub rounds: u32,
    /// The run ends at the first round boundary after this instant.
    pub until: Option<Instant>,
}

impl Schedule for Repeat {
    fn max_rounds(&self) -> u32 {
        self.rounds
    }

    fn next_variant(&mut self) -> Variant {
        self.variant
    }

    fn ends_after(&self, completed: u32) -> bool {
        completed > 0 && self.until.is_some_and(|t| Instant::now() >= t)
    }
}

/// Runs every round of `opts.schedule` and returns them all.
// A run returns once: the size of its error does not matter.
#[allow(clippy::result_large_err)]
pub fn run(opts: &RunOptions) -> Result<RunOutput, Failure> {
    let mut rounds = Vec::with_capacity(opts.schedule.len());
    let facts = run_streaming(opts, &mut |r| {
        rounds.push(r);
        Ok(())
    })?;
    Ok(RunOutput { facts, rounds })
}

/// Runs every round of `opts.schedule` on `opts.backend`, handing each to
/// `on_round` as soon as it is complete (it keeps, writes or summarises it);
/// an error from `on_round` ends the run with [`RunError::Output`].
#[allow(clippy::result_large_err)]
pub fn run_streaming(
    opts: &RunOptions,
    on_round: &mut dyn FnMut(RoundResult) -> Result<(), String>,
) -> Result<RunFacts, Failure> {
    if opts.backend == Backend::Host && opts.schedule.len() <= HOST_SEGMENT as usize {
        // Short enough for one set of threads, exactly as asked.
        return crate::native::run_streaming(opts, on_round);
    }
    run_scheduled(opts, &mut Listed::new(&opts.schedule), on_round)
}

/// Rounds the host backend runs on one set of threads before it starts
/// fresh ones for the next rounds ([`crate::native`] takes its rounds as a
/// list; this bounds the list). Runs up to this long are one set of threads.
pub const HOST_SEGMENT: u32 = 65_536;

/// The host backend's segment when every round has its own deadline
/// ([`RunOptions::round_timeout`]): its threads' deadline covers the whole
/// segment, so it is kept short.
pub const HOST_TIMED_SEGMENT: u32 = 1_024;

/// Runs the rounds `schedule` draws, on `opts.backend` (`opts.schedule` is
/// not used), handing each to `on_round` as soon as it is complete; an error
/// from `on_round` ends the run with [`RunError::Output`]. With
/// [`RunOptions::round_timeout`] every round has that deadline of its own
/// (KVM; the host backend: every segment of [`HOST_TIMED_SEGMENT`] rounds
/// that deadline plus 100 ms per further round and thread), else the whole
/// run has `opts.timeout`.
#[allow(clippy::result_large_err)]
pub fn run_scheduled(
    opts: &RunOptions,
    schedule: &mut dyn Schedule,
    on_round: &mut dyn FnMut(RoundResult) -> Result<(), String>,
) -> Result<RunFacts, Failure> {
    if schedule.max_rounds() == 0 {
        return Err(Failure::early(RunError::NothingToRun));
    }
    if opts.backend == Backend::Host {
        return run_host(opts, schedule, on_round);
    }
    let rounds = schedule.max_rounds();
    let first = schedule.next_variant();
    let image = opts
        .image
        .as_deref()
        .unwrap_or(crate::guest_image::EMBEDDED);
    let setup = || -> Result<(VcpuPool, Windows), RunError> {
        let kvm = vm::open_kvm()?;
        let mut machine = Vm::new(kvm, opts.vcpus, rounds, first, 0, image)?;
        if let Some(inj) = &opts.inject {
            let mut c = Config::default();
            inj.apply(&mut c);
            vm::write_injection(&machine.mem, &c)?;
        }
        // Linux's windows as asked, at the guest's TSC frequency (0 when KVM
        // cannot say, as Vm::new has it), before any vCPU runs.
        let khz = machine
            .vcpus
            .first()
            .and_then(|v| v.get_tsc_khz().ok())
            .unwrap_or(0);
        machine.sync_windows = Windows::at(khz, opts.sync_windows_ms);
        sync_area::write_windows(&machine.mem, machine.sync_windows)?;
        let windows = machine.sync_windows;
        if let Some(cycles) = opts.initial_skew {
            // Before any vCPU runs; verified by the first readback.
            crate::skew::apply(&machine.vcpus, cycles)?;
        }
        let timeout = opts.round_timeout.unwrap_or(opts.timeout);
        Ok((VcpuPool::start(machine, timeout, rounds)?, windows))
    };
    let (mut pool, windows) = setup().map_err(Failure::early)?;
    let mut driver = Driver {
        host: None,
        completed: 0,
        windows,
    };
    match driver.drive(&mut pool, opts, first, schedule, on_round) {
        Ok(facts) => Ok(facts),
        Err(error) => Err(Failure {
            error,
            rounds_completed: driver.completed,
            host: driver.host.map(Box::new),
        }),
    }
    // The pool drops here: every vCPU thread is stopped and joined (or the VM
    // leaked if one cannot be) whatever happened.
}

/// The host backend in segments: each segment is one run of
/// [`crate::native`] on fresh threads, its rounds renumbered to follow the
/// previous segments'. A schedule that ends inside a segment ends it there.
#[allow(clippy::result_large_err)]
fn run_host(
    opts: &RunOptions,
    schedule: &mut dyn Schedule,
    on_round: &mut dyn FnMut(RoundResult) -> Result<(), String>,
) -> Result<RunFacts, Failure> {
    let max = schedule.max_rounds();
    let started = Instant::now();
    let segment = if opts.round_timeout.is_some() {
        HOST_TIMED_SEGMENT
    } else {
        HOST_SEGMENT
    };
    let mut facts: Option<RunFacts> = None;
    let mut base: u32 = 0;
    // Each segment's options: these, with the segment's rounds.
    let mut seg_opts = opts.clone();
    seg_opts.schedule = Vec::new();
    let mut list: Vec<Variant> = Vec::new();
    while base < max && !schedule.ends_after(base) {
        // The first segment of a schedule that may end early is one round:
        // it completes, so the run's facts (its notes, the initial state)
        // come from a whole run of the backend.
        let len = if base == 0 && opts.round_timeout.is_some() {
            1
        } else {
            segment.min(max - base)
        };
        list.clear();
        list.extend((0..len).map(|_| schedule.next_variant()));
        let timeout = match opts.round_timeout {
            Some(t) => t + PER_ROUND_ALLOWANCE * opts.vcpus.saturating_mul(len - 1),
            // What remains of the whole run's deadline.
            None => opts.timeout.saturating_sub(started.elapsed()),
        };
        seg_opts.schedule = std::mem::take(&mut list);
        seg_opts.timeout = timeout.max(Duration::from_millis(1));
        let end = base + len;
        let mut cut = false;
        let result = {
            let cut = &mut cut;
            let schedule: &dyn Schedule = schedule;
            crate::native::run_streaming(&seg_opts, &mut |mut r| {
                r.round = r.round.saturating_add(base);
                let done = r.round.saturating_add(1);
                on_round(r)?;
                if done < end && schedule.ends_after(done) {
                    *cut = true;
                    return Err("the schedule ended".into());
                }
                Ok(())
            })
        };
        list = std::mem::take(&mut seg_opts.schedule);
        match result {
            Ok(f) => {
                facts.get_or_insert(f);
                base = end;
            }
            Err(f) if cut && matches!(f.error, RunError::Output(_)) => {
                // Cut in its first segment (a schedule that may end early
                // without a per-round deadline): the facts the backend
                // could give.
                if facts.is_none() {
                    facts = f.host.map(|h| RunFacts {
                        host: *h,
                        vcpus: opts.vcpus,
                        initial: Vec::new(),
                        notes: Vec::new(),
                        spin_breaker: false,
                    });
                }
                break;
            }
            Err(mut f) => {
                f.rounds_completed = f.rounds_completed.saturating_add(base);
                f.error = renumbered(f.error, base);
                if f.host.is_none() {
                    f.host = facts.map(|x| Box::new(x.host));
                }
                return Err(f);
            }
        }
    }
    facts.ok_or_else(|| Failure::early(RunError::NothingToRun))
}

/// What every further round of a host-backend segment adds to its
/// deadline, per thread (as the default watchdog allows per round and vCPU).
const PER_ROUND_ALLOWANCE: Duration = Duration::from_millis(100);

/// `error` of a segment whose first round is round `base` of the run, with
/// its round numbers made the run's.
fn renumbered(error: RunError, base: u32) -> RunError {
    let at = |r: u32| r.saturating_add(base);
    match error {
        RunError::Vcpu { vcpu, round, error } => RunError::Vcpu {
            vcpu,
            round: at(round),
            error,
        },
        RunError::BadRecord { vcpu, round, error } => RunError::BadRecord {
            vcpu,
            round: at(round),
            error,
        },
        RunError::Sync { round, error } => RunError::Sync {
            round: at(round),
            error,
        },
        RunError::UnreadableRecord { vcpu, round } => RunError::UnreadableRecord {
            vcpu,
            round: at(round),
        },
        RunError::WrongRound {
            vcpu,
            expected,
            found,
        } => RunError::WrongRound {
            vcpu,
            expected: at(expected),
            found: at(found),
        },
        RunError::Timeout(mut stall) => {
            stall.round = at(stall.round);
            RunError::Timeout(stall)
        }
        RunError::Interrupted { signal, round } => RunError::Interrupted {
            signal,
            round: at(round),
        },
        RunError::FinishedEarly { vcpu, round } => RunError::FinishedEarly {
            vcpu,
            round: at(round),
        },
        other => other,
    }
}

/// The round loop's state that outlives an error.
struct Driver {
    host: Option<HostInfo>,
    completed: u32,
    /// The windows Linux's sync runs with in this VM.
    windows: Windows,
}

impl Driver {
    fn drive(
        &mut self,
        pool: &mut VcpuPool,
        opts: &RunOptions,
        first: Variant,
        schedule: &mut dyn Schedule,
        on_round: &mut dyn FnMut(RoundResult) -> Result<(), String>,
    ) -> Result<RunFacts, RunError> {
        let initial = pool.readback(0)?;
        let mut host = HostInfo::collect(pool.facts(&initial));
        host.sync_windows = Some(self.windows);
        host.initial_skew_cycles = opts.initial_skew;
        self.host = Some(host.clone());
        let mut notes = Vec::new();
        if let Some(cycles) = opts.initial_skew {
            crate::skew::verify(&initial, cycles)?;
            notes.push(crate::skew::note(
                initial.len(),
                cycles,
                "KVM_VCPU_TSC_OFFSET",
            ));
        } else if let Some(s) = initial.iter().find(|s| s.offset != initial[0].offset) {
            notes.push(format!(
                "the vCPUs did not start with the same TSC offset ({:?} vs {:?})",
                s.offset, initial[0].offset
            ));
        }
        if initial.iter().any(|s| s.adjust != 0) {
            notes.push("a vCPU started with a non-zero TSC_ADJUST".into());
        }

        // Buffers reused by every round: past the first round, the per-round
        // path allocates nothing but the round's own result.
        let mut acc = RoundAccumulator::new(&initial);
        let mut after: Vec<TscState> = Vec::with_capacity(initial.len());
        let mut records: Vec<RoundRecord> = Vec::with_capacity(initial.len());
        // The guest starts with `first`.
        let mut current = first;
        let mut next = Some(first);
        let max = schedule.max_rounds();
        let mut round = 0u32;
        while round < max {
            if schedule.ends_after(round) {
                // Ended early: the vCPUs are parked after the last round and
                // are stopped with the pool; the guest's end is not awaited.
                return Ok(RunFacts {
                    host,
                    vcpus: pool.vcpus(),
                    initial,
                    notes,
                    spin_breaker: pool.spin_breaker(),
                });
            }
            let variant = next.take().unwrap_or_else(|| schedule.next_variant());
            if current != variant {
                vm::set_variant(pool.mem(), variant)?;
                current = variant;
            }
            if variant == Variant::LinuxTscSync {
                sync_area::clear_results(pool.mem(), pool.vcpus())?;
            }
            if let Some(t) = opts.round_timeout {
                pool.rearm(t);
            }
            pool.run_round(round)?;
            // Every vCPU is parked outside KVM_RUN now: read them all back.
            pool.readback_into(round, &mut after)?;
            pool.read_records(round, variant, &mut records)?;
            let sync = (variant == Variant::LinuxTscSync)
                .then(|| sync_area::read(pool.mem(), pool.vcpus()))
                .transpose()
                .map_err(|error| RunError::Sync { round, error })?;
            let result = acc.add(round, variant, &records, &after, sync);
            for d in &result.disagreements {
                log::warn!("round {round}: {d}");
            }
            on_round(result).map_err(RunError::Output)?;
            self.completed += 1;
            vm::reset_rendezvous(pool.mem())?;
            round += 1;
        }
        // Let every vCPU report the end and halt.
        if let Some(t) = opts.round_timeout {
            pool.rearm(t);
        }
        pool.run_to_end(max)?;
        Ok(RunFacts {
            host,
            vcpus: pool.vcpus(),
            initial,
            notes,
            spin_breaker: pool.spin_breaker(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_schedule_is_its_list() {
        let list = [Variant::Xen415, Variant::XenHead, Variant::XenStd];
        let mut s = Listed::new(&list);
        assert_eq!(s.max_rounds(), 3);
        let got: Vec<Variant> = (0..3).map(|_| s.next_variant()).collect();
        assert_eq!(got, list);
        assert!(!s.ends_after(1), "a list runs to its end");
        assert_eq!(Listed::new(&[]).max_rounds(), 0);
    }

    #[test]
    fn a_repeat_by_time_ends_only_after_a_round_and_its_time() {
        let past = Instant::now() - Duration::from_secs(1);
        let r = Repeat {
            variant: Variant::XenHead,
            rounds: u32::MAX,
            until: Some(past),
        };
        assert!(!r.ends_after(0), "at least one round runs");
        assert!(r.ends_after(1));
        let r = Repeat {
            until: Some(Instant::now() + Duration::from_secs(3600)),
            ..r
        };
        assert!(!r.ends_after(1_000));
        let r = Repeat { until: None, ..r };
        assert!(!r.ends_after(1_000));
    }

    #[test]
    fn a_segments_errors_name_the_runs_rounds() {
        let e = renumbered(RunError::interrupted(15, 3), 1_024);
        assert_eq!(
            e.to_string(),
            "interrupted by SIGTERM in round 1027; the vCPUs were stopped"
        );
        let e = renumbered(
            RunError::WrongRound {
                vcpu: 1,
                expected: 2,
                found: 3,
            },
            10,
        );
        assert!(
            e.to_string().contains("end of round 13 while round 12"),
            "{e}"
        );
        assert!(matches!(
            renumbered(RunError::Lost(2), 5),
            RunError::Lost(2)
        ));
    }

    /// The host backend in segments of fresh threads (a first one of one
    /// round, then [`HOST_TIMED_SEGMENT`]s): the rounds are handed on
    /// numbered as one run's, in order, every one of them.
    #[test]
    fn host_segments_number_their_rounds_as_one_run() {
        let opts = RunOptions {
            backend: Backend::Host,
            vcpus: 2,
            round_timeout: Some(Duration::from_secs(120)),
            ..RunOptions::default()
        };
        let rounds = 2 * HOST_TIMED_SEGMENT + 7;
        let mut schedule = Repeat {
            variant: Variant::XenHead,
            rounds,
            until: None,
        };
        let mut seen = Vec::new();
        let facts = run_scheduled(&opts, &mut schedule, &mut |r| {
            seen.push(r.round);
            Ok(())
        })
        .unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(facts.vcpus, 2);
        assert_eq!(facts.initial.len(), 2, "the first segment's facts");
        assert_eq!(seen, (0..rounds).collect::<Vec<_>>());
    }

    /// A schedule by time cuts a host segment short where its time is up.
    #[test]
    fn a_host_run_by_time_ends_inside_a_segment() {
        let opts = RunOptions {
            backend: Backend::Host,
            vcpus: 2,
            round_timeout: Some(Duration::from_secs(120)),
            ..RunOptions::default()
        };
        let mut schedule = Repeat {
            variant: Variant::XenHead,
            rounds: u32::MAX,
            until: Some(Instant::now() + Duration::from_millis(300)),
        };
        let mut n = 0u32;
        let started = Instant::now();
        run_scheduled(&opts, &mut schedule, &mut |_| {
            n += 1;
            Ok(())
        })
        .unwrap_or_else(|f| panic!("{f}"));
        assert!(n > 0);
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "it ended: {n} rounds"
        );
    }
}
