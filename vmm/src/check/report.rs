//! The `check` report: verdicts, one result per check, the environment and
//! the options (schema `tsc-rendezvous/check/v1`, `vmm/schema/check-v1.json`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tsc_contract::Variant;

use crate::host::HostInfo;

/// One check compared with the baseline.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BaselineVerdict {
    /// The baseline's verdict (null when the check is new).
    pub verdict: Option<Verdict>,
    /// Whether this check is worse than in the baseline.
    pub regressed: bool,
    /// Why, in words.
    pub reason: String,
}

/// How the reason of a check not measured because the run stopped begins.
pub const NOT_MEASURED: &str = "not measured";

/// The schema identifier of `check --json`.
pub const SCHEMA: &str = "tsc-rendezvous/check/v1";

/// A check's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// The expectation held.
    #[serde(rename = "PASS")]
    Pass,
    /// It did not: a finding about the hypervisor.
    #[serde(rename = "FAIL")]
    Fail,
    /// It does not apply to this host, or was not measured.
    #[serde(rename = "SKIP")]
    Skip,
    /// It applies, but the evidence could not decide it (the reason says
    /// why): neither a pass nor a finding.
    #[serde(rename = "UNDECIDED")]
    Undecided,
}

impl Verdict {
    /// How good the verdict is, for baseline comparison:
    /// PASS > UNDECIDED > SKIP > FAIL.
    pub fn rank(self) -> u8 {
        match self {
            Verdict::Pass => 3,
            Verdict::Undecided => 2,
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
            Verdict::Undecided => "UNDECIDED",
        }
    }
}

/// What a judge found: the verdict, why, and what it measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// The outcome.
    pub verdict: Verdict,
    /// Why, in one line.
    pub reason: String,
    /// What was measured.
    pub values: BTreeMap<String, Value>,
    /// The evidence as readable lines (a heading, then one line per vCPU or
    /// pair), shown by the text report and as KTAP diagnostics.
    pub details: Vec<String>,
}

impl Finding {
    /// A finding with this verdict and reason and no values yet.
    pub fn new(verdict: Verdict, reason: impl Into<String>) -> Finding {
        Finding {
            verdict,
            reason: reason.into(),
            values: BTreeMap::new(),
            details: Vec::new(),
        }
    }

    /// PASS, because `reason`.
    pub fn pass(reason: impl Into<String>) -> Finding {
        Finding::new(Verdict::Pass, reason)
    }

    /// FAIL, because `reason`.
    pub fn fail(reason: impl Into<String>) -> Finding {
        Finding::new(Verdict::Fail, reason)
    }

    /// SKIP, because `reason`.
    pub fn skip(reason: impl Into<String>) -> Finding {
        Finding::new(Verdict::Skip, reason)
    }

    #[cfg(test)]
    /// UNDECIDED, because `reason`.
    pub fn undecided(reason: impl Into<String>) -> Finding {
        Finding::new(Verdict::Undecided, reason)
    }

    /// Records a measured value under `key`.
    pub fn value(&mut self, key: &str, v: impl Serialize) {
        self.values
            .insert(key.into(), serde_json::to_value(v).unwrap_or(Value::Null));
    }

    /// As [`Finding::value`], by value.
    pub fn with(mut self, key: &str, v: impl Serialize) -> Finding {
        self.value(key, v);
        self
    }

    /// Sets the readable lines of the evidence.
    pub fn with_details(mut self, details: Vec<String>) -> Finding {
        self.details = details;
        self
    }

