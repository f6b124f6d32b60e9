//! tsc-rendezvous: a KVM mini-VMM that runs Xen's TSC calibration rendezvous,
//! with real `wrmsr IA32_TSC` writes, on N vCPUs of a tiny Rust guest, reads
//! every vCPU's TSC state back through KVM after every round and reports the
//! skew the rendezvous left behind.
//!
//! Data flows one way: options ([`options`]) → VM ([`vstate`]) → guest
//! records and KVM readback ([`rounds`], [`session`], [`tsc`]) → analysed
//! rounds ([`analysis`]) → findings ([`check`], [`compare`]) → reports
//! ([`report`]); the subcommands that drive it are in [`cmd`].
//!
//! Where things live:
//! - [`arch::x86_64`]: guest setup (page tables, GDT, registers, CPUID, MSRs).
//! - [`guest_image`]: the embedded guest ELF and how it is loaded.
//! - [`vstate`]: the VM and the vCPU threads; [`pool`]: starting, driving and
//!   stopping them.
//! - [`tsc`]: reading a vCPU's TSC state back through KVM.
//! - [`host`]: facts about the host (KVM flavour, kernel, TSC frequency).
//! - [`options`]: what a run is asked to do; [`stop`]: the stop request.
//! - [`error`]: why a run ended early.
//! - [`rounds`]: one run, from VM creation to the per-round results.
//! - [`session`]: a VM in command mode, for step-by-step checks.
//! - [`skew`]: `--initial-skew`, set exactly and verified before the first
//!   round.
//! - [`restore`]: snapshot and restore of the TSC state (`restore`, check 7).
//! - [`native`]: the host backend, the algorithms on host threads.
//! - [`analysis`]: skew, honoured writes and exit times from the raw readings.
//! - [`stats`]: order statistics; [`inference`]: PRNG, bootstrap intervals
//!   and the Mann-Whitney U test; [`distribution`]: the same in memory
//!   bounded whatever the number of rounds.
//! - [`compare`]: variants measured interleaved in one VM and compared.
//! - [`check`]: the regression checks, JUnit output and baselines.
//! - [`report`]: the readable `run` report and its JSON schema.
//! - [`cmd`]: the command line, one module per subcommand.
#![deny(missing_docs)]

pub mod analysis;
pub mod arch;
pub mod check;
pub mod cmd;
pub mod compare;

pub mod error;
pub mod guest_image;
pub mod host;

pub mod native;
pub mod options;
pub mod pool;
pub mod report;
pub mod restore;
pub mod rounds;
pub mod session;
pub mod skew;
pub mod stats;
pub mod stop;
pub mod tsc;
pub mod units;
pub mod vstate;
