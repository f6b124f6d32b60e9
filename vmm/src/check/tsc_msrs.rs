//! Check 2, `tsc-msrs`: the single-vCPU expected-behaviour table of the KVM
//! selftest `tsc_msrs_test`: guest and host writes of IA32_TSC and
//! IA32_TSC_ADJUST, each stage read from the guest (`rdmsr`) and from the
//! host (`KVM_GET_MSRS`), on a fresh one-vCPU VM of its own.

use serde::Serialize;

use super::{pvm_prefix, Check, Context, Evidence, Finding};
use crate::arch::x86_64::{MSR_IA32_TSC, MSR_IA32_TSC_ADJUST};
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::session::Session;

/// Check 2.
pub struct TscMsrs;

impl Check for TscMsrs {
    fn number(&self) -> u32 {
        2
    }
    fn id(&self) -> &'static str {
        "tsc-msrs"
    }
    fn title(&self) -> &'static str {
        "tsc_msrs_test table: guest and host writes of IA32_TSC and IA32_TSC_ADJUST"
    }
    fn run(&self, ev: &Evidence, ctx: &Context) -> Result<Finding, RunError> {
        if ev.env.host.kernel_version.is_some_and(|v| v < (5, 10)) {
            return Ok(Finding::skip(
                "kernel < 5.10: guest TSC writes go through KVM's synchronisation heuristic, the table does not apply",
            ));
        }
        let mut s = Session::start(1, ctx.time_left())?;
        if !s.guest_tsc_adjust() {
            return Ok(Finding::skip("the guest's CPUID has no IA32_TSC_ADJUST"));
        }
        let seen = measure(&mut s)?;
        Ok(judge(&seen, ev.env.host.kvm_flavor))
    }
}

/// The unit of the table: 2^30 cycles.
pub const U: u64 = 1 << 30;

/// A value in units of [`U`], rounded to the nearest (as the selftest's
/// ROUND()), taken as signed (TSC_ADJUST may be negative).
pub fn units(v: u64) -> i64 {
    ((v as i64 as i128 + (U as i128) / 2).div_euclid(U as i128)) as i64
}

/// What a stage does before it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing (the fresh VM).
    None,
    /// The guest writes MSR `.0` = `.1`.
    GuestWrite(u32, u64),
    /// The host writes MSR `.0` = `.1` with KVM_SET_MSRS.
    HostWrite(u32, u64),
}

/// One stage of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    /// Its name, as in the selftest.
    pub name: &'static str,
    /// What it does.
    pub action: Action,
    /// Expected (TSC, TSC_ADJUST) in units of [`U`].
    pub expect: (i64, i64),
    /// TSC_ADJUST must equal this exactly (host view), when set.
    pub exact_adjust: Option<u64>,
}

