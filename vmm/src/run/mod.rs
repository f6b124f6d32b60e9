//! One run: the rounds of a schedule on a backend, each handed on as it
//! completes (to a report, a file, a comparison). [`run_scheduled`] starts
//! the backend the options name ([`crate::backend`]) and drives it with the
//! one round loop ([`driver`]); [`run`] collects the rounds of a listed
//! schedule.
//!
//! The rounds come from a [`Schedule`], drawn as they start: a run of any
//! length (a soak of `u32::MAX` rounds, or one that ends when its time is
//! up) allocates nothing in proportion to its rounds.

pub mod driver;
pub mod facts;
pub mod schedule;

use crate::backend::host::HostBackend;
use crate::backend::kvm::KvmBackend;
use crate::error::{Failure, RunError};
use crate::initial_skew;
use crate::options::{Backend, RunOptions};

pub use driver::OnRound;
pub use facts::{RunFacts, RunOutput};
pub use schedule::{Listed, Repeat, Schedule};

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
pub fn run_streaming(opts: &RunOptions, on_round: &mut OnRound<'_>) -> Result<RunFacts, Failure> {
    run_scheduled(opts, &mut Listed::new(&opts.schedule), on_round)
}

/// Runs the rounds `schedule` draws, on `opts.backend` (`opts.schedule` is
/// not used), handing each to `on_round` as soon as it is complete; an error
/// from `on_round` ends the run with [`RunError::Output`]. With
/// [`RunOptions::round_timeout`] every round has that deadline of its own,
/// else the whole run has `opts.timeout`.
#[allow(clippy::result_large_err)]
pub fn run_scheduled(
    opts: &RunOptions,
    schedule: &mut dyn Schedule,
    on_round: &mut OnRound<'_>,
) -> Result<RunFacts, Failure> {
    let rounds = schedule.max_rounds();
    if rounds == 0 || opts.vcpus == 0 {
        return Err(Failure::early(RunError::NothingToRun));
    }
    let first = schedule.next_variant();
    match opts.backend {
        Backend::Kvm => {
            // The backend drops after the run: every vCPU thread is
            // stopped and joined (or the VM leaked if one cannot be).
            let mut kvm = KvmBackend::start(opts, rounds, first).map_err(Failure::early)?;
            driver::drive(&mut kvm, opts, first, schedule, on_round)
        }
        Backend::Host => {
            let offsets = opts
                .initial_skew
                .map(|cycles| initial_skew::targets(opts.vcpus, cycles))
                .unwrap_or_default();
            let mut host = HostBackend::start(opts, &offsets, rounds).map_err(Failure::early)?;
            driver::drive(&mut host, opts, first, schedule, on_round)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tsc_contract::Variant;

    use super::*;

    /// The host backend with a deadline per round (a run by time): the
    /// rounds are handed on numbered as one run's, in order, every one of
    /// them, and the facts are the run's.
    #[test]
    fn a_host_run_with_round_deadlines_numbers_its_rounds_as_one_run() {
        let opts = RunOptions {
            backend: Backend::Host,
            vcpus: 2,
            round_timeout: Some(Duration::from_secs(120)),
            ..RunOptions::default()
        };
        let rounds = 2 * 1_024 + 7;
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
        assert_eq!(facts.initial.len(), 2);
        assert_eq!(seen, (0..rounds).collect::<Vec<_>>());
    }

    /// A schedule by time ends the host backend's run where its time is up.
    #[test]
    fn a_host_run_by_time_ends_when_its_time_is_up() {
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
