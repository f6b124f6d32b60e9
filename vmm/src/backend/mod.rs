//! Where the algorithms run: the CPUs a run drives round by round. KVM's
//! vCPUs ([`kvm`]: a VM and its vCPU pool) or threads of this OS ([`host`]:
//! no hypervisor involved). Both implement [`Backend`], so the round driver
//! ([`crate::run`]) is written once, as uhyve's `UhyveVm<Backend>` is: the
//! schedule, the readback, the verification of an initial skew, the
//! accumulation and the per-round callback live there, and a backend only
//! runs rounds and reads its CPUs back.

pub mod host;
pub mod kvm;

use std::time::Duration;

use tsc_contract::{ClockRecord, HandoffResult, RoundRecord, Variant};

use crate::error::RunError;
use crate::host::HostInfo;
use crate::tsc::clock_points::ClockPoints;
use crate::tsc::TscState;
use crate::vstate::sync_area::SyncRound;

/// What one round left behind, with every CPU parked: the records the CPUs
/// wrote (raw: the driver validates them), every CPU's TSC state read back
/// after the round, and Linux's results for `linux-tsc-sync`. Reused from
/// round to round, so that the per-round path allocates nothing.
#[derive(Debug, Default)]
pub struct RoundData {
    /// Every CPU's record, in CPU order.
    pub records: Vec<RoundRecord>,
    /// Every CPU's TSC state after the round, in CPU order.
    pub after: Vec<TscState>,
    /// Linux's results (`None` for the other variants).
    pub sync: Option<SyncRound>,
    /// The guest's forced hand-off test after the round (`--guest-view`;
    /// empty without it), every pair validated.
    pub guest_view: Vec<HandoffResult>,
    /// Every vCPU's kvmclock record of its last TSC write (`--kvmclock`;
    /// empty without it), raw: the analysis matches each to the round.
    pub clock: Vec<ClockRecord>,
}

impl RoundData {
    /// Storage for `vcpus` CPUs.
    pub fn with_capacity(vcpus: usize) -> RoundData {
        RoundData {
            records: Vec::with_capacity(vcpus),
            after: Vec::with_capacity(vcpus),
            sync: None,
            guest_view: Vec::new(),
            clock: Vec::new(),
        }
    }
}

/// The CPUs a run drives. Every method is called from the thread that
/// started the backend, with every CPU parked (none is running a round),
/// except that a backend with a [`Backend::lookahead`] may be running the
/// rounds planned ahead.
pub trait Backend {
    /// How many CPUs take part.
    fn vcpus(&self) -> u32;

    /// Every CPU's TSC state now, into `out` in CPU order (before the first
    /// round; `round` names it in errors).
    fn readback(&mut self, round: u32, out: &mut Vec<TscState>) -> Result<(), RunError>;

    /// Runs round `round` of `variant` on every CPU, waits until all have
    /// parked again and fills `data` with what the round left.
    fn run_round(
        &mut self,
        round: u32,
        variant: Variant,
        data: &mut RoundData,
    ) -> Result<(), RunError>;

    /// How many rounds past the one it runs the backend may start on its
    /// own (it runs them back to back): the driver draws their variants
    /// that far ahead and hands each to [`Backend::plan`]. 0: none.
    fn lookahead(&self) -> u32 {
        0
    }

    /// The variant of the next round not planned yet (every round's after
    /// the first, in order, before that round is run).
    fn plan(&mut self, variant: Variant) {
        let _ = variant;
    }

    /// Whether round `round` has completed already and waits to be taken
    /// by [`Backend::run_round`]: the driver hands it on even when a stop
    /// was requested.
    fn completed(&self, round: u32) -> bool {
        let _ = round;
        false
    }

    /// After the last of `rounds` rounds of a run that ran them all: lets
    /// the CPUs end (a guest reports its end and halts).
    fn finish(&mut self, rounds: u32) -> Result<(), RunError> {
        let _ = rounds;
        Ok(())
    }

    /// Re-arms the watchdog: what follows must be done within `timeout`
    /// from now.
    fn rearm(&mut self, timeout: Duration);

    /// The host facts, given every CPU's first readback.
    fn host(&self, initial: &[TscState]) -> HostInfo;

    /// Notes on how the CPUs were set up (said before any other note).
    fn setup_notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// How an initial skew was set, for its note.
    fn skew_set_by(&self) -> &'static str;

    /// The note for CPUs that did not start with the same offset without
    /// an initial skew asked for: `offset` is the first one that differs
    /// from CPU 0's `first`.
    fn unequal_start(&self, offset: Option<u64>, first: Option<u64>) -> String;

    /// `--kvmclock`: KVM_GET_CLOCK on the fresh VM, after the first round
    /// and (taken by this call, after the run's last round, every CPU
    /// parked) after the last; `None` for a backend without a VM or a run
    /// without `--kvmclock`.
    fn clock_points(&mut self) -> Option<ClockPoints> {
        None
    }

    /// Whether the VMM broke up the guests' spin-waits (more vCPUs than host
    /// cores): how the run was paced.
    fn spin_breaker(&self) -> bool {
        false
    }
}
