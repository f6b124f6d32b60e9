//! What the checks judge ([`Evidence`], measured once by [`super::measure`])
//! and what a check is: the [`Check`] trait every check implements, with
//! the [`Context`] it runs in.

use std::time::{Duration, Instant};

use super::report::{CheckOptions, Environment, Finding, SkewStats};
use super::tally::RoundTally;
use crate::error::RunError;
use crate::session::WarpSeen;
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
