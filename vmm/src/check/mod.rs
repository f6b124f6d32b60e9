//! `check`: named regression checks of how the hypervisor treats guest TSC
//! writes, each with a verdict (PASS / FAIL / SKIP), a one-line reason and the
//! values it measured.
//!
//! 1. `same-start`: every vCPU starts with the same TSC offset and frequency.
//! 2. `tsc-msrs`: the single-vCPU expected-behaviour table of the KVM selftest
//!    `tsc_msrs_test`, each stage seen from the guest and from the host.
//! 3. `adjust-equals-offset`: after a rendezvous, per vCPU, the TSC_ADJUST
//!    delta equals the offset delta exactly.
//! 4. `writes-honoured`: after a rendezvous the guest's TSCs read the written
//!    value plus elapsed time.
//! 5. `warp`: a guest-visible, lock-ordered warp test after the rendezvous;
//!    the largest backwards step must not exceed the measured skew.
//! 6. `skew-threshold`: median and p99 skew over the rounds within limits.
//!
//! Expectations are gated on the kernel version (5.10: guest TSC writes no
//! longer snapped together; 5.16: the offset attribute) and the hypervisor
//! flavour.

pub mod baseline;
pub mod junit;
mod text;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tsc_contract::Variant;

use crate::analysis::{self, RoundResult, VcpuSample};
use crate::arch::x86_64::{MSR_IA32_TSC, MSR_IA32_TSC_ADJUST};
use crate::host::{cycles_to_ns, HostInfo, KvmFlavor};
use crate::runner::RunError;
use crate::session::Session;
use crate::stats::{summarize, Summary};
use crate::tsc::TscState;

pub use text::render_text;

/// The schema identifier of `check --json`.
pub const SCHEMA: &str = "tsc-rendezvous/check/v1";

/// The reason every check that needs offset changes gives on PVM.
pub const PVM_REASON: &str = "the hypervisor ignores TSC offset changes (PVM)";

/// A check's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// The expectation held.
    #[serde(rename = "PASS")]
    Pass,
    /// It did not: a finding about the hypervisor.
    #[serde(rename = "FAIL")]
    Fail,
    /// It does not apply to this host, or cannot be decided here.
    #[serde(rename = "SKIP")]
    Skip,
}

impl Verdict {
    /// How good the verdict is, for baseline comparison: PASS > SKIP > FAIL.
    pub fn rank(self) -> u8 {
        match self {
            Verdict::Pass => 2,
            Verdict::Skip => 1,
            Verdict::Fail => 0,
        }
    }

    /// The verdict as printed.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

/// One check's result.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CheckResult {
    /// 1-based number, as in the documentation.
    pub number: u32,
    /// Stable identifier, e.g. `same-start`.
    pub id: String,
    /// What is checked, in words.
    pub title: String,
    /// The outcome.
    pub verdict: Verdict,
    /// Why, in one line.
    pub reason: String,
    /// What was measured.
    pub values: BTreeMap<String, Value>,
    /// The comparison with a baseline, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<baseline::Comparison>,
}

impl CheckResult {
    fn new(number: u32, id: &str, title: &str) -> CheckResult {
        CheckResult {
            number,
            id: id.into(),
            title: title.into(),
            verdict: Verdict::Skip,
            reason: String::new(),
            values: BTreeMap::new(),
            baseline: None,
        }
    }

    fn set(&mut self, verdict: Verdict, reason: impl Into<String>) {
        self.verdict = verdict;
        self.reason = reason.into();
    }

    fn value(&mut self, key: &str, v: impl Serialize) {
        self.values
            .insert(key.into(), serde_json::to_value(v).unwrap_or(Value::Null));
    }

    /// Whether this check makes the run fail (a FAIL, or a regression).
    pub fn fails(&self) -> bool {
        self.verdict == Verdict::Fail || self.baseline.as_ref().is_some_and(|b| b.regressed)
    }
}

/// The environment block of every report: the host's facts (flattened into
/// this object) and the relevant KVM capabilities.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Environment {
    /// Kernel, KVM flavour, CPU model and TSC flags, clocksource, TSC
    /// frequency, offset attribute, guest TSC_ADJUST.
    #[serde(flatten)]
    pub host: HostInfo,
    /// Relevant KVM capabilities and their values.
    pub kvm_capabilities: BTreeMap<String, i32>,
}

/// What `check` measures and how.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CheckOptions {
    /// vCPUs for checks 1 and 3-6.
    pub vcpus: u32,
    /// Rendezvous rounds for checks 3-6.
    pub rounds: u32,
    /// The variant.
    pub variant: String,
    /// Iterations of the warp test per vCPU.
    pub warp_iterations: u64,
    /// Check 6's limit in ns (median and p99).
    pub max_skew_ns: Option<f64>,
    /// Check 6's limit in cycles (median and p99).
    pub max_skew_cycles: Option<u64>,
    /// The whole check must finish within this many seconds.
    pub timeout_secs: f64,
}

