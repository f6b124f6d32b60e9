//! What a restore is asked to do: the methods ([`Method`]), the steps of one
//! method's measurement ([`Step`], with the test-only failure injection),
//! and one method's options ([`MethodOptions`]).

use std::time::Duration;

use tsc_contract::Variant;

use crate::tsc::frequency::TscRequest;

/// How the TSC state is put into the restored vCPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    /// Documentation/virt/kvm/devices/vcpu.rst, "TSC offset": KVM_SET_CLOCK
    /// with KVM_CLOCK_REALTIME, KVM_GET_CLOCK, every offset shifted by the
    /// same amount and set with KVM_VCPU_TSC_OFFSET; TSC_ADJUST with
    /// KVM_SET_MSRS.
    Documented,
    /// What many VMMs do: KVM_SET_MSRS of each vCPU's saved IA32_TSC plus
    /// the time elapsed (and TSC_ADJUST), through KVM's one-second matching
    /// of host TSC writes.
    Msr,
    /// The same, every IA32_TSC written twice (Cloud Hypervisor #8383).
    MsrTwice,
}

impl Method {
    /// Every method, in report order.
    pub const ALL: [Method; 3] = [Method::Documented, Method::Msr, Method::MsrTwice];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Method::Documented => "documented",
            Method::Msr => "msr",
            Method::MsrTwice => "msr-twice",
        }
    }

    /// Looks a method up by name.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    /// What it does, in one line.
    pub fn describe(self) -> &'static str {
        match self {
            Method::Documented => {
                "KVM_SET_CLOCK(KVM_CLOCK_REALTIME), KVM_GET_CLOCK, every KVM_VCPU_TSC_OFFSET \
                 shifted by the same amount (vcpu.rst), TSC_ADJUST by KVM_SET_MSRS"
            }
            Method::Msr => {
                "KVM_SET_MSRS of TSC_ADJUST and of IA32_TSC = saved value + host time elapsed"
            }
            Method::MsrTwice => {
                "as msr, then every IA32_TSC written a second time (Cloud Hypervisor #8383)"
            }
        }
    }
}

/// The steps of one method's measurement, in order; a failure names the
/// step it happened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Creating the source VM, the rendezvous and the last guest reads.
    Source,
    /// Saving the source (its VM and vCPU threads are alive).
    Snapshot,
    /// Destroying the source, the delay, creating the destination VM.
    Create,
    /// Restoring guest memory.
    Memory,
    /// Restoring every vCPU's registers.
    Registers,
    /// Restoring the TSC state by the method.
    Tsc,
    /// Starting the destination's vCPU threads and resuming the guest.
    Resume,
    /// The first guest reads, the warp test, the readbacks and the clock
    /// after the guest ran again.
    Measure,
    /// The chained restore: the restored guest runs, is snapshotted and
    /// restored again by the same method.
    Chain,
}

impl Step {
    /// Every step, in order.
    pub const ALL: [Step; 9] = [
        Step::Source,
        Step::Snapshot,
        Step::Create,
        Step::Memory,
        Step::Registers,
        Step::Tsc,
        Step::Resume,
        Step::Measure,
        Step::Chain,
    ];

