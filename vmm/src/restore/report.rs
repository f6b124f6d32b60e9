//! The `restore` report (schema `tsc-rendezvous/restore/v1`,
//! `vmm/schema/restore-v1.json`): per method and vCPU what was saved, what
//! the method wrote and what KVM made of it. Derived once from the
//! measurement ([`super::derive`]) for the JSON, the readable table and
//! check 7.

use std::collections::BTreeMap;

use serde::Serialize;

use super::clock_report::{ChainReport, Keeps, RestoreClock};
use super::methods::{Support, Trace};
use super::offsets::ClockSample;
use super::options::Method;
use crate::host::HostInfo;
use crate::session::WarpSeen;
use crate::tsc::frequency::{FrequencySetting, Ratio, TscRequest};
use crate::tsc::OffsetSource;
use crate::vstate::{PioCompletion, PioState};

/// The schema identifier of `restore --json`.
pub const SCHEMA: &str = "tsc-rendezvous/restore/v1";

/// The whole `restore` report.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The tool's version.
    pub tool_version: &'static str,
    /// The host (from a 1-vCPU probe VM).
    pub host: HostInfo,
    /// The relevant KVM capabilities.
    pub kvm_capabilities: BTreeMap<String, i32>,
    /// What the methods can use on this kernel.
    pub support: Support,
    /// The KVM_CLOCK_* flags KVM_CAP_ADJUST_CLOCK reports, by name.
    pub clock_flags: Vec<&'static str>,
    /// What was asked.
    pub options: OptionsReport,
    /// Every method asked for, in order.
    pub methods: Vec<MethodReport>,
    /// Why the run ended before every method was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

/// The options of a `restore` run.
#[derive(Clone, Debug, Serialize)]
pub struct OptionsReport {
    /// vCPUs.
    pub vcpus: u32,
    /// The rendezvous' variant.
    pub variant: &'static str,
    /// Asked delay between destroying the source and creating the
    /// destination, ms.
    pub delay_ms: u64,
    /// The methods asked for.
    pub methods: Vec<&'static str>,
    /// Warp test iterations per vCPU.
    pub warp_iterations: u64,
    /// Deadline of each VM's session, s.
    pub timeout_secs: f64,
    /// Whether each method's restored guest was restored again.
    pub chain: bool,
    /// `--tsc-khz`: the source VMs' guest TSC rate (absent: the host's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tsc: Option<TscRequest>,
}

/// The guest's TSC rate across a restore, and the units the report's
/// numbers are in: host cycles (the brackets) convert to time at the
/// host's rate and into guest cycles at the ratio; guest cycles to time at
/// the rate the TSC runs at.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateReport {
    /// The host's TSC rate as KVM knows it, kHz.
    pub host_khz: u32,
    /// KVM_GET_TSC_KHZ of the saved vCPUs, kHz.
    pub saved_khz: Option<u32>,
    /// KVM_GET_TSC_KHZ of every restored vCPU (after the method, before the
    /// guest ran), index = vCPU.
    pub restored_khz: Vec<u32>,
    /// Whether every restored vCPU reports the saved rate (`None`: not
    /// measured).
    pub kept: Option<bool>,
    /// The ratio KVM runs the restored TSC at (`guest = host * ratio +
    /// offset`); 1:1 (`0/0`) where it does not scale.
    pub ratio: Ratio,
    /// `ratio` in millionths (1,000,000 at 1:1).
    pub ratio_ppm: u64,
    /// Whether KVM scales the restored TSC.
    pub scaled: bool,
    /// Whether KVM serves the rate by catch-up (no TSC scaling, a rate above
    /// the host's): the TSC runs at the host's rate between guest entries
    /// and is moved forward at entries.
    pub catch_up: bool,
    /// The rate the TSC runs at between guest entries, kHz: guest cycles
    /// convert to time at it.
    pub running_khz: u32,
    /// How the source's rate was set (`--tsc-khz`), if it was.
    pub source: Option<FrequencySetting>,
    /// How the destination's rate was set (the saved rate), if it was.
    pub destination: Option<FrequencySetting>,
}

/// An interval of host time, cycles and ns.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HostInterval {
    /// At least this many host TSC cycles.
    pub min_cycles: u64,
    /// At most this many.
    pub max_cycles: u64,
    /// `min_cycles` in ns (null without a frequency).
    pub min_ns: Option<f64>,
    /// `max_cycles` in ns.
    pub max_ns: Option<f64>,
}

