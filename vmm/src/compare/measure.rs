//! Running the plan: one VM per share of the schedule ([`VmSchedule`],
//! drawn as the rounds start), its rounds handed on as they complete,
//! warm-up rounds counted and dropped, measured rounds summed up per variant
//! ([`Measured`]) and handed to the caller with where they ran (for `--csv`
//! and `--output`). A run that ends early keeps what it measured; a run by
//! time ([`ByTime`]) creates VMs until its time is up and ends at a block
//! boundary.

use std::time::{Duration, Instant};

use super::{Blocks, CompareOptions, Measured, MeasuredRound, Tallies, VmSchedule};
use crate::error::RunError;
use crate::host::HostInfo;
use crate::options::RunOptions;
use crate::run::{self, Schedule};

/// A measurement that ended early: what it measured (`None` when it failed
/// before the first VM said anything about the host) and why it ended.
#[derive(Debug)]
pub struct Partial {
    /// What was measured before the error (boxed: keeps the error small).
    pub data: Option<Box<Measured>>,
    /// Why the measurement ended early.
    pub error: RunError,
}

/// A comparison by time (`--duration`) instead of `rounds` blocks.
#[derive(Clone, Copy, Debug)]
pub struct ByTime {
    /// How long it runs; it ends at the first block boundary after.
    pub duration: Duration,
    /// Every round's deadline (the watchdog, re-armed per round).
    pub round_timeout: Duration,
}

/// Notes from the VMs, each text once with the first VM that had it and how
/// many did (a soak with fresh VMs would otherwise repeat them without end).
#[derive(Debug, Default)]
struct Notes {
    seen: Vec<(String, u32, u32)>,
}

/// Distinct notes kept at most.
const MAX_NOTES: usize = 50;

impl Notes {
    fn add(&mut self, vm: u32, note: String) {
        if let Some((_, _, count)) = self.seen.iter_mut().find(|(n, _, _)| *n == note) {
            *count = count.saturating_add(1);
        } else if self.seen.len() < MAX_NOTES {
            self.seen.push((note, vm, 1));
        }
    }

    fn render(self) -> Vec<String> {
        self.seen
            .into_iter()
            .map(|(note, vm, count)| match count {
                1 => format!("VM {vm}: {note}"),
                n => format!("VM {vm} and {} later VM(s): {note}", n - 1),
            })
            .collect()
    }
}

/// What [`measure`] hands on after every round: the measured round (`None`
/// for a warm-up round) and what was measured so far; an error ends the
/// measurement.
pub type OnRound<'a> = dyn FnMut(Option<&MeasuredRound>, &Tallies) -> Result<(), String> + 'a;

/// Runs the plan, by rounds (`opts.rounds` blocks) or, with `by_time`, for
/// a time. `on_round` is called after every round (warm-up included, then
/// with `None`) with what was measured so far; an error from it ends the
/// measurement ([`RunError::Output`]). A stop request or an error ends it
/// with what was measured so far.
pub fn measure(
    opts: &CompareOptions,
    by_time: Option<ByTime>,
    on_round: &mut OnRound<'_>,
) -> Result<Measured, Partial> {
    let blocks = Blocks::new(&opts.variants, opts.seed);
    if blocks.is_empty() || (by_time.is_none() && opts.rounds == 0) {
        return Err(Partial {
            data: None,
            error: RunError::NothingToRun,
        });
    }
    let block_len = blocks.len();
    let started = Instant::now();
    let until = by_time.map(|b| started + b.duration);
    // Every measured round has a 32-bit sequence number.
    let max_blocks = u32::MAX / block_len;
    let wanted = match by_time {
        Some(_) => max_blocks,
        None => opts.rounds.min(max_blocks),
    };
    let per_vm = match opts.fresh_vm_every {
        0 => wanted,
        k => k,
    };
    let mut m = Measurement {
        blocks,
        block_len,
        tallies: Tallies::default(),
        host: None,
        notes: Notes::default(),
        spin_breaker: false,
        first_block: 0,
        vm: 0,
        seq: 0,
    };
    let mut error = None;
    while m.first_block < wanted {
        if m.vm > 0 && until.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        let n = per_vm.min(wanted - m.first_block);
        if let Err(e) = m.run_vm(opts, by_time, n, until, on_round) {
            error = Some(e);
            break;
        }
    }
    let Measurement {
        tallies,
        host,
        notes,
        spin_breaker,
        vm,
        ..
    } = m;
    let data = host.map(|host| {
        let mut all = Vec::new();
        if spin_breaker {
            all.push(crate::output::lines::SPIN_BREAKER_NOTE.to_string());
        }
        all.extend(notes.render());
        Measured {
            host,
            tallies,
            vms: vm,
            elapsed: started.elapsed(),
            notes: all,
            duration: by_time.map(|b| b.duration),
        }
    });
    match (data, error) {
        (Some(d), None) => Ok(d),
        (data, Some(error)) => Err(Partial {
            data: data.map(Box::new),
            error,
        }),
        (None, None) => Err(Partial {
            data: None,
            error: RunError::NothingToRun,
        }),
    }
}

