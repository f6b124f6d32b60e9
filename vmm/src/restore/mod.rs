//! `restore`: does snapshot/restore keep the guest's TSCs in sync?
//!
//! Per method under test: a command-mode VM runs one rendezvous on N vCPUs
//! (so their offsets differ by the skew it left), every guest reads its TSC,
//! and the VM is snapshotted ([`snapshot`]: memory, registers, TSC state,
//! KVM_GET_CLOCK; each vCPU's pending port I/O completed first) and
//! destroyed. After `--delay-ms` a fresh VM gets the memory and registers
//! back and its TSC state by the method ([`methods`]: `documented`, `msr`,
//! `msr-twice`; the arithmetic in [`offsets`]), and the same guest resumes
//! its command loop: its first TSC reads and a warp test follow. Around the
//! restore the guests read their kvmclock, and once the restored guest ran
//! again KVM's and the guests' view of the clock is taken ([`reads`]); a
//! chained restore snapshots and restores it once more. What was measured
//! ([`measure`], recorded in [`record`])
//! becomes the report ([`derive`] into [`report`], [`text`]) and the
//! evidence of check 7 (`save-restore`); [`run`] is the whole `restore`
//! command, one method after another.

mod chain_derive;
pub mod clock_derive;
pub mod clock_report;
mod clock_text;
pub mod derive;
pub mod error;
pub mod keeps;
pub mod measure;
pub mod methods;
pub mod offsets;
pub mod options;
pub mod reads;
pub mod record;
pub mod report;
pub mod run;
pub mod snapshot;
#[cfg(test)]
pub(crate) mod testdata;
#[cfg(test)]
pub(crate) mod testdata_clock;
pub mod text;
pub mod trace;
mod words;

pub use error::RestoreError;
pub use measure::{measure_method, probe};
pub use methods::Support;
pub use options::{
    fail_from_env, ChainDelay, Method, MethodOptions, Step, FAIL_ENV, INJECTABLE, MAX_DELAY_MS,
};
pub use report::{MethodReport, SCHEMA};