/// What became of a vCPU's offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OffsetFate {
    /// The offset the method wrote (or, for msr, the one its last IA32_TSC
    /// write asked for).
    AsWritten,
    /// The offset the destination vCPU was created with: the write was
    /// replaced by it.
    KeptCreationOffset,
    /// vCPU 0's offset, not its own.
    Vcpu0Offset,
    /// The offset vCPU 0's first IA32_TSC write asked for (msr-twice: a
    /// later write replaced by the first one).
    Vcpu0FirstWrite,
    /// Something else.
    Other,
    /// Unknown: no exact offsets on this kernel.
    Unknown,
}

/// One vCPU's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VcpuReport {
    /// The vCPU.
    pub id: u32,
    /// How its pending port I/O ended at the snapshot.
    pub pio: Option<PioState>,
    /// Its MSR_KVM_SYSTEM_TIME_NEW saved and written back (`None` without
    /// kvmclock).
    pub kvmclock_msr: Option<u64>,
    /// RIP around the completing KVM_RUN.
    pub rip: Option<PioCompletion>,
    /// Offset when the source guest first parked.
    pub offset_initial: Option<u64>,
    /// Offset saved (after the rendezvous).
    pub offset_before: Option<u64>,
    /// Offset the destination vCPU was created with.
    pub offset_created: Option<u64>,
    /// Offset the documented method wrote.
    pub offset_written: Option<u64>,
    /// Offset after the restore, before the guest ran.
    pub offset_after: Option<u64>,
    /// Offset after the warp test.
    pub offset_after_warp: Option<u64>,
    /// What became of it.
    pub offset_fate: OffsetFate,
    /// Offset minus vCPU 0's, saved (exact).
    pub relative_offset_before: Option<i64>,
    /// Offset minus vCPU 0's after the restore (exact).
    pub relative_offset_after: Option<i64>,
    /// Offset minus vCPU 0's after the warp test (exact).
    pub relative_offset_after_warp: Option<i64>,
    /// Relative offset after the restore estimated from bracketed IA32_TSC
    /// reads (for kernels without exact offsets).
    pub relative_estimate_after: Option<i64>,
    /// That estimate's error bar, cycles.
    pub estimate_error: Option<u64>,
    /// How far the offset moved from the first park to the snapshot.
    pub offset_moved_before: Option<i64>,
    /// How far TSC_ADJUST moved meanwhile (the rendezvous' write).
    pub adjust_moved_before: Option<i64>,
    /// TSC_ADJUST saved.
    pub tsc_adjust_before: Option<i64>,
    /// TSC_ADJUST after the restore.
    pub tsc_adjust_after: Option<i64>,
    /// TSC_ADJUST minus vCPU 0's, saved: the skew the rendezvous' writes
    /// asked for.
    pub relative_adjust_before: Option<i64>,
    /// The msr methods' IA32_TSC values written, per pass.
    pub tsc_written: Vec<u64>,
    /// The guest's last TSC read before the snapshot.
    pub guest_tsc_last: Option<u64>,
    /// Its first TSC read after the restore.
    pub guest_tsc_first: Option<u64>,
    /// first - last, cycles.
    pub guest_advance_cycles: Option<i64>,
    /// The advance minus the host time that passed between the reads in
    /// guest cycles (the host bracket at the ratio, widened by KVM's
    /// fixed-point error): (lowest, highest), cycles.
    pub advance_minus_host: Option<(i64, i64)>,
}

/// The clock arithmetic of the documented method.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClockReport {
    /// KVM_GET_CLOCK on the source.
    pub source: ClockSample,
    /// KVM_GET_CLOCK on the destination after KVM_SET_CLOCK.
    pub destination: ClockSample,
    /// KVM_SET_CLOCK's duration, host cycles.
    pub set_clock_cycles: u64,
    /// What the formula added to every offset, cycles.
    pub shift_cycles: i64,
    /// The ratio the host TSC difference entered the shift multiplied by
    /// (the destination's; 1:1, `0/0`, where KVM does not scale).
    pub ratio: Ratio,
    /// What vcpu.rst's formula taken literally (the host TSC difference
    /// unscaled) would have added, cycles.
    pub literal_shift_cycles: i64,
    /// The literal shift minus the one applied: how far the literal
    /// formula would have put every guest TSC off, guest cycles
    /// (`(ratio - 1) * (host TSC elapsed between the samples)`; 0 at 1:1).
    pub literal_miss_cycles: i64,
    /// The same in ns at the rate the TSC runs at.
    pub literal_miss_ns: Option<f64>,
    /// CLOCK_REALTIME's drift against the host TSC between the two samples,
    /// guest cycles (the host TSC interval at KVM_GET_TSC_KHZ / the host's
    /// rate): 0 without NTP or a step, at any ratio.
    pub realtime_drift_cycles: i64,
    /// The host TSC interval between the samples at KVM_GET_TSC_KHZ / the
    /// host's rate minus at the ratio KVM applies, guest cycles: non-zero
    /// where KVM reports a rate it does not scale to (catch-up, or within
    /// its tolerance). The shift must equal the drift plus this.
    pub rate_gap_cycles: i64,
    /// The bound on |shift - (drift + gap)| (see offsets::shift_bound).
    pub shift_bound_cycles: u64,
    /// The bound on |drift| for a clock slewed by NTP and never stepped.
    pub drift_bound_cycles: u64,
}

