//! Why a run (or a command-mode session) ended early: the VM's and the vCPU
//! pool's own errors ([`VmError`], [`PoolError`]) composed with what the run
//! itself can find wrong (records, the host threads, the outputs). Every
//! variant names the vCPU and round where that applies, and says what to do
//! when there is something to do.

use tsc_contract::{RecordError, RoundRecord, Variant};

use crate::host::HostInfo;
use crate::initial_skew::SkewError;
use crate::stop::Signal;
use crate::vstate::memory::HandoffReadError;
use crate::vstate::sync_area::SyncError;
use crate::vstate::{MemError, PoolError, VmError};
use crate::watchdog::Stall;

/// Why a run ended early.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum RunError {
    /// {0}
    Vm(#[from] VmError),
    /// {0}
    Pool(#[from] PoolError),
    /// {0}
    Memory(#[from] MemError),
    /// {0}
    InitialSkew(#[from] SkewError),
    /// cannot start a vCPU thread: {0}
    Spawn(#[source] std::io::Error),
    /// cannot measure the host's TSC frequency against CLOCK_MONOTONIC; the host backend needs it
    HostTscKhz,
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
        error: SyncError,
    },
    /// in round (or command) {round}: {error}
    Handoff {
        /// The round or command.
        round: u32,
        /// What is wrong with the guest's hand-off results.
        #[source]
        error: HandoffReadError,
    },
    /// vCPU {vcpu}'s kvmclock record is not the one of command {tag} (not written, or stale)
    BadClockRecord {
        /// The vCPU.
        vcpu: u32,
        /// The command it should be for.
        tag: u32,
    },
    /// vCPU {vcpu}'s record of round {round} cannot be read from guest memory
    UnreadableRecord {
        /// The vCPU.
        vcpu: u32,
        /// The round.
        round: u32,
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
                | RunError::Pool(PoolError::KickHandler(_))
                | RunError::NothingToRun
        )
    }

    /// Whether this host has no KVM the tool can use (the device cannot be
    /// opened, is not KVM, or lacks a capability the tool needs): what
    /// kselftest calls a missing prerequisite, a skip rather than a failure.
    pub fn kvm_unavailable(&self) -> bool {
        matches!(
            self,
            RunError::Vm(
                VmError::OpenKvm { .. } | VmError::NotKvm { .. } | VmError::MissingCapability(_)
            )
        )
    }

    /// The signal that stopped the run, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self {
            RunError::Interrupted { signal, .. } => Some(signal.0),
            RunError::Pool(p) => p.signal(),
            _ => None,
        }
    }

    /// What the watchdog found, when the run ended because its deadline
    /// passed (a time limit of the tool's, not evidence about KVM).
    pub fn stall(&self) -> Option<&Stall> {
        match self {
            RunError::Timeout(s) | RunError::Pool(PoolError::Timeout(s)) => Some(s),
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

    /// Validates every vCPU's record of `round` (index = vCPU) against the
    /// contract: the first invalid one is the error.
    pub fn check_records(
        records: &[RoundRecord],
        round: u32,
        variant: Variant,
    ) -> Result<(), RunError> {
        for (k, record) in records.iter().enumerate() {
            let vcpu = k as u32;
            record
                .validate(vcpu, round, variant as u32)
                .map_err(|error| RunError::BadRecord { vcpu, round, error })?;
        }
        Ok(())
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
    fn setup_errors_and_signals_are_told_apart() {
        let e = RunError::interrupted(libc::SIGTERM, 4);
        assert_eq!(e.signal(), Some(libc::SIGTERM));
        assert!(!e.is_setup());
        assert_eq!(
            e.to_string(),
            "interrupted by SIGTERM in round 4; the vCPUs were stopped"
        );
        assert!(RunError::Vm(VmError::MissingCapability("KVM_CAP_X")).is_setup());
        assert!(RunError::Vm(VmError::MissingCapability("KVM_CAP_X")).kvm_unavailable());
        assert!(!RunError::NothingToRun.kvm_unavailable());
        assert!(!RunError::Lost(1).is_setup());
        assert_eq!(RunError::Lost(1).signal(), None);
        // The pool's own errors keep their meaning through the run's.
        let e = RunError::from(PoolError::Interrupted {
            signal: Signal(libc::SIGINT),
            round: 2,
        });
        assert_eq!(e.signal(), Some(libc::SIGINT));
        assert_eq!(
            e.to_string(),
            "interrupted by SIGINT (Ctrl-C) in round 2; the vCPUs were stopped"
        );
        let e = RunError::from(PoolError::KickHandler(vmm_sys_util::errno::Error::new(
            libc::EINVAL,
        )));
        assert!(e.is_setup());
        assert!(!RunError::from(PoolError::Lost(0)).is_setup());
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
