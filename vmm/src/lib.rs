//! tsc-rendezvous: a KVM mini-VMM that runs Xen's TSC calibration rendezvous,
//! with real `wrmsr IA32_TSC` writes, on N vCPUs of a tiny Rust guest, reads
//! every vCPU's TSC state back through KVM after every round and reports the
//! skew the rendezvous left behind.
//!
//! The modules are private; what the binary, the benchmark and the
//! integration tests use is re-exported below. Imports only look down the
//! layers (the `layers` test fails when one looks up):
//!
//! 1. leaves: `units` (numbers and units), `stats` (order statistics,
//!    inference, bounded distributions), `arch` (pure x86 builders),
//!    `guest_image`, `stop` (the SIGINT/SIGTERM request), `watchdog`;
//! 2. what a run is asked for (`options`), KVM's TSC readback (`tsc`), host
//!    facts (`host`);
//! 3. the VM, its memory, its vCPU threads, their pool and every vCPU's
//!    saved state (`vstate`), `--initial-skew` (`initial_skew`);
//! 4. the analysis of a round's records and readback (`analysis`), why a
//!    run ended early (`error`);
//! 5. where the rounds run (`backend`: KVM or host threads, one trait), the
//!    one round driver over it (`run`), the command-mode VM (`session`);
//! 6. findings and reports: `restore`, `check`, `compare`, `report`;
//! 7. the command line (`cmd`).
#![deny(missing_docs)]

mod analysis;
mod arch;
mod backend;
mod check;
mod cmd;
mod compare;
mod error;
mod guest_image;
mod host;
mod initial_skew;
mod options;
mod output;
mod report;
mod restore;
mod run;
mod session;
mod stats;
mod stop;
mod tsc;
mod units;
mod vstate;
mod watchdog;

pub use analysis::{
    analyse_round, Base, RoundAccumulator, RoundResult, SkewBasis, VcpuResult, VcpuSample,
};
pub use check::count as check_count;
pub use check::DEFAULT_WARP_ITERATIONS as CHECK_WARP_ITERATIONS;
pub use cmd::{dispatch, parse_inject, Cli};
pub use compare::{
    analyse as analyse_comparison, draw_plot, render_text as render_comparison, CompareData,
    CompareOptions, MeasuredRound,
};
pub use error::{Failure, RunError};
pub use guest_image::{check as check_guest_image, load as load_guest_image, EMBEDDED};
pub use host::{HostInfo, KvmFlavor};
pub use initial_skew::{targets as initial_skew_targets, SkewError};
pub use options::{default_timeout, Backend, RunOptions};
pub use restore::{
    measure_method, probe as probe_restore, ChainDelay, Method, MethodOptions, RestoreError,
};
pub use restore::{
    Step as RestoreStep, FAIL_ENV as RESTORE_FAIL_ENV, INJECTABLE as RESTORE_INJECTABLE,
    SCHEMA as RESTORE_SCHEMA,
};
pub use run::{run, run_streaming, RunOutput};
pub use stats::distribution::{mann_whitney_of, median_shift_of, Distribution, SIGNIFICANT_DIGITS};
pub use stats::inference::{bootstrap_median_shift, mann_whitney, PMethod, Rng};
pub use stats::summarize;
pub use tsc::{
    debugfs, get_offset, has_offset_attr, host_rdtsc, set_offset, OffsetSource, TscState,
};
pub use vstate::pool::JOIN_GRACE;
pub use vstate::slice::{of as sched_slice_of, SHORT_SLICE_NS};
pub use vstate::vm::{max_vcpus, open_kvm, Vm, VmSpec, HIDE_CAP_ENV, KVM_DEVICE_ENV};