/// Skew statistics over the rounds (what a baseline's skew is compared on).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct SkewStats {
    /// Median skew, cycles.
    pub median_cycles: f64,
    /// 99th percentile, cycles.
    pub p99_cycles: f64,
    /// Median skew, ns (null without a TSC frequency).
    pub median_ns: Option<f64>,
    /// 99th percentile, ns.
    pub p99_ns: Option<f64>,
}

/// Counts of verdicts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct Counts {
    /// PASS.
    pub passed: usize,
    /// FAIL.
    pub failed: usize,
    /// SKIP.
    pub skipped: usize,
    /// Checks worse than in the baseline.
    pub regressed: usize,
}

/// The whole result of `check`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CheckReport {
    /// [`SCHEMA`].
    pub schema: String,
    /// The tool's version.
    pub tool_version: String,
    /// The environment.
    pub environment: Environment,
    /// The options used.
    pub options: CheckOptions,
    /// Skew over the rounds, when the rendezvous ran.
    pub skew: Option<SkewStats>,
    /// Every check, in order.
    pub checks: Vec<CheckResult>,
    /// Verdict counts.
    pub counts: Counts,
    /// Whether every check passed or was skipped and nothing regressed.
    pub ok: bool,
}

impl CheckReport {
    /// Recomputes `counts` and `ok` from the checks.
    pub fn tally(&mut self) {
        let mut c = Counts::default();
        for k in &self.checks {
            match k.verdict {
                Verdict::Pass => c.passed += 1,
                Verdict::Fail => c.failed += 1,
                Verdict::Skip => c.skipped += 1,
            }
            if k.baseline.as_ref().is_some_and(|b| b.regressed) {
                c.regressed += 1;
            }
        }
        self.ok = !self.checks.iter().any(CheckResult::fails);
        self.counts = c;
    }
}

const U: u64 = 1 << 30;

/// A value in units of 2^30 cycles, rounded to the nearest (as the selftest's
/// ROUND()), taken as signed (TSC_ADJUST may be negative).
pub fn units(v: u64) -> i64 {
    ((v as i64 as i128 + (U as i128) / 2).div_euclid(U as i128)) as i64
}

fn capabilities(kvm: &kvm_ioctls::Kvm) -> BTreeMap<String, i32> {
    use kvm_bindings::{
        KVM_CAP_ADJUST_CLOCK, KVM_CAP_GET_TSC_KHZ, KVM_CAP_TSC_CONTROL, KVM_CAP_TSC_DEADLINE_TIMER,
        KVM_CAP_VM_TSC_CONTROL,
    };
    let mut m = BTreeMap::new();
    for (name, cap) in [
        ("KVM_CAP_TSC_CONTROL", KVM_CAP_TSC_CONTROL),
        ("KVM_CAP_GET_TSC_KHZ", KVM_CAP_GET_TSC_KHZ),
        ("KVM_CAP_VM_TSC_CONTROL", KVM_CAP_VM_TSC_CONTROL),
        ("KVM_CAP_ADJUST_CLOCK", KVM_CAP_ADJUST_CLOCK),
        ("KVM_CAP_TSC_DEADLINE_TIMER", KVM_CAP_TSC_DEADLINE_TIMER),
    ] {
        m.insert(name.to_string(), kvm.check_extension_raw(u64::from(cap)));
    }
    m.insert(
        "KVM_CAP_MAX_VCPUS".into(),
        crate::vstate::vm::max_vcpus(kvm) as i32,
    );
    m
}

/// One stage of the tsc_msrs_test table.
struct Stage {
    name: &'static str,
    action: Action,
    /// Expected (TSC, TSC_ADJUST) in units of U.
    expect: (i64, i64),
    /// TSC_ADJUST must equal this exactly (host view), when set.
    exact_adjust: Option<u64>,
}

enum Action {
    None,
    GuestWrite(u32, u64),
    HostWrite(u32, u64),
}

