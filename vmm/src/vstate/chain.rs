//! Rounds run back to back by the vCPU threads themselves: the vCPU thread
//! whose report completes a round does the work between two rounds (what
//! [`RoundWork`] says: read what the round left in guest memory into a slot
//! of a ring, prepare the next round) and resumes every vCPU, so that the
//! coordinator is woken once per batch of rounds instead of once per round.
//!
//! The coordinator plans the variants ahead ([`Chain::plan`]) and takes the
//! completed rounds in order ([`Chain::take`]); the chain pauses, every vCPU
//! parked outside KVM_RUN, when the ring is full, when no variant is
//! planned, on a stop request, after an error, or once closed. Nothing a
//! round measured is dropped: a paused chain keeps its completed rounds
//! until they are taken.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::Thread;

use tsc_contract::Variant;
use vm_memory::GuestMemoryMmap;

use super::vcpu::handoff::{Arrive, Mailbox};
use super::vcpu::Command;
use crate::stop;
use crate::tsc::{TscError, TscState};

/// Rounds the ring holds: how far the vCPUs may run ahead of the
/// coordinator.
pub const DEPTH: u32 = 32;

/// How many completed rounds the coordinator waits for before it wakes
/// (fewer when fewer are planned).
pub const BATCH: u32 = DEPTH / 2;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The work between two rounds, on guest memory, every vCPU parked.
pub trait RoundWork: Send + 'static {
    /// What a round leaves behind (reused from round to round).
    type Data: Default + Send;
    /// Why the work failed.
    type Error: Send;

    /// Before round `round` of `variant` starts.
    fn before(
        &mut self,
        mem: &GuestMemoryMmap,
        round: u32,
        variant: Variant,
    ) -> Result<(), Self::Error>;

    /// After round `round` of `variant`: what it left, into `data`, and the
    /// guest's state reset for the next round.
    fn after(
        &mut self,
        mem: &GuestMemoryMmap,
        round: u32,
        variant: Variant,
        data: &mut Self::Data,
    ) -> Result<(), Self::Error>;
}

/// One vCPU's report of a chained round: the round it said it finished
/// (the one running, unless the guest is broken) and its TSC state read
/// back right after, or why it could not be read.
pub type Report = Option<(u32, Result<TscState, TscError>)>;

/// One completed round in the ring.
struct Slot<D, E> {
    /// Every vCPU's report, in vCPU order.
    reported: Vec<Report>,
    data: D,
    error: Option<E>,
}

/// What the coordinator asked for and where the rounds are.
struct Plan<W: RoundWork> {
    work: W,
    /// The round running and its variant.
    running: Option<(u32, Variant)>,
    /// The variants planned, of the rounds from `next` on.
    planned: VecDeque<Variant>,
    /// The first round not started.
    next: u32,
    /// The first round the coordinator has not taken.
    taken: u32,
    /// Why a round could not be started (it stays unstarted).
    error: Option<W::Error>,
    closed: bool,
}

/// Rounds run back to back: see the module documentation.
pub struct Chain<W: RoundWork> {
    vcpus: u32,
    mem: GuestMemoryMmap,
    plan: Mutex<Plan<W>>,
    slots: Vec<Mutex<Slot<W::Data, W::Error>>>,
    /// Reports of the round running so far.
    arrivals: AtomicU32,
    /// Rounds completed.
    done: AtomicU32,
    targets: OnceLock<Vec<(Arc<Mailbox<Command>>, Thread)>>,
}

/// What [`Chain::take`] found.
pub enum Taken<E> {
    /// The round is in `data`, with every vCPU's report.
    Round,
    /// The round has not completed; the chain runs towards it.
    Pending,
    /// The round has not completed and the chain is paused short of it:
    /// it is closed, a stop was requested, or no variant is planned.
    Stuck,
    /// The round cannot run: why.
    Failed(E),
}

impl<W: RoundWork> Chain<W> {
    /// A paused chain over `vcpus` vCPUs of the VM whose memory is `mem`,
    /// whose first round to run is `next`.
    pub fn new(mem: GuestMemoryMmap, vcpus: u32, work: W, next: u32) -> Chain<W> {
        let slots = (0..DEPTH)
            .map(|_| {
                Mutex::new(Slot {
                    reported: (0..vcpus).map(|_| None).collect(),
                    data: W::Data::default(),
                    error: None,
                })
            })
            .collect();
        Chain {
            vcpus,
            mem,
            plan: Mutex::new(Plan {
                work,
                running: None,
                planned: VecDeque::with_capacity(DEPTH as usize + 1),
                next,
                taken: next,
                error: None,
                closed: false,
            }),
            slots,
            arrivals: AtomicU32::new(0),
            done: AtomicU32::new(next),
            targets: OnceLock::new(),
        }
    }

    /// Runs `f` on the work and guest memory while the chain is paused
    /// (every vCPU parked): a round the coordinator drives itself. Returns
    /// `None` when a round is running.
    pub fn with_work<T>(&self, f: impl FnOnce(&mut W, &GuestMemoryMmap) -> T) -> Option<T> {
        let mut plan = lock(&self.plan);
        if plan.running.is_some() {
            return None;
        }
        Some(f(&mut plan.work, &self.mem))
    }