    /// Its name (as in [`FAIL_ENV`]).
    pub fn name(self) -> &'static str {
        match self {
            Step::Source => "source",
            Step::Snapshot => "snapshot",
            Step::Create => "create",
            Step::Memory => "memory",
            Step::Registers => "registers",
            Step::Tsc => "tsc",
            Step::Resume => "resume",
            Step::Measure => "measure",
            Step::Chain => "chain",
        }
    }

    /// What happens in it.
    pub fn describe(self) -> &'static str {
        match self {
            Step::Source => "running the source VM",
            Step::Snapshot => "saving the source VM",
            Step::Create => "creating the destination VM",
            Step::Memory => "restoring guest memory",
            Step::Registers => "restoring the vCPU registers",
            Step::Tsc => "restoring the TSC state",
            Step::Resume => "resuming the restored guest",
            Step::Measure => "measuring the restored guest",
            Step::Chain => "the chained restore (run, snapshot and restore again)",
        }
    }

    /// Looks a step up by name.
    pub fn from_name(name: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Test-only: make one method's measurement fail on purpose in a step, to
/// test the half-way failure path: `snapshot` (after the source was saved,
/// before it is destroyed), `create` (after it was destroyed, before the
/// destination exists), `memory`, `registers`, `tsc` (after vCPU 0's TSC
/// state was restored, before the others'), `resume` (after the
/// destination's vCPU threads started, before the guest runs), `measure`
/// (after the guest's first reads), `chain` (after the second snapshot,
/// before the second restore).
pub const FAIL_ENV: &str = "TSC_RENDEZVOUS_TEST_RESTORE_FAIL";

/// The steps [`FAIL_ENV`] accepts.
pub const INJECTABLE: [Step; 8] = [
    Step::Snapshot,
    Step::Create,
    Step::Memory,
    Step::Registers,
    Step::Tsc,
    Step::Resume,
    Step::Measure,
    Step::Chain,
];

/// The step [`FAIL_ENV`] names, if it is set.
pub fn fail_from_env() -> Result<Option<Step>, String> {
    let Ok(name) = std::env::var(FAIL_ENV) else {
        return Ok(None);
    };
    INJECTABLE
        .into_iter()
        .find(|s| s.name() == name)
        .map(Some)
        .ok_or_else(|| {
            let valid: Vec<&str> = INJECTABLE.iter().map(|s| s.name()).collect();
            format!(
                "{FAIL_ENV}='{name}' is not a step; use one of {}",
                valid.join(", ")
            )
        })
}

/// What one method's measurement is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodOptions {
    /// vCPUs.
    pub vcpus: u32,
    /// The variant of the rendezvous before the snapshot.
    pub variant: Variant,
    /// Time between destroying the source VM and creating the destination.
    pub delay: Duration,
    /// Iterations of the warp test per vCPU after the restore.
    pub warp_iterations: u64,
    /// Deadline of each of the two VMs' sessions.
    pub timeout: Duration,
    /// Test-only: fail on purpose in this step.
    pub fail_at: Option<Step>,
    /// Whether to chain a second restore: the restored guest runs, is
    /// snapshotted and restored again by the same method.
    pub chain: bool,
    /// `--tsc-khz`: the source VM's guest TSC rate (the destination is then
    /// set to the rate saved, KVM_GET_TSC_KHZ of the snapshot); `None`: the
    /// host's, and neither VM's rate is set.
    pub tsc: Option<TscRequest>,
    /// The chained restore's delay: `delay` again, or scaled with the time
    /// since the first restore ([`ChainDelay::Scaled`]).
    pub chain_delay: ChainDelay,
}

/// The chained restore's delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainDelay {
    /// The same as the first restore's (`restore --delay-ms`).
    Same,
    /// `scaled_chain_delay` of the time since the first restore (check 7).
    Scaled,
}

/// The chained restore's delay under [`ChainDelay::Scaled`]: 4 ms per
/// second since the first restore, at least `min`, at most 100 ms. What a
/// restore that loses real time loses is at least the delay, and kvmclock's
/// continuity allowance is 1000 ppm of the host time plus the pages' ages,
/// which for the chained restore grow with the time since the first
/// restore's pages were written (1 ms per second): the delay stays at least
/// 4x that part of the allowance (up to 25 s, beyond any check's run).
pub fn scaled_chain_delay(min: Duration, since_first: Duration) -> Duration {
    (since_first * 4 / 1000).clamp(min, Duration::from_millis(100).max(min))
}

/// The longest `--delay-ms`: a minute, far beyond KVM's one-second matching
/// window of host TSC writes (the interesting boundary), and short enough
/// to keep a run bounded.
pub const MAX_DELAY_MS: u64 = 60_000;

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chained_delay_grows_4_ms_per_second_between_its_bounds() {
        let ms = Duration::from_millis;
        let min = ms(10);
        assert_eq!(scaled_chain_delay(min, ms(300)), ms(10));
        assert_eq!(scaled_chain_delay(min, ms(5_000)), ms(20));
        assert_eq!(scaled_chain_delay(min, ms(60_000)), ms(100));
        assert_eq!(scaled_chain_delay(ms(200), ms(1_000)), ms(200));
    }

    #[test]
    fn methods_and_steps_round_trip_by_name() {
        for m in Method::ALL {
            assert_eq!(Method::from_name(m.name()), Some(m));
        }
        for s in Step::ALL {
            assert_eq!(Step::from_name(s.name()), Some(s));
        }
        assert_eq!(Method::from_name("msr-thrice"), None);
        let e = super::super::error::RestoreError::Injected(Step::Tsc).to_string();
        assert!(e.contains("step 'tsc'") && e.contains(FAIL_ENV), "{e}");
    }
}