fn stages() -> Vec<Stage> {
    let s = |name, action, expect, exact_adjust| Stage {
        name,
        action,
        expect,
        exact_adjust,
    };
    vec![
        s("0: fresh VM", Action::None, (0, 0), None),
        s(
            "1: guest writes TSC = 4U",
            Action::GuestWrite(MSR_IA32_TSC, 4 * U),
            (4, 4),
            None,
        ),
        s(
            "2: guest writes TSC_ADJUST = 8U",
            Action::GuestWrite(MSR_IA32_TSC_ADJUST, 8 * U),
            (8, 8),
            None,
        ),
        s(
            "3: host sets TSC = 72U",
            Action::HostWrite(MSR_IA32_TSC, 72 * U),
            (72, 8),
            None,
        ),
        s(
            "3b: host sets TSC_ADJUST = 123456U",
            Action::HostWrite(MSR_IA32_TSC_ADJUST, 123_456 * U),
            (72, 123_456),
            Some(123_456 * U),
        ),
        s(
            "3c: host restores TSC_ADJUST = 8U",
            Action::HostWrite(MSR_IA32_TSC_ADJUST, 8 * U),
            (72, 8),
            Some(8 * U),
        ),
        s(
            "4: guest writes TSC_ADJUST = 12U",
            Action::GuestWrite(MSR_IA32_TSC_ADJUST, 12 * U),
            (76, 12),
            None,
        ),
        s(
            "5: guest writes TSC = 16U",
            Action::GuestWrite(MSR_IA32_TSC, 16 * U),
            (16, -48),
            None,
        ),
    ]
}

/// Check 2: runs the table on a fresh one-vCPU VM.
fn check_tsc_msrs(
    c: &mut CheckResult,
    flavor: KvmFlavor,
    kernel: Option<(u32, u32)>,
    timeout: Duration,
) -> Result<(), RunError> {
    if kernel.is_some_and(|v| v < (5, 10)) {
        c.set(
            Verdict::Skip,
            "kernel < 5.10: guest TSC writes go through KVM's synchronisation heuristic, the table does not apply",
        );
        return Ok(());
    }
    let mut s = Session::start(1, timeout)?;
    if !s.guest_tsc_adjust() {
        c.set(Verdict::Skip, "the guest's CPUID has no IA32_TSC_ADJUST");
        return Ok(());
    }
    let mut seen = Vec::new();
    for st in stages() {
        match st.action {
            Action::None => {}
            Action::GuestWrite(msr, v) => s.guest_wrmsr(0, msr, v)?,
            Action::HostWrite(msr, v) => s.host_set_msr(0, msr, v)?,
        }
        let (g_tsc, _) = s.guest_rdmsr(0, MSR_IA32_TSC)?;
        let (g_adj, _) = s.guest_rdmsr(0, MSR_IA32_TSC_ADJUST)?;
        let h_tsc = s.host_get_msr(0, MSR_IA32_TSC)?;
        let h_adj = s.host_get_msr(0, MSR_IA32_TSC_ADJUST)?;
        let guest = (units(g_tsc), units(g_adj));
        let hostv = (units(h_tsc), units(h_adj));
        seen.push(json!({
            "stage": st.name, "expected_units": [st.expect.0, st.expect.1],
            "guest_units": [guest.0, guest.1], "host_units": [hostv.0, hostv.1],
        }));
        let exact_ok = st.exact_adjust.is_none_or(|e| e == h_adj);
        if guest != st.expect || hostv != st.expect || !exact_ok {
            let prefix = if flavor == KvmFlavor::Pvm {
                format!("{PVM_REASON}: ")
            } else {
                String::new()
            };
            c.set(
                Verdict::Fail,
                format!(
                    "{prefix}stage {}: expected TSC {}U TSC_ADJUST {}U, guest saw {}U/{}U, host saw {}U/{}U{}",
                    st.name,
                    st.expect.0,
                    st.expect.1,
                    guest.0,
                    guest.1,
                    hostv.0,
                    hostv.1,
                    if exact_ok { "" } else { " (TSC_ADJUST not exact)" }
                ),
            );
            c.value("stages", &seen);
            return Ok(());
        }
    }
    c.set(
        Verdict::Pass,
        "every stage matched from the guest (rdmsr) and from the host (KVM_GET_MSRS)",
    );
    c.value("stages", &seen);
    Ok(())
}

fn samples(
    records: &[tsc_contract::RoundRecord],
    before: &[TscState],
    after: &[TscState],
) -> Vec<VcpuSample> {
    records
        .iter()
        .zip(before.iter().zip(after))
        .map(|(r, (b, a))| VcpuSample {
            record: *r,
            before: *b,
            after: *a,
        })
        .collect()
}

