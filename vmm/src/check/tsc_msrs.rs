//! Check 2, `tsc-msrs`: the single-vCPU expected-behaviour table of the KVM
//! selftest `tsc_msrs_test`: guest and host writes of IA32_TSC and
//! IA32_TSC_ADJUST, each stage read from the guest (`rdmsr`) and from the
//! host (`KVM_GET_MSRS`), on a fresh one-vCPU VM of its own.

use serde::Serialize;

use super::evidence::{Check, Context, Evidence};
use super::judge::context;
use super::report::Finding;
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::session::Session;
use crate::tsc::{MSR_IA32_TSC, MSR_IA32_TSC_ADJUST};

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
        let mut s = Session::start_at(1, ev.options.tsc, ctx.time_left())?;
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

/// The kinds of write the table makes, for the diagnosis.
const KINDS: [(&str, bool, u32); 4] = [
    ("guest IA32_TSC", true, MSR_IA32_TSC),
    ("guest TSC_ADJUST", true, MSR_IA32_TSC_ADJUST),
    ("host IA32_TSC", false, MSR_IA32_TSC),
    ("host TSC_ADJUST", false, MSR_IA32_TSC_ADJUST),
];

/// What a stage's write did, judged against the state the stage started from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Both MSRs read as the selftest expects.
    AsExpected,
    /// TSC_ADJUST changed as expected, the TSC did not move.
    OnlyRecorded,
    /// Neither MSR changed.
    Lost,
    /// Something else.
    Other,
}

impl Effect {
    fn words(self) -> &'static str {
        match self {
            Effect::AsExpected => "as expected",
            Effect::OnlyRecorded => "only recorded in TSC_ADJUST (the TSC did not move)",
            Effect::Lost => "lost (neither MSR changed)",
            Effect::Other => "not as expected",
        }
    }
}

/// (TSC, TSC_ADJUST) after `action`, from the (host-read) state before it,
/// as the selftest's rules say: a TSC write sets the TSC and, from the
/// guest, moves TSC_ADJUST by the same amount; a guest TSC_ADJUST write moves
/// the TSC by the change; a host TSC_ADJUST write only stores the value.
pub fn expected_after(action: Action, (tsc, adj): (u64, u64)) -> (u64, u64) {
    match action {
        Action::None => (0, 0),
        Action::GuestWrite(MSR_IA32_TSC, v) => (v, adj.wrapping_add(v.wrapping_sub(tsc))),
        Action::GuestWrite(_, v) => (tsc.wrapping_add(v.wrapping_sub(adj)), v),
        Action::HostWrite(MSR_IA32_TSC, v) => (v, adj),
        Action::HostWrite(_, v) => (tsc, v),
    }
}

/// One stage's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageVerdict {
    /// (TSC, TSC_ADJUST) expected from the previous stage's state, in U.
    pub expected: (i64, i64),
    /// Whether the guest's and the host's reads both match it (and a host
    /// TSC_ADJUST write is stored exactly).
    pub ok: bool,
    /// What the stage's write did.
    pub effect: Effect,
}

/// Judges each stage against the state the previous stage left (as the host
/// read it), so that one write that misbehaves does not fail every later
/// stage for the same reason.
pub fn stage_verdicts(seen: &[StageSeen]) -> Vec<StageVerdict> {
    let mut prev: Option<(u64, u64)> = None;
    seen.iter()
        .map(|s| {
            let before = prev.unwrap_or((0, 0));
            let exp = expected_after(s.stage.action, before);
            let exp_u = (units(exp.0), units(exp.1));
            let (g, h) = (
                (units(s.guest.0), units(s.guest.1)),
                (units(s.host.0), units(s.host.1)),
            );
            let exact_ok = match s.stage.action {
                Action::HostWrite(MSR_IA32_TSC_ADJUST, v) => s.host.1 == v,
                _ => true,
            };
            let ok = g == exp_u && h == exp_u && exact_ok;
            let before_u = (units(before.0), units(before.1));
            let tsc_unmoved = g.0 == before_u.0 && h.0 == before_u.0;
            let adj_as_expected = g.1 == exp_u.1 && h.1 == exp_u.1;
            let adj_unmoved = g.1 == before_u.1 && h.1 == before_u.1;
            let tsc_should_move = exp_u.0 != before_u.0;
            let adj_should_move = exp_u.1 != before_u.1;
            let a_write = s.stage.action != Action::None;
            let effect = if ok {
                Effect::AsExpected
            } else if a_write && tsc_unmoved && adj_unmoved && (tsc_should_move || adj_should_move)
            {
                Effect::Lost
            } else if a_write
                && tsc_should_move
                && tsc_unmoved
                && adj_should_move
                && adj_as_expected
            {
                Effect::OnlyRecorded
            } else {
                Effect::Other
            };
            prev = Some(s.host);
            StageVerdict {
                expected: exp_u,
                ok,
                effect,
            }
        })
        .collect()
}

