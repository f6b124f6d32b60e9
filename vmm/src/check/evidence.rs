//! What the checks judge ([`Evidence`], measured once by [`super::measure`])
//! and what a check is: the [`Check`] trait every check implements, with
//! the [`Context`] it runs in.

use std::time::{Duration, Instant};

use tsc_contract::ClockRecord;

pub use super::clock_view::ClockView;
use super::frequency::FrequencyEvidence;
use super::report::{CheckOptions, Environment, Finding, SkewStats};
use super::tally::RoundTally;
use crate::error::RunError;
use crate::session::{Handoff, WarpSeen};
use crate::tsc::host_clock::ClockDrift;
use crate::tsc::TscState;
use crate::units::cycles_to_ns;

/// Every guest's TSC read once more after the last round.
#[derive(Clone, Debug, PartialEq)]
pub struct LaterRead {
    /// What each vCPU read.
    pub tsc: Vec<u64>,
    /// Host TSC cycles from just before the last round started until after
    /// the read.
    pub host_elapsed: u64,
    /// Host TSC just before the vCPUs were asked to read.
    pub host_before: u64,
    /// Host TSC just after every vCPU had read.
    pub host_after: u64,
}

/// The warp test after the rounds, and the state it ran in.
#[derive(Clone, Debug, PartialEq)]
pub struct WarpEvidence {
    /// What each vCPU saw.
    pub seen: Vec<WarpSeen>,
    /// Every vCPU's TSC state right after the test.
    pub after: Vec<TscState>,
}

/// The forced hand-off test after the warp test: every pair's result, the
/// state it ran in, and its control.
#[derive(Clone, Debug, PartialEq)]
pub struct HandoffEvidence {
    /// What the guest saw.
    pub test: Handoff,
    /// Every vCPU's TSC state right after the test.
    pub after: Vec<TscState>,
    /// A known move of one vCPU's TSC and the test again.
    pub control: Control,
}

/// The positive control of the hand-off test: one vCPU's TSC moved by a
/// known amount, much larger than the round trip, and the test run again.
#[derive(Clone, Debug, PartialEq)]
pub enum Control {
    /// vCPU `vcpu`'s TSC was moved by `delta` cycles through `how`.
    Moved {
        /// The vCPU moved.
        vcpu: u32,
        /// The move asked for, cycles.
        delta: u64,
        /// How: `KVM_VCPU_TSC_OFFSET` or a guest TSC_ADJUST write.
        how: &'static str,
        /// How far its exact offset relative to vCPU 0 moved (`None`
        /// without exact offsets).
        exact_change: Option<i64>,
        /// The test after the move.
        test: Handoff,
        /// Every vCPU's TSC state right after it.
        after: Vec<TscState>,
    },
    /// A move was asked for (KVM_VCPU_TSC_OFFSET set, a guest TSC_ADJUST
    /// write: KVM accepted it) and the vCPU's exact offset did not move:
    /// what was tried, in words. The exact offsets were shown not to
    /// respond, so their agreement with the guest's view shows nothing.
    Unmoved(String),
    /// No way to move a TSC was available (no KVM_VCPU_TSC_OFFSET, no
    /// guest IA32_TSC_ADJUST, no exact offset to move from): why.
    Impossible(String),
}

/// kvmclock across guest writes of a TSC MSR: what every vCPU read around
/// its write, and KVM's view of every vCPU before and after.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockWrites {
    /// The MSR written (IA32_TSC, or IA32_TSC_ADJUST for the control).
    pub msr: u32,
    /// How far each vCPU moved it, cycles.
    pub delta: u64,
    /// Every vCPU's record of the write.
    pub records: Vec<ClockRecord>,
    /// Every vCPU's TSC state before the write.
    pub before: Vec<TscState>,
    /// And after it.
    pub after: Vec<TscState>,
}

/// What checks 8 and 9 judge.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockEvidence {
    /// Whether the guest registered its kvmclock pages (KVM offers
    /// kvmclock through MSR_KVM_SYSTEM_TIME_NEW).
    pub kvmclock: bool,
    /// The fresh VM, before any round.
    pub fresh: Option<ClockView>,
    /// After the rounds (the guests' TSC writes), before anything else
    /// touched the offsets.
    pub after_rounds: Option<ClockView>,
    /// A guest IA32_TSC write on every vCPU.
    pub tsc_write: Option<ClockWrites>,
    /// The control: a guest TSC_ADJUST write of the same size.
    pub adjust_write: Option<ClockWrites>,
    /// The host's CLOCK_MONOTONIC_RAW against its TSC from the start of the
    /// measurement to after the writes (what a re-anchoring of a page may
    /// move kvmclock by; `None` when it could not be measured).
    pub host_clock: Option<ClockDrift>,
}

/// Everything checks 1 and 3-6 judge.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// The host, the VM and KVM's capabilities.
    pub env: Environment,
    /// The options measured with.
    pub options: CheckOptions,
    /// Every vCPU's TSC state before the first round.
    pub initial: Vec<TscState>,
    /// What the completed rounds say, counted as they completed.
    pub tally: RoundTally,
    /// The guests' TSC read after the rounds (absent when stopped before).
    pub later_read: Option<LaterRead>,
    /// The warp test (absent when stopped before).
    pub warp: Option<WarpEvidence>,
    /// The forced hand-off test (absent when stopped before).
    pub handoff: Option<HandoffEvidence>,
    /// kvmclock and the master clock (checks 8 and 9).
    pub clock: ClockEvidence,
    /// The TSC-frequency family (checks 10-13), measured on VMs of its own
    /// (absent when stopped before).
    pub frequency: Option<FrequencyEvidence>,
}

impl Evidence {
    /// Skew statistics over the rounds completed.
    pub fn skew(&self) -> Option<SkewStats> {
        let khz = self.env.host.tsc_khz;
        self.tally.skew.summary().map(|s| SkewStats {
            median_cycles: s.median,
            p99_cycles: s.p99,
            median_ns: khz.map(|k| cycles_to_ns(s.median, k)),
            p99_ns: khz.map(|k| cycles_to_ns(s.p99, k)),
        })
    }
}

/// What a check may use besides the evidence: the deadline.
pub struct Context {
    deadline: Instant,
}

impl Context {
    /// A context whose checks must be done by `deadline`.
    pub fn until(deadline: Instant) -> Context {
        Context { deadline }
    }

    /// Time left until the checks' deadline (at least a second, so that a
    /// late check still gets to say why it failed).
    pub fn time_left(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1))
    }
}

/// One named check.
pub trait Check: Sync {
    /// Its number, as documented (1-based, in report order).
    fn number(&self) -> u32;
    /// Its stable identifier, e.g. `same-start`.
    fn id(&self) -> &'static str;
    /// What it checks, in words.
    fn title(&self) -> &'static str;
    /// Judges the evidence; a check that needs a VM of its own measures it
    /// here.
    fn run(&self, ev: &Evidence, ctx: &Context) -> Result<Finding, RunError>;
}
