//! The one round loop, for every backend: the first readback and what it
//! says (an initial skew verified, the notes), then per round of the
//! schedule the round itself, its records validated, its analysis, and the
//! round handed on. Adding a per-round measurement means changing
//! [`Driver::round`] and nothing else.

use std::collections::VecDeque;

use tsc_contract::Variant;

use super::facts::RunFacts;
use super::schedule::Schedule;
use crate::analysis::{guest_view, kvmclock, RoundAccumulator, RoundResult};
use crate::backend::{Backend, RoundData};
use crate::error::{Failure, RunError};
use crate::host::HostInfo;
use crate::initial_skew;
use crate::options::RunOptions;
use crate::stop;
use crate::tsc::TscState;

/// Where the rounds go as they complete: kept, written or summarised; an
/// error ends the run with [`RunError::Output`].
pub type OnRound<'a> = dyn FnMut(RoundResult) -> Result<(), String> + 'a;

/// The round loop's state that outlives an error.
struct Driver<'o> {
    opts: &'o RunOptions,
    host: Option<HostInfo>,
    completed: u32,
}

/// Runs the rounds `schedule` draws on `backend`, the first of `first`
/// (the variant the backend was started with, already drawn), handing each
/// to `on_round` as soon as it is complete. A failure keeps how many rounds
/// completed and the host facts, when they were read.
#[allow(clippy::result_large_err)]
pub fn drive<B: Backend>(
    backend: &mut B,
    opts: &RunOptions,
    first: Variant,
    schedule: &mut dyn Schedule,
    on_round: &mut OnRound<'_>,
) -> Result<RunFacts, Failure> {
    let mut d = Driver {
        opts,
        host: None,
        completed: 0,
    };
    d.rounds(backend, first, schedule, on_round)
        .map_err(|error| Failure {
            error,
            rounds_completed: d.completed,
            host: d.host.map(Box::new),
        })
}

impl Driver<'_> {
    fn rounds<B: Backend>(
        &mut self,
        backend: &mut B,
        first: Variant,
        schedule: &mut dyn Schedule,
        on_round: &mut OnRound<'_>,
    ) -> Result<RunFacts, RunError> {
        let n = backend.vcpus() as usize;
        let mut initial = Vec::with_capacity(n);
        backend.readback(0, &mut initial)?;
        let looped = self
            .notes(backend, &initial)
            .and_then(|notes| self.each_round(backend, first, schedule, on_round, &initial, notes));
        // The host facts are read once the first round is handed on (the
        // first result does not wait for them), or here, before the round
        // loop's error is returned.
        let host = self.host_of(backend, &initial).clone();
        let (notes, max, ran) = looped?;
        // After the last round, before the CPUs end.
        let kvm_clock = backend.clock_points();
        if ran == max {
            // Every round ran: let the CPUs end. A run cut short leaves
            // them parked; they are stopped with the backend.
            self.rearm(backend);
            backend.finish(max)?;
        }
        Ok(RunFacts {
            host,
            vcpus: backend.vcpus(),
            initial,
            notes,
            spin_breaker: backend.spin_breaker(),
            kvm_clock,
        })
    }

    /// The host facts, read on the first call (the first readback given).
    fn host_of<B: Backend>(&mut self, backend: &B, initial: &[TscState]) -> &HostInfo {
        let skew = self.opts.initial_skew;
        self.host.get_or_insert_with(|| {
            let mut host = backend.host(initial);
            host.initial_skew_cycles = skew;
            host
        })
    }

    /// Every round the schedule draws; returns the notes, the most rounds
    /// and how many ran.
    fn each_round<B: Backend>(
        &mut self,
        backend: &mut B,
        first: Variant,
        schedule: &mut dyn Schedule,
        on_round: &mut OnRound<'_>,
        initial: &[TscState],
        notes: Vec<String>,
    ) -> Result<(Vec<String>, u32, u32), RunError> {
        // Reused by every round: past the first, the per-round path
        // allocates nothing but the round's own result.
        let mut acc = RoundAccumulator::new(initial);
        let mut data = RoundData::with_capacity(initial.len());
        let max = schedule.max_rounds();
        // The variants drawn and not run yet (the first is drawn), up to
        // the backend's lookahead past the round running. None is drawn
        // once the schedule would end after the rounds drawn (its time is
        // up), and every one drawn runs.
        let ahead = backend.lookahead();
        let mut upcoming = VecDeque::with_capacity(ahead as usize + 1);
        upcoming.push_back(first);
        let mut drawn = 1u32;
        let mut round = 0u32;
        while round < max {
            while drawn < max && drawn - round <= ahead && !schedule.ends_after(drawn) {
                upcoming.push_back(draw(backend, schedule));
                drawn += 1;
            }
            let Some(variant) = upcoming.pop_front() else {
                break;
            };
            let result = self.round(backend, round, variant, &mut acc, &mut data)?;
            on_round(result).map_err(RunError::Output)?;
            self.completed += 1;
            round += 1;
            if round == 1 {
                self.host_of(backend, initial);
            }
        }
        Ok((notes, max, round))
    }

    /// One round: run it, validate its records, analyse it.
    fn round<B: Backend>(
        &mut self,
        backend: &mut B,
        round: u32,
        variant: Variant,
        acc: &mut RoundAccumulator,
        data: &mut RoundData,
    ) -> Result<RoundResult, RunError> {
        // A round that has already completed is handed on whatever comes.
        if !backend.completed(round) {
            if let Some(signal) = stop::requested() {
                return Err(RunError::interrupted(signal, round));
            }
        }
        self.rearm(backend);
        backend.run_round(round, variant, data)?;
        RunError::check_records(&data.records, round, variant)?;
        let mut result = acc.add(round, variant, &data.records, &data.after, data.sync.take());
        if !data.guest_view.is_empty() {
            guest_view::apply(&mut result, &data.guest_view);
        }
        if !data.clock.is_empty() {
            kvmclock::apply(&mut result, &data.clock, &data.records);
        }
        for d in &result.disagreements {
            log::warn!("round {round}: {d}");
        }
        Ok(result)
    }

    /// Every round of a run by time has its own deadline.
    fn rearm<B: Backend>(&self, backend: &mut B) {
        if let Some(t) = self.opts.round_timeout {
            backend.rearm(t);
        }
    }

    /// What the first readback says: the initial skew verified and noted,
    /// or offsets that differ without one; a TSC_ADJUST that is not 0.
    fn notes<B: Backend>(
        &self,
        backend: &B,
        initial: &[TscState],
    ) -> Result<Vec<String>, RunError> {
        let mut notes = backend.setup_notes();
        if let Some(cycles) = self.opts.initial_skew {
            initial_skew::verify(initial, cycles)?;
            notes.push(initial_skew::note(
                initial.len(),
                cycles,
                backend.skew_set_by(),
            ));
        } else if let Some(first) = initial.first() {
            if let Some(s) = initial.iter().find(|s| s.offset != first.offset) {
                notes.push(backend.unequal_start(s.offset, first.offset));
            }
        }
        if initial.iter().any(|s| s.adjust != 0) {
            notes.push("a vCPU started with a non-zero TSC_ADJUST".into());
        }
        Ok(notes)
    }
}

/// The schedule's next variant, planned on the backend.
fn draw<B: Backend>(backend: &mut B, schedule: &mut dyn Schedule) -> Variant {
    let variant = schedule.next_variant();
    backend.plan(variant);
    variant
}

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;
