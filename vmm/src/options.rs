//! What a run is asked to do: the backend, the vCPUs, the schedule of
//! variants, the deadline, the guest image, the windows of Linux's sync, the
//! guest's TSC frequency ([`TscRequest`], and how it was set:
//! [`FrequencySetting`]) and an optional injected fault. Built by the commands from their arguments and
//! by the tests directly; read by [`crate::rounds`].

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tsc_contract::{Config, Inject, Variant};

/// Where the algorithms run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// In a KVM guest: one vCPU per CPU, real `wrmsr IA32_TSC`, the TSC
    /// state read back through KVM.
    #[default]
    Kvm,
    /// On host threads of this OS (`backend::host`): one thread per
    /// "vCPU", real `rdtsc`, TSC writes simulated as per-thread offsets. No
    /// hypervisor of this tool is involved.
    Host,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 2] = [Backend::Kvm, Backend::Host];

    /// The backend's name, as `--backend` takes it.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Kvm => "kvm",
            Backend::Host => "host",
        }
    }

    /// Looks a backend up by its name.
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// Linux's window for an AP that starts a package (`loop_timeout()`), ms.
pub const FIRST_WINDOW_MS: u64 = 20;
/// Linux's window for any other AP, ms.
pub const WINDOW_MS: u64 = 2;

/// The windows Linux's sync runs with, in ms and in TSC cycles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Windows {
    /// The window of an AP that starts a package, ms.
    pub first_ms: u64,
    /// The window of any other AP, ms.
    pub ms: u64,
    /// `first_ms` in TSC cycles.
    pub first_cycles: u64,
    /// `ms` in TSC cycles.
    pub cycles: u64,
}

impl Windows {
    /// `(first_ms, ms)` at `tsc_khz`.
    pub fn at(tsc_khz: u32, (first_ms, ms): (u64, u64)) -> Windows {
        Windows {
            first_ms,
            ms,
            first_cycles: first_ms.saturating_mul(u64::from(tsc_khz)),
            cycles: ms.saturating_mul(u64::from(tsc_khz)),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Where the algorithms run.
    pub backend: Backend,
    /// Number of vCPUs (host threads with [`Backend::Host`]).
    pub vcpus: u32,
    /// The variant of each round, in order.
    pub schedule: Vec<Variant>,
    /// The whole run must finish within this (unless `round_timeout` is
    /// set).
    pub timeout: Duration,
    /// When set, every round must finish within this instead (the watchdog
    /// is re-armed before each round; see `run::run_scheduled`):
    /// runs that end when their time is up (`--duration`).
    pub round_timeout: Option<Duration>,
    /// The guest image; the embedded one when `None`.
    pub image: Option<Vec<u8>>,
    /// A fault for the guest to inject (testing the error handling; KVM
    /// only).
    pub inject: Option<Injection>,
    /// The windows of Linux's sync (`linux-tsc-sync`), ms: for an AP that
    /// starts a package, and for any other AP (Linux: 20 and 2).
    pub sync_windows_ms: (u64, u64),
    /// `--initial-skew CYCLES`: vCPU k starts `k * CYCLES / (N - 1)` cycles
    /// ahead of vCPU 0, set before the first round and verified by the
    /// readback (`initial_skew`); `None`: as the hypervisor starts them.
    pub initial_skew: Option<u64>,
    /// `--guest-view EXCHANGES`: after every round the guest runs the
    /// forced hand-off test (this many exchanges per pair of vCPU 0 with
    /// every other vCPU, both directions), the fourth method of the
    /// relative offsets; `None`: not run.
    pub guest_view: Option<u32>,
    /// `--kvmclock`: every vCPU registers its kvmclock page and reads
    /// kvmclock around every TSC write of the rendezvous (the jump it saw is
    /// reported per round).
    pub kvmclock: bool,
    /// `--tsc-khz`: the guest's TSC frequency (KVM_SET_TSC_KHZ); `None`: the
    /// host's. KVM only.
    pub tsc: Option<TscRequest>,
}

impl Default for RunOptions {
    /// KVM, 2 vCPUs, one round of the seed, the default timeout, the
    /// embedded guest, Linux's windows.
    fn default() -> Self {
        RunOptions {
            backend: Backend::Kvm,
            vcpus: 2,
            schedule: vec![Variant::Xen6ca022a1],
            timeout: default_timeout(2, 1),
            round_timeout: None,
            image: None,
            inject: None,
            sync_windows_ms: (FIRST_WINDOW_MS, WINDOW_MS),
            initial_skew: None,
            guest_view: None,
            kvmclock: false,
            tsc: None,
        }
    }
}

/// The default deadline of a run: 60 s plus 100 ms per round and vCPU.
pub fn default_timeout(vcpus: u32, rounds: u32) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(100) * vcpus.saturating_mul(rounds)
}

/// The default deadline of each round of a run by time (`--duration`): 60 s
/// plus 100 ms per vCPU, what [`default_timeout`] allows a run of one round.
pub fn default_round_timeout(vcpus: u32) -> Duration {
    default_timeout(vcpus, 1)
}

/// The longest `--duration` accepted: 30 days. At the ~1,450 rounds/s of a
/// 2-vCPU PVM host that is about 3.8e9 rounds, within the 32-bit round
/// counter; a faster run that reaches the counter's end stops there and
/// says so.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The most rounds one run (one VM, one set of host threads) can have: the
/// guest, the records and the reports count rounds in 32 bits.
pub const MAX_ROUNDS: u32 = u32::MAX;

/// A fault the guest injects on purpose (`--inject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injection {
    /// What to do.
    pub kind: Inject,
    /// On which vCPU.
    pub vcpu: u32,
    /// In which round (0-based).
    pub round: u32,
    /// In which rendezvous iteration (0-based; stall, triple fault, panic).
    pub iteration: u32,
    /// For [`Inject::Delay`]: TSC cycles before the final write.
    pub cycles: u64,
}