/// The table, in order.
pub fn stages() -> [Stage; 8] {
    let s = |name, action, expect, exact_adjust| Stage {
        name,
        action,
        expect,
        exact_adjust,
    };
    [
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

/// What one stage read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StageSeen {
    /// The stage.
    #[serde(skip)]
    pub stage: Stage,
    /// Guest rdmsr of IA32_TSC and IA32_TSC_ADJUST (raw).
    #[serde(skip)]
    pub guest: (u64, u64),
    /// Host KVM_GET_MSRS of the same (raw).
    #[serde(skip)]
    pub host: (u64, u64),
}

/// Runs the table on vCPU 0 of `s` (a fresh VM): every stage's action, then
/// the four reads.
pub fn measure(s: &mut Session) -> Result<Vec<StageSeen>, RunError> {
    let mut seen = Vec::new();
    for stage in stages() {
        match stage.action {
            Action::None => {}
            Action::GuestWrite(msr, v) => s.guest_wrmsr(0, msr, v)?,
            Action::HostWrite(msr, v) => s.host_set_msr(0, msr, v)?,
        }
        let (g_tsc, _) = s.guest_rdmsr(0, MSR_IA32_TSC)?;
        let (g_adj, _) = s.guest_rdmsr(0, MSR_IA32_TSC_ADJUST)?;
        let h_tsc = s.host_get_msr(0, MSR_IA32_TSC)?;
        let h_adj = s.host_get_msr(0, MSR_IA32_TSC_ADJUST)?;
        seen.push(StageSeen {
            stage,
            guest: (g_tsc, g_adj),
            host: (h_tsc, h_adj),
        });
    }
    Ok(seen)
}

/// Judges the stages read back: PASS when every stage matched from both
/// sides, else FAIL naming the first stage that did not.
pub fn judge(seen: &[StageSeen], flavor: KvmFlavor) -> Finding {
    let units2 = |(a, b): (u64, u64)| (units(a), units(b));
    let table: Vec<serde_json::Value> = seen
        .iter()
        .map(|s| {
            let (g, h) = (units2(s.guest), units2(s.host));
            serde_json::json!({
                "stage": s.stage.name, "expected_units": [s.stage.expect.0, s.stage.expect.1],
                "guest_units": [g.0, g.1], "host_units": [h.0, h.1],
            })
        })
        .collect();
    let first_bad = seen.iter().find_map(|s| {
        let (g, h) = (units2(s.guest), units2(s.host));
        let exact_ok = s.stage.exact_adjust.is_none_or(|e| e == s.host.1);
        (g != s.stage.expect || h != s.stage.expect || !exact_ok).then_some((s, g, h, exact_ok))
    });
    let f =
        match first_bad {
            None if seen.is_empty() => Finding::skip("no stage ran"),
            None => Finding::pass(
                "every stage matched from the guest (rdmsr) and from the host (KVM_GET_MSRS)",
            ),
            Some((s, g, h, exact_ok)) => Finding::fail(format!(
            "{}stage {}: expected TSC {}U TSC_ADJUST {}U, guest saw {}U/{}U, host saw {}U/{}U{}",
            pvm_prefix(flavor),
            s.stage.name,
            s.stage.expect.0,
            s.stage.expect.1,
            g.0,
            g.1,
            h.0,
            h.1,
            if exact_ok { "" } else { " (TSC_ADJUST not exact)" }
        )),
        };
    f.with("stages", table)
}

#[cfg(test)]
mod tests {
    use super::super::Verdict;
    use super::*;

    #[test]
    fn units_round_to_the_nearest_and_keep_the_sign() {
        assert_eq!(units(0), 0);
        assert_eq!(units(U / 2 - 1), 0);
        assert_eq!(units(U / 2), 1);
        assert_eq!(units(4 * U + 12345), 4);
        assert_eq!(units((-48i64 * U as i64) as u64), -48);
        assert_eq!(units((-48i64 * U as i64 + 1000) as u64), -48);
    }

    /// The selftest's table (tools/testing/selftests/kvm/x86_64/tsc_msrs_test.c),
    /// transcribed independently of `stages()`: who writes, which MSR, the
    /// value in U, and the expected TSC and TSC_ADJUST in U afterwards.
    const SELFTEST: [(&str, &str, i64, i64, i64); 8] = [
        ("-", "-", 0, 0, 0),
        ("guest", "TSC", 4, 4, 4),
        ("guest", "TSC_ADJUST", 8, 8, 8),
        ("host", "TSC", 72, 72, 8),
        ("host", "TSC_ADJUST", 123_456, 72, 123_456),
        ("host", "TSC_ADJUST", 8, 72, 8),
        ("guest", "TSC_ADJUST", 12, 76, 12),
        ("guest", "TSC", 16, 16, -48),
    ];

    #[test]
    fn the_table_matches_the_selftest() {
        let t = stages();
        assert_eq!(t.len(), SELFTEST.len());
        for (st, &(who, msr, value, tsc, adj)) in t.iter().zip(&SELFTEST) {
            let msr_index = match msr {
                "TSC" => MSR_IA32_TSC,
                _ => MSR_IA32_TSC_ADJUST,
            };
            let expected_action = match who {
                "guest" => Action::GuestWrite(msr_index, (value * U as i64) as u64),
                "host" => Action::HostWrite(msr_index, (value * U as i64) as u64),
                _ => Action::None,
            };
            assert_eq!(st.action, expected_action, "{}", st.name);
            assert_eq!(st.expect, (tsc, adj), "{}", st.name);
            // Host writes of TSC_ADJUST store the value exactly.
            let exact = (who == "host" && msr == "TSC_ADJUST").then_some((value * U as i64) as u64);
            assert_eq!(st.exact_adjust, exact, "{}", st.name);
        }
    }

    fn seen_as_expected() -> Vec<StageSeen> {
        stages()
            .into_iter()
            .map(|stage| {
                let v = (
                    (stage.expect.0 * U as i64) as u64 + 1000,
                    stage
                        .exact_adjust
                        .unwrap_or((stage.expect.1 * U as i64) as u64),
                );
                StageSeen {
                    stage,
                    guest: v,
                    host: v,
                }
            })
            .collect()
    }

    #[test]
    fn a_table_read_as_expected_passes() {
        let f = judge(&seen_as_expected(), KvmFlavor::Svm);
        assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
        assert_eq!(f.values["stages"].as_array().map(Vec::len), Some(8));
    }

    #[test]
    fn the_first_stage_that_differs_is_named() {
        let mut seen = seen_as_expected();
        // Stage 1's guest write was ignored: the TSC stayed near 0.
        seen[1].guest.0 = 1000;
        seen[1].host.0 = 1000;
        let f = judge(&seen, KvmFlavor::Svm);
        assert_eq!(f.verdict, Verdict::Fail);
        assert!(
            f.reason
                .starts_with("stage 1: guest writes TSC = 4U: expected TSC 4U"),
            "{}",
            f.reason
        );
        // A host TSC_ADJUST that is near but not exact fails too.
        let mut seen = seen_as_expected();
        seen[4].host.1 += 1;
        let f = judge(&seen, KvmFlavor::Svm);
        assert!(f.reason.ends_with("(TSC_ADJUST not exact)"), "{}", f.reason);
    }
}