/// Runs every check.
pub fn run_checks(opts: &CheckOptions) -> Result<CheckReport, RunError> {
    let started = Instant::now();
    let timeout = Duration::from_secs_f64(opts.timeout_secs);
    let variant = Variant::from_name(&opts.variant).unwrap_or(Variant::XenHead);
    let mut s = Session::start(opts.vcpus, timeout)?;
    let initial = s.readback()?;
    let tsc_khz = initial.first().map(|t| t.tsc_khz);
    let environment = Environment {
        host: HostInfo::collect(tsc_khz, s.has_offset_attr(), s.guest_tsc_adjust()),
        kvm_capabilities: s.kvm().map(capabilities).unwrap_or_default(),
    };
    let (kernel, flavor) = (environment.host.kernel_version, environment.host.kvm_flavor);

    // 1. Same start.
    let mut c1 = CheckResult::new(
        1,
        "same-start",
        "every vCPU starts with the same TSC offset and frequency",
    );
    let khz: Vec<u32> = initial.iter().map(|t| t.tsc_khz).collect();
    c1.value("tsc_khz", &khz);
    let same_khz = khz.iter().all(|&k| k == khz[0]);
    if s.has_offset_attr() {
        let offsets: Vec<Option<u64>> = initial.iter().map(|t| t.offset).collect();
        c1.value("offsets", &offsets);
        let same = offsets.iter().all(|o| *o == offsets[0]);
        match (same, same_khz) {
            (true, true) => c1.set(
                Verdict::Pass,
                "equal offsets (KVM_VCPU_TSC_OFFSET) and frequencies",
            ),
            (false, _) => c1.set(
                Verdict::Fail,
                "the vCPUs were created with different TSC offsets",
            ),
            (true, false) => c1.set(
                Verdict::Fail,
                "the vCPUs run their TSCs at different frequencies",
            ),
        }
    } else {
        // Bracketed estimates: equal within their error bars.
        let e0 = initial
            .first()
            .map(|t| (t.estimated_offset(), t.estimate_error()));
        let worst = initial
            .iter()
            .filter_map(|t| {
                let (o0, err0) = e0?;
                let d = analysis::signed_delta(t.estimated_offset(), o0).unsigned_abs();
                Some((d, t.estimate_error() + err0))
            })
            .max_by_key(|(d, _)| *d)
            .unwrap_or((0, 0));
        c1.value("largest_offset_difference_cycles", worst.0);
        c1.value("error_cycles", worst.1);
        let adj_zero = initial.iter().all(|t| t.adjust == 0);
        if !same_khz {
            c1.set(
                Verdict::Fail,
                "the vCPUs run their TSCs at different frequencies",
            );
        } else if worst.0 <= worst.1 && adj_zero {
            c1.set(
                Verdict::Pass,
                "offsets equal within the bracketed reads' error (no KVM_VCPU_TSC_OFFSET)",
            );
        } else {
            c1.set(
                Verdict::Fail,
                "offsets differ by more than the bracketed reads' error",
            );
        }
    }

    // 3-6: rendezvous rounds on all vCPUs.
    let mut rounds: Vec<RoundResult> = Vec::new();
    let mut before = initial.clone();
    let mut base_rel = vec![0i64; opts.vcpus as usize];
    let mut host_before_last = 0u64;
    for round in 0..opts.rounds {
        host_before_last = crate::tsc::host_rdtsc();
        let records = s.rendezvous(variant, round)?;
        let after = s.readback()?;
        let r = analysis::analyse_round(
            round,
            variant.name(),
            &samples(&records, &before, &after),
            &mut base_rel,
        );
        rounds.push(r);
        before = after;
    }
    let tsc_after = s.guest_rdtsc_all()?;
    let host_elapsed = crate::tsc::host_rdtsc().wrapping_sub(host_before_last);
    let warp = s.warp(opts.warp_iterations)?;
    let after_warp = s.readback()?;
    drop(s);

    let c3 = judge_adjust_equals_offset(&rounds, environment.host.tsc_offset_attr, flavor);
    let c4 = judge_writes_honoured(&rounds, &tsc_after, host_elapsed, flavor);
    let c5 = judge_warp(
        opts.vcpus,
        opts.warp_iterations,
        &warp,
        actual_skew(&after_warp),
    );
    let skew = summarize(rounds.iter().map(|r| r.skew_cycles as f64))
        .as_ref()
        .map(|s| skew_stats(s, tsc_khz));
    let c6 = judge_skew_threshold(
        &rounds,
        skew.as_ref(),
        opts.max_skew_ns,
        opts.max_skew_cycles,
    );

    // 2. The selftest table, on its own one-vCPU VM.
    let mut c2 = CheckResult::new(
        2,
        "tsc-msrs",
        "tsc_msrs_test table: guest and host writes of IA32_TSC and IA32_TSC_ADJUST",
    );
    let left = timeout.saturating_sub(started.elapsed());
    check_tsc_msrs(&mut c2, flavor, kernel, left.max(Duration::from_secs(1)))?;

    let mut report = CheckReport {
        schema: SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        environment,
        options: opts.clone(),
        skew,
        checks: vec![c1, c2, c3, c4, c5, c6],
        counts: Counts::default(),
        ok: false,
    };
    report.tally();
    Ok(report)
}