impl Injection {
    /// Writes the injection into a guest config.
    pub fn apply(&self, c: &mut Config) {
        c.inject_kind = self.kind as u32;
        c.inject_vcpu = self.vcpu;
        c.inject_round = self.round;
        c.inject_iteration = self.iteration;
        c.inject_cycles = self.cycles;
    }

    /// Checks the injection against the run's vCPU and round counts; the
    /// error names the problem and the fix.
    pub fn check(&self, vcpus: u32, rounds: u32) -> Result<(), String> {
        if self.vcpu >= vcpus {
            return Err(format!(
                "--inject names vCPU {} but the run has {vcpus} vCPU(s); use vcpu=0..{}",
                self.vcpu,
                vcpus.saturating_sub(1)
            ));
        }
        if self.round >= rounds {
            return Err(format!(
                "--inject names round {} but the run has {rounds} round(s); use round=0..{}",
                self.round,
                rounds.saturating_sub(1)
            ));
        }
        Ok(())
    }
}

/// A guest TSC frequency asked for: kHz, or a ratio of the host's rate in
/// parts per million (`0.5x` is 500,000 ppm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TscRequest {
    /// This many kHz.
    Khz(u32),
    /// This many millionths of the host's rate.
    RatioPpm(u64),
}

impl TscRequest {
    /// Parses `KHZ` (a whole number of kHz) or `Rx` (a ratio of the host's
    /// rate with up to six decimals, e.g. `0.5x`, `2x`, `1.0002x`).
    pub fn parse(text: &str) -> Result<TscRequest, String> {
        let t = text.trim();
        if let Some(r) = t.strip_suffix('x').or_else(|| t.strip_suffix('X')) {
            let ppm = parse_ppm(r).ok_or_else(|| {
                format!("'{text}' is not a ratio of the host's rate (e.g. 0.5x, 2x, 1.0002x)")
            })?;
            if ppm == 0 || ppm > 64_000_000 {
                return Err(format!(
                    "'{text}': the ratio must be above 0 and at most 64x (KVM's limit is lower)"
                ));
            }
            return Ok(TscRequest::RatioPpm(ppm));
        }
        match t.parse::<u32>() {
            Ok(0) => Err("a TSC frequency of 0 kHz cannot be set".into()),
            Ok(k) => Ok(TscRequest::Khz(k)),
            Err(_) => Err(format!(
                "'{text}' is neither kHz (e.g. 2000000) nor a ratio of the host's rate (e.g. 0.5x)"
            )),
        }
    }

