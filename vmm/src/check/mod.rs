//! `check`: named regression checks of how the hypervisor treats guest TSC
//! writes, each with a verdict (PASS / FAIL / SKIP), a one-line reason and the
//! values it measured.
//!
//! The evidence most checks judge is measured once ([`evidence`]); each check
//! is a module with a pure judge and its unit tests, registered in
//! [`CHECKS`]. A check that needs a VM of its own (the `tsc_msrs_test` table)
//! measures it in its [`Check::run`]. A new check is one new module plus one
//! line in [`CHECKS`].
//!
//! A verdict comes from the evidence: FAIL needs evidence of failure,
//! inconclusive evidence is UNDECIDED with its reason, and every reason is
//! derived from the measured data (the hypervisor's name is only context).
//! Expectations are gated on the kernel version only where the kernel's
//! documented behaviour changed (before 5.10 guest TSC writes go through
//! KVM's synchronisation heuristic).

mod adjust_offset;
pub mod baseline;
mod clock_view;
pub mod evidence;
mod frequency;
mod handoff;
mod judge;
pub mod junit;
pub mod kcidb;
pub mod kselftest;
pub mod ktap;
mod kvmclock;
mod kvmclock_frequency;
mod lock_order;
pub mod markdown;
mod master_clock;
mod measure;
mod mixed_frequency;
pub mod openmetrics;
mod report;
mod same_start;
mod save_restore;
mod save_restore_clock;
mod scaled_rendezvous;
mod skew_threshold;
pub mod tally;
#[cfg(test)]
mod testdata;
mod text;
mod tsc_frequency;
pub mod tsc_msrs;
mod warp;
mod writes_honoured;

use std::time::Instant;

use crate::error::RunError;

pub use evidence::{Check, Context};
pub use report::{
    CheckOptions, CheckReport, CheckResult, Counts, DEFAULT_EXCHANGES, DEFAULT_WARP_ITERATIONS,
    SCHEMA,
};
pub use text::render_text;

/// Every check, in report order.
pub static CHECKS: &[&dyn Check] = &[
    &same_start::SameStart,
    &tsc_msrs::TscMsrs,
    &adjust_offset::AdjustEqualsOffset,
    &writes_honoured::WritesHonoured,
    &warp::Warp,
    &skew_threshold::SkewThreshold,
    &save_restore::SaveRestore,
    &kvmclock::KvmclockContinuity,
    &master_clock::MasterClock,
    &tsc_frequency::TscFrequency,
    &kvmclock_frequency::KvmclockFrequency,
    &mixed_frequency::MixedFrequency,
    &scaled_rendezvous::ScaledRendezvous,
];

/// How many checks `check` runs (`CHECKS`).
pub fn count() -> usize {
    CHECKS.len()
}

/// Why the checks could not produce a report.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CannotCheck(#[source] pub RunError);

/// Runs every check. A stop request (SIGINT, SIGTERM) ends the measurement
/// early: the checks judge what was measured, those without evidence are
/// skipped as not measured, and the report says it is incomplete. Any other
/// error before the report exists is returned.
pub fn run_checks(opts: &CheckOptions) -> Result<CheckReport, CannotCheck> {
    let ctx = Context::until(Instant::now() + opts.timeout);
    let measuring = Instant::now();
    let (ev, stopped) = measure::measure(opts).map_err(CannotCheck)?;
    let measure_seconds = Some(measuring.elapsed().as_secs_f64());
    let mut incomplete = match stopped {
        Some(e) if e.signal().is_some() => Some(e.to_string()),
        Some(e) => return Err(CannotCheck(e)),
        None => None,
    };
    let mut checks = Vec::with_capacity(CHECKS.len());
    for check in CHECKS {
        let started = Instant::now();
        // After a stop request a check that needs a VM of its own stops at
        // once; the others judge what was measured.
        let finding = match check.run(&ev, &ctx) {
            Ok(f) => f,
            Err(e) if e.signal().is_some() => {
                incomplete.get_or_insert_with(|| e.to_string());
                judge::not_measured(&e)
            }
            Err(e) => return Err(CannotCheck(e)),
        };
        checks.push(CheckResult {
            seconds: Some(started.elapsed().as_secs_f64()),
            ..CheckResult::new(check.number(), check.id(), check.title(), finding)
        });
    }
    let mut report = CheckReport {
        schema: SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        skew: ev.skew(),
        environment: ev.env,
        options: opts.clone(),
        checks,
        counts: Counts::default(),
        ok: false,
        incomplete,
        measure_seconds,
    };
    report.tally();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_are_numbered_in_order_with_distinct_ids() {
        for (i, c) in CHECKS.iter().enumerate() {
            assert_eq!(c.number(), i as u32 + 1, "{}", c.id());
        }
        let mut ids: Vec<&str> = CHECKS.iter().map(|c| c.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), CHECKS.len(), "distinct ids");
    }
}