fn pvm_prefix(flavor: KvmFlavor) -> String {
    if flavor == KvmFlavor::Pvm {
        format!("{PVM_REASON}: ")
    } else {
        String::new()
    }
}

/// Check 3 from the rounds: every vCPU's TSC_ADJUST delta equals its offset
/// delta, exactly.
pub fn judge_adjust_equals_offset(
    rounds: &[RoundResult],
    offset_attr: bool,
    flavor: KvmFlavor,
) -> CheckResult {
    let mut c = CheckResult::new(
        3,
        "adjust-equals-offset",
        "after the rendezvous, per vCPU: TSC_ADJUST delta == offset delta, exactly",
    );
    if !offset_attr {
        c.set(
            Verdict::Skip,
            "KVM_VCPU_TSC_OFFSET is absent (Linux < 5.16): offset deltas cannot be read exactly",
        );
        return c;
    }
    let total: usize = rounds.iter().map(|r| r.vcpus.len()).sum();
    let mismatches: Vec<Value> = rounds
        .iter()
        .flat_map(|r| r.vcpus.iter().map(move |v| (r.round, v)))
        .filter(|(_, v)| v.offset_delta != Some(v.tsc_adjust_delta))
        .map(|(round, v)| {
            json!({"round": round, "vcpu": v.id, "tsc_adjust_delta": v.tsc_adjust_delta,
                   "offset_delta": v.offset_delta})
        })
        .collect();
    c.value("comparisons", total);
    c.value("mismatches", mismatches.len());
    match mismatches.first() {
        _ if total == 0 => c.set(Verdict::Skip, "no rounds ran"),
        Some(first) => {
            c.value("first_mismatch", first);
            c.set(
                Verdict::Fail,
                format!(
                    "{}{} of {total} deltas differ, e.g. round {} vCPU {}: offset moved by {}, \
                     TSC_ADJUST by {}",
                    pvm_prefix(flavor),
                    mismatches.len(),
                    first["round"],
                    first["vcpu"],
                    first["offset_delta"],
                    first["tsc_adjust_delta"]
                ),
            );
        }
        None => c.set(Verdict::Pass, format!("all {total} deltas equal")),
    }
    c
}

/// Check 4 from the rounds and a guest TSC read taken `host_elapsed` host
/// cycles after the last round started: every write took effect, no guest
/// saw its TSC not jump, and the later reads are the last written value plus
/// (at most a few times) the elapsed time.
pub fn judge_writes_honoured(
    rounds: &[RoundResult],
    tsc_after: &[u64],
    host_elapsed: u64,
    flavor: KvmFlavor,
) -> CheckResult {
    let mut c = CheckResult::new(
        4,
        "writes-honoured",
        "after the rendezvous the guest's TSCs read the written value plus elapsed time",
    );
    if rounds.is_empty() {
        c.set(Verdict::Skip, "no rounds ran");
        return c;
    }
    let last_written = rounds
        .last()
        .and_then(|r| r.vcpus.first())
        .map_or(0, |v| v.written_value);
    let not_honoured = rounds
        .iter()
        .filter(|r| r.writes_honoured != Some(true))
        .count();
    let no_jump = rounds
        .iter()
        .flat_map(|r| &r.vcpus)
        .filter(|v| v.guest_saw_jump == Some(false))
        .count();
    // Scaled TSCs may run faster than the host's: allow a factor of 4.
    let bound = host_elapsed.saturating_mul(4).max(1);
    let read_ok = tsc_after
        .iter()
        .all(|&t| t.wrapping_sub(last_written) <= bound);
    c.value("rounds_not_honoured", not_honoured);
    c.value("vcpu_rounds_without_jump", no_jump);
    c.value("last_written_value", last_written);
    c.value("guest_tsc_after", tsc_after);
    c.value("host_cycles_since_last_round", host_elapsed);
    if not_honoured == 0 && no_jump == 0 && read_ok {
        c.set(
            Verdict::Pass,
            format!(
                "in all {} rounds every vCPU's TSC jumped to the written value and ran on from it",
                rounds.len()
            ),
        );
    } else {
        c.set(
            Verdict::Fail,
            format!(
                "{}{not_honoured} of {} rounds not honoured, {no_jump} vCPU-rounds without a TSC jump{}",
                pvm_prefix(flavor),
                rounds.len(),
                if read_ok {
                    ""
                } else {
                    ", a later guest read is not the written value plus elapsed time"
                }
            ),
        );
    }
    c
}

