//! tsc-rendezvous: a KVM mini-VMM that runs Xen's TSC calibration rendezvous,
//! with real `wrmsr IA32_TSC` writes, on N vCPUs of a tiny Rust guest, reads
//! every vCPU's TSC state back through KVM after every round and reports the
//! skew the rendezvous left behind.
//!
//! Where things live:
//! - [`arch::x86_64`]: guest setup (page tables, GDT, registers, CPUID, MSRs).
//! - [`guest_image`]: the embedded guest ELF and how it is loaded.
//! - [`vstate`]: the VM ([`vstate::vm`]) and the vCPU threads ([`vstate::vcpu`]).
//! - [`tsc`]: reading a vCPU's TSC state back through KVM.
//! - [`host`]: facts about the host (KVM flavour, kernel, TSC frequency).
//! - [`analysis`]: skew, honoured writes and exit times from the raw readings.
//! - [`stats`]: order statistics.
//! - [`inference`]: PRNG, bootstrap intervals and the Mann-Whitney U test.
//! - [`compare`]: variants measured interleaved in one VM and compared.
//! - [`runner`]: one run, from VM creation to the per-round results.
//! - [`session`]: a VM in command mode, for step-by-step checks.
//! - [`report`]: the readable report and the JSON schema.
//! - [`check`]: the regression checks (`check`), JUnit output and baselines.
//! - [`cli`]: the command line.
#![deny(missing_docs)]

pub mod analysis;
pub mod arch;
pub mod check;
pub mod cli;
pub mod compare;
pub mod guest_image;
pub mod host;
pub mod inference;
pub mod report;
pub mod runner;
pub mod session;
pub mod stats;
pub mod tsc;
pub mod vstate;
