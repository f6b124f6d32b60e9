//! Why a run (or a command-mode session) ended early. Every variant names the
//! vCPU and round where that applies, and says what to do when there is
//! something to do.

use std::fmt;
use std::time::Duration;

use tsc_contract::{Progress, RecordError};

use crate::host::HostInfo;
use crate::stop::signal_name;
use crate::tsc::TscError;
use crate::vstate::exit::VcpuError;
use crate::vstate::vm::VmError;

/// Why a run ended early.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum RunError {
    /// {0}
    Vm(#[from] VmError),
    /// {0}
    InitialSkew(#[from] crate::skew::SkewError),
    /// cannot start a vCPU thread: {0}
    Spawn(#[source] std::io::Error),
    /// cannot install the vCPU kick signal handler: {0}
    KickHandler(#[source] vmm_sys_util::errno::Error),
    /// vCPU {vcpu} in round {round}: {error}
    Vcpu {
        /// The vCPU.
        vcpu: u32,
        /// In which round (in command mode: which command).
        round: u32,
        /// What happened.
        #[source]
        error: VcpuError,
    },
    /// reading vCPU {vcpu}'s TSC state failed: {error}
    Readback {
        /// The vCPU.
        vcpu: u32,
        /// The error.
        #[source]
        error: TscError,
    },
    /// vCPU {vcpu}'s record of round {round} is invalid: {error}
    BadRecord {
        /// The vCPU.
        vcpu: u32,
        /// The round.
        round: u32,
        /// Why.
        #[source]
        error: RecordError,
    },
    /// in round {round}: {error}
    Sync {
        /// The round.
        round: u32,
        /// What is wrong with the guest's result.
        #[source]
        error: crate::vstate::sync_area::SyncError,
    },
    /// vCPU {vcpu}'s record of round {round} cannot be read from guest memory
    UnreadableRecord {
        /// The vCPU.
        vcpu: u32,
        /// The round.
        round: u32,
    },
    /// vCPU {vcpu} reported the end of round {found} while round {expected} was running
    WrongRound {
        /// The vCPU.
        vcpu: u32,
        /// The round running.
        expected: u32,
        /// What the guest reported.
        found: u32,
    },
    /// vCPU {vcpu} reported command {found} done while command {expected} was running
    WrongCommand {
        /// The vCPU.
        vcpu: u32,
        /// The command running.
        expected: u32,
        /// What the guest reported.
        found: u32,
    },
    /// {0}
    Timeout(Stall),
    /// interrupted by {signal} in round {round}; the vCPUs were stopped
    Interrupted {
        /// The signal.
        signal: Signal,
        /// The round running.
        round: u32,
    },
    /// cannot write a round to --output: {0}
    Output(String),
    /// vCPU {0}'s thread ended unexpectedly
    Lost(u32),
    /// vCPU {vcpu} reported it had finished every round while round {round} was running
    FinishedEarly {
        /// The vCPU.
        vcpu: u32,
        /// The round running.
        round: u32,
    },
    /// nothing to run: no variant or no round was asked for
    NothingToRun,
}

impl RunError {
    /// Whether the run could not start at all (exit code 2) rather than
    /// failing once it ran (exit code 1).
    pub fn is_setup(&self) -> bool {
        matches!(
            self,
            RunError::Vm(_)
                | RunError::InitialSkew(_)
                | RunError::KickHandler(_)
                | RunError::NothingToRun
        )
    }

    /// The signal that stopped the run, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self {
            RunError::Interrupted { signal, .. } => Some(signal.0),
            _ => None,
        }
    }

    /// The error a stop request gives in `round`.
    pub fn interrupted(signal: i32, round: u32) -> RunError {
        RunError::Interrupted {
            signal: Signal(signal),
            round,
        }
    }
}

/// A signal, shown by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(pub i32);

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&signal_name(self.0))
    }
}

/// What the watchdog found when the deadline passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// The round running.
    pub round: u32,
    /// vCPUs that had not reported, with where each said it was (from its
    /// progress slot in guest memory; `None` when unreadable).
    pub missing: Vec<(u32, Option<Progress>)>,
    /// The rendezvous semaphore, read from guest memory.
    pub semaphore: Option<u32>,
    /// The deadline.
    pub timeout: Duration,
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<String> = self.missing.iter().map(|(v, _)| v.to_string()).collect();
        write!(
            f,
            "timed out after {:.1} s in round {}: vCPU(s) {} had not arrived",
            self.timeout.as_secs_f64(),
            self.round,
            ids.join(", ")
        )?;
        for (i, (v, p)) in self.missing.iter().enumerate() {
            let sep = if i == 0 { "; " } else { ", " };
            match p {
                Some(p) => write!(f, "{sep}vCPU {v} {p}")?,
                None => write!(f, "{sep}vCPU {v}'s progress is unreadable")?,
            }
        }
        match self.semaphore {
            Some(s) => write!(f, "; rendezvous semaphore = {s} (read from guest memory)")?,
            None => write!(f, "; rendezvous semaphore unreadable")?,
        }
        write!(f, "; raise --timeout if the host is only slow")
    }
}

/// A run that ended early.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Failure {
    /// What went wrong.
    #[source]
    pub error: RunError,
    /// Rounds completed (and handed on) before it.
    pub rounds_completed: u32,
    /// Host facts, when the run got as far as reading them (boxed: keeps the
    /// error small).
    pub host: Option<Box<HostInfo>>,
}

impl Failure {
    /// A failure before any round or host fact.
    pub fn early(error: RunError) -> Failure {
        Failure {
            error,
            rounds_completed: 0,
            host: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_says_who_was_where_and_what_to_do() {
        let e = RunError::Timeout(Stall {
            round: 2,
            missing: vec![
                (
                    0,
                    Some(Progress::At {
                        round: 2,
                        iteration: 3,
                    }),
                ),
                (1, None),
            ],
            semaphore: Some(1),
            timeout: Duration::from_millis(4_000),
        })
        .to_string();
        assert_eq!(
            e,
            "timed out after 4.0 s in round 2: vCPU(s) 0, 1 had not arrived; vCPU 0 was in \
             round 2 iteration 3, vCPU 1's progress is unreadable; rendezvous semaphore = 1 \
             (read from guest memory); raise --timeout if the host is only slow"
        );
    }

    #[test]
    fn setup_errors_and_signals_are_told_apart() {
        let e = RunError::interrupted(libc::SIGTERM, 4);
        assert_eq!(e.signal(), Some(libc::SIGTERM));
        assert!(!e.is_setup());
        assert_eq!(
            e.to_string(),
            "interrupted by SIGTERM in round 4; the vCPUs were stopped"
        );
        assert!(RunError::Vm(VmError::MissingCapability("KVM_CAP_X")).is_setup());
        assert!(!RunError::Lost(1).is_setup());
        assert_eq!(RunError::Lost(1).signal(), None);
    }

    #[test]
    fn the_source_chain_is_kept() {
        use std::error::Error as _;
        let e = RunError::BadRecord {
            vcpu: 1,
            round: 2,
            error: RecordError::BadMagic(0),
        };
        assert!(e.source().is_some(), "the record error is the source");
        let f = Failure::early(e);
        assert!(f.source().is_some());
        assert!(f
            .to_string()
            .starts_with("vCPU 1's record of round 2 is invalid"));
    }
}