/// Check 5 from the warp test's per-vCPU (largest step, steps) and the
/// actual skew (skew, error, method) measured after it.
pub fn judge_warp(
    vcpus: u32,
    iterations: u64,
    warp: &[(u64, u64)],
    (skew, err, how): (u64, u64, &'static str),
) -> CheckResult {
    let mut c = CheckResult::new(
        5,
        "warp",
        "guest-visible lock-ordered warp test: largest backwards step <= measured skew",
    );
    let max_warp = warp.iter().map(|w| w.0).max().unwrap_or(0);
    let warps: u64 = warp.iter().map(|w| w.1).sum();
    c.value("max_warp_cycles", max_warp);
    c.value("warps", warps);
    c.value("iterations_per_vcpu", iterations);
    c.value("skew_cycles", skew);
    c.value("skew_error_cycles", err);
    c.value("skew_method", how);
    if vcpus < 2 {
        c.set(Verdict::Skip, "one vCPU: nothing to warp against");
    } else if max_warp <= skew.saturating_add(err) {
        c.set(
            Verdict::Pass,
            format!(
                "largest backwards step {max_warp} cycles ({warps} steps) <= skew {skew} ± {err} ({how})"
            ),
        );
    } else {
        c.set(
            Verdict::Fail,
            format!(
                "the guest saw its TSC go back by {max_warp} cycles, more than the measured skew \
                 {skew} ± {err} ({how})"
            ),
        );
    }
    c
}

/// Check 6: median and p99 skew against the limits given (SKIP without one).
pub fn judge_skew_threshold(
    rounds: &[RoundResult],
    skew: Option<&SkewStats>,
    max_ns: Option<f64>,
    max_cycles: Option<u64>,
) -> CheckResult {
    let mut c = CheckResult::new(
        6,
        "skew-threshold",
        "median and p99 skew over the rounds within --max-skew-ns / --max-skew-cycles",
    );
    if let Some(st) = skew {
        c.value("median_cycles", st.median_cycles);
        c.value("p99_cycles", st.p99_cycles);
        c.value("median_ns", st.median_ns);
        c.value("p99_ns", st.p99_ns);
        c.value("rounds", rounds.len());
        c.value(
            "writes_honoured",
            rounds.iter().all(|r| r.writes_honoured == Some(true)),
        );
    }
    let Some(st) = skew else {
        c.set(Verdict::Skip, "no rounds ran");
        return c;
    };
    if max_ns.is_none() && max_cycles.is_none() {
        c.set(
            Verdict::Skip,
            "no limit given (--max-skew-ns or --max-skew-cycles)",
        );
        return c;
    }
    let mut over = Vec::new();
    if let Some(limit) = max_cycles {
        for (what, v) in [("median", st.median_cycles), ("p99", st.p99_cycles)] {
            if v > limit as f64 {
                over.push(format!("{what} {v:.0} cycles > {limit}"));
            }
        }
    }
    if let Some(limit) = max_ns {
        match (st.median_ns, st.p99_ns) {
            (Some(m), Some(p)) => {
                for (what, v) in [("median", m), ("p99", p)] {
                    if v > limit {
                        over.push(format!("{what} {v:.0} ns > {limit}"));
                    }
                }
            }
            _ => over.push("no TSC frequency to convert to ns".into()),
        }
    }
    let note = if rounds.iter().all(|r| r.writes_honoured == Some(false)) {
        " (the would-be skew: the writes were ignored)"
    } else {
        ""
    };
    if over.is_empty() {
        c.set(
            Verdict::Pass,
            format!(
                "median {:.0} and p99 {:.0} cycles within the limits{note}",
                st.median_cycles, st.p99_cycles
            ),
        );
    } else {
        c.set(Verdict::Fail, format!("{}{note}", over.join(", ")));
    }
    c
}

/// The actual skew now: from the offsets (exact) when available, else the
/// bracketed reads. Returns (skew, error, method).
fn actual_skew(states: &[TscState]) -> (u64, u64, &'static str) {
    let offsets: Option<Vec<u64>> = states.iter().map(|s| s.offset).collect();
    if let Some(o) = offsets {
        let base = o.first().copied().unwrap_or(0);
        let rel = o.iter().map(|&x| analysis::signed_delta(x, base));
        return (analysis::spread(rel), 0, "KVM_VCPU_TSC_OFFSET");
    }
    let base = states.first().map_or(0, |s| s.estimated_offset());
    let rel = states
        .iter()
        .map(|s| analysis::signed_delta(s.estimated_offset(), base));
    let err = states.iter().map(|s| s.estimate_error()).max().unwrap_or(0) * 2;
    (analysis::spread(rel), err, "bracketed IA32_TSC reads")
}

fn skew_stats(s: &Summary, tsc_khz: Option<u32>) -> SkewStats {
    SkewStats {
        median_cycles: s.median,
        p99_cycles: s.p99,
        median_ns: tsc_khz.map(|k| cycles_to_ns(s.median, k)),
        p99_ns: tsc_khz.map(|k| cycles_to_ns(s.p99, k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vcpu(
        id: u32,
        adj: i64,
        off: Option<i64>,
        jump: Option<bool>,
    ) -> crate::analysis::VcpuResult {
        crate::analysis::VcpuResult {
            id,
            tsc_adjust_delta: adj,
            guest_adjust_delta: Some(adj),
            offset_delta: off,
            written_value: 5_000,
            tsc_first: 4_000,
            tsc_before_write: 4_500,
            tsc_after_loop: 5_100,
            tsc_at_write: 4_600,
            write_latency_cycles: 100,
            exit_latency_cycles: 100,
            write_honoured: off.map(|o| o == adj),
            guest_saw_jump: jump,
            rel_offset_adjust: 0,
            rel_offset_attr: None,
            rel_offset_bracket: 0,
            rel_offset_bracket_error: 0,
            tsc_khz: 1_000_000,
        }
    }

    fn round(
        vcpus: Vec<crate::analysis::VcpuResult>,
        honoured: Option<bool>,
        skew: u64,
    ) -> RoundResult {
        RoundResult {
            round: 0,
            variant: "xen-head".into(),
            skew_cycles: skew,
            skew_cycles_attr: None,
            skew_cycles_bracket: 0,
            skew_cycles_bracket_error: 0,
            writes_honoured: honoured,
            cpu0_exit_latency_cycles: 100,
            disagreements: vec![],
            vcpus,
        }
    }

    #[test]
    fn check_3_passes_only_on_exact_equality_and_names_pvm() {
        let good = [round(
            vec![
                vcpu(0, -400, Some(-400), None),
                vcpu(1, -300, Some(-300), None),
            ],
            Some(true),
            100,
        )];
        assert_eq!(
            judge_adjust_equals_offset(&good, true, KvmFlavor::Vmx).verdict,
            Verdict::Pass
        );
        let off_by_one = [round(vec![vcpu(0, -400, Some(-399), None)], None, 0)];
        assert_eq!(
            judge_adjust_equals_offset(&off_by_one, true, KvmFlavor::Vmx).verdict,
            Verdict::Fail
        );
        let ignored = [round(vec![vcpu(0, -400, Some(0), None)], Some(false), 0)];
        let c = judge_adjust_equals_offset(&ignored, true, KvmFlavor::Pvm);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(c.reason.starts_with(PVM_REASON), "{}", c.reason);
        assert_eq!(
            judge_adjust_equals_offset(&good, false, KvmFlavor::Vmx).verdict,
            Verdict::Skip
        );
    }

    #[test]
    fn check_4_needs_honoured_writes_jumps_and_a_plausible_later_read() {
        let r = [round(
            vec![vcpu(0, -400, Some(-400), Some(true))],
            Some(true),
            0,
        )];
        assert_eq!(
            judge_writes_honoured(&r, &[5_500], 1_000, KvmFlavor::Svm).verdict,
            Verdict::Pass
        );
        // The later read is below the value written: the TSC did not move.
        assert_eq!(
            judge_writes_honoured(&r, &[4_000], 1_000, KvmFlavor::Svm).verdict,
            Verdict::Fail
        );
        // Far beyond the elapsed time: not "written value plus elapsed time".
        assert_eq!(
            judge_writes_honoured(&r, &[5_000 + 10_000], 1_000, KvmFlavor::Svm).verdict,
            Verdict::Fail
        );
        let no_jump = [round(
            vec![vcpu(0, -400, Some(-400), Some(false))],
            Some(true),
            0,
        )];
        assert_eq!(
            judge_writes_honoured(&no_jump, &[5_500], 1_000, KvmFlavor::Svm).verdict,
            Verdict::Fail
        );
        let pvm = [round(vec![vcpu(0, -400, Some(0), None)], Some(false), 0)];
        let c = judge_writes_honoured(&pvm, &[5_500], 1_000, KvmFlavor::Pvm);
        assert!(c.verdict == Verdict::Fail && c.reason.starts_with(PVM_REASON));
    }

    #[test]
    fn check_5_compares_the_warp_with_the_skew_and_its_error() {
        let skew = (1_000, 50, "test");
        assert_eq!(
            judge_warp(2, 10, &[(1_050, 3), (0, 0)], skew).verdict,
            Verdict::Pass
        );
        assert_eq!(
            judge_warp(2, 10, &[(1_051, 1), (0, 0)], skew).verdict,
            Verdict::Fail
        );
        assert_eq!(judge_warp(1, 10, &[(0, 0)], skew).verdict, Verdict::Skip);
    }

    #[test]
    fn check_6_applies_both_limits_to_median_and_p99() {
        let rounds = [round(vec![], Some(true), 2_000)];
        let st = SkewStats {
            median_cycles: 2_000.0,
            p99_cycles: 9_000.0,
            median_ns: Some(1_000.0),
            p99_ns: Some(4_500.0),
        };
        assert_eq!(
            judge_skew_threshold(&rounds, Some(&st), None, None).verdict,
            Verdict::Skip
        );
        assert_eq!(
            judge_skew_threshold(&rounds, Some(&st), None, Some(9_000)).verdict,
            Verdict::Pass
        );
        let c = judge_skew_threshold(&rounds, Some(&st), None, Some(8_999));
        assert!(
            c.verdict == Verdict::Fail && c.reason.contains("p99"),
            "{}",
            c.reason
        );
        assert_eq!(
            judge_skew_threshold(&rounds, Some(&st), Some(4_500.0), None).verdict,
            Verdict::Pass
        );
        assert_eq!(
            judge_skew_threshold(&rounds, Some(&st), Some(999.0), None).verdict,
            Verdict::Fail
        );
        let no_khz = SkewStats {
            median_ns: None,
            p99_ns: None,
            ..st
        };
        assert_eq!(
            judge_skew_threshold(&rounds, Some(&no_khz), Some(1e9), None).verdict,
            Verdict::Fail
        );
    }

    #[test]
    fn units_round_to_the_nearest_and_keep_the_sign() {
        assert_eq!(units(0), 0);
        assert_eq!(units(U / 2 - 1), 0);
        assert_eq!(units(U / 2), 1);
        assert_eq!(units(4 * U + 12345), 4);
        assert_eq!(units((-48i64 * U as i64) as u64), -48);
        assert_eq!(units((-48i64 * U as i64 + 1000) as u64), -48);
    }

    #[test]
    fn the_table_matches_the_selftest() {
        let t = stages();
        assert_eq!(t.len(), 8);
        assert_eq!(t[0].expect, (0, 0));
        assert_eq!(t[4].exact_adjust, Some(123_456 * U));
        assert_eq!(t[7].expect, (16, 16 - 64));
    }

    fn state(offset: Option<u64>, tsc: u64, host: u64) -> TscState {
        TscState {
            adjust: 0,
            tsc,
            host_before: host,
            host_after: host + 10,
            offset,
            tsc_khz: 1,
        }
    }

    #[test]
    fn actual_skew_prefers_the_exact_offsets() {
        let s = [
            state(Some(100), 0, 0),
            state(Some(40), 0, 0),
            state(Some(130), 0, 0),
        ];
        assert_eq!(actual_skew(&s), (90, 0, "KVM_VCPU_TSC_OFFSET"));
        let s = [state(None, 1_000, 0), state(None, 1_500, 0)];
        let (skew, err, _) = actual_skew(&s);
        assert_eq!((skew, err), (500, 10));
    }

    #[test]
    fn tally_counts_verdicts_and_regressions() {
        let mut r = CheckReport {
            schema: SCHEMA.into(),
            tool_version: "t".into(),
            environment: Environment {
                host: HostInfo {
                    kernel_release: "6.1".into(),
                    kernel_version: Some((6, 1)),
                    kvm_flavor: KvmFlavor::Svm,
                    cpu_model: None,
                    cpu_tsc_flags: vec![],
                    clocksource: None,
                    tsc_khz: None,
                    tsc_offset_attr: true,
                    guest_tsc_adjust: true,
                },
                kvm_capabilities: BTreeMap::new(),
            },
            options: CheckOptions {
                vcpus: 2,
                rounds: 1,
                variant: "xen-head".into(),
                warp_iterations: 1,
                max_skew_ns: None,
                max_skew_cycles: None,
                timeout_secs: 1.0,
            },
            skew: None,
            checks: vec![CheckResult::new(1, "a", "a"), CheckResult::new(2, "b", "b")],
            counts: Counts::default(),
            ok: false,
        };
        r.checks[0].set(Verdict::Pass, "ok");
        r.tally();
        assert_eq!((r.counts.passed, r.counts.skipped, r.ok), (1, 1, true));
        r.checks[1].set(Verdict::Fail, "no");
        r.tally();
        assert_eq!((r.counts.failed, r.ok), (1, false));
    }
}