/// The warp test after the restore, summed over the vCPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WarpReport {
    /// Largest backwards step, cycles.
    pub max_warp_cycles: u64,
    /// Backwards steps.
    pub warps: u64,
    /// Lock hand-offs between vCPUs.
    pub handoffs: u64,
    /// Shortest forward step across a hand-off, cycles.
    pub shortest_handoff_cycles: Option<u64>,
    /// Iterations per vCPU.
    pub iterations_per_vcpu: u64,
}

/// One method's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MethodReport {
    /// Its name.
    pub method: &'static str,
    /// What it does.
    pub description: &'static str,
    /// Whether it ran (false: this kernel cannot do it).
    pub ran: bool,
    /// Why it did not run.
    pub not_run_reason: Option<String>,
    /// Whether every step completed.
    pub completed: bool,
    /// The step it failed in.
    pub failed_step: Option<&'static str>,
    /// Why it failed.
    pub error: Option<String>,
    /// Where exact offsets came from.
    pub offset_source: Option<OffsetSource>,
    /// The guest TSC frequency, kHz (the saved vCPUs' KVM_GET_TSC_KHZ).
    pub tsc_khz: Option<u32>,
    /// The rate across the restore and the units of the numbers.
    pub rate: Option<RateReport>,
    /// From destroying the source to creating the destination, ms.
    pub delay_ms: Option<f64>,
    /// Host time between the last read before and the first read after.
    pub host_time_passed: Option<HostInterval>,
    /// Spread of the saved relative offsets, cycles (exact).
    pub skew_before_cycles: Option<u64>,
    /// Spread after the restore (exact).
    pub skew_after_cycles: Option<u64>,
    /// Spread of the saved relative TSC_ADJUST values.
    pub adjust_skew_before_cycles: Option<u64>,
    /// The documented method's clock arithmetic.
    pub clock: Option<ClockReport>,
    /// The warp test.
    pub warp: Option<WarpReport>,
    /// Per vCPU.
    pub vcpus: Vec<VcpuReport>,
    /// What the method did to the relative offsets, in words.
    pub offsets_outcome: Option<String>,
    /// What happened to the guests' TSCs, in words.
    pub time_outcome: Option<String>,
    /// What the raw trace of the method wrote.
    pub trace: Option<Trace>,
    /// The raw warp results per vCPU.
    pub warp_seen: Option<Vec<WarpSeen>>,
    /// The guests' kvmclock across the restore and the clock once the
    /// restored guest ran again.
    pub kvmclock: Option<RestoreClock>,
    /// The chained restore (restore, run, snapshot, restore again).
    pub chain: Option<ChainReport>,
    /// Which property the method kept after one and after two restores:
    /// the exact skew, the master clock, both or neither.
    pub keeps: Option<Keeps>,
}

impl MethodReport {
    /// A method this kernel cannot do.
    pub fn not_run(method: Method, why: String) -> MethodReport {
        MethodReport {
            method: method.name(),
            description: method.describe(),
            ran: false,
            not_run_reason: Some(why),
            completed: false,
            failed_step: None,
            error: None,
            offset_source: None,
            tsc_khz: None,
            rate: None,
            delay_ms: None,
            host_time_passed: None,
            skew_before_cycles: None,
            skew_after_cycles: None,
            adjust_skew_before_cycles: None,
            clock: None,
            warp: None,
            vcpus: Vec::new(),
            offsets_outcome: None,
            time_outcome: None,
            trace: None,
            warp_seen: None,
            kvmclock: None,
            chain: None,
            keeps: None,
        }
    }
}