    /// The variant of the next round not planned yet.
    pub fn plan(&self, variant: Variant) {
        lock(&self.plan).planned.push_back(variant);
    }

    /// The last round the coordinator should wait for when it wants
    /// `round`: a batch, bounded by what is planned.
    pub fn batch_end(&self, round: u32) -> u32 {
        let plan = lock(&self.plan);
        let planned = plan.next.saturating_add(plan.planned.len() as u32);
        let last = planned.saturating_sub(1).max(round);
        round.saturating_add(BATCH - 1).min(last)
    }

    /// Takes round `round` (the first not taken) into `data` and `states`
    /// (in vCPU order: the round each vCPU reported, its state), or, if it
    /// has not completed, makes sure the chain runs towards it.
    pub fn take(
        &self,
        round: u32,
        data: &mut W::Data,
        states: &mut Vec<Report>,
    ) -> Taken<W::Error> {
        let mut plan = lock(&self.plan);
        if plan.taken != round {
            // Rounds are taken in order, each once.
            return Taken::Stuck;
        }
        if self.done.load(Ordering::SeqCst) > round {
            let mut slot = lock(&self.slots[(round % DEPTH) as usize]);
            std::mem::swap(&mut slot.data, data);
            states.clear();
            states.extend(slot.reported.iter_mut().map(Option::take));
            let error = slot.error.take();
            drop(slot);
            plan.taken = round.saturating_add(1);
            if let Some(e) = error {
                return Taken::Failed(e);
            }
            self.resume(&mut plan);
            return Taken::Round;
        }
        if let Some(e) = plan.error.take() {
            return Taken::Failed(e);
        }
        self.resume(&mut plan);
        if let Some(e) = plan.error.take() {
            return Taken::Failed(e);
        }
        if plan.running.is_none() && self.done.load(Ordering::SeqCst) <= round {
            return Taken::Stuck;
        }
        Taken::Pending
    }

    /// Whether no round runs (every vCPU is parked, or about to be).
    pub fn paused(&self) -> bool {
        lock(&self.plan).running.is_none()
    }

    /// Starts the next planned round when the chain is paused and may go
    /// on; the caller holds the plan.
    fn resume(&self, plan: &mut Plan<W>) {
        if plan.running.is_some() || plan.closed || plan.error.is_some() {
            return;
        }
        if stop::requested().is_some() || plan.next >= plan.taken.saturating_add(DEPTH) {
            return;
        }
        let Some(targets) = self.targets.get() else {
            return;
        };
        let Some(variant) = plan.planned.pop_front() else {
            return;
        };
        let round = plan.next;
        if let Err(e) = plan.work.before(&self.mem, round, variant) {
            plan.planned.push_front(variant);
            plan.error = Some(e);
            return;
        }
        plan.next = round.saturating_add(1);
        plan.running = Some((round, variant));
        for (mailbox, thread) in targets {
            mailbox.post(Command::Chain, thread);
        }
    }
}

impl<W: RoundWork> Arrive<Command> for Chain<W> {
    fn connect(&self, targets: Vec<(Arc<Mailbox<Command>>, Thread)>) {
        let _ = self.targets.set(targets);
    }

    fn arrive(&self, vcpu: u32, reported: u32, state: Result<TscState, TscError>) -> bool {
        let running = lock(&self.plan).running;
        let Some((round, variant)) = running else {
            // Not started by the chain: nothing to complete.
            return false;
        };
        {
            let mut slot = lock(&self.slots[(round % DEPTH) as usize]);
            if let Some(r) = slot.reported.get_mut(vcpu as usize) {
                *r = Some((reported, state));
            }
        }
        if self.arrivals.fetch_add(1, Ordering::SeqCst) + 1 < self.vcpus {
            return false;
        }
        // The last report of the round: every vCPU is parked.
        self.arrivals.store(0, Ordering::SeqCst);
        let mut plan = lock(&self.plan);
        {
            let mut guard = lock(&self.slots[(round % DEPTH) as usize]);
            let slot = &mut *guard;
            slot.error = plan
                .work
                .after(&self.mem, round, variant, &mut slot.data)
                .err();
            let failed = slot.error.is_some()
                || slot
                    .reported
                    .iter()
                    .any(|r| !matches!(r, Some((n, Ok(_))) if *n == round));
            if failed {
                // The coordinator reports it; nothing more runs.
                plan.closed = true;
            }
        }
        plan.running = None;
        self.done.store(round.saturating_add(1), Ordering::SeqCst);
        self.resume(&mut plan);
        true
    }

    fn arrived(&self, vcpu: u32) -> bool {
        let running = lock(&self.plan).running;
        running.is_none_or(|(round, _)| {
            lock(&self.slots[(round % DEPTH) as usize])
                .reported
                .get(vcpu as usize)
                .is_some_and(Option::is_some)
        })
    }

    fn completed(&self) -> u32 {
        self.done.load(Ordering::SeqCst)
    }

    fn close(&self) {
        lock(&self.plan).closed = true;
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