    /// The kHz asked for on a host of `host_khz` (a ratio rounded to the
    /// nearest kHz, at least 1).
    pub fn resolve(self, host_khz: u32) -> u32 {
        match self {
            TscRequest::Khz(k) => k,
            TscRequest::RatioPpm(ppm) => {
                let k = (u128::from(host_khz) * u128::from(ppm) + 500_000) / 1_000_000;
                u32::try_from(k).unwrap_or(u32::MAX).max(1)
            }
        }
    }

    /// As the option is written.
    pub fn describe(self) -> String {
        match self {
            TscRequest::Khz(k) => format!("{k} kHz"),
            TscRequest::RatioPpm(ppm) => format!("{}x the host's rate", fmt_ppm(ppm)),
        }
    }
}

/// `digits[.decimals]` as millionths (at most six decimals).
fn parse_ppm(s: &str) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() || frac.len() > 6 {
        return None;
    }
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !digits(frac) {
        return None;
    }
    let int: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac: u64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<6}").parse().ok()?
    };
    int.checked_mul(1_000_000)?.checked_add(frac)
}

/// Millionths as a decimal ratio without trailing zeros (`500000` -> `0.5`).
pub fn fmt_ppm(ppm: u64) -> String {
    let s = format!("{}.{:06}", ppm / 1_000_000, ppm % 1_000_000);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// How KVM_SET_TSC_KHZ was applied to a VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetVia {
    /// On the VM before its vCPUs were created (KVM_CAP_VM_TSC_CONTROL).
    Vm,
    /// On every vCPU after its creation.
    Vcpu,
}

/// The guest TSC frequency a VM was created with (`--tsc-khz`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrequencySetting {
    /// What was asked for.
    pub asked: TscRequest,
    /// The rate set, kHz.
    pub khz: u32,
    /// The host's rate as KVM knows it, kHz.
    pub host_khz: u32,
    /// Where KVM_SET_TSC_KHZ went.
    pub via: SetVia,
    /// After a per-vCPU set that changed the ratio, every vCPU's TSC was
    /// written 0 by the host (KVM_SET_MSRS, as QEMU does after setting the
    /// rate): KVM keeps the offset it gave the vCPU at creation and changes
    /// only the multiplier, so the TSC would otherwise jump.
    pub resynced: bool,
    /// Whether KVM scales at this rate ([`crate::tsc::frequency::Ratio::effective`]): KVM_CAP_TSC_CONTROL
    /// and a rate beyond its tolerance.
    pub scaled: bool,
}