/// What the measurement has so far, across its VMs.
struct Measurement {
    blocks: Blocks,
    block_len: u32,
    tallies: Tallies,
    host: Option<HostInfo>,
    notes: Notes,
    spin_breaker: bool,
    /// The first block of the next VM.
    first_block: u32,
    /// The next VM's number.
    vm: u32,
    /// The next measured round's sequence number.
    seq: u32,
}

impl Measurement {
    /// One VM: its warm-up rounds, then `blocks` blocks of measured rounds
    /// (fewer when the time is up), each handed to `on_round`.
    fn run_vm(
        &mut self,
        opts: &CompareOptions,
        by_time: Option<ByTime>,
        blocks: u32,
        until: Option<Instant>,
        on_round: &mut OnRound<'_>,
    ) -> Result<(), RunError> {
        let mut schedule = VmSchedule::new(&mut self.blocks, opts.warmup, blocks, until);
        let warm = opts.warmup.min(schedule.max_rounds());
        let run_opts = RunOptions {
            backend: opts.backend,
            sync_windows_ms: opts.sync_windows_ms,
            initial_skew: opts.initial_skew,
            vcpus: opts.vcpus,
            schedule: Vec::new(),
            timeout: opts.timeout,
            round_timeout: by_time.map(|b| b.round_timeout),
            image: opts.image.clone(),
            inject: opts.inject,
            guest_view: None,
            kvmclock: opts.kvmclock,
            tsc: opts.tsc,
        };
        let mut round_in_vm = 0u32;
        let mut measured_here = 0u32;
        let this_vm = self.vm;
        self.vm += 1;
        let (block_len, first_block) = (self.block_len, self.first_block);
        let (tallies, seq) = (&mut self.tallies, &mut self.seq);
        let result = run::run_scheduled(&run_opts, &mut schedule, &mut |result| {
            let i = round_in_vm;
            round_in_vm += 1;
            if i < warm {
                tallies.warmup_rounds_run = tallies.warmup_rounds_run.saturating_add(1);
                return on_round(None, tallies);
            }
            let k = i - warm;
            let r = MeasuredRound {
                seq: *seq,
                vm: this_vm,
                block: first_block.saturating_add(k / block_len),
                round_in_vm: i,
                result,
            };
            *seq = seq.saturating_add(1);
            measured_here += 1;
            tallies.add(&r.result);
            on_round(Some(&r), tallies)
        });
        self.first_block = self.first_block.saturating_add(measured_here / block_len);
        if self.host.is_none() {
            self.host = match &result {
                Ok(facts) => Some(facts.host.clone()),
                Err(f) => f.host.as_deref().cloned(),
            };
        }
        let facts = result.map_err(|f| f.error)?;
        self.spin_breaker |= facts.spin_breaker;
        for n in facts.notes {
            self.notes.add(this_vm, n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A note every VM has is said once, with how many VMs had it; distinct
    /// notes are kept up to a bound, so a soak of fresh VMs cannot grow them.
    #[test]
    fn repeated_notes_are_said_once_and_the_notes_are_bounded() {
        let mut n = Notes::default();
        for vm in 0..1_000 {
            n.add(vm, "overcommitted".into());
            n.add(vm, format!("odd {vm}"));
        }
        let notes = n.render();
        assert_eq!(notes.len(), MAX_NOTES);
        assert_eq!(notes[0], "VM 0 and 999 later VM(s): overcommitted");
        assert_eq!(notes[1], "VM 0: odd 0");
    }

    #[test]
    fn nothing_to_compare_is_said_before_any_vm() {
        let opts = CompareOptions {
            backend: crate::options::Backend::Host,
            sync_windows_ms: (20, 2),
            initial_skew: None,
            kvmclock: false,
            tsc: None,
            inject: None,
            vcpus: 2,
            variants: Vec::new(),
            rounds: 10,
            warmup: 0,
            seed: 1,
            fresh_vm_every: 0,
            bootstrap: 100,
            timeout: Duration::from_secs(60),
            image: None,
        };
        let e = measure(&opts, None, &mut |_, _| Ok(())).expect_err("no variants");
        assert!(matches!(e.error, RunError::NothingToRun) && e.data.is_none());
    }
}