/// One line from the data: what each kind of write did.
pub fn diagnosis(seen: &[StageSeen], verdicts: &[StageVerdict]) -> String {
    let mut parts = Vec::new();
    for (name, guest, msr) in KINDS {
        let effects: Vec<Effect> = seen
            .iter()
            .zip(verdicts)
            .filter(|(s, _)| match s.stage.action {
                Action::GuestWrite(m, _) => guest && m == msr,
                Action::HostWrite(m, _) => !guest && m == msr,
                Action::None => false,
            })
            .map(|(_, v)| v.effect)
            .collect();
        let Some(&first) = effects.first() else {
            continue;
        };
        let word = if effects.iter().all(|&e| e == first) {
            first.words()
        } else {
            "not consistent between stages"
        };
        parts.push(format!("{name} writes {word}"));
    }
    parts.join("; ")
}

/// Judges the whole table: every stage with its expected, guest-seen and
/// host-seen values and its own verdict, and a diagnosis of what each kind of
/// write did. PASS when every stage matched from both sides.
pub fn judge(seen: &[StageSeen], flavor: KvmFlavor) -> Finding {
    if seen.is_empty() {
        return Finding::skip("no stage ran");
    }
    let verdicts = stage_verdicts(seen);
    let units2 = |(a, b): (u64, u64)| [units(a), units(b)];
    let table: Vec<serde_json::Value> = seen
        .iter()
        .zip(&verdicts)
        .map(|(s, v)| {
            serde_json::json!({
                "stage": s.stage.name,
                "expected_units": [s.stage.expect.0, s.stage.expect.1],
                "expected_from_previous_units": [v.expected.0, v.expected.1],
                "guest_units": units2(s.guest),
                "host_units": units2(s.host),
                "verdict": if v.ok { "PASS" } else { "FAIL" },
                "effect": v.effect,
            })
        })
        .collect();
    let bad: Vec<&str> = seen
        .iter()
        .zip(&verdicts)
        .filter(|(_, v)| !v.ok)
        .map(|(s, _)| s.stage.name)
        .collect();
    let diag = diagnosis(seen, &verdicts);
    let fresh_at_zero = verdicts.first().is_some_and(|v| v.ok);
    let f = if bad.is_empty() {
        Finding::pass(format!(
            "every stage matched from the guest (rdmsr) and from the host (KVM_GET_MSRS): {diag}"
        ))
    } else {
        let start = if fresh_at_zero {
            String::new()
        } else {
            "a fresh vCPU's TSC did not start at 0; ".into()
        };
        Finding::fail(format!(
            "{} of {} stages differ ({}): {start}{diag}{}",
            bad.len(),
            seen.len(),
            bad.join(", "),
            context(flavor)
        ))
    };
    f.with("stages", table).with("diagnosis", diag)
}

#[cfg(test)]
mod tests {
    use super::super::report::Verdict;
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
    fn a_table_read_as_expected_passes_with_every_stage() {
        let f = judge(&seen_as_expected(), KvmFlavor::Svm);
        assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
        let stages = f.values["stages"].as_array().expect("stages");
        assert_eq!(stages.len(), 8);
        assert!(stages.iter().all(|s| s["verdict"] == "PASS"));
        assert!(
            f.reason.contains("guest IA32_TSC writes as expected"),
            "{}",
            f.reason
        );
    }