impl FrequencySetting {
    /// In words, for reports.
    pub fn describe(&self) -> String {
        let via = match self.via {
            SetVia::Vm => "KVM_SET_TSC_KHZ on the VM",
            SetVia::Vcpu if self.resynced => {
                "KVM_SET_TSC_KHZ on every vCPU, then KVM_SET_MSRS(IA32_TSC = 0)"
            }
            SetVia::Vcpu => "KVM_SET_TSC_KHZ on every vCPU",
        };
        let how = if self.scaled {
            let ppm = (u64::from(self.khz) * 1_000_000 + u64::from(self.host_khz) / 2)
                / u64::from(self.host_khz.max(1));
            format!("scaled, {}x the host's {} kHz", fmt_ppm(ppm), self.host_khz)
        } else {
            format!(
                "not scaled by KVM (the host's {} kHz: no TSC scaling or within its tolerance)",
                self.host_khz
            )
        };
        format!("{} kHz ({}), {via}; {how}", self.khz, self.asked.describe())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn requests_parse_as_khz_or_ratio() {
        assert_eq!(TscRequest::parse("2000000"), Ok(TscRequest::Khz(2_000_000)));
        assert_eq!(TscRequest::parse("0.5x"), Ok(TscRequest::RatioPpm(500_000)));
        assert_eq!(TscRequest::parse("2x"), Ok(TscRequest::RatioPpm(2_000_000)));
        assert_eq!(TscRequest::parse(".25x"), Ok(TscRequest::RatioPpm(250_000)));
        assert_eq!(
            TscRequest::parse("1.0002X"),
            Ok(TscRequest::RatioPpm(1_000_200))
        );
        for bad in ["0", "x", "0x", "-1", "1.5", "1.0000001x", "abc", "", "65x"] {
            assert!(TscRequest::parse(bad).is_err(), "{bad}");
        }
        let e = TscRequest::parse("fast").expect_err("not a rate");
        assert!(e.contains("kHz") && e.contains("0.5x"), "{e}");
    }

    #[test]
    fn ratios_resolve_against_the_host_to_the_nearest_khz() {
        assert_eq!(TscRequest::RatioPpm(500_000).resolve(2_596_125), 1_298_063);
        assert_eq!(
            TscRequest::RatioPpm(2_000_000).resolve(2_596_125),
            5_192_250
        );
        assert_eq!(TscRequest::Khz(123).resolve(2_596_125), 123);
        assert_eq!(TscRequest::RatioPpm(1).resolve(1), 1, "never 0 kHz");
        assert_eq!(fmt_ppm(500_000), "0.5");
        assert_eq!(fmt_ppm(2_000_000), "2");
        assert_eq!(fmt_ppm(1_000_200), "1.0002");
        assert_eq!(
            TscRequest::RatioPpm(500_000).describe(),
            "0.5x the host's rate"
        );
    }

    use super::*;

    #[test]
    fn the_defaults_are_kvm_and_linux_windows() {
        let o = RunOptions::default();
        assert_eq!((o.backend, o.sync_windows_ms), (Backend::Kvm, (20, 2)));
        for b in Backend::ALL {
            assert_eq!(Backend::from_name(b.name()), Some(b));
        }
        assert_eq!(Backend::from_name("qemu"), None);
        assert_eq!(
            serde_json::to_value(Backend::Host).ok(),
            Some(serde_json::json!("host"))
        );
    }

    #[test]
    fn windows_convert_at_the_tsc_frequency() {
        let w = Windows::at(2_000_000, (FIRST_WINDOW_MS, WINDOW_MS));
        assert_eq!((w.first_cycles, w.cycles), (40_000_000, 4_000_000));
    }

    #[test]
    fn the_default_timeout_grows_with_the_work() {
        assert!(default_timeout(8, 1000) > default_timeout(2, 100));
        // 60 s + 100 ms for one round on one vCPU, worked out by hand.
        assert_eq!(default_timeout(1, 1), Duration::from_millis(60_100));
        assert_eq!(default_timeout(4, 50), Duration::from_secs(80));
    }

    #[test]
    fn a_round_of_a_run_by_time_gets_what_a_one_round_run_gets() {
        assert_eq!(default_round_timeout(2), Duration::from_millis(60_200));
        assert!(default_round_timeout(2) < default_timeout(2, 1_000_000));
        assert_eq!(MAX_DURATION.as_secs(), 2_592_000);
    }

    #[test]
    fn an_injection_outside_the_run_names_the_valid_range() {
        let inj = Injection {
            kind: Inject::Panic,
            vcpu: 2,
            round: 0,
            iteration: 0,
            cycles: 0,
        };
        let e = inj.check(2, 5).expect_err("vCPU 2 of 2");
        assert!(e.contains("vcpu=0..1"), "{e}");
        let inj = Injection {
            vcpu: 0,
            round: 3,
            ..inj
        };
        let e = inj.check(2, 3).expect_err("round 3 of 3");
        assert!(e.contains("round=0..2"), "{e}");
        assert!(inj.check(2, 4).is_ok());
    }

    #[test]
    fn applying_an_injection_fills_every_inject_field() {
        let mut c = Config::default();
        Injection {
            kind: Inject::Delay,
            vcpu: 1,
            round: 7,
            iteration: 4,
            cycles: 99,
        }
        .apply(&mut c);
        assert_eq!(
            (
                c.inject_kind,
                c.inject_vcpu,
                c.inject_round,
                c.inject_iteration,
                c.inject_cycles
            ),
            (Inject::Delay as u32, 1, 7, 4, 99)
        );
    }
}
