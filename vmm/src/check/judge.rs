//! The findings every check may give: evidence not measured, a measurement
//! stopped, and the hypervisor named as context (never as a reason).

use super::report::{Finding, NOT_MEASURED};
use crate::error::RunError;
use crate::host::KvmFlavor;

/// The floor a bound must be within when the skew is smaller: 100 us, the
/// skew Linux's clocksource watchdog lets pass (`WATCHDOG_MAX_SKEW`, 100 to
/// 125 us depending on the version). A guest that resolves every pair's
/// offset to within it sees every skew Linux would act on.
pub const FLOOR_NS: u64 = crate::units::WATCHDOG_MAX_SKEW_NS;

/// The hypervisor's name as context for a finding (never as its reason):
/// ` (host: PVM)`.
pub fn context(flavor: KvmFlavor) -> String {
    format!(" (host: {})", flavor.name())
}

/// A finding for evidence that was not measured because the run stopped.
pub fn missing(what: &str) -> Finding {
    Finding::skip(format!("{NOT_MEASURED}: the run stopped before the {what}"))
}

/// UNDECIDED: the guest has no kvmclock to judge (checks 8 and 9).
pub fn no_kvmclock() -> Finding {
    Finding::new(
        super::report::Verdict::Undecided,
        "no kvmclock: KVM does not offer it to this guest (CPUID lacks \
         KVM_FEATURE_CLOCKSOURCE2), so there is nothing to judge",
    )
}

/// The finding of a check whose measurement was stopped.
pub fn not_measured(e: &RunError) -> Finding {
    Finding::skip(format!("{NOT_MEASURED}: {e}"))
}