    /// One guest TSC write ignored (stage 1): only that stage fails; the
    /// later stages are judged from the state it left, so they pass.
    #[test]
    fn one_misbehaving_stage_does_not_fail_the_later_ones() {
        let mut seen = seen_as_expected();
        // Stage 1's guest write was ignored: the TSC ran on from 0 and
        // TSC_ADJUST stayed 0. Stage 2's TSC_ADJUST write then moves the TSC
        // to 8U, and from there on everything reads as in the table.
        seen[1].guest = (2_000, 0);
        seen[1].host = (2_000, 0);
        let v = stage_verdicts(&seen);
        let ok: Vec<bool> = v.iter().map(|v| v.ok).collect();
        assert_eq!(ok[0..2], [true, false]);
        assert_eq!(v[1].effect, Effect::Lost);
        let f = judge(&seen, KvmFlavor::Svm);
        assert_eq!(f.verdict, Verdict::Fail);
        assert!(
            f.reason
                .starts_with("1 of 8 stages differ (1: guest writes TSC = 4U)"),
            "{}",
            f.reason
        );
    }

    /// What an ignoring hypervisor looks like (as PVM is seen to behave):
    /// the TSC runs on from wherever it was, guest writes only move
    /// TSC_ADJUST, host TSC writes change nothing, host TSC_ADJUST writes are
    /// stored. The diagnosis says exactly that, from the data.
    #[test]
    fn an_ignoring_hypervisor_is_diagnosed_from_the_data() {
        let start = 5_389 * U;
        let mut tsc = start;
        let mut adj: u64 = 0;
        let seen: Vec<StageSeen> = stages()
            .into_iter()
            .map(|stage| {
                match stage.action {
                    Action::None => {}
                    Action::GuestWrite(MSR_IA32_TSC, v) => {
                        adj = adj.wrapping_add(v.wrapping_sub(tsc))
                    }
                    Action::GuestWrite(_, v) | Action::HostWrite(MSR_IA32_TSC_ADJUST, v) => adj = v,
                    Action::HostWrite(_, _) => {}
                }
                tsc += 1000;
                StageSeen {
                    stage,
                    guest: (tsc, adj),
                    host: (tsc, adj),
                }
            })
            .collect();
        let f = judge(&seen, KvmFlavor::Pvm);
        assert_eq!(f.verdict, Verdict::Fail);
        let d = f.values["diagnosis"].as_str().expect("diagnosis");
        assert_eq!(
            d,
            "guest IA32_TSC writes only recorded in TSC_ADJUST (the TSC did not move); \
             guest TSC_ADJUST writes only recorded in TSC_ADJUST (the TSC did not move); \
             host IA32_TSC writes lost (neither MSR changed); host TSC_ADJUST writes as expected"
        );
        assert!(
            f.reason.contains("a fresh vCPU's TSC did not start at 0"),
            "{}",
            f.reason
        );
        assert!(f.reason.ends_with("(host: PVM)"), "{}", f.reason);
    }

    #[test]
    fn expectations_follow_the_selftest_rules() {
        let before = (10 * U, 2 * U);
        assert_eq!(
            expected_after(Action::GuestWrite(MSR_IA32_TSC, 4 * U), before),
            (4 * U, (2 * U).wrapping_sub(6 * U))
        );
        assert_eq!(
            expected_after(Action::GuestWrite(MSR_IA32_TSC_ADJUST, 8 * U), before),
            (16 * U, 8 * U)
        );
        assert_eq!(
            expected_after(Action::HostWrite(MSR_IA32_TSC, 72 * U), before),
            (72 * U, 2 * U)
        );
        assert_eq!(
            expected_after(Action::HostWrite(MSR_IA32_TSC_ADJUST, 5), before),
            (10 * U, 5)
        );
    }
}