    /// Sets the verdict and reason, keeping the values.
    pub fn set(&mut self, verdict: Verdict, reason: impl Into<String>) {
        self.verdict = verdict;
        self.reason = reason.into();
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
    /// The evidence as readable lines (see [`Finding::details`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// The comparison with a baseline, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineVerdict>,
    /// Wall time of this check's own work, seconds: its own VMs and
    /// measurements and its judgement (the measurement the checks share is
    /// [`CheckReport::measure_seconds`]). Absent in earlier versions' results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

impl CheckResult {
    /// The result of check `number` `id` ("what is checked": `title`).
    pub fn new(number: u32, id: &str, title: &str, finding: Finding) -> CheckResult {
        CheckResult {
            number,
            id: id.into(),
            title: title.into(),
            verdict: finding.verdict,
            reason: finding.reason,
            values: finding.values,
            details: finding.details,
            baseline: None,
            seconds: None,
        }
    }

    /// Whether this check was not measured because the run stopped (a
    /// signal): SKIP, saying so.
    pub fn missed(&self) -> bool {
        self.verdict == Verdict::Skip && self.reason.starts_with(NOT_MEASURED)
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
    #[serde(with = "variant_name")]
    pub variant: Variant,
    /// Iterations of the warp test per vCPU.
    pub warp_iterations: u64,
    /// Exchanges per ordered pair of the forced hand-off test (check 5).
    /// Missing in results of earlier versions: the default.
    #[serde(default = "default_exchanges")]
    pub exchanges: u32,
    /// Check 6's limit in ns (median and p99).
    pub max_skew_ns: Option<f64>,
    /// Check 6's limit in cycles (median and p99).
    pub max_skew_cycles: Option<u64>,
    /// The whole check must finish within this.
    #[serde(rename = "timeout_secs", with = "duration_secs")]
    pub timeout: Duration,
    /// `--tsc-khz`: the guest TSC rate of every VM the checks measure on
    /// (the frequency family's probes set their own); `None`: the host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tsc: Option<crate::tsc::frequency::TscRequest>,
}

/// Exchanges per ordered pair of the forced hand-off test by default.
pub const DEFAULT_EXCHANGES: u32 = 200;

/// Iterations per vCPU of the lock-ordered warp test by default (check 5's
/// run after the rounds and check 7's on the restored VM). A warp shows at
/// a hand-off faster than it, so the test's resolution is its shortest
/// hand-off: on PVM (emulated ring 0) 14.0-14.4 k cycles at 1,000
/// iterations against 13.7-14.0 k at 10,000, which took 0.28 s of check's
/// 0.56 s; check 5's forced hand-off test bounds the same pairs to about
/// 6 k cycles, so check 5 decides the same (docs/speed.md).
pub const DEFAULT_WARP_ITERATIONS: u64 = 1_000;

fn default_exchanges() -> u32 {
    DEFAULT_EXCHANGES
}

/// A [`Variant`] as its name in JSON.
mod variant_name {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};
    use tsc_contract::Variant;

    pub fn serialize<S: Serializer>(v: &Variant, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Variant, D::Error> {
        let name = String::deserialize(d)?;
        Variant::from_name(&name)
            .ok_or_else(|| D::Error::custom(format!("unknown variant '{name}'")))
    }
}

/// A [`Duration`] as seconds (a float) in JSON.
mod duration_secs {
    use std::time::Duration;

    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(|e| D::Error::custom(format!("{secs} s: {e}")))
    }
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
    /// UNDECIDED.
    #[serde(default)]
    pub undecided: usize,
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
    /// Whether no check failed, nothing regressed and the run completed
    /// (skipped and undecided checks do not fail a run).
    pub ok: bool,
    /// Why the checks stopped before they were done (a signal); absent when
    /// they completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// Wall time of the measurement the checks share (one VM: the state at
    /// the start, the rounds, the warp and hand-off tests, the kvmclock
    /// views), seconds; each check's own time is [`CheckResult::seconds`].
    /// Absent in earlier versions' results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_seconds: Option<f64>,
}

impl CheckReport {
    /// Recomputes `counts` and `ok` from the checks; an incomplete run is
    /// never ok.
    pub fn tally(&mut self) {
        let mut c = Counts::default();
        for k in &self.checks {
            match k.verdict {
                Verdict::Pass => c.passed += 1,
                Verdict::Fail => c.failed += 1,
                Verdict::Skip => c.skipped += 1,
                Verdict::Undecided => c.undecided += 1,
            }
            if k.baseline.as_ref().is_some_and(|b| b.regressed) {
                c.regressed += 1;
            }
        }
        self.ok = !self.checks.iter().any(CheckResult::fails) && self.incomplete.is_none();
        self.counts = c;
    }

    /// The line that says a run's failures follow from a host that ignores
    /// guest TSC writes, where the data shows it: some check FAILed and
    /// check 3's exact offsets did not move in vCPU-rounds whose TSC_ADJUST
    /// recorded a write. `None` otherwise, whatever the hypervisor is
    /// called (its name is context only).
    pub fn ignored_writes_note(&self) -> Option<String> {
        if !self.checks.iter().any(|c| c.verdict == Verdict::Fail) {
            return None;
        }
        let c3 = self
            .checks
            .iter()
            .find(|c| c.id == "adjust-equals-offset")?;
        let unmoved = c3.values.get("offsets_unmoved")?.as_u64()?;
        let compared = c3.values.get("comparisons")?.as_u64()?;
        (unmoved > 0).then(|| {
            format!(
                "The exact offsets did not move in {unmoved} of {compared} vCPU-rounds whose \
                 TSC_ADJUST recorded a guest write (check 3): this host ignores guest TSC writes, \
                 and the failures that follow from it are a true finding about the hypervisor, \
                 not an error of the tool (host: {}).",
                self.environment.host.kvm_flavor.name()
            )
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::host::KvmFlavor;

    /// A report with these checks, for tests.
    pub(crate) fn report(checks: Vec<CheckResult>) -> CheckReport {
        CheckReport {
            schema: SCHEMA.into(),
            tool_version: "t".into(),
            environment: Environment {
                host: HostInfo {
                    backend: crate::host::Backend::Kvm,
                    host_threads: None,
                    sync_windows: None,
                    initial_skew_cycles: None,
                    pacing: None,
                    host_tsc_khz: None,
                    guest_tsc: None,
                    kernel_release: "6.1".into(),
                    kernel_version: Some((6, 1)),
                    kvm_flavor: KvmFlavor::Svm,
                    cpu_model: None,
                    cpu_tsc_flags: vec![],
                    clocksource: None,
                    tsc_khz: None,
                    tsc_offset_attr: true,
                    offset_source: crate::tsc::OffsetSource::KvmVcpuTscOffset,
                    guest_tsc_adjust: true,
                },
                kvm_capabilities: BTreeMap::new(),
            },
            options: CheckOptions {
                tsc: None,
                vcpus: 2,
                rounds: 1,
                variant: Variant::XenHead,
                warp_iterations: 1,
                exchanges: 1,
                max_skew_ns: None,
                max_skew_cycles: None,
                timeout: Duration::from_secs(1),
            },
            skew: None,
            checks,
            counts: Counts::default(),
            ok: false,
            incomplete: None,
            measure_seconds: None,
        }
    }

    fn check(verdict: Verdict) -> CheckResult {
        CheckResult::new(1, "a", "a", Finding::new(verdict, "why"))
    }

    #[test]
    fn tally_counts_verdicts_and_regressions() {
        let mut r = report(vec![check(Verdict::Pass), check(Verdict::Skip)]);
        r.tally();
        assert_eq!((r.counts.passed, r.counts.skipped, r.ok), (1, 1, true));
        r.checks[1].verdict = Verdict::Fail;
        r.tally();
        assert_eq!((r.counts.failed, r.ok), (1, false));
        r.checks[1].verdict = Verdict::Pass;
        r.incomplete = Some("interrupted".into());
        r.tally();
        assert!(!r.ok, "an interrupted run is not ok");
    }

    /// The closing line about ignored writes comes from check 3's data,
    /// never from the hypervisor's name: a PVM run whose failures are not
    /// about ignored writes gets none, any host whose offsets ignored the
    /// writes gets it.
    #[test]
    fn the_ignored_writes_line_follows_the_data_not_the_name() {
        let c3 = |unmoved: u64| {
            let f = Finding::new(Verdict::Fail, "2 of 2 deltas differ")
                .with("offsets_unmoved", unmoved)
                .with("comparisons", 2u64);
            CheckResult::new(3, "adjust-equals-offset", "t", f)
        };
        let mut r = report(vec![check(Verdict::Fail), c3(2)]);
        r.environment.host.kvm_flavor = KvmFlavor::Pvm;
        let line = r.ignored_writes_note().expect("offsets ignored the writes");
        assert!(
            line.starts_with("The exact offsets did not move in 2 of 2 vCPU-rounds"),
            "{line}"
        );
        assert!(line.ends_with("(host: PVM)."), "{line}");
        // PVM, a FAIL, but offsets that moved: no such line.
        r.checks[1] = c3(0);
        assert_eq!(r.ignored_writes_note(), None);
        // Another hypervisor with the same data gets the same line.
        r.checks[1] = c3(2);
        r.environment.host.kvm_flavor = KvmFlavor::Vmx;
        assert!(r
            .ignored_writes_note()
            .is_some_and(|l| l.ends_with("(host: VMX).")));
        // No FAIL: nothing to explain.
        r.checks[0] = check(Verdict::Pass);
        r.checks[1].verdict = Verdict::Pass;
        assert_eq!(r.ignored_writes_note(), None);
    }

    #[test]
    fn options_keep_their_json_form() {
        let r = report(vec![]);
        let v = serde_json::to_value(&r.options).expect("serialises");
        assert_eq!(v["variant"], "xen-head");
        assert_eq!(v["timeout_secs"], 1.0);
        let back: CheckOptions = serde_json::from_value(v).expect("reads back");
        assert_eq!(back, r.options);
        let mut bad = serde_json::to_value(&r.options).expect("serialises");
        bad["variant"] = "xen-9".into();
        let e = serde_json::from_value::<CheckOptions>(bad).expect_err("unknown variant");
        assert!(e.to_string().contains("unknown variant 'xen-9'"), "{e}");
    }
}
